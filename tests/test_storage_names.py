"""playpen.storage.names: Name, Location and path_under against every hostile value, and every source of a name."""
from __future__ import annotations

import json
import os
import typing
from dataclasses import dataclass
from pathlib import Path

import pytest

from playpen.cli import main
from playpen.config import load_config
from playpen.errors import PlaypenError
from playpen.storage import (Location, Name, check_location, check_name, inside, move_tree, path_under, remove_tree,
                             resolve_storage_root)
from tests.helpers import CONFIGS, ESCAPES, INJECTIONS, refused, snapshot

# ---------------------------------------------------------------- the rules, against every hostile value

# beyond the tables every job kind's fields were once run through: refused as names too
MORE_NAMES = {"dot": ".", "leading dash": "-x", "one over the limit": "x" * 129, "non-ASCII letter": "café",
              "fullwidth solidus": "a\uff0fb", "right-to-left override": "x\u202ey", "zero-width space": "x\u200by"}
NAMES_REFUSED = {**INJECTIONS, **ESCAPES, **MORE_NAMES}
LOCATIONS_REFUSED = {**INJECTIONS, **{k: ESCAPES[k] for k in ("empty", "tab", "nul")},
                     "not UTF-8": os.fsdecode(b"res-\xff")}
LOCATIONS_TAKEN = {k: v for k, v in ESCAPES.items() if k not in LOCATIONS_REFUSED}  # fine in a path


@dataclass
class Fields:
    """A config with one field of each rule, read as every config is (playpen.config.load_config)."""

    name: Name = "ok"
    location: Location | None = None


def refusals(tmp_path: Path, key: str, value: str) -> list[str]:
    """`value` as `key` of Fields: by its rule, as a `key=value` override (JSON is YAML: a newline arrives as
    one) and in a config file; each must be refused, and each message is returned."""
    rule = {"name": check_name, "location": check_location}[key]
    file = tmp_path / "c.yaml"
    file.write_text(json.dumps({key: value}))
    messages = []
    for attempt in (lambda: rule(value, key), lambda: load_config(Fields, None, [f"{key}={json.dumps(value)}"]),
                    lambda: load_config(Fields, file)):
        with pytest.raises(PlaypenError) as error:
            attempt()
        messages.append(str(error.value))
    return messages


@pytest.mark.parametrize("label", NAMES_REFUSED)
def test_name_refuses_every_hostile_value(tmp_path, label):
    direct, override, in_file = refusals(tmp_path, "name", NAMES_REFUSED[label])
    assert direct.startswith("name: ") and "is not a safe name; use letters, digits and . _ -" in direct, direct
    assert override.startswith("overrides: name: ") and in_file.startswith(f"{tmp_path / 'c.yaml'}: name: ")
    assert {m.split(": ", 1)[1] for m in (override, in_file)} == {direct}  # the rule's own line, once read
    assert not any("\n" in m or "\r" in m for m in (direct, override, in_file))


@pytest.mark.parametrize("label", LOCATIONS_REFUSED)
def test_location_refuses_every_hostile_value(tmp_path, label):
    direct, override, in_file = refusals(tmp_path, "location", LOCATIONS_REFUSED[label])
    assert direct.startswith("location: path ") and "use a plain path" in direct or "not UTF-8" in direct, direct
    assert override.startswith("overrides: location: ") and in_file.startswith(f"{tmp_path / 'c.yaml'}: location")
    assert {m.split(": ", 1)[1] for m in (override, in_file)} == {direct}  # the rule's own line, once read
    assert not any("\n" in m or "\r" in m for m in (direct, override, in_file))


@pytest.mark.parametrize("label", LOCATIONS_TAKEN)
def test_location_takes_what_only_a_name_refuses(label):
    value = LOCATIONS_TAKEN[label]
    assert check_location(value, "location") == value
    assert load_config(Fields, None, [f"location={json.dumps(value)}"]).location == value


