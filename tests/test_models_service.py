"""The model service (playpen.models.service): every model clem knows is a model playpen knows (clemcore's packaged
registry, `mock`), `playpen eval mock` equals `clem run -m mock` + `clem score` + `clem eval` on the fixture
benchmark, an API model without its key.json entry is one line, and a training run resolves its models once."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

MINIBENCH = Path(__file__).resolve().parent / "data" / "minibench"
CLEM = str(Path(sys.executable).with_name("clem"))
GAMES = ["taboo", "wordle", "wordle_hard", "mathquiz"]  # dialogue (one of them two-player) and static


def run(cwd: Path, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


def ok(cwd: Path, *argv: str) -> str:
    done = run(cwd, *argv)
    assert done.returncode == 0, f"{argv}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture
def bench(tmp_path) -> Path:
    """A working directory with the fixture clembench registered and a model of the user's own."""
    (tmp_path / "game_registry.json").write_text(json.dumps([{"benchmark_path": str(MINIBENCH)}]))
    (tmp_path / "model_registry.json").write_text(json.dumps([
        {"model_name": "my-api-model", "backend": "openai", "model_id": "gpt-x"}]))
    return tmp_path


@pytest.mark.slow
def test_playpen_lists_every_model_clem_lists(bench):
    clem = ok(bench, CLEM, "list", "models")
    clem_names = set(re.findall(r"^(\S+) -> ", clem, re.M))
    playpen = ok(bench, sys.executable, "-m", "playpen.cli", "list", "models")
    playpen_names = {line.split()[0] for line in playpen.splitlines() if line.strip()}
    assert {"gpt-4o", "claude-sonnet-4.5", "llama-3.3-70b", "qwen2.5-72b", "my-api-model"} <= clem_names
    assert clem_names <= playpen_names, clem_names - playpen_names
    assert {"mock", "playpen-tiny"} <= playpen_names
    # a name in both registries: playpen's packaged entry wins, clemcore's is listed as shadowed
    assert re.search(r"^gpt-4o-mini .* clemcore +\(shadowed by the packaged entry\)$", playpen, re.M), playpen


def test_clemcore_models_resolve_as_clem_resolves_them(bench, monkeypatch):
    from clemcore.backends import ModelRegistry

    from playpen.models.service import resolve

    monkeypatch.chdir(bench)
    clems = ModelRegistry.from_packaged_and_cwd_files()
    for name in ("gpt-4o", "llama-3.3-70b", "mock", "my-api-model"):
        theirs = clems.get_first_model_spec_that_unify_with(name).to_dict()
        theirs.pop("lookup_source", None)
        assert resolve(name, role=None) == theirs, name
    assert resolve("mock", role=None)["backend"] == "_player_programmed"


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> tuple[dict, Path, Path]:
    """The fixture benchmark's games with clem's mock player, through playpen and through clem's own pipeline."""
    work = tmp_path_factory.mktemp("mock-bench")
    (work / "game_registry.json").write_text(json.dumps([{"benchmark_path": str(MINIBENCH)}]))
    ok(work, sys.executable, "-m", "playpen.cli", "eval", "mock", *[a for g in GAMES for a in ("-g", g)], "-r", "pp")
    ok(work, CLEM, "run", "-g", *GAMES, "-m", "mock", "-r", "clem")
    ok(work, CLEM, "score", "-r", "clem")
    ok(work, CLEM, "eval", "-r", "clem")
    return json.loads((work / "pp" / "mock.val.json").read_text()), work / "pp", work / "clem"


def scored(results: Path, game: str) -> list[tuple[str, str, dict]]:
    """(experiment, episode, episode scores) of every scored episode of mock's game."""
    return sorted((p.parent.parent.name, p.parent.name, json.loads(p.read_text())["episode scores"])
                  for p in (results / "mock" / game).glob("*/*/scores.json"))


