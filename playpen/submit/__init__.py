"""`python -m playpen.submit`: training, eval and sweep jobs on SLURM (or local processes) through submitit,
inside an image, on N nodes, surviving preemption.

A submission reads in one direction, one module per step:

    cli.py       argument parsing; `submit` runs the four steps below, `status`/`logs` the last one
    plan.py      1. read and check everything once into a Plan (profile, executor, resources, image, config,
                    storage root, folders, the job's variables and python command)
    render.py    2. the Plan as submitit executors (sbatch parameters, setup lines; --dry-run prints the script)
    send.py      3. submit from a clean environment, record the submission
    watch.py     4. where it went, --wait's progress and result; job state, `status` and `logs` later

and what they read or run:

    profiles.py  typed cluster profiles (configs/cluster/*.yaml)
    container.py the `apptainer exec` prefix a job's python runs behind
    jobs.py      the checkpointable callables a job runs, and the rendezvous of its tasks
"""