@pytest.mark.parametrize("label", INJECTIONS)
def test_models_and_games_named_by_a_hostile_value_are_unknown(label):
    """A model or game never becomes a path itself (folders named after it go through storage.slug): it is
    refused as unknown."""
    from playpen.games.registry import resolve_game
    from playpen.model_registry import resolve_model

    with pytest.raises(PlaypenError, match="unknown model"):
        resolve_model(INJECTIONS[label])
    with pytest.raises(PlaypenError, match="unknown game"):
        resolve_game(INJECTIONS[label])


def configs_with_named_fields() -> dict[str, tuple[type, dict[str, type]]]:
    """Every config a command or job reads whose fields become folder names or reach a job script: its class and
    {field: the rule its annotation must apply}."""
    from playpen.debate_tools.tournament import TournamentConfig
    from playpen.eval.sweep import SweepConfig
    from playpen.submit.jobs import EvalSpec
    from playpen.submit.profiles import ClusterProfile
    from playpen.train import METHODS
    from playpen.train.runner import load_recipe

    train = {"experiment": Name, "run_id": Name, "storage_root": Location}
    return {**{f"train {m}": (load_recipe(m).Config, train) for m in METHODS},
            "eval job": (EvalSpec, {"results_dir": Location, "storage_root": Location}),
            "sweep": (SweepConfig, {"name": Name, "output_dir": Location, "storage_root": Location}),
            "tournament": (TournamentConfig, {"name": Name, "output_dir": Location}),
            "cluster profile": (ClusterProfile, {"storage_root": Location})}


def test_every_field_that_becomes_a_path_is_a_name_or_a_location():
    """So the tests above cover each of them; test_submit_script.py runs one field of each kind per job through
    the whole command (a meter job's output folders are flags, checked by check_location: run there, each)."""
    wrong = []
    for what, (cls, fields) in configs_with_named_fields().items():
        hints = typing.get_type_hints(cls)
        for key, rule in fields.items():
            checked = [t for t in typing.get_args(hints[key]) or (hints[key],) if t is not type(None)]
            if checked != [rule]:
                wrong.append(f"{what}: {key} is {hints[key]}, not {rule.__name__}")
    assert not wrong, wrong


# ---------------------------------------------------------------- every source of a name, through the command

SFT = ["train", "sft", "data=sft.jsonl", "storage_root=runs", "cpu_threads=1"]


@pytest.mark.parametrize("key,value", [("run_id", "../../../x")])  # (every other value: the rules above)
def test_training_names_stay_under_the_storage_root(capsys, stocked_cwd, key, value):
    other = {"run_id": "experiment=x", "experiment": "run_id=r1"}[key]
    err = refused(capsys, SFT + [other, f"{key}={json.dumps(value)}"], stocked_cwd)
    assert f"{key}: " in err and "is not a safe name" in err, err


def test_an_absolute_run_id_naming_a_folder_deletes_nothing(capsys, stocked_cwd, tmp_path):
    victim = tmp_path / "victim"
    (victim / "checkpoints" / "checkpoint-5").mkdir(parents=True)
    refused(capsys, SFT + ["experiment=x", f"run_id={victim}"], stocked_cwd, victim)


def test_a_link_planted_at_a_run_folder_is_not_followed(capsys, stocked_cwd, tmp_path):
    work = stocked_cwd
    victim = tmp_path / "victim"
    (victim / "checkpoints" / "checkpoint-5").mkdir(parents=True)
    (work / "runs" / "x").mkdir(parents=True)
    (work / "runs" / "x" / "r1").symlink_to(victim)
    err = refused(capsys, SFT + ["experiment=x", "run_id=r1"], work, victim)
    assert f"{work / 'runs' / 'x' / 'r1'} is a symbolic link (to {victim})" in err, err
    (work / "runs" / "x").rename(work / "runs" / "y")  # a link at the experiment folder too
    (work / "runs" / "x").symlink_to(work / "runs" / "y")
    refused(capsys, SFT + ["experiment=x", "run_id=r2"], work, victim)


