"""The process around a training: library warnings and progress bars kept off the screen, CPU threads, and the
distributed teardown at the end (heavy libraries are imported inside the functions).
"""
from __future__ import annotations

import os

from playpen import distributed


def quiet_libraries() -> None:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import warnings

    for message in (".*kernels.*", ".*all_gather_into_tensor.*",
                    ".*reduce_scatter_tensor.*", ".*torch.distributed.*is deprecated.*"):
        warnings.filterwarnings("ignore", message=message)
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")  # no "unable to detect a GPU" warning per process
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()  # "Loading weights" bars would break one-line errors


def set_threads(threads: int | None) -> None:
    import torch

    if threads and not torch.cuda.is_available():
        torch.set_num_threads(int(threads))


def close_progress_bars() -> None:
    """End the Trainer's progress bar (tqdm draws it again when the process exits, after any message)."""
    from tqdm import tqdm

    for bar in list(tqdm._instances):
        bar.close()


def teardown_distributed() -> None:
    distributed.teardown()
    try:
        from accelerate.state import AcceleratorState, PartialState

        AcceleratorState._reset_state(reset_partial_state=True)
        PartialState._reset_state()
    except Exception:
        pass
