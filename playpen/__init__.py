"""playpen: train and evaluate chat LLMs in interaction, from a laptop to a SLURM cluster."""

__version__ = "0.1.0"
