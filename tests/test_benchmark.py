"""A clembench-style benchmark registered through game_registry.json, as upstream playpen users work with
clembench (tests/data/minibench: its README lists what each game tests).

The differential test plays the same games and instances with the same model (playpen-tiny, greedy) through
`playpen eval` and through clem's own pipeline (`clem run` + `clem score` + `clem eval`) and requires the same
episodes, experiments, % played, quality and final scores. Then: which game a name means (`playpen list games`),
clem's selector strings, training on benchmark games (an instances file, generated instances) and an upstream
playpen trainer file run unchanged. ~2 minutes."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from playpen.errors import PlaypenError
from playpen.games.instances import generate_instances, instances_file, read_instances
from playpen.games.registry import resolve_game, select_games

from tests.helpers import playpen_ok as playpen
from tests.helpers import run_ok as run

MINIBENCH = Path(__file__).resolve().parent / "data" / "minibench"
DIALOGUE, STATIC = ["taboo", "wordle", "wordle_hard"], ["mathquiz"]  # in clem's search order
MODEL = "playpen-tiny"
CLEM = str(Path(sys.executable).with_name("clem"))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A working directory as a user sets it up: the benchmark registered, playpen-tiny in a model_registry.json
    (clem's registry does not know it)."""
    from playpen.models.tiny import ensure_tiny_model
    from playpen.model_registry import resolve_model

    ensure_tiny_model()
    folder = tmp_path_factory.mktemp("bench-workdir")
    (folder / "game_registry.json").write_text(json.dumps([{"benchmark_path": str(MINIBENCH)}]))
    (folder / "model_registry.json").write_text(json.dumps([resolve_model(MODEL)]))
    return folder


