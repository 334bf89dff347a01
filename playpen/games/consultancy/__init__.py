"""consultancy: one consultant, a judge who asks questions (see ../debate/README.md)."""
