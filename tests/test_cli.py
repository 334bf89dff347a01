"""The command line describes itself: `playpen -h` lists the commands by group, `playpen train METHOD -h` and
`playpen submit KIND -h` list every config key (type, default, range, help: the field metadata), an unknown key
names its close match and that help. Flags are spelled with dashes; clem's underscore spellings are read as the
same flags and stay hidden; -T is the temperature wherever there is one; old routes work with one note. All in
process, nothing is loaded or written (~5 s)."""
from __future__ import annotations

import re

import pytest
import yaml

from playpen.cli import GROUPS, build_parser_for, main
from playpen.config_help import key_docs
from playpen.train import METHODS


@pytest.fixture(autouse=True)
def fresh_process(fresh_notes, monkeypatch):
    """Each test is a process of its own (deprecation notes print again) with a terminal of 120 columns."""
    monkeypatch.setenv("COLUMNS", "120")  # the width help is wrapped to


def help_of(capsys, *argv: str) -> str:
    assert main([*argv, "--help"]) == 0
    return capsys.readouterr().out


def parse(*argv: str):
    args, _ = build_parser_for(list(argv)).parse_known_args(list(argv))
    return args


def entries(text: str) -> dict[str, str]:
    """A key listing's entries: key → its line (`  group_size: int = 8, at least 2 (...)`)."""
    return {m.group(1): m.group(0) for m in re.finditer(r"^  ([\w.\[\]]+): .*$", text, re.M)}


# ---------------------------------------------------------------- playpen -h

def test_top_help_groups_the_commands_and_hides_old_routes(capsys):
    out = help_of(capsys)
    headings = [line[:-1] for line in out.splitlines() if re.fullmatch(r"[a-z]+:", line)]
    assert headings == ["learn", "evaluate", "cluster", "tools", "options"]
    sections = dict(re.findall(r"^([a-z]+):\n((?:  .*\n)+)", out, re.M))
    for group, names in GROUPS.items():
        assert [line.split()[0] for line in sections[group].splitlines() if not line.startswith("    ")] == \
            list(names), group
    listed = " ".join(sections["learn"].split())
    assert all(method in listed for method in METHODS)  # every train method, rloo, rft and distill included
    for old in ("build-tiny", "status", "logs", "sweep", "sweep-local"):
        assert not re.search(rf"^  {old} ", out, re.M), old


def test_top_help_points_to_the_keys(capsys):
    out = " ".join(help_of(capsys).split())
    assert "`playpen train METHOD -h` and `playpen submit KIND -h` list every config key" in out


# ---------------------------------------------------------------- every key, documented

@pytest.mark.parametrize("method", METHODS)
def test_train_help_lists_every_key_of_the_method(capsys, method):
    from playpen.train.runner import load_recipe

    config = load_recipe(method).Config
    out = help_of(capsys, "train", method)
    assert f"config keys of {method} (" in out and f"trl.{load_recipe(method).trl_config}" in out
    listed = entries(out.split("config keys of")[1])
    assert list(listed) == [doc.name for doc in key_docs(config)]
    assert set(listed) >= {"experiment", "model", "seed", "trainer"}


def test_a_key_shows_type_default_range_and_help(capsys):
    out = help_of(capsys, "train", "grpo")
    keys = entries(out)
    assert keys["experiment"] == "  experiment: name (required)"
    assert keys["group_size"] == "  group_size: int = 8, at least 2 (GRPO's advantage compares the episodes of a group)"
    assert keys["partner_seats"] == "  partner_seats: list[int] | null = null"
    assert keys["temperature"].startswith("  temperature: float = 1.0, greater than 0 (episodes are sampled;")
    help_line = out.split(keys["group_size"] + "\n")[1].splitlines()[0]
    assert help_line == ("      episodes per instance: TRL's num_generations, whose rewards are normalised "
                         "against each other")


def test_every_key_has_help():
    """The help is the field's metadata: a key added without one fails here, not in a user's --help."""
    from playpen.debate_tools.tournament import TournamentConfig
    from playpen.eval.sweep import SweepConfig
    from playpen.reward import meter
    from playpen.submit.jobs import EvalSpec
    from playpen.train.runner import load_recipe

    docs = [doc for method in METHODS for doc in key_docs(load_recipe(method).Config)]
    docs += key_docs(EvalSpec) + key_docs(SweepConfig) + key_docs(TournamentConfig) + meter.key_docs()
    assert [doc.name for doc in docs if not doc.help] == []


def test_train_help_without_a_method_lists_no_keys(capsys):
    assert "config keys of" not in help_of(capsys, "train")
    assert "config keys of" not in help_of(capsys, "train", "ppo")  # the method is refused when it runs, not here