def fails(cwd: Path, *argv: str) -> str:
    done = subprocess.run([sys.executable, "-m", "playpen.cli", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("playpen: error: "), done.stderr
    return lines[0]


def episodes(results: Path, game: str) -> list[tuple[str, str]]:
    """(experiment folder, episode folder) of every scored episode of the model's game."""
    return sorted((p.parent.parent.name, p.parent.name) for p in (results / MODEL / game).glob("*/*/scores.json"))


def clem_eval_of(results: Path, games: list[str], into: Path) -> pd.Series:
    """`clem eval` over some of the games only: its clemscore is then the score of just those games."""
    for game in games:
        shutil.copytree(results / MODEL / game, into / MODEL / game)
    run(into, CLEM, "eval", "-r", str(into))
    return pd.read_csv(into / "results.csv", index_col=0).loc[MODEL]


@pytest.fixture(scope="module")
def both(workdir) -> tuple[dict, Path, Path]:
    """The same games, instances, model and generation settings through playpen and through clem."""
    games = [*DIALOGUE, *STATIC]
    playpen(workdir, "eval", MODEL, *[a for g in games for a in ("-g", g)], "-L", "24", "-b", "8", "-r", "pp")
    run(workdir, CLEM, "run", "-g", *games, "-m", MODEL, "-l", "24", "-b", "8", "-r", "clem")
    run(workdir, CLEM, "score", "-r", "clem")
    run(workdir, CLEM, "eval", "-r", "clem")
    val = json.loads((workdir / "pp" / f"{MODEL}.val.json").read_text())
    return val, workdir / "pp", workdir / "clem"


@pytest.mark.slow
def test_playpen_eval_equals_clem_run_score_eval(both, workdir):
    val, ours, clems = both
    table = pd.read_csv(clems / "results.csv", index_col=0).loc[MODEL]
    assert set(val["games"]) == {*DIALOGUE, *STATIC}
    for game in [*DIALOGUE, *STATIC]:
        mine = val["games"][game]
        assert episodes(ours, game) == episodes(clems, game) != [], game
        assert mine["episodes"] == len(episodes(clems, game))
        assert mine["played"] == table[f"{game}, % Played"], game
        assert mine["quality"] == (None if pd.isna(table[f"{game}, Quality Score"])
                                   else table[f"{game}, Quality Score"]), game
        assert mine["static"] == (game in STATIC)
        assert mine["game_path"] == str(resolve_game(game, cwd=workdir).path) and "game_registry.json" in mine["source"]
        experiment = json.loads(next((ours / MODEL / game).glob("*/experiment.json")).read_text())
        assert experiment["game_path"] == mine["game_path"]  # the records name the game's folder too
    # each game played its own instances file, as clem plays it: wordle_hard its instances_hard.json
    assert {e for e, _ in episodes(ours, "wordle_hard")} == {"hard_no_clue"}
    assert {e for e, _ in episodes(ours, "taboo")} == {"high_en", "low_en"}  # the benchmark's taboo, not the built-in
    # final scores: clem eval over the dialogue games only gives clemscore, over the static ones statscore
    assert val["clemscore"] == clem_eval_of(clems, DIALOGUE, workdir / "clem-dialogue")["-, clemscore"]
    assert val["statscore"] == clem_eval_of(clems, STATIC, workdir / "clem-static")["-, clemscore"]
    print(json.dumps({g: {k: val["games"][g][k] for k in ("episodes", "played", "quality", "clemscore")}
                      for g in val["games"]} | {"clemscore": val["clemscore"], "statscore": val["statscore"]}))


@pytest.mark.slow
def test_benchmark_games_win_over_builtins_of_the_same_name(workdir):
    listing = playpen(workdir, "list", "games")
    rows = {line.split()[0]: line for line in listing.splitlines()[1:]}
    assert "game_registry.json" in rows["wordle"] and "game_registry.json" in rows["taboo"]
    assert "built-in" in rows["playpen-wordle"] and "shadowed by" in rows["playpen-wordle"]
    assert "built-in" in rows["referencegame"] and "shadowed" not in rows["referencegame"]
    assert rows["mathquiz"].split()[2] == "static" and rows["wordle_hard"].split()[2] == "dialogue"
    verbose = playpen(workdir, "list", "games", "-v")
    assert "instances_hard.json" in verbose and str(MINIBENCH / "static" / "mathquiz") in verbose
    header, *lines = verbose.splitlines()
    for column in ("players", "kind", "source"):  # columns stay aligned whatever the names' lengths
        at = header.index(column)
        assert all(line[at - 2:at] == "  " and line[at] != " " for line in lines), (column, verbose)
    # the built-in stays reachable under its unambiguous name, and plays its own instances
    builtin = resolve_game("playpen-taboo", cwd=workdir)
    assert builtin.builtin and builtin.path.name == "taboo" and builtin.path != resolve_game("taboo", cwd=workdir).path
    assert {e["name"] for e, _ in read_instances(instances_file(builtin))} == {"easy", "medium", "hard"}
    playpen(workdir, "eval", MODEL, "-g", "playpen-taboo", "--instances", "1", "-L", "8", "-r", "builtin")
    assert (workdir / "builtin" / MODEL / "playpen-taboo" / "easy").is_dir()


def test_clem_selector_strings_select_like_clem(workdir, tmp_path):
    assert [e.name for e in select_games(["{'benchmark':['2.0']}"], cwd=workdir)] == DIALOGUE
    assert [e.name for e in select_games(["{'benchmark':['static_1.0']}"], cwd=workdir)] == STATIC
    assert [e.name for e in select_games(["{'main_game':'wordle'}"], cwd=workdir)] == ["wordle", "wordle_hard"]
    # every game = the games clem sees here, as `clem run -g all` (the built-ins only where no benchmark is around)
    assert [e.name for e in select_games(None, cwd=workdir)] == [*STATIC, *DIALOGUE]
    assert [e.name for e in select_games(["all"], suite="static", cwd=workdir)] == STATIC
    assert [e.name for e in select_games(None, suite="static", cwd=tmp_path)] == ["arithmetic"]
    with pytest.raises(PlaypenError, match="game selector"):
        select_games(["{'benchmark':['9.9']}"], cwd=workdir)
    out = playpen(workdir, "list", "games", "-s", "{'benchmark':['2.0']}")
    assert [line.split()[0] for line in out.splitlines()[1:]] == DIALOGUE


GRPO = ("trainer.max_steps=1", "instances=2", "group_size=2", "max_new_tokens=8",
        "trainer.per_device_train_batch_size=2", "cpu_threads=1", "storage_root=runs")


@pytest.mark.slow
def test_training_on_a_benchmark_game(workdir):
    # clembench ships no train split: the error names both ways out
    message = fails(workdir, "train", "grpo", "experiment=b", "game=wordle", *GRPO)
    assert "ships no train split" in message and "split: <name>" in message and "generate: {seed: N}" in message
    assert not (workdir / "runs").exists()
    # 1. an instances file of the game, by name
    playpen(workdir, "train", "grpo", "experiment=bench", "run_id=file", "game=wordle_hard", "split=instances_hard",
            *GRPO)
    records = list((workdir / "runs" / "bench" / "file" / "playpen-records").rglob("instance.json"))
    assert records and {json.loads(p.read_text())["target_word"] for p in records} <= \
        {i["target_word"] for _, i in read_instances(MINIBENCH / "wordle" / "in" / "instances_hard.json")}
    # 2. fresh instances from the game's own generator, held apart from validation by content: seed 6 happens to
    # make one instance equal to a validation one; the game's generator run on its own says which
    raw = raw_generated(seed=6)
    content = lambda i: json.dumps({k: v for k, v in i.items() if k != "game_id"}, sort_keys=True)  # noqa: E731
    validation = {content(i) for _, i in read_instances(MINIBENCH / "wordle" / "in" / "instances.json")}
    overlapping = [i for i in raw if content(i) in validation]
    generated, dropped = generate_instances(resolve_game("wordle", cwd=workdir), seed=6)
    kept = [i for e in generated["experiments"] for i in e["game_instances"]]
    assert dropped == len(overlapping) == 1 and len(kept) == len(raw) - 1
    assert not {content(i) for i in kept} & validation
    out = playpen(workdir, "train", "grpo", "experiment=bench", "run_id=gen", "game=wordle", "generate={seed: 6}",
                  *GRPO)
    saved = workdir / "runs" / "bench" / "gen" / "wordle.generated-seed6.json"
    assert json.loads(saved.read_text()) == generated and "1 identical to validation instances dropped" in out
    assert "SEED = 2024" in fails(workdir, "train", "grpo", "experiment=b", "game=wordle",
                                  "generate={seed: 2024}", *GRPO)


def raw_generated(seed: int) -> list[dict]:
    """minibench wordle's generator run directly, nothing dropped."""
    spec = importlib.util.spec_from_file_location("minibench_wordle_generator",
                                                  MINIBENCH / "wordle" / "instancegenerator.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    generator = module.MiniWordleInstanceGenerator()
    generator.on_generate(seed)
    return [i for e in generator.instances["experiments"] for i in e["game_instances"]]


@pytest.mark.slow
def test_upstream_trainer_file_runs_unchanged(workdir):
    """The shape of upstream playpen's examples/trl trainers: `from playpen import BasePlayPen`, a constructor
    taking the learner alone, `learn(self, game_registry)` with clemcore's GameRegistry, and the learner's
    `get_name()` (clemcore 2's Model API; clemcore 3 has `.name`)."""
    (workdir / "upstream_trainer.py").write_text(
        "from clemcore.backends.huggingface_local_api import HuggingfaceLocalModel\n"
        "from clemcore.clemgame import GameRegistry\n"
        "from playpen import BasePlayPen\n\n\n"
        "class SimpleSftTrainer(BasePlayPen):\n\n"
        "    def __init__(self, learner: HuggingfaceLocalModel):\n"
        "        super().__init__(learner)\n\n"
        "    def learn(self, game_registry: GameRegistry):\n"
        "        wordle = game_registry.get_game_specs_that_unify_with('wordle', verbose=False)[0]\n"
        "        names = [spec['game_name'] for spec in game_registry]\n"
        "        params = sum(p.numel() for p in self.learner.model.parameters())\n"
        "        open('learned.json', 'w').write(__import__('json').dumps(\n"
        "            {'names': names, 'wordle': wordle['game_path'], 'params': params,\n"
        "             'learner': self.learner.get_name()}))\n")
    playpen(workdir, "run", "upstream_trainer.py", "-l", MODEL)
    learned = json.loads((workdir / "learned.json").read_text())
    assert learned["wordle"] == str(MINIBENCH / "wordle") and learned["params"] > 0
    assert learned["learner"] == MODEL
    assert {"wordle", "wordle_hard", "taboo", "mathquiz", "playpen-wordle", "referencegame"} <= set(learned["names"])
