"""debate: two debaters, a judge who cannot see the passage (see README.md)."""