@pytest.mark.parametrize("kind, keys", [
    ("eval", {"model", "games", "results_dir", "instance_set", "batch_size", "storage_root"}),
    ("sweep", {"name", "runs", "runs[].path", "runs[].every", "games[].name", "max_instances", "meters"}),
    ("tournament", {"name", "debaters", "judges", "game", "output_dir"}),
    ("meter", {"model", "classifier", "prompts", "samples", "temperature", "batch_size", "storage_root"}),
])
def test_submit_help_lists_the_keys_of_its_config(capsys, kind, keys):
    out = help_of(capsys, "submit", kind)
    assert f"config keys of {kind} (in the --config file" in out
    listed = entries(out.split("config keys of")[1])
    assert keys <= set(listed), keys - set(listed)


def test_submit_help_of_a_method_is_the_train_help_of_it(capsys):
    keys = help_of(capsys, "train", "rft").split("config keys of")[1]
    assert help_of(capsys, "submit", "rft").split("config keys of")[1] == keys
    assert "config keys of" not in help_of(capsys, "submit", "doctor")  # (flags only)


def test_sweep_help_shows_the_sweep_defaults(capsys):
    keys = entries(help_of(capsys, "submit", "sweep"))
    assert keys["games"] == "  games: list[str | mapping] = [all]"
    assert keys["temperature"] == "  temperature: float = 0.0, at least 0 and at most 100 (0 is greedy)"
    assert keys["runs[].path"] == "  runs[].path: str (required)"


# ---------------------------------------------------------------- an unknown key

