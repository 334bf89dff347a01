"""playpen.config and the shipped configs (playpen/configs/): reading, overrides, spellings; every config valid.

Every shipped config is valid for what runs it, with a header that says how to run it and one name that `--config`
resolves the same way from any folder; `playpen configs list|copy`; the config reader's types, overrides and
errors; one spelling of the generation length (`max_new_tokens`; the old `max_tokens` works with one note)."""
from __future__ import annotations

import dataclasses
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from playpen import config as pconfig
from playpen.cli import build_parser_for
from playpen.config import (build, config_file, find_config, load_config, packaged_config_names, packaged_configs,
                            parse_overrides)
from playpen.errors import PlaypenError

pytestmark = pytest.mark.usefixtures("fresh_notes")  # deprecation notes print as in a process of its own

PACKAGE = Path(__file__).resolve().parents[1] / "playpen"
SHIPPED = PACKAGE / "configs"
# the folder of a training config -> the methods that take it (grpo/tiny_reward_model is RLOO's example too)
TRAIN_FOLDERS = {"sft": ("sft",), "dpo": ("dpo",), "grpo": ("grpo",), "reward": ("reward",), "rft": ("rft",),
                 "distill": ("distill",), "rloo": ("rloo",)}
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
    assert {"grpo/demo", "rft/tiny_wordle", "distill/tiny_wordle", "deepspeed/zero2.json",
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
    from playpen.train.trl_args import MANAGED, current_names

    files = shipped(folder)
    assert files, folder
    for path in files:
        methods = ("grpo", "rloo") if name_of(path) == "grpo/tiny_reward_model" else TRAIN_FOLDERS[folder]
        for method in methods:
            recipe = load_recipe(method)
            cfg = load_config(recipe.Config, path)
            fields = {f.name for f in dataclasses.fields(getattr(trl, recipe.trl_config))}
            check_keys(current_names(cfg.trainer, fields), fields - set(MANAGED) - set(recipe.forced(cfg)), str(path))
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
    assert re.search(r"^rft/tiny_wordle +playpen train rft", out, re.M)
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


# ---------------------------------------------------------------- playpen.config: types, overrides and errors

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


# ---------------------------------------------------------------- max_new_tokens, once max_tokens (one note)

NOTE = "[playpen] note: max_tokens is deprecated; use max_new_tokens"


def parse(argv: list[str]):
    args, _ = build_parser_for(argv).parse_known_args(argv)
    return args


def notes(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if "deprecated" in line]


COMMANDS = {  # a command line, without its -L
    "eval": ["eval", "playpen-tiny"],
    "run": ["run", "t.py", "-l", "playpen-tiny"],
    "screen": ["screen", "playpen-tiny", "-g", "wordle", "-o", "x.jsonl"],
    "meter": ["meter", "playpen-tiny", "--classifier", "vader", "--prompts", "p.jsonl"],
    "debate rejudge": ["debate", "rejudge", "records"],
}


@pytest.mark.parametrize("command", COMMANDS)
def test_new_flag_spellings_and_no_note(capsys, command):
    for flag in ("-L", "--max-new-tokens"):
        assert parse(COMMANDS[command] + [flag, "7"]).max_new_tokens == 7
    assert notes(capsys) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_old_flag_works_with_one_note(capsys, command):
    assert parse(COMMANDS[command] + ["--max_tokens", "9"]).max_new_tokens == 9
    assert parse(COMMANDS[command] + ["--max_tokens", "5"]).max_new_tokens == 5
    assert notes(capsys) == [NOTE]


def test_old_flag_is_hidden_from_help(capsys):
    with pytest.raises(SystemExit):
        parse(["eval", "-h"])
    out = capsys.readouterr().out
    assert "--max-new-tokens" in out and "--max_tokens" not in out


def test_sweep_and_tournament_files(tmp_path, capsys):
    from playpen.debate_tools.tournament import TournamentConfig
    from playpen.eval.sweep import SweepConfig

    new = tmp_path / "new.yaml"
    new.write_text(yaml.safe_dump({"name": "s", "models": ["playpen-tiny"], "max_new_tokens": 32}))
    assert pconfig.load_config(SweepConfig, new).max_new_tokens == 32
    assert pconfig.load_config(SweepConfig, new, ["max_new_tokens=12"]).max_new_tokens == 12
    assert notes(capsys) == []

    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump({"name": "s", "models": ["playpen-tiny"], "max_tokens": 32}))
    assert pconfig.load_config(SweepConfig, old).max_new_tokens == 32
    # an old override on a new file overrides it (each layer is renamed on its own)
    assert pconfig.load_config(SweepConfig, new, ["max_tokens=12"]).max_new_tokens == 12
    cfg = pconfig.load_config(TournamentConfig, None, ["name=t", "debaters=[a]", "judges=[b]", "max_tokens=40"])
    assert cfg.max_new_tokens == 40
    assert notes(capsys) == [NOTE]


def test_both_spellings_in_one_file_is_one_line(tmp_path):
    from playpen.errors import PlaypenError
    from playpen.eval.sweep import SweepConfig

    both = tmp_path / "both.yaml"
    both.write_text("name: s\nmax_tokens: 8\nmax_new_tokens: 16\n")
    with pytest.raises(PlaypenError, match="both max_tokens and max_new_tokens given; keep max_new_tokens only"):
        pconfig.load_config(SweepConfig, both)


def test_meter_job_keys(capsys):
    from playpen.reward.meter import parse_config

    base = {"model": "playpen-tiny", "classifier": "vader", "prompts": "p.jsonl"}
    assert parse_config({**base, "max_new_tokens": 8}, "m.yaml").max_new_tokens == 8
    assert notes(capsys) == []
    assert parse_config({**base, "max_tokens": 6}, "m.yaml").max_new_tokens == 6
    assert notes(capsys) == [NOTE]


def test_old_flag_on_a_bad_value_is_note_then_one_error(capsys, tmp_path, monkeypatch):
    """The note is a note: the refusal is still exactly one `playpen: error:` line naming the new flag."""
    from playpen.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["eval", "playpen-tiny", "-g", "wordle", "-r", "res", "--max_tokens", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [NOTE, "playpen: error: -L/--max-new-tokens: must be at least 1, got 0"]
    assert not (tmp_path / "res").exists()


def test_teacher_of_a_game_method_is_its_partner_and_distillations_teacher_is_its_grader(capsys):
    """`teacher:` named the frozen player of the other seats until distillation's grading teacher came: a method
    without a teacher of its own reads it as `partner:` (with one note); distill keeps both roles apart."""
    from playpen.train import distill, grpo

    cfg = pconfig.load_config(grpo.Config, None, ["experiment=x", "teacher=playpen-tiny", "teacher_seats=[1]"])
    assert (cfg.partner, cfg.partner_seats) == ("playpen-tiny", [1])
    assert "note: teacher is deprecated; use partner" in capsys.readouterr().err
    cfg = pconfig.load_config(distill.Config, None, ["experiment=x", "teacher=programmatic", "partner=playpen-tiny"])
    assert (cfg.teacher, cfg.partner) == ("programmatic", "playpen-tiny")