def test_a_game_name_from_a_registry_cannot_leave_the_results_folder(capsys, stocked_cwd):
    work = stocked_cwd
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


def test_a_model_name_from_a_registry_cannot_leave_the_results_folder(capsys, stocked_cwd):
    (stocked_cwd / "model_registry.json").write_text(json.dumps([
        {"model_name": "../../victim", "huggingface_id": "x/y", "backend": "huggingface_local"}]))
    err = refused(capsys, ["eval", "../../victim", "-g", "wordle", "-r", "ev/R1"], stocked_cwd)
    assert "model_registry.json: entry 0 ('../../victim') model_name is not a safe name" in err, err


@pytest.mark.parametrize("value", ["../../x"])  # (every other value: the rules above)
def test_tournament_and_sweep_names_stay_under_their_folder(capsys, stocked_cwd, value):
    before = snapshot(stocked_cwd)
    config = str(CONFIGS / "debate" / "tournament_tiny.yaml")
    assert main(["debate", "tournament", config, f"name={json.dumps(value)}"]) == 2
    assert "name: " in capsys.readouterr().err and snapshot(stocked_cwd) == before
    refused(capsys, ["submit", "sweep", "--config", str(CONFIGS / "sweeps" / "tiny.yaml"), "--dry-run",
                     f"name={json.dumps(value)}"], stocked_cwd)


def test_a_meter_name_in_a_sweep_is_a_safe_name(capsys, stocked_cwd):
    (stocked_cwd / "p.jsonl").write_text('{"prompt": "hi"}\n')
    (stocked_cwd / "s.yaml").write_text("name: s\nmodels: [playpen-tiny]\ngames: []\n"
                                        "meters: [{name: ../../x, classifier: vader, prompts: p.jsonl}]\n")
    err = refused(capsys, ["submit", "sweep", "--config", "s.yaml", "--dry-run"], stocked_cwd)
    assert "meters[0]: name: '../../x' is not a safe name" in err, err


def test_results_and_output_folders_that_are_links_are_refused(capsys, stocked_cwd, tmp_path):
    work = stocked_cwd
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


# ---------------------------------------------------------------- one slug rule

def test_slug_output_is_a_name():
    from playpen.storage import check_name, slug

    for text in ["runs/grpo/r1", "../../etc", ".hidden", "-x", "a b\tc", "ü@+=", "", "x" * 300, "vader-tiny"]:
        assert check_name(slug(text), "slug") == slug(text)


def test_composed_keys_of_earlier_folders_are_unchanged():
    """Sweep cell keys, tournament markers and records' player folders are compositions of names: each part a slug,
    the separator kept, so what an earlier version wrote is found again (no finished cell runs twice)."""
    from playpen.eval.sweep import _cell_key
    from playpen.records import model_identifier

    # the keys the earlier per-module rule ([^A-Za-z0-9._@+=-] → _) gave these rows and games
    assert _cell_key("grpo/r1@step10", "wordle") == "grpo_r1@step10/wordle"
    assert _cell_key("playpen-tiny@final", "wordle~train") == "playpen-tiny@final/wordle_train"
    assert _cell_key("tiny-a", "meter-vader-tiny") == "tiny-a/meter-vader-tiny"
    assert model_identifier(["playpen-tiny", "smol-135m"]) == "playpen-tiny--smol-135m"
    assert model_identifier(["runs/x/r1"]) == "runs_x_r1"


def test_tournament_marker_names_are_unchanged(tmp_path):
    from playpen.debate_tools import tournament

    cfg = tournament.TournamentConfig(name="t", debaters=["a"], judges=["b"], output_dir=str(tmp_path))
    marker = tournament._played_marker(cfg, ("playpen-tiny", "programmatic", "runs/x"))
    assert marker.name == "playpen-tiny__programmatic__runs_x.json"
