"""playpen.model_registry against shared storage: a model_registry.json anyone can write into any folder under the
storage root adds at most the one model of the training run it sits in (`<experiment>-<run_id>`), never a name
defined elsewhere (`playpen-tiny`, clemcore's `gpt-4o`, another run's), and says so on screen; a name holding
`--` (which joins a model and its partner in results folders) is refused wherever a model is named. Nothing here
loads a model."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from playpen.errors import PlaypenError
from playpen.model_registry import model_entries, resolve_model


def entry(name: str, hub: str = "neighbour/weights") -> dict:
    return {"model_name": name, "backend": "huggingface_local", "huggingface_id": hub}


def run_folder(root: Path, experiment: str, run_id: str, *entries: dict) -> Path:
    run = root / experiment / run_id
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(f"# playpen train sft (resolved config)\nexperiment: {experiment}\n")
    (run / "model_registry.json").write_text(json.dumps(list(entries)))
    return run


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PLAYPEN_STORAGE", str(tmp_path / "runs"))
    return tmp_path / "runs"


def test_a_run_folder_adds_only_its_own_model(root, capsys):
    run_folder(root, "exp", "r1", entry("exp-r1", "/runs/exp/r1/final"), entry("playpen-tiny"), entry("gpt-4o"))
    (root / "notes" / "x").mkdir(parents=True)  # any folder, not a run
    (root / "notes" / "x" / "model_registry.json").write_text(json.dumps([entry("notes-x")]))
    names = [e.name for e in model_entries()]
    assert "exp-r1" in names and "notes-x" not in names
    assert resolve_model("exp-r1")["huggingface_id"] == "/runs/exp/r1/final"
    assert resolve_model("playpen-tiny")["huggingface_id"] != "neighbour/weights"  # the packaged one
    assert resolve_model("gpt-4o")["backend"] == "openai"  # clemcore's
    err = capsys.readouterr().err
    assert "skipping 'playpen-tiny'" in err and "skipping 'gpt-4o'" in err and "registers only its own model" in err
    assert "notes/x is not a training run folder" in err


@pytest.mark.parametrize("experiment,run_id,shadowed", [("playpen", "tiny", "playpen-tiny"),
                                                        ("gpt", "4o", "gpt-4o")])
def test_a_run_named_like_another_model_shadows_nothing(root, capsys, experiment, run_id, shadowed):
    run_folder(root, experiment, run_id, entry(shadowed))
    assert resolve_model(shadowed).get("huggingface_id") != "neighbour/weights"
    err = capsys.readouterr().err
    assert f"registers '{shadowed}', a name already defined elsewhere; skipped" in err, err


def test_a_run_folder_given_as_the_model_is_its_own_model(root):
    run = run_folder(root, "exp", "r2", entry("playpen-tiny"), entry("exp-r2", "/runs/exp/r2/final"))
    assert resolve_model(str(run))["huggingface_id"] == "/runs/exp/r2/final"
    foreign = run_folder(root, "exp", "r3", entry("playpen-tiny"))
    with pytest.raises(PlaypenError, match="does not register the run's own model 'exp-r3'"):
        resolve_model(str(foreign))


def test_a_name_with_the_pair_separator_is_refused(root, tmp_path):
    (tmp_path / "model_registry.json").write_text(json.dumps([entry("mock--mock")]))
    with pytest.raises(PlaypenError, match=r"'mock--mock'\) model_name holds '--'"):
        model_entries()


def test_a_model_folder_named_like_a_pair_is_refused(tmp_path, capsys, monkeypatch):
    from playpen.cli import main

    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "a--b"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert main(["eval", str(folder), "-g", "wordle", "-r", "res"]) == 2
    err = capsys.readouterr().err
    assert "model name 'a--b' holds '--'" in err and not (tmp_path / "res").exists()


def test_a_training_run_whose_model_name_would_hold_the_separator_is_refused(tmp_path):
    from playpen.storage import RunDir

    with pytest.raises(PlaypenError, match="model name 'x--r1'"):
        RunDir.for_experiment(tmp_path / "runs", "x-", "r1")
    assert not (tmp_path / "runs" / "x-").exists()


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_a_clembench_log_planted_where_clemcore_appends_is_refused(root, tmp_path, kind):
    import os

    victim = tmp_path / "thesis.tex"
    victim.write_text("only copy")
    log = tmp_path / "clembench.log"
    log.symlink_to(victim) if kind == "symlink" else os.link(victim, log)
    with pytest.raises(PlaypenError, match="clembench.log is a link"):
        model_entries()
    assert victim.read_text() == "only copy"
