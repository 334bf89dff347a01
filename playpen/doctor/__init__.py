"""`playpen doctor`: will a job run here? Software against the lock, the devices, each feature a job uses tried
for real (small and bounded), and the storage, as a table and as JSON in a run folder. As a job across nodes
(`python -m playpen.submit doctor --nodes N`) every rank runs the same checks and adds the rendezvous from
SLURM's environment, an all-reduce with its bus bandwidth, and the job's start latency.

    report.py    Check (OK / WARN / FAILED / SKIPPED, one line each), table and JSON
    software.py  versions against requirements/lock.txt, the image and its labels, GPUs / the CPU's bf16 probe
    features.py  bf16 product, 4-bit load, DeepSpeed ZeRO-2 step, rollout-engine episode
    storage.py   storage_root and scratch writable, free space, flock
    collective.py the job's part: rendezvous, all-reduce, ranks' hosts and devices
    cli.py       `playpen doctor`
"""
from __future__ import annotations

import socket
from pathlib import Path

from playpen.doctor.report import Check

DOCTOR_FILE = "doctor.json"


def local_checks(storage_root: str | None = None, skip: tuple[str, ...] = (),
                 group_failed: bool = False) -> list[Check]:
    """Every check of one process, in order: software, devices, storage, features."""
    from playpen.doctor.features import feature_checks
    from playpen.doctor.software import device_checks, software_checks
    from playpen.doctor.storage import storage_checks
    from playpen.train.runner import quiet_libraries

    quiet_libraries()  # library banners and progress bars would break the table
    return [*software_checks(), *device_checks(), *storage_checks(storage_root),
            *feature_checks(skip, group_failed=group_failed)]


def output_folder(root: Path, kind: str) -> Path:
    from playpen.storage import path_under, timestamp

    return path_under(root, "doctor", f"{timestamp()}-{kind}-{socket.gethostname().split('.')[0]}",
                      what="doctor folder")
