"""The 2-model × 2-game eval sweep as ONE SLURM job array on the dev cluster: one model's cells fail, the registry
is fixed, the same command is rerun, and only the failed cells are submitted again; the aggregate is complete."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import sweep_results, write_sweep, write_tiny_ab_registry

pytestmark = pytest.mark.slurm


def submit_sweep(config: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "playpen.submit", "sweep", "--config", str(config),
                           "--cluster", "devcluster", "--executor", "slurm", "--wait"],
                          cwd=cwd, capture_output=True, text=True, timeout=420, env={**os.environ})


def test_sweep_job_array_reruns_only_failed_cells(devcluster, tmp_path):
    write_tiny_ab_registry(tmp_path, broken=True)
    config = write_sweep(tmp_path)
    sweep_dir = tmp_path / "sweep"

    first = submit_sweep(config, tmp_path)
    assert "array" in (first.stdout + first.stderr).lower(), first.stdout + first.stderr
    from playpen.eval.sweep import status

    counts = status(sweep_dir)["counts"]
    assert counts == {"done": 2, "running": 0, "failed": 2, "pending": 0}, first.stdout + first.stderr
    done_before = sweep_results(sweep_dir)
    assert sorted(done_before) == ["tiny-a/arithmetic", "tiny-a/wordle"]

    write_tiny_ab_registry(tmp_path, broken=False)
    second = submit_sweep(config, tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    after = sweep_results(sweep_dir)
    assert sorted(after) == ["tiny-a/arithmetic", "tiny-a/wordle", "tiny-b/arithmetic", "tiny-b/wordle"]
    # the cells that were done were not run again: same attempt ids
    assert {k: after[k]["attempt"] for k in done_before} == {k: v["attempt"] for k, v in done_before.items()}
    assert status(sweep_dir)["counts"]["done"] == 4
    rows = (sweep_dir / "sweep.csv").read_text().strip().splitlines()
    assert len(rows) == 5 and all(",done," in row for row in rows[1:])
    assert json.loads((sweep_dir / "cells" / "tiny-b" / "wordle" / "result.json").read_text())["attempt"]


def test_tournament_matches_as_one_job_array(devcluster, tmp_path):
    """python -m playpen.submit tournament: one array task per seating on the dev cluster, then the dependent
    aggregate job's table; the rerun submits nothing (every match is played)."""
    config = tmp_path / "tournament.yaml"
    config.write_text(f"name: t\ndebaters: [playpen-tiny, programmatic]\njudges: [programmatic]\n"
                      f"max_instances: 1\nmax_new_tokens: 16\noutput_dir: {tmp_path / 'tournaments'}\n")

    def submit() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "playpen.submit", "tournament", "--config", str(config),
                               "--cluster", "devcluster", "--executor", "slurm", "--wait"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=420, env={**os.environ})

    first = submit()
    out = first.stdout + first.stderr
    assert first.returncode == 0 and "submitted tournament job array of 2" in out, out
    folder = tmp_path / "tournaments" / "t"
    # one result per match (the hidden .<match>.lock files beside them stay: flock files are never removed)
    assert sorted(p.name for p in (folder / "played").iterdir() if not p.name.startswith(".")) == [
        "playpen-tiny__programmatic__programmatic.json", "programmatic__playpen-tiny__programmatic.json"]
    assert all(p.suffix in (".json", ".lock") for p in (folder / "played").iterdir())
    assert len(json.loads((folder / "matches.json").read_text())) == 2  # seatings x instances
    assert "| programmatic | 2 | 1.00 |" in (folder / "results.md").read_text() and "# Tournament t" in out
    again = submit()
    assert again.returncode == 0 and "all 2 matches are played; nothing submitted" in again.stdout, again.stdout
