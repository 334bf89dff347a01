"""No value reaches a job script or a path unchecked.

- the sbatch script of a training job, line by line, against a recorded file (tests/data/golden/);
- hostile values (a newline and #SBATCH, $(...), `...`, ;, quotes, '..', absolute paths) through every field of
  every job kind that becomes a path or reaches the script: refused in one line, nothing written;
- every source of a name that becomes a path (run ids, experiments, game names from a registry, model names,
  sweep/meter/tournament names, -r/-o folders, a link planted at a run folder) stays under its root.
Nothing here loads a model."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from playpen.cli import main
from playpen.errors import PlaypenError
from playpen.storage import (atomic_write_text, check_name, inside, move_tree, path_under, remove_tree,
                             resolve_storage_root)
from tests.test_bad_input import home  # noqa: F401  (the one-folder-per-case fixture of the bad-input cases)
from tests.test_integrity import refused, snapshot

@pytest.fixture
def work(home: Path) -> Path:  # noqa: F811
    return home


REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "data" / "golden"
CONFIGS = REPO / "playpen" / "configs"
STAMP = re.compile(r"\d{8}-\d{6}-\d+")  # the submission folder's time and pid

# values that would write lines of their own into a script, or run a command when a shell reads them
INJECTIONS = {
    "newline #SBATCH": "x\n#SBATCH --partition=evil\necho INJECTED; touch marker\n#",
    "carriage return": "x\r#SBATCH --partition=evil",
    "$(...)": "x$(touch marker)",
    "backquotes": "x`touch marker`",
    "single quote": "x'; touch marker; '",
    "double quote": 'x"; touch marker; "',
    "backslash": "x\\\nmarker",
    "percent": "x%j",
}
# names only: these are fine in a path, never as one folder name
ESCAPES = {"semicolon": "x;touch marker", "dot dot": "..", "parent": "../../x", "absolute": "/tmp/x",
           "separator": "a/b", "hidden": ".x", "space": "a b", "empty": "", "too long": "x" * 200,
           "tab": "x\ty", "nul": "x\x00y"}

TRAIN = {"sft": "sft/tiny_lora.yaml", "dpo": "dpo/tiny_rollouts.yaml", "grpo": "grpo/demo.yaml",
         "rloo": "grpo/tiny_reward_model.yaml", "reward": "reward/tiny_sentiment.yaml"}
# job kind -> (its default config, {field: "name" | "path" | "other"}); "other": a model or game, refused as
# unknown (it never becomes a path itself: folders named after it are made safe with storage.slug)
FIELDS = {
    **{kind: (config, {"experiment": "name", "run_id": "name", "storage_root": "path", "model": "other"})
       for kind, config in TRAIN.items()},
    "grpo": ("grpo/demo.yaml", {"experiment": "name", "run_id": "name", "storage_root": "path", "model": "other",
                                "game": "other"}),
    "eval": ("eval/tiny.yaml", {"results_dir": "path", "storage_root": "path", "model": "other"}),
    "meter": ("meter/tiny_vader.yaml", {"output": "path", "storage_root": "path", "model": "other"}),
    "sweep": ("sweeps/tiny.yaml", {"name": "name", "output_dir": "path", "storage_root": "path"}),
    "tournament": ("debate/tournament_tiny.yaml", {"name": "name", "output_dir": "path"}),
}
CASES = [(kind, key, label) for kind, (_, fields) in FIELDS.items() for key, sort in fields.items()
         for label in (*INJECTIONS, *(ESCAPES if sort == "name" else ()))]


def submit_argv(kind: str, *extra: str) -> list[str]:
    return ["submit", kind, "--config", str(CONFIGS / FIELDS[kind][0]), "--dry-run", *extra]


# ---------------------------------------------------------------- section 1: the script

def test_generated_sbatch_script_matches_the_recorded_one(capsys, work):
    """The whole script of a 2-node GPU-profile training job, line by line. The recorded file is never rewritten
    by the test: a change to it is a change to every job playpen submits, reviewed as such."""
    recorded = GOLDEN / "sft_2nodes.sbatch"
    assert recorded.is_file(), f"{recorded} is missing: record it by hand from the command in this test"
    capsys.readouterr()
    assert main(["submit", "sft", "--config", str(GOLDEN / "sft.yaml"), "--cluster", str(GOLDEN / "cluster.yaml"),
                 "--nodes", "2", "--dry-run"]) == 0
    out = STAMP.sub("<STAMP>", capsys.readouterr().out)
    assert out.splitlines() == recorded.read_text().splitlines()
    assert not any(work.rglob("*.sbatch")) and not (work / "runs").exists()  # a dry run creates nothing
    for line in out.splitlines():  # every line is one of a script's kinds of line: nothing else got in
        assert re.fullmatch(r"(#!/bin/bash|# .*|#SBATCH --[a-z-]+(=\S+)?|module .*|export [A-Z_]+=\"[^\"]*\"|"
                            r"export SUBMITIT_EXECUTOR=slurm|srun .*|)", line), line


@pytest.mark.parametrize("kind,key,label", CASES, ids=[f"{k}-{f}-{v}" for k, f, v in CASES])
def test_hostile_values_are_refused_before_anything_is_written(capsys, work, kind, key, label):
    """As an override (JSON is YAML: the newline arrives as one) and the same in the config file itself."""
    value = {**INJECTIONS, **ESCAPES}[label]
    err = refused(capsys, submit_argv(kind, f"{key}={json.dumps(value)}"), work)
    assert key in err or "path" in err or f"unknown {key}" in err, err
    config = work / "hostile.yaml"
    from playpen.config import load_yaml

    config.write_text(json.dumps({**load_yaml(CONFIGS / FIELDS[kind][0]), key: value}))
    refused(capsys, ["submit", kind, "--config", str(config), "--dry-run"], work)
    assert not list(work.rglob("marker"))


PROFILE_CASES = [("storage_root", label) for label in INJECTIONS] + [  # other values: no line breaks (an
    (key, label) for key in ("partition", "account", "mem", "setup", "sbatch", "env")  # #SBATCH value on its one
    for label in ("newline #SBATCH", "carriage return", "backslash")]                 # line adds nothing)


@pytest.mark.parametrize("key,label", PROFILE_CASES)
def test_hostile_cluster_profile_values_are_refused(capsys, work, key, label):
    value = INJECTIONS[label]
    nested = {"setup": [value], "sbatch": {"comment": value}, "env": {"X": value}}
    (work / "c.yaml").write_text(json.dumps({key: nested.get(key, value)}))
    err = refused(capsys, submit_argv("sft", "--cluster", "c.yaml"), work)
    assert f"c.yaml: {key}" in err, err


def test_a_container_flag_with_a_newline_is_refused(capsys, work):
    err = refused(capsys, submit_argv("sft", "--container", "/x.sif\n#SBATCH --partition=evil"), work)
    assert "--container" in err and "control character" in err, err


@pytest.mark.parametrize("value", ["[1", "{a: 1", "a: b: c", "'unclosed", "\tx"])
def test_an_override_that_is_not_yaml_is_one_line(capsys, work, value):
    err = refused(capsys, submit_argv("sft", f"run_id={value}"), work)
    assert "override " in err and "run_id=" in err and "not valid YAML" in err, err


# ---------------------------------------------------------------- section 2: names that become paths

SFT = ["train", "sft", "data=sft.jsonl", "storage_root=runs", "cpu_threads=1"]


@pytest.mark.parametrize("value", ["../../../x", "/tmp/abs-run", "..", ".", "a/b", "x\ny"])
@pytest.mark.parametrize("key", ["run_id", "experiment"])
def test_training_names_stay_under_the_storage_root(capsys, work, key, value):
    other = {"run_id": "experiment=x", "experiment": "run_id=r1"}[key]
    err = refused(capsys, SFT + [other, f"{key}={json.dumps(value)}"], work)
    assert f"{key}: " in err and "is not a safe name" in err, err


def test_an_absolute_run_id_naming_a_folder_deletes_nothing(capsys, work, tmp_path):
    victim = tmp_path / "victim"
    (victim / "checkpoints" / "checkpoint-5").mkdir(parents=True)
    refused(capsys, SFT + ["experiment=x", f"run_id={victim}"], work, victim)


def test_a_link_planted_at_a_run_folder_is_not_followed(capsys, work, tmp_path):
    victim = tmp_path / "victim"
    (victim / "checkpoints" / "checkpoint-5").mkdir(parents=True)
    (work / "runs" / "x").mkdir(parents=True)
    (work / "runs" / "x" / "r1").symlink_to(victim)
    err = refused(capsys, SFT + ["experiment=x", "run_id=r1"], work, victim)
    assert f"{work / 'runs' / 'x' / 'r1'} is a symbolic link (to {victim})" in err, err
    (work / "runs" / "x").rename(work / "runs" / "y")  # a link at the experiment folder too
    (work / "runs" / "x").symlink_to(work / "runs" / "y")
    refused(capsys, SFT + ["experiment=x", "run_id=r2"], work, victim)


def test_a_game_name_from_a_registry_cannot_leave_the_results_folder(capsys, work):
    victim = work / "ev" / "victim"
    victim.mkdir(parents=True)
    (victim / "precious.txt").write_text("keep me")
    game = work / "evil"
    game.mkdir()
    (game / "clemgame.json").write_text(json.dumps({"game_name": "../../victim", "players": 1}))
    err = refused(capsys, ["eval", "playpen-tiny", "-g", "../../victim", "-r", "ev/R1"], work)
    assert "clemgame.json: game_name '../../victim' is not a safe name" in err, err
    (game / "clemgame.json").unlink()
    (work / "game_registry.json").write_text(json.dumps([{"game_path": str(game), "game_name": "a/../../b",
                                                          "players": 1}]))
    err = refused(capsys, ["eval", "playpen-tiny", "-g", "wordle", "-r", "ev/R1"], work)
    assert "game_registry.json: entry 0: game_name 'a/../../b' is not a safe name" in err, err


def test_a_model_name_from_a_registry_cannot_leave_the_results_folder(capsys, work):
    (work / "model_registry.json").write_text(json.dumps([{"model_name": "../../victim", "huggingface_id": "x/y",
                                                           "backend": "huggingface_local"}]))
    err = refused(capsys, ["eval", "../../victim", "-g", "wordle", "-r", "ev/R1"], work)
    assert "model_registry.json: entry 0 ('../../victim') model_name is not a safe name" in err, err


@pytest.mark.parametrize("value", ["../../x", "/tmp/x", "..", "a\nb"])
def test_tournament_and_sweep_names_stay_under_their_folder(capsys, work, value):
    before = snapshot(work)
    config = str(CONFIGS / "debate" / "tournament_tiny.yaml")
    assert main(["debate", "tournament", config, f"name={json.dumps(value)}"]) == 2
    assert "name: " in capsys.readouterr().err and snapshot(work) == before
    refused(capsys, ["submit", "sweep", "--config", str(CONFIGS / "sweeps" / "tiny.yaml"), "--dry-run",
                     f"name={json.dumps(value)}"], work)


def test_a_meter_name_in_a_sweep_is_a_safe_name(capsys, work):
    (work / "p.jsonl").write_text('{"prompt": "hi"}\n')
    (work / "s.yaml").write_text("name: s\nmodels: [playpen-tiny]\ngames: []\n"
                                 "meters: [{name: ../../x, classifier: vader, prompts: p.jsonl}]\n")
    err = refused(capsys, ["submit", "sweep", "--config", "s.yaml", "--dry-run"], work)
    assert "meters[0]: name: '../../x' is not a safe name" in err, err


def test_results_and_output_folders_that_are_links_are_refused(capsys, work, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (work / "link").symlink_to(tmp_path / "elsewhere")
    (work / "p.jsonl").write_text('{"prompt": "hi"}\n')
    err = refused(capsys, ["eval", "playpen-tiny", "-g", "wordle", "-r", "link"], work, tmp_path / "elsewhere")
    assert "results folder link is a symbolic link" in err, err
    err = refused(capsys, ["meter", "playpen-tiny", "--classifier", "vader", "--prompts", "p.jsonl", "-o", "link"],
                  work, tmp_path / "elsewhere")
    assert "--output link is a symbolic link" in err, err


def test_path_under_and_tree_operations_stay_inside_their_root(tmp_path):
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    assert path_under(root, "a", "b") == root / "a" / "b"
    for bad in ("..", "../x", "/x", "a/b", ".x", "x\n", ""):
        with pytest.raises(PlaypenError, match="is not a safe name"):
            path_under(root, bad)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("1")
    (root / "link").symlink_to(outside)
    with pytest.raises(PlaypenError, match="is a symbolic link"):
        path_under(root, "link", "x")
    with pytest.raises(PlaypenError, match="outside"):
        inside(root / "link" / "keep", root)
    with pytest.raises(PlaypenError, match="outside"):
        remove_tree(root / ".." / "outside", root)
    with pytest.raises(PlaypenError, match="outside"):
        remove_tree(root, root)  # the root itself is never removed
    (tmp_path / "outside-link").symlink_to(outside)
    with pytest.raises(PlaypenError, match="outside"):
        remove_tree(root / ".." / "outside-link", root)
    remove_tree(root / "link", root)  # a link is removed, not followed
    assert (outside / "keep").is_file() and not (root / "link").exists()
    with pytest.raises(PlaypenError, match="outside"):
        move_tree(root / "a", outside / "a", root)
    assert check_name("ok-1.2_x", "n") == "ok-1.2_x"
    with pytest.raises(PlaypenError, match="storage_root"):
        resolve_storage_root("/tmp/a\nb")


# ---------------------------------------------------------------- shared storage

def test_atomic_writes_honour_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.json", "{}")
        os.umask(0o077)
        atomic_write_text(tmp_path / "b.json", "{}")
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b.json").stat().st_mode & 0o777 == 0o600


def test_two_meters_into_one_folder(capsys, work):
    """The second `playpen meter` into an -o that one holds stops in one line, as a second eval into one -r does."""
    from playpen.storage import exclusive_folder

    (work / "p.jsonl").write_text('{"prompt": "hi"}\n')
    with exclusive_folder(work / "out", "held", "-"):
        err = refused(capsys, ["meter", "playpen-tiny", "--classifier", "vader", "--prompts", "p.jsonl",
                               "-o", "out"], work)
    assert "meter folder out is in use by another playpen meter" in err, err


def test_a_link_inside_a_run_folder_is_not_followed(tmp_path):
    from playpen.storage import RunDir

    run = RunDir(tmp_path / "runs" / "x" / "r1")
    run.path.mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    run.checkpoints.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PlaypenError, match=r"run folder .*/r1/checkpoints is a symbolic link"):
        run.create()
