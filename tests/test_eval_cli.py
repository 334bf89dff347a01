"""`playpen eval` end to end on the bundled tiny model: val.json + clemcore's results.csv/html, replacing one
game in a reused results dir, rescoring only, checkpoints as models, and one-line errors. ~30 s."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from playpen.cli import main
from playpen.games.instances import read_instances, spread
from playpen.models.specs import checkpoint_spec, resolve_eval_model
from playpen.models.tiny import ensure_tiny_model

FAST = ["--instances", "2", "-L", "24"]


def tiny():
    return ensure_tiny_model()


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
