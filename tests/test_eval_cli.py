"""`playpen eval` end to end on the bundled tiny model: val.json + clemcore's results.csv/html, replacing one
game in a reused results dir, rescoring only, checkpoints as models, and one-line errors (a partner that is down,
a folder that holds no model, one that cannot be written). ~30 s."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from playpen.cli import main
from playpen.games.instances import read_instances, spread
from playpen.models.specs import checkpoint_spec, resolve_eval_model
from tests.helpers import REPO, refused, refused_in_subprocess, snapshot

FAST = ["--instances", "2", "-L", "24"]


def val_of(results: Path, model: str = "playpen-tiny") -> dict:
    return json.loads((results / f"{model}.val.json").read_text())


def episode_files(results: Path, game: str, model: str = "playpen-tiny") -> dict[str, float]:
    return {str(p.relative_to(results)): p.stat().st_mtime_ns
            for p in (results / model / game).rglob("interactions.json")}


def test_eval_wordle_writes_val_json_and_clem_tables(tiny, tmp_path, capsys):
    results = tmp_path / "res"
    assert main(["eval", "playpen-tiny", "-g", "wordle", *FAST, "-r", str(results)]) == 0
    val = val_of(results)
    assert set(val["games"]) == {"wordle"} and val["games"]["wordle"]["episodes"] == 2
    assert val["games"]["wordle"]["instances"] == 2 and val["games"]["wordle"]["missing"] == 0
    assert 0 <= val["clemscore"] <= 100 and val["statscore"] is None
    assert (results / "results.html").is_file() and (results / "raw.csv").is_file()
    table = pd.read_csv(results / "results.csv", index_col=0)
    assert val["clemscore"] == table.loc["playpen-tiny", "-, clemscore"]
    assert val["games"]["wordle"]["played"] == table.loc["playpen-tiny", "wordle, % Played"]
    assert len(list((results / "playpen-tiny" / "wordle").rglob("scores.json"))) == 2
    assert "clemscore" in capsys.readouterr().out


def test_replace_one_game_then_rescore(tiny, tmp_path):
    results = tmp_path / "res"
    assert main(["eval", "playpen-tiny", "-g", "wordle", "-g", "arithmetic", *FAST, "-r", str(results)]) == 0
    first = val_of(results)
    assert set(first["games"]) == {"wordle", "arithmetic"} and first["statscore"] is not None
    assert first["games"]["arithmetic"]["static"] and not first["games"]["wordle"]["static"]
    wordle_before = episode_files(results, "wordle")

    # -g arithmetic -r DIR: arithmetic is replayed (now 3 instances), wordle's records stay untouched
    assert main(["eval", "playpen-tiny", "-g", "arithmetic", "--instances", "3", "-L", "24", "-r", str(results)]) == 0
    second = val_of(results)
    assert second["games"]["arithmetic"]["episodes"] == 3 and second["games"]["wordle"]["episodes"] == 2
    assert episode_files(results, "wordle") == wordle_before
    assert len(episode_files(results, "arithmetic")) == 3
    table = pd.read_csv(results / "results.csv", index_col=0)
    # clemcore's results.csv scores all games together; val.json's clemscore covers the dialogue games only
    # (statscore the static ones), so recompute clemcore's formula from the per-game columns of its table
    row = table.loc["playpen-tiny"]
    assert second["clemscore"] == round(row["wordle, % Played"] / 100 * row["wordle, Quality Score"], 2)
    assert second["statscore"] == round(row["arithmetic, % Played"] / 100 * row["arithmetic, Quality Score"], 2)

    # --skip_gameplay: scores are recomputed from the interactions alone
    for f in results.rglob("scores.json"):
        f.unlink()
    (results / "playpen-tiny.val.json").unlink()
    assert main(["eval", "playpen-tiny", "--skip_gameplay", "-r", str(results)]) == 0
    third = val_of(results)
    assert {g: v["clemscore"] for g, v in third["games"].items()} == \
        {g: v["clemscore"] for g, v in second["games"].items()}
    assert third["clemscore"] == second["clemscore"] and third["statscore"] == second["statscore"]


def test_suite_static_plays_only_static_games(tiny, tmp_path):
    results = tmp_path / "res"
    assert main(["eval", "playpen-tiny", "--suite", "static", *FAST, "-r", str(results)]) == 0
    val = val_of(results)
    assert val["games"] and all(g["static"] for g in val["games"].values())
    assert val["clemscore"] is None and val["statscore"] is not None


def test_checkpoint_folder_is_a_model(tiny, tmp_path):
    """An adapter checkpoint of a run (no model_registry.json yet) evaluates as base model + adapter."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    ckpt = tmp_path / "exp" / "run1" / "checkpoints" / "checkpoint-7"
    model = AutoModelForCausalLM.from_pretrained(tiny)
    get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"])).save_pretrained(ckpt)
    spec = resolve_eval_model(str(ckpt))
    assert spec["model_name"] == "playpen-tiny-step7" and spec["model_config"]["peft_model"] == str(ckpt)
    assert spec["huggingface_id"] == str(tiny)
    results = tmp_path / "res"
    assert main(["eval", str(ckpt), "-g", "wordle", "--instances", "1", "-L", "16", "-r", str(results)]) == 0
    assert val_of(results, "playpen-tiny-step7")["games"]["wordle"]["episodes"] == 1
    assert resolve_eval_model(str(ckpt.parent.parent)) == spec  # an unfinished run: its latest checkpoint
    full = checkpoint_spec(tiny, base_spec=spec, name="x")  # full weights (config.json, no adapter)
    assert full["huggingface_id"] == str(tiny) and "peft_model" not in full["model_config"]


