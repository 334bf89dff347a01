"""playpen: train and evaluate chat LLMs in interaction, from a laptop to a SLURM cluster."""

from playpen.train.base import BasePlayPen, BasePlaypenTrainer  # upstream trainer files import them from here

__version__ = "0.1.0"
__all__ = ["BasePlayPen", "BasePlaypenTrainer", "__version__"]