def test_an_unknown_key_names_its_close_match_and_the_help(capsys, tmp_path):
    assert main(["train", "grpo", "experiment=x", f"storage_root={tmp_path}", "group_sise=4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("playpen: error: overrides: unknown key 'group_sise'; did you mean group_size? "
                   "(every key: `playpen train grpo --help`)")


def test_an_unknown_trainer_key_is_one_short_line(capsys, tmp_path):
    assert main(["train", "sft", "experiment=x", f"storage_root={tmp_path}", "trainer.max_stepz=3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("playpen: error: overrides: trainer: unknown key 'max_stepz'; did you mean max_steps, "
                   "save_steps, eval_steps? (trainer: takes the fields of trl.SFTConfig)")


@pytest.mark.parametrize("kind, text, where", [
    ("eval", "model: playpen-tiny\ngame: [wordle]\n", "every key: `playpen submit eval --help`"),
    ("sweep", "name: s\nmodel: [playpen-tiny]\n", "every key: `playpen submit sweep --help`"),
    ("tournament", "name: t\njudge: [programmatic]\n", "every key: `playpen submit tournament --help`"),
    ("meter", "model: playpen-tiny\nclassifier: vader\nprompts: p.jsonl\nsampels: 2\n",
     "every key: `playpen submit meter --help`"),
])
def test_an_unknown_job_key_points_to_submit_help(capsys, tmp_path, kind, text, where):
    (tmp_path / "c.yaml").write_text(text)
    assert main(["submit", kind, "--config", str(tmp_path / "c.yaml"), "--executor", "local", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert "did you mean" in err and err.endswith(f"({where})") and "\n" not in err, err


def test_a_trainer_key_at_the_top_points_to_its_section(capsys, tmp_path):
    assert main(["train", "sft", "--config", "sft/tiny_lora", f"storage_root={tmp_path}", "max_steps=2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("tiny_lora.yaml: unknown key 'max_steps'; did you mean trainer.max_steps? (it goes under "
                        "trainer:; every key: `playpen train sft --help`)") and "\n" not in err, err
    assert main(["train", "sft", "--config", "sft/tiny_lora", f"storage_root={tmp_path}", "r=4"]) == 2
    assert "did you mean lora.r?" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


# ---------------------------------------------------------------- refusals that say what to give

@pytest.mark.parametrize("argv, line", [
    (["eval", "m", "--gmae", "wordle"],
     "playpen eval: unrecognized arguments: --gmae wordle; did you mean --game? (see `playpen eval -h`)"),
    (["submit", "sft", "--nodez", "2"],
     "playpen submit sft: unrecognized arguments: --nodez; did you mean --nodes? (see `playpen submit sft -h`)"),
    (["train", "sft", "--config", "sft/tiny_lora", "trainer.max_steps=1", "--bogus"],
     "playpen train: unrecognized arguments: --bogus (see `playpen train -h`)"),
    (["train", "sft"], "playpen train sft needs --config NAME_OR_FILE, e.g. --config sft/tiny_full (the shipped "
                       "configs: `playpen configs list`)"),
    (["train", "grpo", "trainer.max_steps=1"], "playpen train grpo needs --config NAME_OR_FILE, e.g. --config "
                                              "grpo/demo"),
    (["train"], "playpen train needs a METHOD, one of: sft, dpo, grpo, "),
    (["submit", "doctor", "--dry-run", "k=v"], "doctor takes no key=value overrides (got k=v)"),
])
def test_a_refusal_says_what_to_give(capsys, clean_cwd, argv, line):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"playpen: error: {line}") and err.count("\n") == 1, err
    assert not any(clean_cwd.iterdir())


def test_doctor_help_lists_no_overrides(capsys):
    out = help_of(capsys, "submit", "doctor")
    assert "key=value" not in out and "--storage-root" in out
    assert "key=value" in help_of(capsys, "submit", "sft")


# ---------------------------------------------------------------- clem's underscore spellings

EVAL = ["eval", "playpen-tiny"]


def test_clems_underscore_spellings_are_the_dashed_flags(capsys):
    dashed = parse(*EVAL, "--results-dir", "R", "--skip-gameplay", "--instance-set", "train", "--batch-size", "3")
    for spelling in (["--results_dir", "R", "--skip_gameplay", "--instance_set", "train", "--batch_size", "3"],
                     ["--results_dir=R", "--skip_gameplay", "--instance_set=train", "--batch_size=3"]):
        assert vars(parse(*EVAL, *spelling)) == vars(dashed)
    assert (dashed.results_dir, dashed.skip_gameplay, dashed.instance_set, dashed.batch_size) == \
        ("R", True, "train", 3)
    assert "deprecated" not in capsys.readouterr().err  # clem's spelling, not an old one: no note


def test_underscore_spellings_on_every_command(capsys):
    assert parse("submit", "sft", "--dry_run", "--gpus_per_node", "2").gpus_per_node == 2
    assert parse("doctor", "--storage_root", "S").storage_root == "S"
    assert parse("screen", "m", "-g", "wordle", "-o", "o.json", "--partner_seats", "1").partner_seats == [1]
    assert parse("meter", "m", "--classifier", "vader", "--prompts", "p", "--batch_size", "2").batch_size == 2


def test_underscore_spellings_stay_out_of_help(capsys):
    out = help_of(capsys, *EVAL)
    for flag in ("--results-dir", "--skip-gameplay", "--instance-set", "--batch-size"):
        assert flag in out and flag.replace("-", "_").replace("__", "--", 1) not in out


def test_an_unknown_underscore_flag_is_named_as_typed(capsys):
    assert main([*EVAL, "--bogus_flag"]) == 2
    assert "unrecognized arguments: --bogus_flag" in capsys.readouterr().err


def test_a_bad_value_names_the_dashed_flag(capsys):
    assert main([*EVAL, "-g", "wordle", "--batch_size", "0"]) == 2
    assert capsys.readouterr().err.strip() == "playpen: error: -b/--batch-size: must be at least 1, got 0"


# ---------------------------------------------------------------- -T

@pytest.mark.parametrize("argv", [
    EVAL, ["run", "t.py", "-l", "m"], ["screen", "m", "-g", "wordle", "-o", "o.json"],
    ["meter", "m", "--classifier", "vader", "--prompts", "p"], ["debate", "curve", "run"],
    ["debate", "rejudge", "records"],
])
def test_minus_t_is_the_temperature_everywhere(argv):
    assert parse(*argv, "-T", "0.5").temperature == 0.5
    assert parse(*argv, "--temperature", "0.25").temperature == 0.25


# ---------------------------------------------------------------- one route per action

@pytest.mark.parametrize("old, new", [(["status"], ["submit", "status"]), (["logs"], ["submit", "logs"])])
def test_old_routes_are_the_new_ones_with_one_note(capsys, tmp_path, old, new):
    assert main([*new, str(tmp_path)]) == 2
    expected = capsys.readouterr().err
    assert main([*old, str(tmp_path)]) == 2
    note, *rest = capsys.readouterr().err.splitlines(keepends=True)
    assert note == f"[playpen] note: playpen {old[0]} is deprecated; use playpen {' '.join(new)}\n"
    assert "".join(rest) == expected


def test_old_sweep_route_submits_the_same_script(capsys):
    argv = ["sweep", "--executor", "local", "--dry-run"]
    assert main(["submit", *argv]) == 0
    script = capsys.readouterr().out
    assert main(argv) == 0
    done = capsys.readouterr()
    assert done.err.startswith("[playpen] note: playpen sweep is deprecated; use playpen submit sweep\n")
    assert len(done.out.splitlines()) == len(script.splitlines())


def test_a_sweep_run_here_has_its_status_under_submit_status(capsys, tmp_path):
    """`sweep-local --status` (deprecated) and `submit status` show the cells of a sweep never submitted."""
    from playpen.eval.sweep import load_sweep

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "here", "models": ["playpen-tiny"], "games": ["wordle"],
                                    "output_dir": str(tmp_path / "sweep")}))
    load_sweep(path).pending_cells()  # (writes sweep.json, plays nothing)
    assert main(["submit", "status", str(tmp_path / "sweep")]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("sweep here (") and "pending  playpen-tiny/wordle" in shown
    assert main(["sweep-local", "--status", str(tmp_path / "sweep")]) == 0
    done = capsys.readouterr()
    assert done.out == shown
    assert done.err == ("[playpen] note: playpen sweep-local is deprecated; use playpen submit sweep --executor "
                        "local --wait (and submit status SWEEP_DIR)\n")