@pytest.mark.slow
def test_playpen_eval_mock_equals_clem_run_mock(both):
    val, ours, clems = both
    table = pd.read_csv(clems / "results.csv", index_col=0).loc["mock"]
    assert set(val["games"]) == set(GAMES)
    for game in GAMES:
        # the same experiments and episodes, each scored alike (the mock answers are the games' own, deterministic)
        assert scored(ours, game) == scored(clems, game) != [], game
        assert val["games"][game]["episodes"] == len(scored(clems, game))
        assert val["games"][game]["played"] == table[f"{game}, % Played"], game
        assert val["games"][game]["quality"] == table[f"{game}, Quality Score"], game
    assert val["model_spec"]["backend"] == "_player_programmed"


def refused(cwd: Path, *argv: str) -> str:
    """One line, exit 2, no traceback; HOME is the working directory (no ~/.clemcore/key.json)."""
    import os

    done = run(cwd, sys.executable, "-m", "playpen.cli", *argv, env={**os.environ, "HOME": str(cwd)})
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("playpen: error: "), done.stderr
    return lines[0]


def test_api_models_without_their_key_are_one_line(bench):
    (bench / "trainer.py").write_text("from playpen.train.base import BasePlaypenTrainer\n\n"
                                      "class T(BasePlaypenTrainer):\n    def learn(self):\n        pass\n")
    # another backend's key is there: its value never appears in a message
    (bench / "key.json").write_text(json.dumps({"anthropic": {"api_key": "sk-SECRET-VALUE"}}))
    where = f"looked in {bench / 'key.json'} or {bench / '.clemcore' / 'key.json'}"
    for argv, model, backend in [(["eval", "gpt-4o", "-g", "wordle", "-r", "res"], "model 'gpt-4o'", "openai"),
                                 (["run", "trainer.py", "-l", "mock", "-p", "gemini-2.5-flash"],
                                  "partner 'gemini-2.5-flash'", "google"),
                                 (["eval", "my-api-model", "-g", "wordle", "-r", "res"], "model 'my-api-model'",
                                  "openai")]:
        line = refused(bench, *argv)
        assert f"{model} uses the remote backend '{backend}'" in line and where in line, line
        assert "SECRET" not in line
    assert not (bench / "res").exists()


def test_mock_plays_against_a_teacher_through_playpen_run(bench):
    (bench / "trainer.py").write_text(
        "from playpen.train.base import BasePlaypenTrainer\n\n"
        "class T(BasePlaypenTrainer):\n    def learn(self):\n"
        "        print('learner', self.learner.name, type(self.learner).__name__, 'teacher', self.teacher.name)\n")
    out = ok(bench, sys.executable, "-m", "playpen.cli", "run", "trainer.py", "-l", "mock", "-p", "mock")
    assert "learner mock CustomResponseModel teacher mock" in out


@pytest.mark.slow
def test_a_grpo_run_reads_the_registries_and_resolves_its_models_once(tmp_path, monkeypatch):
    from playpen import model_registry as registry
    from playpen.models import service
    from playpen.train import train

    monkeypatch.chdir(tmp_path)
    (tmp_path / "model_registry.json").write_text(json.dumps([{**registry.resolve_model("playpen-tiny"),
                                                               "model_name": "partner"}]))
    reads, resolved = registry.REGISTRY_READS[0], service.RESOLVED.copy()
    train("grpo", None, [f"storage_root={tmp_path / 'runs'}", "cpu_threads=1", "experiment=once", "game=taboo",
                         "partner=partner", "self_play=false", "instances=2", "group_size=2", "max_new_tokens=8",
                         "trainer.per_device_train_batch_size=2", "trainer.max_steps=1"])
    assert registry.REGISTRY_READS[0] - reads == 1  # (before the model service: 5)
    assert service.RESOLVED - resolved == {"playpen-tiny": 1, "partner": 1}  # (before: the teacher 3 times)


def test_playpens_own_models_resolve_without_importing_clemcore(tmp_path):
    # importing clemcore applies its logging config (./clembench.log; submitit's job log lines switched off)
    code = ("import sys; from playpen.models.service import resolve_local; resolve_local('playpen-tiny'); "
            "print('clemcore' in sys.modules)")
    assert ok(tmp_path, sys.executable, "-c", code).strip() == "False"
    assert not (tmp_path / "clembench.log").exists()
