"""playpen: train and evaluate chat LLMs in interaction, from a laptop to a SLURM cluster."""
import warnings as _warnings

from playpen.train.base import BasePlayPen, BasePlaypenTrainer  # upstream trainer files import them from here

# transformers 5 deprecates `is_gradient_checkpointing`, which PEFT reads at every adapter load (eval, training,
# reward models, sweep cells): one FutureWarning per process, about a hundred lines between `make demo`'s
# progress lines, and nothing a user can do about it. Set here, once, for every entry point.
_warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)

__version__ = "0.1.0"
__all__ = ["BasePlayPen", "BasePlaypenTrainer", "__version__"]
