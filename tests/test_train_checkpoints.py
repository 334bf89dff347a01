"""playpen.train.checkpoints: a checkpoint is resumed or finished from only when it is this run's. A folder copied
in from another run (or reached through a link) would otherwise become this run's registered final model: step 7
of a run with max_steps 3, a rank-16 adapter under lora.r=4, full weights where the run trains an adapter. Each is
`playpen train` as a user runs it: exit 2, one line naming the checkpoint, before any model loads. A stray file
named like a checkpoint, and a save cut off by a file size limit, are one line too."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from playpen.cli import main
from playpen.errors import PlaypenError
from playpen.model_registry import playpen_home

TRAIN = ["train", "sft", "experiment=x", "run_id=r1", "data=sft.jsonl", "storage_root=runs", "cpu_threads=1"]


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("PLAYPEN_HOME", str(playpen_home()))
    monkeypatch.chdir(tmp_path)
    row = {"messages": [{"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "4"}]}
    (tmp_path / "sft.jsonl").write_text(json.dumps(row) + "\n")
    return tmp_path


def checkpoint(folder: Path, step: int, rank: int | None = 16, state_step: int | None = None,
               alpha: int = 32, base: str = "/models/playpen-tiny") -> Path:
    """A complete checkpoint as the Trainer and ResumeState leave it: an adapter of `rank` (None: full weights)."""
    from safetensors.numpy import save_file

    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step, "max_steps": 50}))
    state_step = step if state_step is None else state_step
    (path / "playpen_state.json").write_text(json.dumps({"step": state_step, "global_step": state_step}))
    if rank is None:
        (path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 4096}))
        save_file({"w": np.zeros((2, 2), np.float32)}, str(path / "model.safetensors"))
    else:
        (path / "adapter_config.json").write_text(json.dumps({"r": rank, "lora_alpha": alpha,
                                                              "target_modules": ["q_proj", "v_proj"],
                                                              "base_model_name_or_path": base}))
        save_file({"base_model.model.q_proj.lora_A.weight": np.zeros((rank, 8), np.float32)},
                  str(path / "adapter_model.safetensors"))
    return path


def refused(capsys, *extra: str) -> str:
    capsys.readouterr()
    assert main([*TRAIN, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("playpen: error: "), err
    return err[0]


CASES = {  # (checkpoint, overrides) -> what the line says
    "past max_steps": (dict(step=7), ["trainer.max_steps=3"], "it is at step 7, past the run's max_steps 3"),
    "another rank": (dict(step=2), ["trainer.max_steps=3", "lora.r=4"],
                     "its adapter has r=16, the run's lora has r=4"),
    "another alpha": (dict(step=2, alpha=8), ["trainer.max_steps=3"],
                      "its adapter has lora_alpha=8, the run's lora has lora_alpha=32"),
    "renamed": (dict(step=2, state_step=7), ["trainer.max_steps=9"],
                "its playpen_state.json says step 7, its name step 2"),
    "full weights": (dict(step=2, rank=None), ["trainer.max_steps=3"],
                     "it holds full weights, and this run trains a LoRA adapter"),
    "an adapter": (dict(step=2), ["trainer.max_steps=3", "lora=null"],
                   "it holds a LoRA adapter, and this run trains full weights"),
    "another base model": (dict(step=2, base="HuggingFaceTB/SmolLM2-1.7B"), ["trainer.max_steps=3"],
                           "its adapter sits on HuggingFaceTB/SmolLM2-1.7B, the run trains "),
}


@pytest.mark.parametrize("case", CASES)
def test_a_checkpoint_that_does_not_fit_the_run_is_refused(capsys, work, case):
    made, overrides, message = CASES[case]
    path = checkpoint(work / "runs" / "x" / "r1" / "checkpoints", **made)
    err = refused(capsys, *overrides)
    assert f"checkpoint {path} does not fit this run: {message}" in err, err
    assert not (work / "runs" / "x" / "r1" / "final").exists()


def test_an_adapter_whose_tensors_disagree_with_its_config_is_refused(capsys, work):
    path = checkpoint(work / "runs" / "x" / "r1" / "checkpoints", 2)
    (path / "adapter_config.json").write_text(json.dumps({"r": 4, "lora_alpha": 32}))  # the tensors are rank 16
    err = refused(capsys, "trainer.max_steps=3", "lora.r=4")
    assert "tensor base_model.model.q_proj.lora_A.weight has rank 16, the run's lora has r=4" in err, err


def test_checkpoints_reached_through_links_are_not_the_runs(capsys, work):
    other = checkpoint(work / "runs" / "y" / "r9" / "checkpoints", 3)
    run = work / "runs" / "x" / "r1"
    run.mkdir(parents=True)
    (run / "checkpoints").symlink_to(other.parent)
    err = refused(capsys, "trainer.max_steps=3")
    assert f"run folder {run / 'checkpoints'} is a symbolic link" in err, err
    (run / "checkpoints").unlink()
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "checkpoint-3").symlink_to(other)  # a link named like a checkpoint is none
    from playpen.storage import checkpoints_in

    assert checkpoints_in(run / "checkpoints") == []


def test_a_folder_planted_where_the_next_checkpoint_goes_is_removed_first(tmp_path, monkeypatch):
    """The Trainer writes checkpoint-<step> by name: what someone put there before (links inside) goes first."""
    from types import SimpleNamespace

    from playpen.train.checkpoints import resume_state_callback

    victim = tmp_path / "thesis.tex"
    victim.write_text("only copy")
    planted = tmp_path / "checkpoints" / "checkpoint-4"
    planted.mkdir(parents=True)
    (planted / "adapter_model.safetensors").symlink_to(victim)
    callback = resume_state_callback()
    args = SimpleNamespace(output_dir=str(tmp_path / "checkpoints"))
    state = SimpleNamespace(global_step=4, is_world_process_zero=True)
    callback.on_step_end(args, state, SimpleNamespace(should_save=False))
    assert planted.exists()  # no save at this step: nothing touched
    callback.on_step_end(args, state, SimpleNamespace(should_save=True))
    assert victim.read_text() == "only copy" and os.listdir(planted) == []  # made anew, empty,
    assert not stat.S_IMODE(planted.stat().st_mode) & 0o022  # and nobody else can plant anything in it


# ---------------------------------------------------------------- not a checkpoint; a save that cannot be written

def test_a_stray_file_named_like_a_checkpoint(tmp_path):
    from playpen.train.checkpoints import find_resume_checkpoint

    (tmp_path / "checkpoint-3").write_text("not a folder")
    with pytest.raises(PlaypenError, match=r"checkpoint-3 is a file, not a checkpoint folder; move it out of"):
        find_resume_checkpoint(tmp_path)


@pytest.mark.slow
def test_a_file_size_limit_during_a_checkpoint_save_is_one_line(clean_cwd, run_inputs):
    """`ulimit -f` (as a full disk or quota): one line saying how to resume, not a safetensors traceback; the rerun
    skips the cut-off checkpoint."""
    import resource
    import subprocess
    import sys

    argv = [sys.executable, "-m", "playpen.cli", "train", "sft", "experiment=x", f"data={run_inputs['sft']}",
            "storage_root=runs", "cpu_threads=1", "trainer.max_steps=2", "trainer.save_steps=1",
            "trainer.per_device_train_batch_size=4"]
    limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))  # noqa: E731 (adapter: 630 kB)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=clean_cwd, preexec_fn=limit,
                          env={**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert last.startswith("playpen: error: cannot write into ") and "(File too large); free space" in last, last
