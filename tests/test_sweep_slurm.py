"""The 2-model × 2-game eval sweep as ONE SLURM job array on the dev cluster: one model's cells fail, the registry
is fixed, the same command is rerun, and only the failed cells are submitted again; the aggregate is complete."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.devcluster import devcluster  # noqa: F401  (the session fixture)
from tests.test_sweep import results_by_key, write_registry, write_sweep

pytestmark = pytest.mark.slurm


def submit_sweep(config: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "playpen.submit", "sweep", "--config", str(config),
                           "--cluster", "devcluster", "--executor", "slurm", "--wait"],
                          cwd=cwd, capture_output=True, text=True, timeout=420, env={**os.environ})


def test_sweep_job_array_reruns_only_failed_cells(devcluster, tmp_path):  # noqa: F811
    write_registry(tmp_path, broken=True)
    config = write_sweep(tmp_path)
    sweep_dir = tmp_path / "sweep"

    first = submit_sweep(config, tmp_path)
    assert "array" in (first.stdout + first.stderr).lower(), first.stdout + first.stderr
    from playpen.eval.sweep import status

    counts = status(sweep_dir)["counts"]
    assert counts == {"done": 2, "running": 0, "failed": 2, "pending": 0}, first.stdout + first.stderr
    done_before = results_by_key(sweep_dir)
    assert sorted(done_before) == ["tiny-a/arithmetic", "tiny-a/wordle"]

    write_registry(tmp_path, broken=False)
    second = submit_sweep(config, tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    after = results_by_key(sweep_dir)
    assert sorted(after) == ["tiny-a/arithmetic", "tiny-a/wordle", "tiny-b/arithmetic", "tiny-b/wordle"]
    # the cells that were done were not run again: same attempt ids
    assert {k: after[k]["attempt"] for k in done_before} == {k: v["attempt"] for k, v in done_before.items()}
    assert status(sweep_dir)["counts"]["done"] == 4
    rows = (sweep_dir / "sweep.csv").read_text().strip().splitlines()
    assert len(rows) == 5 and all(",done," in row for row in rows[1:])
    assert json.loads((sweep_dir / "cells" / "tiny-b" / "wordle" / "result.json").read_text())["attempt"]
