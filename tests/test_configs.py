"""The shipped configs (playpen/configs/): every one valid for what runs it, headers that say how to run it, one
name for each that `--config` resolves the same way from any folder, and `playpen configs list|copy`."""
from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest

from playpen.config import config_file, find_config, load_config, packaged_config_names, packaged_configs
from playpen.errors import PlaypenError

PACKAGE = Path(__file__).resolve().parents[1] / "playpen"
SHIPPED = PACKAGE / "configs"
# the folder of a training config -> the methods that take it (grpo/tiny_reward_model is RLOO's example too)
TRAIN_FOLDERS = {"sft": ("sft",), "dpo": ("dpo",), "grpo": ("grpo",), "reward": ("reward",), "rft": ("rft",),
                 "distill": ("distill",)}
VENV_BIN = str(Path(sys.executable).parent)  # python, no sbatch/srun/apptainer


def shipped(folder: str) -> list[Path]:
    return sorted((SHIPPED / folder).glob("*.yaml"))


def header(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    return lines[:next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))]


def name_of(path: Path) -> str:
    return str(path.relative_to(SHIPPED).with_suffix(""))


def test_one_copy_of_each_config_and_the_top_level_folder_only_points_to_it():
    """The repository's configs/ is where a user's copies go: it ships nothing but its README."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    tracked = subprocess.run(["git", "ls-files", "configs"], cwd=root, capture_output=True, text=True)
    if tracked.returncode == 0:  # (an unpacked copy without git: the names below still hold)
        assert tracked.stdout.split() == ["configs/README.md"], "shipped configs belong in playpen/configs/"
    assert len(packaged_config_names()) >= 35
    assert {"grpo/demo", "rft/tiny_numberguess", "distill/tiny_numberguess", "deepspeed/zero2.json",
            "cluster/example_gpu"} <= set(packaged_config_names())


def test_every_header_says_how_to_run_it_not_what_it_measured():
    """A config's first line is the command that runs it (by its shipped name); no measurements in headers
    (they live in bench/results/)."""
    for path in sorted(SHIPPED.rglob("*.yaml")):
        lines = header(path)
        assert lines and lines[0].startswith("# "), path
        text = "\n".join(lines)
        assert not re.search(r"\b20\d\d-\d\d-\d\d\b|[Mm]easured|\bissue \d", text), f"{path}: {text}"
        folder = path.parent.name
        if folder in TRAIN_FOLDERS:
            assert f"train {folder} --config {name_of(path)}" in lines[0], path
        elif folder == "cluster":
            assert lines[0].startswith("# Cluster profile"), path
        else:
            assert name_of(path) in text or str(path.relative_to(SHIPPED)) in text, path


@pytest.mark.parametrize("folder", sorted(TRAIN_FOLDERS))
def test_every_training_config_is_valid(folder):
    """Each training config loads into its method's schema, its trainer: and lora: keys are TRL's and PEFT's, and
    the files it names (deepspeed:, prompts:) resolve to shipped files."""
    import trl
    from peft import LoraConfig

    from playpen.config import check_keys
    from playpen.reward.prompts import read_prompts
    from playpen.train.runner import load_recipe
    from playpen.train.trl_args import ALIASES, MANAGED

    files = shipped(folder)
    assert files, folder
    for path in files:
        methods = ("grpo", "rloo") if name_of(path) == "grpo/tiny_reward_model" else TRAIN_FOLDERS[folder]
        for method in methods:
            recipe = load_recipe(method)
            cfg = load_config(recipe.Config, path)
            fields = {f.name for f in dataclasses.fields(getattr(trl, recipe.trl_config))}
            check_keys(cfg.trainer, fields - set(MANAGED) - set(recipe.forced(cfg)) | set(ALIASES), str(path))
            check_keys(cfg.lora or {}, {f.name for f in dataclasses.fields(LoraConfig)}, str(path))
            if cfg.deepspeed:
                assert config_file(cfg.deepspeed).is_relative_to(SHIPPED), path
            if getattr(cfg, "prompts", None):
                assert read_prompts(cfg.prompts, str(path)), path


def test_deepspeed_files_and_prompts_are_well_formed():
    from playpen.reward.prompts import read_prompts

    for path in sorted((SHIPPED / "deepspeed").glob("*.json")):
        assert "zero_optimization" in json.loads(path.read_text()), path
    for path in sorted((SHIPPED / "reward" / "prompts").glob("*.jsonl")):
        assert len(read_prompts(str(path), str(path))) >= 10, path


def test_every_cluster_profile_loads():
    from playpen.submit.profiles import available, load_profile

    for path in shipped("cluster"):
        assert load_profile(str(path)).name == path.stem
        assert path.stem in available()
    assert load_profile("cluster/example_gpu").partition == "gpu"  # a shipped name works as --cluster too


@pytest.mark.parametrize("name", ["eval/tiny", "meter/tiny_vader", "sweeps/tiny", "debate/tournament_tiny"])
def test_every_job_config_passes_its_submit_checks(name, tmp_path, monkeypatch, capsys):
    """eval, meter, sweep and tournament files as their job takes them: `playpen submit KIND --config NAME
    --dry-run` from a folder outside the checkout, every check run (models, games, prompts, scorer)."""
    from playpen.submit.cli import main

    kind = {"sweeps": "sweep", "debate": "tournament"}.get(name.split("/")[0], name.split("/")[0])
    monkeypatch.setenv("PATH", VENV_BIN)
    monkeypatch.chdir(tmp_path)
    extra = [] if kind == "tournament" else [f"storage_root={tmp_path / 'runs'}"]
    assert main([kind, "--config", name, "--dry-run", *extra]) == 0, capsys.readouterr().err
    assert "#SBATCH" in capsys.readouterr().out


def test_the_checkpoint_sweep_is_valid_once_its_run_is_set():
    from playpen.eval.sweep import SweepConfig

    cfg = load_config(SweepConfig, "sweeps/checkpoints")
    assert cfg.runs and cfg.runs[0].path.endswith("RUN_ID")  # a placeholder the header says to set


# ---------------------------------------------------------------- one name, resolved the same way everywhere

def test_a_config_resolves_by_path_then_by_shipped_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no configs/ folder here
    demo = SHIPPED / "grpo" / "demo.yaml"
    for given in ("grpo/demo", "grpo/demo.yaml", "configs/grpo/demo.yaml", str(demo)):
        assert find_config(given) == demo, given
    assert config_file("configs/deepspeed/zero2.json") == config_file("deepspeed/zero2.json") \
        == SHIPPED / "deepspeed" / "zero2.json"
    mine = tmp_path / "configs" / "grpo" / "demo.yaml"  # an existing path comes first: your copy
    mine.parent.mkdir(parents=True)
    mine.write_text("experiment: mine\n")
    assert find_config("configs/grpo/demo.yaml") == Path("configs/grpo/demo.yaml")
    assert find_config("grpo/demo") == demo  # a bare name is always the shipped one
    assert config_file("../grpo/demo") == Path("../grpo/demo")  # never outside playpen/configs/


def test_an_unknown_config_is_one_line_with_the_close_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PlaypenError, match=r"config file grpo/dmeo not found: .*playpen configs list.*grpo/demo"):
        find_config("grpo/dmeo")
    assert config_file("configs/nope.json") == Path("configs/nope.json")  # left to its caller to name


def test_a_wheel_ships_the_defaults_the_code_names():
    """What the code falls back to (submit's defaults, the demo's config, cluster profiles, DeepSpeed files) is in
    the package, so an install without the repository has it."""
    from playpen.submit.cli import DEFAULT_CONFIGS
    from playpen.submit.profiles import search_dirs

    assert packaged_configs() == SHIPPED
    for relative in DEFAULT_CONFIGS.values():
        assert (packaged_configs() / relative).is_file(), relative
    assert packaged_configs() / "cluster" in search_dirs()
    pyproject = (PACKAGE.parent / "pyproject.toml").read_text()
    shipped_suffixes = {p.suffix for p in SHIPPED.rglob("*") if p.is_file()}
    assert all(f'configs/**/*{suffix}' in pyproject for suffix in shipped_suffixes - {".md"}), shipped_suffixes


# ---------------------------------------------------------------- playpen configs list | copy

def test_configs_list_names_each_with_its_command(capsys):
    from playpen.cli import main

    assert main(["configs", "list"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^grpo/demo +playpen train grpo --config grpo/demo", out, re.M)
    assert re.search(r"^rft/tiny_numberguess +playpen train rft", out, re.M)
    assert re.search(r"^deepspeed/zero2\.json$", out, re.M)


def test_configs_copy_makes_your_copy_that_config_then_reads(tmp_path, monkeypatch, capsys):
    from playpen.cli import main
    from playpen.train.grpo import Config

    monkeypatch.chdir(tmp_path)
    assert main(["configs", "copy", "grpo/demo"]) == 0
    copy = Path("configs/grpo/demo.yaml")
    assert copy.read_bytes() == (SHIPPED / "grpo" / "demo.yaml").read_bytes()
    assert "--config configs/grpo/demo.yaml" in capsys.readouterr().out
    copy.write_text(copy.read_text().replace("max_steps: 120", "max_steps: 7"))
    assert load_config(Config, "configs/grpo/demo.yaml").trainer["max_steps"] == 7
    assert main(["configs", "copy", "grpo/demo"]) == 2  # never overwritten without --force
    assert "exists; pass --force" in capsys.readouterr().err
    assert main(["configs", "copy", "configs/cluster/example_gpu.yaml", "mine.yaml"]) == 0
    assert "--cluster mine.yaml" in capsys.readouterr().out
    Path("folder").mkdir()
    assert main(["configs", "copy", "deepspeed/zero3.json", "folder"]) == 0
    assert Path("folder/zero3.json").is_file()
    assert main(["configs", "copy", "grpo/dem"]) == 2
    assert "no shipped config named grpo/dem; did you mean grpo/demo" in capsys.readouterr().err