def responses(results: Path) -> dict:
    out = {}
    for f in results.glob("playpen-tiny/*/*/*/interactions.json"):
        game_id = json.loads((f.parent / "instance.json").read_text())["game_id"]
        turns = json.loads(f.read_text())["turns"]
        out[(f.parts[-4], f.parts[-3], game_id)] = [a["action"]["content"] for t in turns for a in t
                                                     if a["action"]["type"] == "get message"]
    return out


def test_rollout_engine_and_clemcore_runner_play_the_same(tiny, tmp_path):
    """Greedy decoding: the engine (auto's choice for local models) and clemcore's runner give the same replies,
    hence the same scores."""
    for player in ("engine", "clemcore"):
        argv = ["eval", "playpen-tiny", "-g", "wordle", "-g", "taboo", *FAST, "--player", player]
        assert main([*argv, "-r", str(tmp_path / player)]) == 0
    engine, clem = val_of(tmp_path / "engine"), val_of(tmp_path / "clemcore")
    assert responses(tmp_path / "engine") == responses(tmp_path / "clemcore") != {}
    assert engine["games"] == clem["games"] and engine["clemscore"] == clem["clemscore"]


def test_instances_are_spread_over_experiments(tmp_path):
    path = tmp_path / "instances.json"
    path.write_text(json.dumps({"experiments": [
        {"name": "a", "game_instances": [{"game_id": i} for i in range(3)]},
        {"name": "b", "game_instances": [{"game_id": i} for i in range(3, 5)]}]}))
    ids = lambda pairs: [(e["name"], i["game_id"]) for e, i in pairs]  # noqa: E731
    assert ids(spread(read_instances(path), 3)) == [("a", 0), ("b", 3), ("a", 1)]
    assert len(spread(read_instances(path), 99)) == len(spread(read_instances(path), None)) == 5


