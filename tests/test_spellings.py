"""One spelling of the generation length: `max_new_tokens` in files, `-L/--max-new-tokens` on command
lines. The old `max_tokens` / `--max_tokens` still work and print one deprecation note per process; the new
spelling prints nothing. Nothing here loads a model."""
from __future__ import annotations

import pytest
import yaml

from playpen import config as pconfig
from playpen.cli import build_parser_for

NOTE = "[playpen] note: max_tokens is deprecated; use max_new_tokens"


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    monkeypatch.setattr(pconfig, "_NOTED", set())  # "once per process": each test is a process of its own


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


def test_teacher_of_a_game_method_is_its_partner_and_distillations_teacher_is_its_grader(capsys):
    """`teacher:` named the frozen player of the other seats until distillation's grading teacher came: a method
    without a teacher of its own reads it as `partner:` (with one note); distill keeps both roles apart."""
    from playpen.train import distill, grpo

    cfg = pconfig.load_config(grpo.Config, None, ["experiment=x", "teacher=playpen-tiny", "teacher_seats=[1]"])
    assert (cfg.partner, cfg.partner_seats) == ("playpen-tiny", [1])
    assert "note: teacher is deprecated; use partner" in capsys.readouterr().err
    cfg = pconfig.load_config(distill.Config, None, ["experiment=x", "teacher=programmatic", "partner=playpen-tiny"])
    assert (cfg.teacher, cfg.partner) == ("programmatic", "playpen-tiny")
