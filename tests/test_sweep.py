"""Eval sweeps on the local (in-process) executor: a 2-model × 2-game sweep with a broken model, fixed and rerun
(only its cells run again), a lost result, a dead job's stale heartbeat, checkpoints of a run as a learning
curve, and one-line errors for bad sweep files. ~40 s. (The SLURM job-array version is in the submit tests.)"""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

from playpen.errors import PlaypenError
from playpen.models.specs import resolve_eval_model
from playpen.eval.sweep import (Cell, aggregate, cell_state, format_status, load_sweep, run_cell, run_local,
                                status)
from playpen.model_registry import resolve_model
from tests.helpers import check_refused, sweep_results, write_sweep, write_tiny_ab_registry


def test_failed_cells_rerun_alone_and_aggregate_completes(tiny, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_tiny_ab_registry(tmp_path, broken=True)
    path = write_sweep(tmp_path)
    first = run_local(load_sweep(path), log=lambda m: None)
    assert len(first["ran"]) == 4
    assert sorted(first["failed"]) == ["tiny-b/arithmetic", "tiny-b/wordle"]
    sweep_dir = tmp_path / "sweep"
    info = status(sweep_dir)
    assert info["counts"] == {"done": 2, "running": 0, "failed": 2, "pending": 0}
    assert all("nonexistent" in c["error"] or "Error" in c["error"] for c in info["cells"] if c["state"] == "failed")
    assert first["aggregate"]["complete"] is False and first["aggregate"]["done"] == 2
    done_before = sweep_results(sweep_dir)
    assert sorted(done_before) == ["tiny-a/arithmetic", "tiny-a/wordle"]

    # fix the registry entry; rerun from another working directory with cells that went through pickle
    write_tiny_ab_registry(tmp_path, broken=False)
    sweep = load_sweep(path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    pending = sweep.pending_cells()
    assert sorted(c.key for c in pending) == ["tiny-b/arithmetic", "tiny-b/wordle"]
    for cell in pending:
        run_cell(str(sweep.dir), pickle.loads(pickle.dumps(cell)))
    monkeypatch.chdir(tmp_path)  # the registry that names tiny-a/tiny-b is this folder's
    assert load_sweep(path).pending_cells() == []
    after = sweep_results(sweep_dir)
    assert len(after) == 4
    assert {k: after[k]["attempt"] for k in done_before} == {k: v["attempt"] for k, v in done_before.items()}

    agg = aggregate(sweep_dir)
    assert agg["complete"] and agg["done"] == agg["rows"] == 4
    lines = (sweep_dir / "sweep.csv").read_text().strip().splitlines()
    assert len(lines) == 5 and lines[0].startswith("model,step,checkpoint,run,game,static")
    assert all(",done," in line for line in lines[1:])
    assert (sweep_dir / "plots" / "heatmap.png").stat().st_size > 1000
    html = (sweep_dir / "sweep.html").read_text()
    assert "tiny-a" in html and "tiny-b" in html and "plots/heatmap.png" in html
    assert status(sweep_dir)["counts"]["done"] == 4 and "4 done" in format_status(status(sweep_dir))

    # a lost result (e.g. deleted by hand): only that cell is pending; a rerun runs just it
    (sweep_dir / "cells" / "tiny-a" / "wordle" / "result.json").unlink()
    again = run_local(load_sweep(path), log=lambda m: None)
    assert again["ran"] == ["tiny-a/wordle"] and not again["failed"] and again["aggregate"]["complete"]


def test_dead_job_counts_as_failed_and_changed_settings_rerun(tiny, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_tiny_ab_registry(tmp_path, broken=False)
    path = write_sweep(tmp_path, models=["tiny-a"], games=["arithmetic"])
    sweep = load_sweep(path)
    cell = sweep.pending_cells()[0]
    state_file = sweep.dir / "cells" / cell.key / "state.json"
    state_file.parent.mkdir(parents=True)
    state_file.write_text(json.dumps({"state": "running", "host": "node7", "job": "123",
                                      "heartbeat": time.time(), "fingerprint": cell.fingerprint()}))
    assert cell_state(sweep.dir, cell)["state"] == "running"
    assert sweep.pending_cells() == []  # a live cell is not submitted twice, and not called done
    from playpen.cli import main

    capsys.readouterr()
    assert main(["submit", "sweep", "--config", str(path), "--executor", "local"]) == 0
    out = capsys.readouterr().out
    assert "0 of 1 cells are done and 1 still running" in out and "cells are done;" not in out, out
    state_file.write_text(json.dumps({"state": "running", "host": "node7", "heartbeat": time.time() - 3600}))
    st = cell_state(sweep.dir, cell)
    assert st["state"] == "failed" and "heartbeat" in st["error"]
    run_cell(sweep.dir, cell)
    assert cell_state(sweep.dir, cell)["state"] == "done"
    changed = load_sweep(path, ["max_new_tokens=12"])
    assert [c.key for c in changed.pending_cells()] == [cell.key]  # different settings: the result is stale


def make_run(root: Path, tiny: Path, steps: list[int], registry: bool) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    run = root / "grpo-tiny" / "run1"
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny), LoraConfig(r=2, target_modules=["q_proj"]))
    for step in steps:
        model.save_pretrained(run / "checkpoints" / f"checkpoint-{step}")
    if registry:
        spec = {**resolve_model("playpen-tiny"), "model_name": "grpo-tiny-run1"}
        last = run / "checkpoints" / f"checkpoint-{steps[-1]}"
        spec["model_config"] = {**spec["model_config"], "peft_model": str(last)}
        (run / "model_registry.json").write_text(json.dumps([spec]))
    return run


def test_checkpoints_of_a_run_make_a_learning_curve(tiny, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = make_run(tmp_path / "runs", tiny, [10, 20, 30], registry=False)
    path = write_sweep(tmp_path, models=[], runs=[{"path": str(run), "every": 2, "base": True, "label": "grpo"}],
                       games=["arithmetic"], max_instances=1)
    sweep = load_sweep(path)
    assert [(c.model, c.step) for c in sweep.cells] == [("grpo", 0), ("grpo", 10), ("grpo", 30)]
    assert "peft_model" not in sweep.cells[0].spec["model_config"]
    assert sweep.cells[2].spec["model_config"]["peft_model"] == str(run / "checkpoints" / "checkpoint-30")
    out = run_local(sweep, log=lambda m: None)
    assert not out["failed"] and out["aggregate"]["complete"]
    assert (sweep.dir / "plots" / "learning_curve.png").stat().st_size > 1000
    rows = (sweep.dir / "sweep.csv").read_text().splitlines()[1:]
    assert [r.split(",")[1] for r in rows] == ["0", "10", "30"]


def test_run_registry_and_final_model(tiny, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = make_run(tmp_path / "runs", tiny, [5], registry=True)
    sweep = load_sweep(write_sweep(tmp_path, models=[], runs=[{"path": str(run), "final": True}], games=["wordle"]))
    assert [(c.model, c.step, c.checkpoint) for c in sweep.cells] == [
        ("grpo-tiny/run1", 5, str(run / "checkpoints" / "checkpoint-5")), ("grpo-tiny/run1", None, "final")]
    assert sweep.cells[0].spec["model_name"] == "grpo-tiny-run1-step5"
    # `playpen eval <run dir>` evaluates what the run registered
    assert resolve_eval_model(str(run))["model_config"]["peft_model"] == str(run / "checkpoints" / "checkpoint-5")


def test_a_cell_whose_process_died_on_this_host_is_failed_at_once(tmp_path):
    """Killed with -9, a cell's heartbeat is fresh for STALE_AFTER_S more; on the host it ran on, its pid says."""
    import socket

    from playpen.eval.cells import Cell

    cell = Cell(key="m/wordle", model="m", spec={"model_name": "m"}, game="wordle", game_path="", game_spec={},
                static=False, instance_set="validation", max_instances=1, max_tokens=8, temperature=0.0,
                batch_size=1)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    state_file = tmp_path / "cells" / cell.key / "state.json"
    state_file.parent.mkdir(parents=True)
    for pid, expected in ((dead.pid, "failed"), (os.getpid(), "running")):
        state_file.write_text(json.dumps({"state": "running", "host": socket.gethostname(), "pid": pid,
                                          "heartbeat": time.time(), "fingerprint": cell.fingerprint()}))
        st = cell_state(tmp_path, cell)
        assert st["state"] == expected and (expected == "running" or f"pid {dead.pid} on this host" in st["error"])


def test_heartbeat_keeps_a_running_cell_alive(tmp_path, monkeypatch):
    from playpen.eval import cells

    monkeypatch.setattr(cells, "HEARTBEAT_S", 0.05)
    path = tmp_path / "state.json"
    with cells._Heartbeat(path, {"state": "running", "heartbeat": 0.0}):
        time.sleep(0.3)
        assert time.time() - json.loads(path.read_text())["heartbeat"] < 1


def test_bad_sweep_files_are_one_line_and_run_nothing(tiny, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    empty_run = tmp_path / "runs" / "exp" / "empty"
    (empty_run / "checkpoints").mkdir(parents=True)
    blank_ckpt = tmp_path / "runs" / "exp" / "blank"
    (blank_ckpt / "checkpoints" / "checkpoint-3").mkdir(parents=True)
    not_a_sweep = tmp_path / "results"
    not_a_sweep.mkdir()
    (not_a_sweep / "notes.txt").write_text("mine")
    cases = [
        (dict(models=["no-such-model"]), "unknown model 'no-such-model'"),
        (dict(models=["playpen-tiny"], games=["wordle", "chess"]), "unknown game 'chess'"),
        (dict(models=[], runs=[str(empty_run)]), "has no checkpoints"),
        (dict(models=[], runs=[str(blank_ckpt)]), "checkpoint-3 is empty"),
        (dict(models=["playpen-tiny"], output_dir=str(not_a_sweep)), "is not a sweep's"),
        (dict(models=["playpen-tiny"], games=[{"name": "wordle", "instances": "nope"}]), "no instance set 'nope'"),
        (dict(models=["playpen-tiny"], max_token=5), "unknown key 'max_token'"),
    ]
    for overrides, message in cases:
        with pytest.raises(PlaypenError, match=message) as err:
            load_sweep(write_sweep(tmp_path, **overrides))
        assert "\n" not in str(err.value)
        assert not (tmp_path / "sweep").exists()
    with pytest.raises(PlaypenError, match="is not a sweep directory"):
        status(not_a_sweep)
    with pytest.raises(PlaypenError, match="is not a sweep directory"):
        aggregate(not_a_sweep)
    with pytest.raises(PlaypenError, match="is not a sweep directory"):
        run_cell(not_a_sweep, Cell("k", "m", {"model_name": "m"}, "wordle", "/x", {}, False, "validation", 1,
                                   8, 0.0, 1))
    proc = subprocess.run([sys.executable, "-m", "playpen.eval.sweep", "--status", str(not_a_sweep)],
                          capture_output=True, text=True, timeout=60, env={**os.environ})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("playpen: error:")


def test_meters_in_a_sweep_match_playpen_meter(tiny, tmp_path, monkeypatch):
    """A meter cell is `playpen meter` on that model: same settings, same completions, same mean; checkpoints of a
    run make a meter curve; a meter setting a sweep owns (model:) is one line."""
    from playpen.reward.meter import meter, parse_config

    monkeypatch.chdir(tmp_path)
    run = make_run(tmp_path / "runs", tiny, [10, 20], registry=False)
    prompts = Path(__file__).parents[1] / "playpen/configs/reward/prompts/taboo_describer_validation.jsonl"
    settings = {"classifier": "vader", "prompts": str(prompts), "samples": 2, "limit": 3, "max_new_tokens": 8}
    path = write_sweep(tmp_path, models=["playpen-tiny"], runs=[{"path": str(run), "label": "grpo"}], games=[],
                       meters=[{"name": "sentiment", **settings}])
    sweep = load_sweep(path)
    assert [c.key for c in sweep.cells] == ["playpen-tiny/meter-sentiment", "grpo@step10/meter-sentiment",
                                            "grpo@step20/meter-sentiment"]
    out = run_local(sweep, log=lambda m: None)
    assert not out["failed"] and out["aggregate"]["complete"]
    assert (sweep.dir / "plots" / "meter_curve.png").stat().st_size > 1000
    result = sweep_results(sweep.dir)["playpen-tiny/meter-sentiment"]
    direct = parse_config({"model": "playpen-tiny", "output": str(tmp_path / "direct"), **settings}, "test")
    meter(direct)
    summary = json.loads((tmp_path / "direct" / "playpen-tiny.summary.json").read_text())
    assert result["meter_n"] == summary["n"] == 6 and result["meter_mean"] == summary["mean"]
    assert "mean " in format_status(status(sweep.dir))
    with pytest.raises(PlaypenError, match=r"meters\[0\]: model: is not a meter setting"):
        load_sweep(write_sweep(tmp_path, models=["playpen-tiny"], meters=[{"model": "playpen-tiny", **settings}]))
    with pytest.raises(PlaypenError, match=r"meters\[0\]: .*--prompts"):
        load_sweep(write_sweep(tmp_path, models=["playpen-tiny"],
                               meters=[{**settings, "prompts": str(tmp_path / "none.jsonl")}]))


# ---------------------------------------------------------------- bad values in a sweep file, through the command

SWEEP = "name: s\nmodels: [playpen-tiny]\ngames: [wordle]\n"
SWEEPS = {  # the sweep file's extra lines: what the line says (no cell runs, no table or heatmap is written)
    "max_instances 0": ("max_instances: 0", "s.yaml: max_instances: must be at least 1, got 0"),
    "max_instances -4": ("max_instances: -4", "max_instances: must be at least 1, got -4"),
    "temperature -1": ("temperature: -1", "temperature: must be at least 0, got -1.0"),
    "temperature inf": ("temperature: .inf", "temperature: must be a finite number, got inf"),
    "temperature nan": ("temperature: .nan", "temperature: must be a finite number, got nan"),
    "batch_size 0": ("batch_size: 0", "batch_size: must be at least 1, got 0"),
    "max_new_tokens 0": ("max_new_tokens: 0", "max_new_tokens: must be at least 1, got 0"),
    "max_new_tokens abc": ("max_new_tokens: abc", "max_new_tokens: expected int, got 'abc'"),
    "a game's max_instances 0": ("games: [{name: wordle, max_instances: 0}]",
                                 "s.yaml: games[0]: max_instances: must be at least 1, got 0"),
    "a run's every 0": ("runs: [{path: folder, every: 0}]", "s.yaml: runs[0]: every: must be at least 1, got 0"),
}


@pytest.mark.parametrize("case", SWEEPS)
def test_sweep_values(capsys, stocked_cwd, case):
    extra, message = SWEEPS[case]
    key = extra.split(":")[0]
    text = "\n".join(line for line in SWEEP.splitlines() if not line.startswith(key + ":")) + "\n" + extra + "\n"
    check_refused(capsys, stocked_cwd, ["submit", "sweep", "--config", "s.yaml", "--executor", "local", "--dry-run"],
                  message, {"s.yaml": text})
