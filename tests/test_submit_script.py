"""playpen submit's job script: the recorded sbatch script, and no job field or profile value reaching it unchecked."""
from __future__ import annotations

import json
import re

import pytest

from playpen.cli import main
from playpen.errors import PlaypenError
from tests.helpers import CONFIGS, ESCAPES, INJECTIONS, REPO, refused

GOLDEN = REPO / "tests" / "data" / "golden"
STAMP = re.compile(r"\d{8}-\d{6}-\d+-[0-9a-f]{8}")  # the submission folder's time, pid and random part

# job kind -> (its default config, {field: its kind}). Every name and location field is a storage.Name or
# Location, run against every hostile value in test_storage_names.py (which also checks the annotations); here
# one field of each kind per job kind goes through the whole command. A meter job's folders are flags of its
# own, checked by check_location where they are read: both run here.
FIELDS = {
    "sft": ("sft/tiny_lora.yaml", {"experiment": "name", "storage_root": "location", "model": "model"}),
    "dpo": ("dpo/tiny_rollouts.yaml", {"run_id": "name", "storage_root": "location", "model": "model"}),
    "grpo": ("grpo/demo.yaml", {"experiment": "name", "storage_root": "location", "model": "model",
                                "game": "game"}),
    "rloo": ("grpo/tiny_reward_model.yaml", {"run_id": "name", "storage_root": "location", "model": "model"}),
    "reward": ("reward/tiny_sentiment.yaml", {"experiment": "name", "storage_root": "location", "model": "model"}),
    "eval": ("eval/tiny.yaml", {"results_dir": "location", "model": "model"}),
    "meter": ("meter/tiny_vader.yaml", {"output": "location", "storage_root": "location", "model": "model"}),
    "sweep": ("sweeps/tiny.yaml", {"name": "name", "output_dir": "location"}),
    "tournament": ("debate/tournament_tiny.yaml", {"name": "name", "output_dir": "location"}),
}
# the values each kind of field takes in turn (names: a newline, then what only a name refuses), so the cases
# together send every injection through a location, and most through a model
VALUES = {"name": ["newline #SBATCH", *ESCAPES], "location": [*INJECTIONS],
          "model": [*INJECTIONS][3:] + [*INJECTIONS][:3], "game": ["newline #SBATCH"]}


def hostile_cases() -> list[tuple[str, str, str]]:
    cases, used = [], {sort: 0 for sort in VALUES}
    for kind, (_, fields) in FIELDS.items():
        for key, sort in fields.items():
            cases.append((kind, key, VALUES[sort][used[sort] % len(VALUES[sort])]))
            used[sort] += 1
    return cases


CASES = hostile_cases()


def submit_argv(kind: str, *extra: str) -> list[str]:
    return ["submit", kind, "--config", str(CONFIGS / FIELDS[kind][0]), "--dry-run", *extra]


def test_generated_sbatch_script_matches_the_recorded_one(capsys, stocked_cwd):
    """The whole script of a 2-node GPU-profile training job, line by line. The recorded file is never rewritten
    by the test: a change to it is a change to every job playpen submits, reviewed as such."""
    work = stocked_cwd
    recorded = GOLDEN / "sft_2nodes.sbatch"
    assert recorded.is_file(), f"{recorded} is missing: record it by hand from the command in this test"
    capsys.readouterr()
    assert main(["submit", "sft", "--config", str(GOLDEN / "sft.yaml"), "--cluster", str(GOLDEN / "cluster.yaml"),
                 "--nodes", "2", "--dry-run"]) == 0
    out = STAMP.sub("<STAMP>", capsys.readouterr().out)
    assert out.splitlines() == recorded.read_text().splitlines()
    assert not any(work.rglob("*.sbatch")) and not (work / "runs").exists()  # a dry run creates nothing
    for line in out.splitlines():  # every line is one of a script's kinds of line: nothing else got in
        assert re.fullmatch(r"(#!/bin/bash|# .*|#SBATCH --[a-z-]+(=\S+)?|module .*|export [A-Z_]+=\"[^\"]*\"|"
                            r"export SUBMITIT_EXECUTOR=slurm|srun .*|)", line), line