@pytest.mark.parametrize("argv, message", [
    (["nope-model", "-g", "wordle"], "unknown model 'nope-model'"),
    (["playpen-tiny", "-g", "nogame"], "unknown game 'nogame'"),
    (["playpen-tiny", "-g", "arithmetic", "--suite", "clem"], "not in suite 'clem'"),
    (["playpen-tiny", "-g", "wordle", "--instance_set", "nosuchset"], "has no instance set 'nosuchset'"),
    (["playpen-tiny", "--skip_gameplay"], "no records of model playpen-tiny"),
])
def test_bad_input_is_one_line(tmp_path, argv, message):
    proc = subprocess.run([sys.executable, "-m", "playpen.cli", "eval", *argv, "-r", str(tmp_path / "r")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("playpen: error: ") and message in lines[0], proc.stderr
    assert not (tmp_path / "r").exists()


def test_cli_module_is_light():
    code = ("import sys, argparse; import playpen.eval.cli as c; c.add_arguments(argparse.ArgumentParser()); "
            "heavy = [m for m in ('torch', 'transformers', 'clemcore', 'pandas', 'matplotlib') if m in sys.modules]; "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.strip()
    assert out == "[]"


@pytest.mark.slow
@pytest.mark.parametrize("player", ["engine", "clemcore"])
def test_eval_screen_shows_the_table_and_the_log_goes_to_the_results(tiny, tmp_path, player):
    """clemcore's INFO lines, its scoring/batch bars and transformers' loading bars stay off the screen; they are
    in <results>/clembench.log, and on screen with -v."""
    argv = [sys.executable, "-m", "playpen.cli", "eval", "playpen-tiny", "-g", "wordle", *FAST, "--player", player]
    quiet = subprocess.run([*argv, "-r", str(tmp_path / "q")], capture_output=True, text=True, cwd=tmp_path,
                           timeout=240)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout.splitlines()[0].split() == ["game", "episodes", "%", "played", "quality", "clemscore"]
    for noise in ("clemcore.run - INFO", "Loading weights", "Scoring episodes", "Batch sizes", "[eval]"):
        assert noise not in quiet.stderr + quiet.stdout, noise
    log = (tmp_path / "q" / "clembench.log").read_text()
    assert "clemcore.run - INFO - Loading game benchmark for wordle" in log
    assert "[eval] wordle: 2 episodes scored" in log
    loud = subprocess.run([*argv, "-r", str(tmp_path / "v"), "-v"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=240)
    assert loud.returncode == 0 and "clemcore.run - INFO" in loud.stdout + loud.stderr
    assert "[eval] wordle: 2 episodes scored" in loud.stderr


# ---------------------------------------------------------------- no episode finished, no model, no folder

@pytest.mark.slow
def test_eval_where_no_episode_finished_writes_no_scores(dead_partner, clean_cwd):
    results = clean_cwd / "res"
    err = refused_in_subprocess(clean_cwd, "eval", dead_partner, "-g", "wordle", "--instances", "2", "-r", str(results))
    assert err == f"playpen: error: no episode of wordle finished; see {results / 'clembench.log'}"
    assert "APIConnectionError" in (results / "clembench.log").read_text()
    assert not list(results.glob("*.val.json")) and not (results / "results.csv").exists()


@pytest.mark.slow
def test_a_replay_where_no_episode_finished_keeps_the_earlier_records(dead_partner, clean_cwd):
    """`playpen eval M -g G -r DIR` replays G; if this time no episode finishes (the model's service is down),
    the records G had in DIR stay and are scored, with a warning: nothing on disk is lost."""
    from playpen.model_registry import resolve_model

    tiny = {**resolve_model("playpen-tiny"), "model_name": "flaky"}
    dead = json.loads((clean_cwd / "model_registry.json").read_text())[0]
    (clean_cwd / "model_registry.json").write_text(json.dumps([tiny]))
    first = subprocess.run([sys.executable, "-m", "playpen.cli", "eval", "flaky", "-g", "wordle", "--instances", "2",
                            "-L", "16", "-r", "res"], capture_output=True, text=True, cwd=clean_cwd, timeout=300)
    assert first.returncode == 0, first.stderr
    before = snapshot(clean_cwd / "res" / "flaky" / "wordle")
    (clean_cwd / "model_registry.json").write_text(json.dumps([{**dead, "model_name": "flaky"}]))  # now unreachable
    again = subprocess.run([sys.executable, "-m", "playpen.cli", "eval", "flaky", "-g", "wordle", "--instances", "2",
                            "-L", "16", "-r", "res"], capture_output=True, text=True, cwd=clean_cwd, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "no episode of wordle finished this time" in again.stderr and "earlier records" in again.stderr
    assert snapshot(clean_cwd / "res" / "flaky" / "wordle") == before
    assert json.loads((clean_cwd / "res" / "flaky.val.json").read_text())["games"]["wordle"]["episodes"] == 2
    assert not (clean_cwd / "res" / ".playing").exists()


def test_eval_of_a_folder_that_holds_no_model(capsys, clean_cwd):
    (clean_cwd / "model_registry.json").write_text(json.dumps([
        {"model_name": "mine-a", "backend": "huggingface_local", "huggingface_id": "x"},
        {"model_name": "mine-b", "backend": "huggingface_local", "huggingface_id": "y"}]))
    (clean_cwd / "empty").mkdir()
    cases = [
        ("", "no model given: name a registered model (`playpen list models`), a training run folder or a "
             "checkpoint folder"),
        (".", f"{clean_cwd} is a folder with a model registry (mine-a, mine-b), not a model; name the model, "
              f"e.g. mine-b"),
        (str(clean_cwd), f"{clean_cwd} is a folder with a model registry (mine-a, mine-b), not a model"),
        ("empty", f"no config.json in {clean_cwd / 'empty'}: the folder holds no model, checkpoint"),
    ]
    for model, message in cases:
        err = refused(capsys, ["eval", model, "-g", "wordle", "-r", str(clean_cwd / "res")], clean_cwd / "empty",
                      clean_cwd / "model_registry.json")
        assert message in err, err
        assert not (clean_cwd / "res").exists()


def test_an_unwritable_results_folder_is_one_line(capsys, clean_cwd):
    err = refused(capsys, ["eval", "playpen-tiny", "-g", "wordle", "-r", "/sys/playpen-results"], clean_cwd)
    assert "folder /sys/playpen-results cannot be written" in err, err


# ---------------------------------------------------------------- clem's own files; one load, one scoring

WORDLE = str(REPO / "playpen" / "games" / "wordle")


def clem_files(model_dir: Path) -> set[str]:
    return {str(p.relative_to(model_dir)) for p in model_dir.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_eval_writes_the_files_clem_run_writes_and_clem_score_agrees(clean_cwd):
    """The same game, the same `mock` model: clemcore's own `clem run` and `playpen eval` write the same files
    (playpen adds scores.json and its playpen_eval.json), and `clem score` on playpen's folder gives playpen's
    scores."""
    from clemcore import backends, cli

    (clean_cwd / "game_registry.json").write_text(json.dumps([{"benchmark_path": WORDLE}]))
    cli.run("wordle", backends.ModelSpec.from_strings(["mock"]), gen_args={"temperature": 0.0, "max_tokens": 300},
            experiment_name="easy", results_dir_path=clean_cwd / "clem")  # `clem run -g wordle -m mock -e easy`
    assert main(["eval", "mock", "-g", "wordle", "-e", "easy", "-r", "pp"]) == 0
    played = clem_files(clean_cwd / "pp" / "mock")
    assert played - {p for p in played if p.endswith(("scores.json", "playpen_eval.json"))} == \
        clem_files(clean_cwd / "clem" / "mock")
    assert sum(p.endswith("completed.json") for p in played) == 7 == \
        sum(p.endswith("player_1.requests.json") for p in played)
    ours, theirs = (json.loads((clean_cwd / r / "mock" / "run.json").read_text()) for r in ("pp", "clem"))
    assert ours.keys() == theirs.keys() and ours["player_models"] == theirs["player_models"]
    assert ours["games"]["wordle"]["num_instances"] == theirs["games"]["wordle"]["num_instances"] == 7
    episode = Path("wordle/easy/instance_00000/player_1.requests.json")
    ours, theirs = (json.loads((clean_cwd / r / "mock" / episode).read_text()) for r in ("pp", "clem"))
    assert ours["meta"] == theirs["meta"] and len(ours["calls"]) == len(theirs["calls"])

    scores = {p: (clean_cwd / "pp" / "mock" / p).read_text() for p in played if p.endswith("/scores.json")}
    cli.score("wordle", results_dir=str(clean_cwd / "pp"))  # `clem score -g wordle -r pp`
    rescored = {p: json.loads((clean_cwd / "pp" / "mock" / p).read_text()) for p in scores}
    assert rescored == {p: json.loads(text) for p, text in scores.items()} and len(scores) == 7


@pytest.mark.slow
def test_a_second_game_joins_run_json_and_each_game_is_loaded_and_scored_once(clean_cwd, monkeypatch, capsys):
    """run.json keeps the games played into the folder before (as clem run's RunFileSaver does); each game is
    loaded once and every episode scored once (a replay into a staging folder used to load each game three times
    and score it twice)."""
    from clemcore.clemgame import GameBenchmark, GameScorer

    from playpen.games import instances

    monkeypatch.setattr(instances, "_BENCHMARKS", {})  # (games loaded by earlier tests of this process)
    loads, scorings = [], []
    load_from_spec, compute_scores = GameBenchmark.load_from_spec, GameScorer.compute_scores
    monkeypatch.setattr(GameBenchmark, "load_from_spec",
                        staticmethod(lambda spec: loads.append(spec["game_name"]) or load_from_spec(spec)))
    monkeypatch.setattr(GameScorer, "compute_scores",
                        lambda self, episode: scorings.append(self.game_name) or compute_scores(self, episode))
    assert main(["eval", "mock", "-g", "wordle", "--instances", "2", "-r", "res"]) == 0
    assert main(["eval", "mock", "-g", "taboo", "--instances", "3", "-r", "res"]) == 0
    assert sorted(loads) == ["taboo", "wordle"]
    assert sorted(scorings) == ["taboo"] * 3 + ["wordle"] * 2
    run = json.loads((clean_cwd / "res" / "mock" / "run.json").read_text())
    assert {g: v["num_instances"] for g, v in run["games"].items()} == {"wordle": 2, "taboo": 3}
    assert main(["eval", "mock", "--skip_gameplay", "-r", "res"]) == 0  # rescoring: once more, nothing loaded
    assert sorted(loads) == ["taboo", "wordle"] and len(scorings) == 10


@pytest.mark.parametrize("name", ["raw.csv", "results.html", "mock.val.json", "mock/run.json"])
def test_a_folder_where_eval_writes_a_file_is_one_line_before_playing(capsys, clean_cwd, name):
    (clean_cwd / "res" / name).mkdir(parents=True)
    err = refused(capsys, ["eval", "mock", "-g", "wordle", "--instances", "1", "-r", "res"], clean_cwd / "res")
    assert f"res/{name} is a folder where playpen eval writes a file; move it away" in err, err


# ---------------------------------------------------------------- what a killed eval leaves

SLOW_BACKEND = '''"""A model that takes a minute per reply: an eval is still playing when the test stops it."""
import time

import clemcore.backends as backends


class Slow(backends.Backend):
    def get_model_for(self, model_spec):
        return SlowModel(model_spec)


class SlowModel(backends.Model):
    def generate_response(self, messages):
        time.sleep(60)
        return messages, {}, "guess: hello"
'''


CHECKOUT_FIRST = {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.fixture
def slow_model(clean_cwd) -> str:
    (clean_cwd / "slow_api.py").write_text(SLOW_BACKEND)
    (clean_cwd / "key.json").write_text(json.dumps({"slow": {"api_key": "dummy-not-a-secret"}}))
    (clean_cwd / "model_registry.json").write_text(json.dumps([
        {"model_name": "slow", "backend": "slow", "model_id": "slow", "model_config": {}}]))
    return "slow"


def stopped_while_playing(cwd: Path, model: str, signal_number: int) -> subprocess.Popen:
    """An eval of `model` into cwd/res, sent `signal_number` once its game is being played in .playing.*."""
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-m", "playpen.cli", "eval", model, "-g", "wordle", "--instances", "1",
                             "-r", "res"], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=CHECKOUT_FIRST)
    deadline = time.time() + 120
    while not list((cwd / "res").glob(".playing.*/slow/wordle/*/instance_*/instance.json")):
        assert proc.poll() is None and time.time() < deadline, proc.stderr and proc.stderr.read()
        time.sleep(0.1)
    proc.send_signal(signal_number)
    proc.wait(timeout=60)
    assert signal_number != signal.SIGTERM or proc.returncode == 128 + signal.SIGTERM, proc.stderr.read()
    return proc


def hidden(results: Path) -> list[str]:
    return sorted(p.name for p in results.iterdir() if p.name.startswith((".playing", ".tables")))


@pytest.mark.slow
def test_a_killed_eval_leaves_nothing_after_the_next_run(slow_model, clean_cwd):
    """SIGKILL while playing leaves the private .playing.* folder (and one a kill left while the tables were made,
    .tables.*); the next eval over that folder removes both, and never a live one's. ~10 s."""
    import signal
    import tempfile

    from playpen.storage import LOCK_FILE, private_folder

    stopped_while_playing(clean_cwd, slow_model, signal.SIGKILL)
    left = hidden(clean_cwd / "res")
    assert len(left) == 1 and left[0].startswith(".playing.")
    # what a kill while the tables are made leaves: the private folder, its lock file held by no one
    tables = Path(tempfile.mkdtemp(dir=clean_cwd / "res", prefix=".tables."))
    (tables / LOCK_FILE).write_text("pid 1 on elsewhere".ljust(199) + "\n")
    assert len(hidden(clean_cwd / "res")) == 2
    assert main(["eval", "mock", "-g", "wordle", "--instances", "1", "-r", "res"]) == 0
    assert hidden(clean_cwd / "res") == []
    with private_folder(clean_cwd / "res", ".tables.") as held:  # a live one's is never removed
        assert main(["eval", "mock", "--skip_gameplay", "-r", "res"]) == 0
        assert hidden(clean_cwd / "res") == [held.name]


@pytest.mark.slow
def test_sigterm_ends_an_eval_without_leftovers(slow_model, clean_cwd):
    """scancel sends SIGTERM: the eval stops at once and removes its staging folder on the way out. ~5 s."""
    import signal

    stopped_while_playing(clean_cwd, slow_model, signal.SIGTERM)
    assert hidden(clean_cwd / "res") == []
