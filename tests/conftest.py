from tests.devcluster import devcluster  # noqa: F401  (session fixture: the local SLURM dev cluster)
