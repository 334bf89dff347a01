"""`python -m playpen.submit`: training, eval and sweep jobs on SLURM (or local processes) through submitit,
inside an image, on N nodes, surviving preemption.

    cli.py       argument parsing and the submit/status/logs commands
    profiles.py  typed cluster profiles (configs/cluster/*.yaml)
    executor.py  submitit executors and the sbatch script from a profile
    jobs.py      the checkpointable callables a job runs
    launch.py    multi-node rendezvous inside a job
    status.py    job state, requeues and log tails of a run or sweep dir
"""
