"""The one exception type users see: a single line saying what is wrong and how to fix it."""


class PlaypenError(Exception):
    """Bad input or environment. The CLI prints `playpen: error: <message>` and exits 2, nothing else."""
