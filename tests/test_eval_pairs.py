"""`playpen eval MODEL PARTNER` and `-e` play what `clem run -m MODEL PARTNER [-e NAME]` plays: on the fixture
benchmark both agree per game on episodes, experiments, % played and quality, under clem's `MODEL--PARTNER` folder;
rescoring works on pairs; bad input is one line before anything is written. ~90 s (clem and playpen run as
processes)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import playpen_ok as playpen
from tests.helpers import run_ok as run

MINIBENCH = Path(__file__).resolve().parent / "data" / "minibench"
CLEM = str(Path(sys.executable).with_name("clem"))


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    from playpen.models.tiny import ensure_tiny_model
    from playpen.model_registry import resolve_model

    ensure_tiny_model()
    folder = tmp_path_factory.mktemp("pairs")
    (folder / "game_registry.json").write_text(json.dumps([{"benchmark_path": str(MINIBENCH)}]))
    # clem's registry does not know playpen-tiny
    (folder / "model_registry.json").write_text(json.dumps([resolve_model("playpen-tiny")]))
    return folder


def scored(results: Path, pair: str, game: str) -> list[tuple[str, str, dict]]:
    return sorted((p.parent.parent.name, p.parent.name, json.loads(p.read_text())["episode scores"])
                  for p in (results / pair / game).glob("*/*/scores.json"))


def players(results: Path, pair: str, game: str) -> set[tuple]:
    """Seat → model name of every episode (clem's interactions.json 'players' block)."""
    return {tuple(sorted((k, v["game_role"], v["model_name"])
                         for k, v in json.loads(p.read_text())["players"].items()))
            for p in (results / pair / game).glob("*/*/interactions.json")}


def agree(work: Path, ours: str, clems: str, pair: str, game: str = "taboo") -> dict:
    val = json.loads((work / ours / f"{pair}.val.json").read_text())
    table = pd.read_csv(work / clems / "results.csv", index_col=0).loc[pair]
    assert scored(work / ours, pair, game) == scored(work / clems, pair, game) != []
    assert players(work / ours, pair, game) == players(work / clems, pair, game)
    mine = val["games"][game]
    assert mine["episodes"] == len(scored(work / clems, pair, game))
    assert mine["played"] == table[f"{game}, % Played"]
    assert mine["quality"] == table[f"{game}, Quality Score"]
    assert val["clemscore"] == table["-, clemscore"]
    return val


@pytest.mark.slow
def test_a_pair_plays_as_clem_run_plays_it(work):
    # clemcore's runner for both seats (mock is no local model)
    playpen(work, "eval", "mock", "mock", "-g", "taboo", "-r", "pp")
    run(work, CLEM, "run", "-g", "taboo", "-m", "mock", "mock", "-r", "clem")
    run(work, CLEM, "score", "-r", "clem")
    run(work, CLEM, "eval", "-r", "clem")
    val = agree(work, "pp", "clem", "mock--mock")
    assert val["model"] == "mock" and val["partner"] == "mock" and val["folder"] == "mock--mock"
    # rescoring the pair's records, and the tables over them
    for f in (work / "pp").rglob("scores.json"):
        f.unlink()
    (work / "pp" / "mock--mock.val.json").unlink()
    playpen(work, "eval", "mock", "mock", "--skip_gameplay", "-r", "pp")
    assert agree(work, "pp", "clem", "mock--mock")["clemscore"] == val["clemscore"]


@pytest.mark.slow
def test_the_rollout_engine_learner_with_a_partner_and_one_experiment(work):
    # the local learner through the rollout engine in seat 0, clem's mock in seat 1, only experiment low_en
    playpen(work, "eval", "playpen-tiny", "mock", "-g", "taboo", "-e", "low_en", "-L", "24", "-r", "pp-e")
    run(work, CLEM, "run", "-g", "taboo", "-m", "playpen-tiny", "mock", "-e", "low_en", "-l", "24", "-r", "clem-e")
    run(work, CLEM, "score", "-r", "clem-e")
    run(work, CLEM, "eval", "-r", "clem-e")
    agree(work, "pp-e", "clem-e", "playpen-tiny--mock")
    assert {e for e, _, _ in scored(work / "pp-e", "playpen-tiny--mock", "taboo")} == {"low_en"}
    assert {("Player 1", "Describer", "playpen-tiny"), ("Player 2", "Guesser", "mock")} <= \
        set(next(iter(players(work / "pp-e", "playpen-tiny--mock", "taboo"))))


@pytest.mark.slow
def test_instances_count_within_the_chosen_experiments(work):
    playpen(work, "eval", "mock", "-g", "taboo", "-e", "high_en", "-e", "low_en", "--instances", "1", "-r", "one")
    assert [e for e, _, _ in scored(work / "one", "mock", "taboo")] == ["high_en"]
    playpen(work, "eval", "mock", "-g", "taboo", "-e", "low_en", "--instances", "1", "-r", "low")
    assert [e for e, _, _ in scored(work / "low", "mock", "taboo")] == ["low_en"]


@pytest.mark.parametrize("argv, says", [
    (["mock", "-g", "taboo", "-e", "nope"], "no experiment nope in the chosen games; they have taboo: high_en, low_en"),
    (["mock", "mock", "-g", "wordle"], "wordle has 1 player(s)"),
    (["mock", "programmatic", "-g", "taboo"], "partner programmatic plays the built-in games' experts"),
    (["mock", "gpt-4o", "-g", "taboo"], "partner 'gpt-4o' uses the remote backend 'openai'"),
    (["mock", "no-such-model", "-g", "taboo"], "no-such-model"),
    (["mock", "mock", "-e", "low_en", "--skip_gameplay"], "--skip-gameplay plays nothing"),
])
def test_bad_pairs_and_experiments_are_one_line(work, argv, says, monkeypatch, capsys):
    from playpen.cli import main

    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(work))  # no ~/.clemcore/key.json
    assert main(["eval", *argv, "-r", "bad"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("playpen: error: ") and says in lines[0], lines
    assert not (work / "bad").exists()


def test_a_sweep_crosses_models_with_partners(tmp_path, monkeypatch):
    import yaml

    from playpen.eval.sweep import load_sweep, run_local

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"name": "pairs", "models": ["mock"], "partners": ["self", "mock", "programmatic"],
                                    "games": ["taboo", "wordle"], "max_instances": 2,
                                    "output_dir": str(tmp_path / "sweep")}))
    sweep = load_sweep(path)
    # partners play the two-player game only; the model alone plays both
    assert sorted(c.key for c in sweep.cells) == ["mock--mock/taboo", "mock--programmatic/taboo", "mock/taboo",
                                                  "mock/wordle"]
    out = run_local(sweep, log=lambda m: None)
    assert not out["failed"]
    table = pd.read_csv(tmp_path / "sweep" / "sweep.csv")
    assert sorted(table["partner"].fillna("-")) == ["-", "-", "mock", "programmatic"]
    assert (table["episodes"] == 2).all()
    # each pair's records are clem's MODEL--PARTNER folder
    result = json.loads((tmp_path / "sweep" / "cells" / "mock--programmatic" / "taboo" / "result.json").read_text())
    assert list((tmp_path / "sweep" / result["records"]).glob("mock--programmatic/taboo/*/*/scores.json"))
    path.write_text(yaml.safe_dump({"name": "pairs", "models": ["mock"], "partners": ["mock"], "games": ["wordle"]}))
    with pytest.raises(Exception, match="partners: mock plays none of the games"):
        load_sweep(path)
