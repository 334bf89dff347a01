"""The taboo game (clemcore loads master.py from this folder; the package makes it installable)."""
