"""DeepSpeed ZeRO-2 and ZeRO-3, and plain DDP, under `torchrun --nproc_per_node 2` (gloo on CPU), through the real CLI.
The first DeepSpeed run on a machine compiles a helper op (~35 s), cached in ~/.cache/torch_extensions."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from playpen.storage import read_jsonl

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    # a real port: with --master_port 0 the ranks never met (DeepSpeed re-reads MASTER_PORT=0) and the run hung
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(tmp_path: Path, *args: str, timeout: int = 400) -> subprocess.CompletedProcess:
    torchrun_bin = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    cmd = [str(torchrun_bin), "--nproc_per_node", "2", "--master_port", str(free_port()), "-m", "playpen.cli",
           "train", *args, f"storage_root={tmp_path / 'runs'}"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return proc


def run_dir(tmp_path: Path, experiment: str) -> Path:
    (path,) = (tmp_path / "runs" / experiment).iterdir()
    return path


@pytest.fixture(scope="module")
def sft_data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("dist-data") / "sft.jsonl"
    with path.open("w") as f:
        for i in range(16):
            messages = [{"role": "user", "content": "Reply only with: GUESS: <word>"},
                        {"role": "assistant", "content": f"GUESS: {['apple', 'crane', 'slate', 'house'][i % 4]}"}]
            f.write(json.dumps({"messages": messages}) + "\n")
    return path


@pytest.mark.slow
def test_sft_lora_zero3_two_processes(tmp_path, sft_data):
    proc = torchrun(tmp_path, "sft", "experiment=z3", f"data={sft_data}", "deepspeed=configs/deepspeed/zero3.json",
                    "trainer.max_steps=2", "trainer.save_steps=1", "trainer.per_device_train_batch_size=2")
    run = run_dir(tmp_path, "z3")
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl") if "loss" in r] == [1, 2]
    checkpoint = run / "checkpoints" / "checkpoint-2"
    assert (checkpoint / "global_step2").is_dir()  # DeepSpeed's sharded optimizer state
    assert {p.name for p in checkpoint.glob("rng_state_*.pth")} == {"rng_state_0.pth", "rng_state_1.pth"}
    assert (run / "final" / "adapter_model.safetensors").is_file()
    assert proc.stdout.count("[playpen] registered model") == 1  # rank 0 only


@pytest.mark.slow
def test_dpo_static_zero3_two_processes(tmp_path):
    """DPO's policy and (adapter-off) reference under ZeRO-3: every method runs under both DeepSpeed configs."""
    prefs = tmp_path / "prefs.jsonl"
    with prefs.open("w") as f:
        for word in ["apple", "crane", "slate", "house"] * 4:
            f.write(json.dumps({"prompt": [{"role": "user", "content": "Reply only with: GUESS: <word>"}],
                                "chosen": [{"role": "assistant", "content": f"GUESS: {word}"}],
                                "rejected": [{"role": "assistant", "content": "maybe a word"}]}) + "\n")
    torchrun(tmp_path, "dpo", "experiment=dpo-z3", f"data={prefs}", "deepspeed=configs/deepspeed/zero3.json",
             "trainer.max_steps=2", "trainer.per_device_train_batch_size=2")
    run = run_dir(tmp_path, "dpo-z3")
    rows = [r for r in read_jsonl(run / "metrics.jsonl") if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2] and "rewards/margins" in rows[0]
    assert (run / "final" / "adapter_model.safetensors").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("deepspeed", ["configs/deepspeed/zero2.json", "null"], ids=["zero2", "ddp"])
def test_grpo_two_processes(tmp_path, deepspeed):
    """ZeRO-2 plays through TRL's unwrap context; plain DDP (gloo) plays the trainer's own module."""
    torchrun(tmp_path, "grpo", "experiment=z2", "game=arithmetic", "instances=4", "group_size=2",
             "max_new_tokens=8", f"deepspeed={deepspeed}", "trainer.max_steps=2",
             "trainer.per_device_train_batch_size=2")
    run = run_dir(tmp_path, "z2")
    rows = [r for r in read_jsonl(run / "metrics.jsonl") if "reward" in r]
    assert [r["step"] for r in rows] == [1, 2]
    # each step: 2 processes x 2 episodes, records per rank
    tags = sorted(p.name for p in (run / "playpen-records").glob("*/step_*"))
    assert tags == ["step_00000-rank0", "step_00000-rank1", "step_00001-rank0", "step_00001-rank1"]
    state = json.loads((run / "checkpoints" / "checkpoint-2" / "playpen_state.json").read_text())
    assert state["episodes"] == 8