def test_a_vllm_server_job_script_matches_the_recorded_one(capsys, stocked_cwd):
    """GRPO with `vllm_mode: server` on 3 nodes: the server as a background step on the first node (its state file
    in the job folder, removed first), training on the other two (8 tasks)."""
    recorded = GOLDEN / "grpo_server_3nodes.sbatch"
    capsys.readouterr()
    assert main(["submit", "grpo", "--config", str(GOLDEN / "grpo_server.yaml"), "--cluster",
                 str(GOLDEN / "cluster.yaml"), "--nodes", "3", "--dry-run"]) == 0
    out = STAMP.sub("<STAMP>", capsys.readouterr().out)
    assert out.splitlines() == recorded.read_text().splitlines()
    for line in out.splitlines():
        assert re.fullmatch(r"(#!/bin/bash|# .*|#SBATCH --[a-z-]+(=\S+)?|module .*|export [A-Z_]+=\"[^\"]*\"|"
                            r"export SUBMITIT_EXECUTOR=slurm|srun .*|rm -f \"\$PLAYPEN_VLLM_STATE\"|)", line), line


@pytest.mark.parametrize("kind,key,label", CASES, ids=[f"{k}-{f}-{v}" for k, f, v in CASES])
def test_hostile_values_are_refused_before_anything_is_written(capsys, stocked_cwd, kind, key, label):
    """As an override (JSON is YAML: the newline arrives as one) and the same in the config file itself."""
    work = stocked_cwd
    value = {**INJECTIONS, **ESCAPES}[label]
    err = refused(capsys, submit_argv(kind, f"{key}={json.dumps(value)}"), work)
    assert key in err or "path" in err or f"unknown {key}" in err, err
    config = work / "hostile.yaml"
    from playpen.config import load_yaml

    config.write_text(json.dumps({**load_yaml(CONFIGS / FIELDS[kind][0]), key: value}))
    refused(capsys, ["submit", kind, "--config", str(config), "--dry-run"], work)
    assert not list(work.rglob("marker"))


def test_the_cases_cover_every_job_kind_and_kind_of_field_and_every_injection_into_a_location():
    assert {(kind, FIELDS[kind][1][key]) for kind, key, _ in CASES} == \
        {(kind, sort) for kind, (_, fields) in FIELDS.items() for sort in fields.values()}
    assert {label for kind, key, label in CASES if FIELDS[kind][1][key] == "location"} == set(INJECTIONS)


# ---------------------------------------------------------------- cluster profiles

PROFILE_CASES = [("storage_root", label) for label in INJECTIONS] + [  # other values: no line breaks (an
    (key, label) for key in ("partition", "account", "mem", "setup", "sbatch", "env")  # #SBATCH value on its one
    for label in ("newline #SBATCH", "carriage return", "backslash")]                 # line adds nothing)
NESTED = {"setup": lambda v: [v], "sbatch": lambda v: {"comment": v}, "env": lambda v: {"X": v}}


def write_profile(folder, key: str, label: str) -> None:
    value = INJECTIONS[label]
    (folder / "c.yaml").write_text(json.dumps({key: NESTED.get(key, lambda v: v)(value)}))


@pytest.mark.parametrize("key,label", PROFILE_CASES)
def test_hostile_cluster_profile_values_are_refused(clean_cwd, key, label):
    from playpen.submit.profiles import load_profile

    write_profile(clean_cwd, key, label)
    with pytest.raises(PlaypenError) as error:
        load_profile("c.yaml")
    assert str(error.value).startswith(f"c.yaml: {key}") and "\n" not in str(error.value), error.value


@pytest.mark.parametrize("key,label", [("storage_root", "$(...)"), ("partition", "newline #SBATCH"),
                                       ("setup", "carriage return"), ("sbatch", "backslash"),
                                       ("env", "newline #SBATCH")])  # (a value, a list, two mappings)
def test_submit_refuses_a_hostile_cluster_profile(capsys, stocked_cwd, key, label):
    write_profile(stocked_cwd, key, label)
    err = refused(capsys, submit_argv("sft", "--cluster", "c.yaml"), stocked_cwd)
    assert f"c.yaml: {key}" in err, err


def test_a_container_flag_with_a_newline_is_refused(capsys, stocked_cwd):
    err = refused(capsys, submit_argv("sft", "--container", "/x.sif\n#SBATCH --partition=evil"), stocked_cwd)
    assert "--container" in err and "control character" in err, err


@pytest.mark.parametrize("value", ["[1", "{a: 1", "a: b: c", "'unclosed", "\tx"])
def test_an_override_that_is_not_yaml_is_one_line(capsys, stocked_cwd, value):
    err = refused(capsys, submit_argv("sft", f"run_id={value}"), stocked_cwd)
    assert "override " in err and "run_id=" in err and "not valid YAML" in err, err
