"""playpen.registry: model registries and key.json, as a command reads them and against shared storage.

A model_registry.json anyone can write into any folder under the storage root adds at most the one model of the
training run it sits in (`<experiment>-<run_id>`), never a name defined elsewhere (`playpen-tiny`, clemcore's
`gpt-4o`, another run's), and says so on screen; a name holding `--` (which joins a model and its partner in
results folders) is refused wherever a model is named. Lookup, precedence and registering; `playpen list models`;
broken registries and key.json files are one line. Nothing here loads a model."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from playpen.errors import PlaypenError
from playpen.model_registry import model_entries, register_model, resolve_model
from tests.helpers import check_refused, playpen_process, refused

SFT = ["train", "sft", "experiment=x", "data=sft.jsonl", "storage_root=runs", "cpu_threads=1"]
GRPO = ["train", "grpo", "experiment=x", "game=arithmetic", "storage_root=runs", "cpu_threads=1"]


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


# ---------------------------------------------------------------- model registries: lookup, order, registering

def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


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


def test_resolve_model_takes_only_a_training_runs_registry(stocked_cwd):
    """`model=<folder>` for training means the folder's model only when the folder is a training run."""
    from playpen.errors import PlaypenError
    from playpen.model_registry import resolve_model

    run = stocked_cwd / "runs" / "x" / "r1"
    (run / "checkpoints").mkdir(parents=True)
    (run / "model_registry.json").write_text(json.dumps([
        {"model_name": "x-r1", "backend": "huggingface_local", "huggingface_id": "a/b"}]))
    assert resolve_model(str(run))["model_name"] == "x-r1"
    with pytest.raises(PlaypenError, match=r"project is a folder with a model registry \(mine\), not a model"):
        resolve_model("project")


def test_a_broken_run_registry_is_skipped_with_a_warning(capsys, tmp_path):
    from playpen.model_registry import model_entries

    run = tmp_path / "runs" / "x" / "r1"
    (run / "checkpoints").mkdir(parents=True)
    (run / "model_registry.json").write_text('[{"model_name": "x-r1", ')
    names = [e.name for e in model_entries(cwd=tmp_path, storage_root=tmp_path / "runs")]
    assert "playpen-tiny" in names
    err = capsys.readouterr().err
    assert f"playpen: warning: skipping a run's model registry: {run / 'model_registry.json'}:1:" in err, err


@pytest.mark.parametrize("argv", [["eval", "SmolLM2-135M-Instruct", "-g", "wordle", "-r", "res"],
                                  ["train", "sft", "experiment=x", "data=sft.jsonl", "model=SmolLM2-135M-Instruct"]])
def test_an_uncached_hub_model_offline_is_one_line(capsys, clean_cwd, monkeypatch, argv):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(clean_cwd / "empty-cache"))
    (clean_cwd / "sft.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "a"},
                                                             {"role": "assistant", "content": "b"}]}) + "\n")
    err = refused(capsys, argv, clean_cwd)
    assert "HuggingFaceTB/SmolLM2-135M-Instruct is not in the local Hugging Face cache" in err, err


# ---------------------------------------------------------------- `playpen list models`

