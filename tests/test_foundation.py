"""Foundation: configs, registries, run storage and the CLI's bad-input contract (one line, exit 2, nothing written)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from playpen.config import build, load_config, parse_overrides
from playpen.errors import PlaypenError
from playpen.games.registry import resolve_game
from playpen.model_registry import model_entries, register_model, resolve_model
from playpen.storage import RunDir, atomic_write_json, resolve_storage_root

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Lora:
    r: int = 16
    alpha: float = 32.0


@dataclass
class Recipe:
    model: str
    lora: Lora | None = None
    max_steps: int = 10
    learning_rate: float = 1e-4
    games: list[str] = field(default_factory=list)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_config_loads_yaml_with_overrides_and_types(tmp_path):
    cfg = write(tmp_path / "c.yaml", "model: playpen-tiny\nlora: {r: 8}\nlearning_rate: 1e-5\ngames: [wordle]\n")
    recipe = load_config(Recipe, cfg, ["max_steps=3", "lora.alpha=16"])
    assert recipe == Recipe(model="playpen-tiny", lora=Lora(r=8, alpha=16.0), max_steps=3,
                            learning_rate=1e-5, games=["wordle"])


@pytest.mark.parametrize("text, overrides, message", [
    ("model: m\nmax_stepz: 3\n", [], "c.yaml: unknown key 'max_stepz'; did you mean max_steps?"),
    ("model: m\nlora: {rank: 3}\n", [], "c.yaml: lora: unknown key 'rank'"),
    ("model: m\nmax_steps: many\n", [], "c.yaml: max_steps: expected int, got 'many'"),
    ("lora: {}\n", [], "c.yaml: missing required key(s): model"),
    ("model: m\n", ["max_steps"], "override 'max_steps' must look like key=value"),
    ("model: m\n  bad: [\n", [], "c.yaml:2:"),
])
def test_config_errors_name_file_and_key(tmp_path, text, overrides, message):
    cfg = write(tmp_path / "c.yaml", text)
    with pytest.raises(PlaypenError) as error:
        load_config(Recipe, cfg, overrides)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_overrides_nest_and_parse_scalars():
    assert parse_overrides(["a.b=3", "a.c=x", "d=true"]) == {"a": {"b": 3, "c": "x"}, "d": True}
    with pytest.raises(PlaypenError):
        build(Recipe, {"model": "m", "games": "wordle"}, "x")


def test_custom_registry_entry_precedes_packaged(tmp_path):
    write(tmp_path / "model_registry.json", json.dumps([{
        "model_name": "smol-135m", "backend": "huggingface_local", "huggingface_id": "/models/my-smol",
        "model_config": {"premade_chat_template": True, "peft_model": "/adapters/a"}}]))
    spec = resolve_model("smol-135m", cwd=tmp_path)
    assert spec["huggingface_id"] == "/models/my-smol"
    assert spec["model_config"]["peft_model"] == "/adapters/a"
    sources = [e.source for e in model_entries(tmp_path) if e.name == "smol-135m"]
    assert sources == [str(tmp_path / "model_registry.json"), "packaged"]


def test_unknown_model_suggests_closest():
    with pytest.raises(PlaypenError, match="unknown model 'playpen-tine'; did you mean playpen-tiny"):
        resolve_model("playpen-tine")


def test_malformed_registry_names_file_and_position(tmp_path):
    write(tmp_path / "model_registry.json", '[{"model_name": "x",}]')
    with pytest.raises(PlaypenError, match=r"model_registry.json:1:21: malformed JSON"):
        resolve_model("x", cwd=tmp_path)


def test_register_model_keeps_other_entries(tmp_path):
    registry = tmp_path / "model_registry.json"
    write(registry, json.dumps([{"model_name": "keep", "backend": "openai"}]))
    register_model({"model_name": "new", "backend": "huggingface_local"}, registry)
    register_model({"model_name": "new", "backend": "huggingface_local", "huggingface_id": "p"}, registry)
    names = [e["model_name"] for e in json.loads(registry.read_text())]
    assert names == ["keep", "new"]
    assert resolve_model("new", cwd=tmp_path)["huggingface_id"] == "p"


def test_run_registry_found_by_name_and_by_path(tmp_path):
    run = tmp_path / "runs" / "exp" / "r1"
    run.mkdir(parents=True)
    write(run / "config.yaml", "experiment: exp\n")  # a training run's folder: only its registry names its model
    write(run / "model_registry.json", json.dumps([{"model_name": "exp-r1", "backend": "huggingface_local",
                                                    "huggingface_id": "x/y"}]))
    assert resolve_model("exp-r1", cwd=tmp_path, storage_root=tmp_path / "runs")["model_name"] == "exp-r1"
    assert resolve_model(str(run))["model_name"] == "exp-r1"


def test_game_registry_pointing_to_missing_folder(tmp_path):
    write(tmp_path / "game_registry.json", json.dumps([{"benchmark_path": "nowhere/clembench"}]))
    with pytest.raises(PlaypenError, match="benchmark_path nowhere/clembench does not exist"):
        resolve_game("wordle", cwd=tmp_path)
    with pytest.raises(PlaypenError, match="unknown game 'no-such-game'; available:"):
        resolve_game("no-such-game")


def test_run_dir_layout_and_atomic_writes(tmp_path):
    run = RunDir.for_experiment(tmp_path, "exp", "r1").create()
    assert [p.name for p in (run.checkpoints, run.records, run.logs)] == ["checkpoints", "playpen-records", "logs"]
    atomic_write_json(run.path / "a.json", {"x": 1})
    assert json.loads((run.path / "a.json").read_text()) == {"x": 1}
    assert not [p for p in run.path.iterdir() if p.name.endswith(".tmp")]


def test_storage_root_not_writable(tmp_path):
    blocker = write(tmp_path / "file", "")
    with pytest.raises(PlaypenError, match="storage root .* cannot be created"):
        resolve_storage_root(blocker / "runs")


def playpen(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "playpen.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_cli_lists_models_with_sources(tmp_path):
    write(tmp_path / "model_registry.json", json.dumps([{"model_name": "llama3-8b", "backend": "huggingface_local",
                                                         "huggingface_id": "/scratch/llama"}]))
    out = playpen("list", "models", "-v", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(row.startswith("playpen-tiny") and "packaged" in row for row in lines)
    assert any(row.startswith("llama3-8b") and str(tmp_path / "model_registry.json") in row for row in lines)
    assert any(row.startswith("llama3-8b") and "shadowed" in row for row in lines)


def test_cli_bad_input_is_one_line_and_writes_nothing(tmp_path):
    write(tmp_path / "model_registry.json", "[oops")
    before = sorted(p.name for p in tmp_path.iterdir())
    out = playpen("list", "models", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0
    assert out.stderr.startswith("playpen: error: ") and "model_registry.json:1:2" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before
