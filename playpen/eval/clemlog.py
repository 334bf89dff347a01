"""clemcore's log kept with the results, off the screen.

clemcore configures its loggers when imported: INFO lines on stdout and every game master step in ./clembench.log;
its runners and scorer draw their own progress bars, and transformers one per model load. During `playpen eval`
all of it goes to `<results>/clembench.log` instead, and the screen shows one progress bar per game (the rollout
engine's) and the summary table; `-v` puts clemcore's lines back on the screen.
"""
from __future__ import annotations

import contextlib
import io
import logging
from contextlib import contextmanager
from pathlib import Path

from playpen.storage import make_folder, open_append

LOG_FILE = "clembench.log"
CONSOLE_LOGGERS = ("clemcore.run", "clemcore.cli", "clemcore.backends")  # clemcore's loggers with a console handler
FORMAT = "%(asctime)s - %(name)s - %(levelname)s - %(message)s"  # clemcore's own format


@contextmanager
def clemcore_log(results_dir: Path, verbose: bool = False):
    """Within: the root logger's file is <results_dir>/clembench.log; unless verbose, clemcore's console lines and
    transformers' loading bars are off (library_bars() takes clemcore's own bars off)."""
    import clemcore  # noqa: F401  (its logging config is applied on import: replace it after that)
    import transformers

    root = logging.getLogger()
    make_folder(results_dir, "results folder")
    here = _AppendOnlyFileHandler(results_dir / LOG_FILE, encoding="utf-8")
    here.setFormatter(logging.Formatter(FORMAT))
    files = [h for h in root.handlers if isinstance(h, logging.FileHandler)]
    consoles = [] if verbose else [(logging.getLogger(name), h) for name in CONSOLE_LOGGERS
                                   for h in logging.getLogger(name).handlers
                                   if type(h) is logging.StreamHandler]
    for handler in files:
        root.removeHandler(handler)
    root.addHandler(here)
    for logger, handler in consoles:
        logger.removeHandler(handler)
    bars_were_on = transformers.utils.logging.is_progress_bar_enabled()
    if not verbose:
        transformers.utils.logging.disable_progress_bar()
    try:
        yield Path(here.baseFilename)
    finally:
        root.removeHandler(here)
        here.close()
        for handler in files:
            root.addHandler(handler)
        for logger, handler in consoles:
            logger.addHandler(handler)
        if bars_were_on:
            transformers.utils.logging.enable_progress_bar()


class _AppendOnlyFileHandler(logging.FileHandler):
    """A log file opened as playpen opens every file it appends to (storage.open_append): a link planted at the
    log's name in a shared results folder is refused, not written through."""

    def _open(self):
        return open(open_append(self.baseFilename, "log file"), "a", encoding=self.encoding, errors=self.errors)


def library_bars(verbose: bool):
    """Around clemcore's runner and scorer: their tqdm bars (stderr) are dropped unless verbose; what matters of
    them is in the log."""
    return contextlib.nullcontext() if verbose else contextlib.redirect_stderr(io.StringIO())