def test_cli_lists_models_with_sources(tmp_path):
    write(tmp_path / "model_registry.json", json.dumps([{"model_name": "llama3-8b", "backend": "huggingface_local",
                                                         "huggingface_id": "/scratch/llama"}]))
    out = playpen_process("list", "models", "-v", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(row.startswith("playpen-tiny") and "packaged" in row for row in lines)
    assert any(row.startswith("llama3-8b") and str(tmp_path / "model_registry.json") in row for row in lines)
    assert any(row.startswith("llama3-8b") and "shadowed" in row for row in lines)


def test_cli_bad_input_is_one_line_and_writes_nothing(tmp_path):
    write(tmp_path / "model_registry.json", "[oops")
    before = sorted(p.name for p in tmp_path.iterdir())
    out = playpen_process("list", "models", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0
    assert out.stderr.startswith("playpen: error: ") and "model_registry.json:1:2" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


# ---------------------------------------------------------------- key.json and registries a command reads

KEYS_AND_REGISTRIES = {  # name: (argv, files written first, what the line says)
    "key.json broken JSON": (GRPO + ["game=taboo", "partner=gpt-4o-mini"],
                             {"key.json": '{"openai": {"api_key": "sk-not-a-secret",}}'},
                             "key.json:1:42: malformed JSON: Expecting property name"),
    "key.json a list": (GRPO + ["game=taboo", "partner=gpt-4o-mini"], {"key.json": '["openai"]'},
                        'key.json: must map backend names to their settings'),
    "key.json binary": (GRPO + ["game=taboo", "partner=gpt-4o-mini"], {"key.json": b"\xff\xfe\x00{"},
                        "key file {home}/key.json is not a text file"),
    "key.json without the entry": (GRPO + ["game=taboo", "partner=gpt-4o-mini"], {"key.json": '{"anthropic": {}}'},
                                   "key.json has no 'openai' entry with an api_key"),
    "registry backend 42 (list models)": (["list", "models"],
                                          {"model_registry.json": '[{"model_name": "m", "backend": 42}]'},
                                          "model_registry.json: entry 0 ('m') needs a string 'backend' (e.g. "
                                          "huggingface_local, openai), got 42"),
    "registry model_config a string": (["list", "models"], {"model_registry.json": json.dumps([
        {"model_name": "m", "backend": "openai", "model_id": "x", "model_config": "fast"}])},
        "entry 0 ('m') 'model_config' must be a mapping, got 'fast'"),
    "registry without backend (eval)": (["eval", "m", "-g", "wordle", "-r", "res"],
                                        {"model_registry.json": '[{"model_name": "m", "huggingface_id": "x/y"}]'},
                                        "entry 0 ('m') needs a string 'backend'"),
    "registry without huggingface_id (train)": (SFT + ["model=m"], {"model_registry.json": json.dumps([
        {"model_name": "m", "backend": "huggingface_local"}])},
        "entry 0 ('m') uses backend huggingface_local and needs 'huggingface_id'"),
    "registry huggingface_id a number": (["list", "models"], {"model_registry.json": json.dumps([
        {"model_name": "m", "backend": "huggingface_local", "huggingface_id": 7}])},
        "entry 0 ('m') 'huggingface_id' must be a string, got 7"),
    "registry binary": (["list", "models"], {"model_registry.json": b"\x00\xff\xfe"},
                        "model registry {home}/model_registry.json is not a text file"),
}


@pytest.mark.parametrize("case", KEYS_AND_REGISTRIES)
def test_keys_and_registries(capsys, stocked_cwd, case):
    argv, files, message = KEYS_AND_REGISTRIES[case]
    err = check_refused(capsys, stocked_cwd, argv, message.format(home=stocked_cwd), files)
    assert "sk-not-a-secret" not in err


def test_a_name_two_run_folders_spell_is_refused_naming_both(root, capsys):
    """`vic-exp/r1` and `vic/exp-r1` both spell `vic-exp-r1`: the newest registry must not win (a neighbour's
    weights evaluated under the victim's name); the name is refused naming both folders, each folder still
    stands for its own model."""
    victim = run_folder(root, "vic-exp", "r1", entry("vic-exp-r1", "/victim/final"))
    neighbour = run_folder(root, "vic", "exp-r1", entry("vic-exp-r1", "/neighbour/final"))
    with pytest.raises(PlaypenError, match="registered by 2 run folders") as refusal:
        resolve_model("vic-exp-r1")
    assert str(victim) in str(refusal.value) and str(neighbour) in str(refusal.value)
    assert "vic-exp-r1" not in [e.name for e in model_entries()]
    assert resolve_model(str(victim))["huggingface_id"] == "/victim/final"
    assert "whose <experiment>-<run_id> spell the same name" in capsys.readouterr().err


def test_a_new_run_whose_name_another_run_folder_spells_is_refused(root):
    from playpen.storage import RunDir

    existing = run_folder(root, "vic-exp", "r1", entry("vic-exp-r1"))
    with pytest.raises(PlaypenError, match=f"which run folder {existing} spells too"):
        RunDir.for_experiment(root, "vic", "exp-r1").create()
    assert not (root / "vic").exists()
    RunDir.for_experiment(root, "vic-exp", "r1").create()  # the run itself resumes
