"""`trainer.report_to`: W&B (offline), trackio and MLflow reach TRL beside playpen's own metrics.jsonl, checked in one
line (a tracker playpen does not pass on, a package that is not installed), and W&B offline writes its run folder
into the run folder with the run id as its name and the run's config attached."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from playpen.errors import PlaypenError
from playpen.train import trackers
from tests.helpers import fails

REPO = Path(__file__).resolve().parents[1]


def sft_config(tmp_path: Path, *extra: str) -> Path:
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"{i} + {i}?"},
                                                     {"role": "assistant", "content": str(2 * i)}]}) + "\n"
                            for i in range(16)))
    config = tmp_path / "sft.yaml"
    config.write_text(f"experiment: tracked\nmodel: playpen-tiny\ndata: {data}\nlora: {{}}\ncpu_threads: 1\n"
                      f"storage_root: {tmp_path / 'runs'}\ntrainer:\n  max_steps: 2\n  save_steps: 2\n"
                      f"  per_device_train_batch_size: 4\n" + "".join(f"  {line}\n" for line in extra))
    return config


def test_report_to_names_are_checked():
    assert trackers.requested("none", "x") == [] and trackers.requested(None, "x") == []
    assert trackers.requested(["wandb", "mlflow"], "x") == ["wandb", "mlflow"]
    with pytest.raises(PlaypenError, match="playpen writes TensorBoard itself"):
        trackers.requested("tensorboard", "x")
    with pytest.raises(PlaypenError, match="use wandb, trackio, mlflow or none"):
        trackers.requested("comet_ml", "x")


def test_a_tracker_playpen_does_not_pass_on_is_one_line(tmp_path, capsys):
    err = fails(capsys, ["train", "sft", "--config", str(sft_config(tmp_path)), "trainer.report_to=all"])
    assert "trainer.report_to=all: name the trackers" in err


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is not None, reason="mlflow is installed here")
def test_a_tracker_whose_package_is_missing_is_one_line(tmp_path, capsys):
    err = fails(capsys, ["train", "sft", "--config", str(sft_config(tmp_path)), "trainer.report_to=mlflow"])
    assert "trainer.report_to=mlflow needs the mlflow package, which is not installed here" in err


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("wandb") is None,
                    reason="wandb is not installed (the lock has it: make setup)")
def test_wandb_offline_writes_its_run_folder_into_the_run_folder(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore")  # the profile says the nodes are offline
    proc = subprocess.run([sys.executable, "-m", "playpen.cli", "train", "sft", "--config",
                           str(sft_config(tmp_path, "report_to: wandb")), "run_id=tracked-1"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    run = tmp_path / "runs" / "tracked" / "tracked-1"
    [offline] = (run / "wandb").glob("offline-run-*")  # what `wandb sync` uploads later
    [log] = offline.glob("run-*.wandb")
    record = log.read_bytes()
    assert b"playpen" in record and b"tracked-1" in record  # the run's config attached; run name = run id
    debug = (offline / "logs" / "debug.log").read_text()
    assert "'project': 'tracked'" in debug and "finish()" in debug and "Error" not in debug  # finished cleanly
    assert len((run / "metrics.jsonl").read_text().splitlines()) >= 2  # playpen's own metrics as before
