"""`make demo`'s chain on a shortened schedule: submit the demo config through submitit's local executor, wait,
then `python -m playpen.demo` evaluates the untrained and the trained model with `playpen eval` and plots them.
The full-length demo (120 steps) is measured in bench/results/demo.md, not here."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHORT = ["trainer.max_steps=2", "trainer.save_steps=1", "validation_instances=3"]


@pytest.mark.slow
def test_demo_chain_trains_registers_and_compares_on_validation(tmp_path):
    env = {**os.environ, "PLAYPEN_STORAGE": str(tmp_path / "runs")}
    config = "grpo/demo"  # a shipped config by name: the run works from any folder
    submit = subprocess.run([sys.executable, "-m", "playpen.submit", "grpo", "--config", config, "--executor",
                             "local", "--wait", *SHORT], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=600)
    assert submit.returncode == 0, submit.stdout[-2000:] + submit.stderr[-2000:]
    demo = subprocess.run([sys.executable, "-m", "playpen.demo", "--config", config, "--samples", "2", *SHORT],
                          cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]

    (run,) = (tmp_path / "runs" / "grpo-demo").iterdir()
    for produced in ("learning_curve.png", "demo_eval.png", "validation.json", "metrics.jsonl", "final"):
        assert (run / produced).exists(), produced
    assert any((run / "playpen-records").rglob("interactions.json"))
    summary = json.loads((run / "demo_eval.json").read_text())
    assert set(summary) == {"untrained T=0", "trained T=0", "untrained T=1.3", "trained T=1.3"}
    trained = json.loads((run / "model_registry.json").read_text())[-1]["model_name"]
    for name, row in summary.items():
        assert row["model"] == ("playpen-tiny" if name.startswith("untrained") else trained)
        # every referencegame validation instance: once greedy, once per sampling seed at the rollout temperature
        sampled = row["temperature"] > 0
        assert row["episodes"] == 60 * (2 if sampled else 1) and row["seeds"] == (2 if sampled else 1)
        assert 0 <= row["clemscore"] <= 100 and (row["clemscore_se"] > 0) == sampled
        assert row["clemscore"] == pytest.approx(row["played"] * row["quality"] / 100, abs=0.01)  # val.json rounds
        assert f"[demo] {name}" in demo.stdout
    # the sampling seeds really play other episodes: the two evaluations' records differ
    seeds = [json.loads(next((run / "eval" / f"untrained-T1.3-seed{k}").rglob("playpen-tiny.val.json")).read_text())
             for k in (0, 1)]
    assert seeds[0]["games"] != seeds[1]["games"]


def test_pooled_evaluations_are_one_evaluation_of_all_episodes():
    from playpen.demo import pooled

    vals = [{"games": {"g": {"episodes": 60, "played": 75.0, "quality": 40.0, "clemscore": 30.0}}},
            {"games": {"g": {"episodes": 60, "played": 100.0, "quality": 25.0, "clemscore": 25.0}}}]
    row = pooled(vals, "g")
    # 45 + 60 played episodes, quality (45*40 + 60*25) / 105
    assert row["episodes"] == 120 and row["played"] == pytest.approx(87.5)
    assert row["quality"] == pytest.approx(3300 / 105) and row["clemscore"] == pytest.approx(0.875 * 3300 / 105)
    assert row["clemscore_se"] == pytest.approx(2.5) and row["seeds"] == 2
    nothing_played = pooled([{"games": {"g": {"episodes": 5, "played": 0.0, "quality": None, "clemscore": 0.0}}}], "g")
    assert nothing_played["clemscore"] == 0.0 and nothing_played["clemscore_se"] == 0.0
