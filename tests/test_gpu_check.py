"""bench/gpu_check.sh, the GPU proof prepared for a node without internet: its CPU part (--dry-run: doctor, GRPO
killed after its first checkpoint and resumed, SFT-LoRA, the rollout engine against generate and a raw loop on a
small random Llama, the report), and the plan of wheels it carries (bench/gpu_wheels.py)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_dry_run_runs_every_phase_and_writes_the_report(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_WORK": str(tmp_path / "work")}
    start = time.perf_counter()
    proc = subprocess.run(["bash", "bench/gpu_check.sh", "--dry-run", "--results", str(tmp_path)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)
    print(f"gpu_check.sh --dry-run: {time.perf_counter() - start:.1f} s")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = (tmp_path / "gpu-dry-run.md").read_text()
    assert text.endswith("## Failures\n\nnone\n"), text
    found = json.loads((tmp_path / "gpu-dry-run.json").read_text())
    assert found["doctor"]["overall"] in ("OK", "WARN")
    grpo, sft = found["training"]["grpo"], found["training"]["sft"]
    assert grpo["killed_at"] == 1 and grpo["steps"] == 2 and sft["steps"] == 2
    assert [r["batch"] for r in found["rollout"]["rows"]] == [1, 2]
    assert all(r["engine_tok_s"] > 0 and r["raw_tok_s"] > 0 for r in found["rollout"]["rows"])
    if importlib.util.find_spec("vllm") is not None:  # the vLLM rows the first GPU lent measures
        assert all(r["vllm_tok_s"] > 0 for r in found["rollout"]["rows"]) and "vLLM × engine" in text
        assert [(g["group"], g["episodes"]) for g in found["rollout"]["groups"]] == [(2, 4)]
        assert all(g["engine_eps_s"] > 0 and g["vllm_eps_s"] > 0 for g in found["rollout"]["groups"])
    assert "resum" in (tmp_path / "work" / "grpo.log").read_text().split("==== killed", 1)[1]


def test_the_wheel_plan_is_pinned_and_leaves_the_node_its_torch():
    proc = subprocess.run([sys.executable, "bench/gpu_wheels.py", "plan"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    plan = [line.split("==") for line in proc.stdout.split()]
    names = [name for name, _ in plan]
    assert {"trl", "datasets", "clemcore", "submitit"} <= set(names)
    assert not {"torch", "transformers", "peft", "accelerate", "numpy"} & set(names)  # the node's own
    assert names.index("clemcore") < names.index("deepspeed") < names.index("trl")  # by phase, while they fit
    assert names[-2:] == ["pyarrow", "bitsandbytes"]
    lock = (REPO / "requirements" / "lock.txt").read_text()
    assert all(f"\n{name}=={version}\n" in lock for name, version in plan)
