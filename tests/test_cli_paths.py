"""Every path a user gives playpen's commands (configs, data, models, storage roots, outputs): checked first."""
from __future__ import annotations

import json

import pytest

from tests.helpers import REPO, check_refused

SFT = ["train", "sft", "experiment=x", "data=sft.jsonl", "storage_root=runs", "cpu_threads=1"]
GRPO = ["train", "grpo", "experiment=x", "game=arithmetic", "storage_root=runs", "cpu_threads=1"]
EVAL = ["eval", "playpen-tiny", "-g", "wordle", "-r", "res"]
UNREADABLE = "/proc/self/mem"  # a file that exists and cannot be read (permission bits do not stop root)
READ_ONLY = "/sys"  # a folder that exists and takes no file


PATHS = {
    # --config
    "--config a folder": (["train", "sft", "--config", "folder"], "config file folder is a folder, not a file"),
    "--config /tmp": (["train", "sft", "--config", "/tmp"], "config file /tmp is a folder, not a file"),
    "--config binary": (["train", "sft", "--config", "binary.bin"], "config file binary.bin is not a text file"),
    "--config unreadable": (["train", "sft", "--config", UNREADABLE], f"config file {UNREADABLE} cannot be read"),
    "--config missing": (["train", "sft", "--config", "nope.yaml"], "config file nope.yaml not found"),
    "--config broken YAML": (["train", "sft", "--config", "broken.yaml"], "broken.yaml:3:1: YAML syntax error"),
    "--config a YAML list": (["train", "sft", "--config", "list.yaml"],
                             "list.yaml: top level must be a mapping of keys, got list"),
    # training data
    "data a folder": (SFT + ["data=folder"], "overrides: data file folder is a folder, not a file"),
    "data binary": (SFT + ["data=binary.bin"], "data file binary.bin is not a text file"),
    "data unreadable": (SFT + [f"data={UNREADABLE}"], f"data file {UNREADABLE} cannot be read"),
    "data missing": (SFT + ["data=nope.jsonl"], "data file nope.jsonl not found"),
    "data broken JSON": (SFT + ["data=broken.json"], "broken.json:1: malformed JSON"),
    "eval_data a folder": (SFT + ["eval_data=folder"], "eval_data file folder is a folder, not a file"),
    # DeepSpeed file
    "deepspeed a folder": (SFT + ["deepspeed=folder"], "deepspeed config folder is a folder, not a file"),
    "deepspeed binary": (SFT + ["deepspeed=binary.bin"], "deepspeed config binary.bin is not a text file"),
    "deepspeed broken JSON": (SFT + ["deepspeed=broken.json"], "broken.json:1:51: malformed DeepSpeed JSON"),
    # a model path
    "model: a folder with no model": (SFT + ["model=folder"], "no config.json in {home}/folder: the folder holds "
                                                              "no model"),
    "model=. (a project's registry)": (SFT + ["model=project"], "project is a folder with a model registry (mine), "
                                                               "not a model; name the model, e.g. mine"),
    "partner=. (a project's registry)": (GRPO + ["game=taboo", "partner=project"],
                                         "project is a folder with a model registry (mine), not a model"),
    # storage root
    "storage root read-only": (SFT + [f"storage_root={READ_ONLY}"], f"storage root {READ_ONLY} is not writable"),
    "storage root is a file": (SFT + ["storage_root=sft.jsonl"], "storage root {home}/sft.jsonl cannot be created"),
    # playpen run's trainer file
    "run: trainer file a folder": (["run", "folder", "-l", "playpen-tiny"],
                                   "trainer file folder is a folder, not a file"),
    "run: trainer file binary": (["run", "binary.bin", "-l", "playpen-tiny"], "trainer file binary.bin is not a text"),
    # playpen data -o
    "data -o read-only folder": (["data", str(REPO / "tests/data/clembench-runs-sample"), "-o",
                                  f"{READ_ONLY}/out.jsonl"], f"output {READ_ONLY}/out.jsonl cannot be written"),
    "data -o under a file": (["data", str(REPO / "tests/data/clembench-runs-sample"), "-o", "sft.jsonl/out.jsonl"],
                             "output sft.jsonl/out.jsonl cannot be written ({home}/sft.jsonl is a file)"),
    # eval's instances file
    "instances broken JSON": (EVAL + ["--instance_set", "./broken.json"], "broken.json:1:51: malformed JSON"),
    "instances missing": (EVAL + ["--instance_set", "./nope.json"], "game 'wordle' has no instance set './nope.json'"),
    "instances a folder": (EVAL + ["--instance_set", "./folder"], "game 'wordle' has no instance set './folder'"),
}


OUTPUTS = {  # an output file a user names: a link there (someone else's, or a typo) is refused before anything runs
    "data -o": ["data", str(REPO / "tests/data/clembench-runs-sample"), "-o", "link.jsonl"],
    "screen -o": ["screen", "playpen-tiny", "-g", "arithmetic", "-o", "link.jsonl"],
    "rejudge -o": ["debate", "rejudge", "folder", "--judge", "programmatic", "-o", "link.jsonl"],
    "transcripts -o": ["debate", "transcripts", "-o", "link.jsonl"],
}


@pytest.mark.parametrize("case", OUTPUTS)
def test_output_files_named_by_a_user_are_checked_first(capsys, stocked_cwd, case):
    (stocked_cwd / "link.jsonl").symlink_to(stocked_cwd / "sft.jsonl")
    check_refused(capsys, stocked_cwd, OUTPUTS[case], "-o link.jsonl is a symbolic link" if case != "data -o"
                  else "output link.jsonl is a symbolic link")
    (stocked_cwd / "link.jsonl").unlink()
    argv = [a if a != "link.jsonl" else "out'$(x).jsonl" for a in OUTPUTS[case]]
    check_refused(capsys, stocked_cwd, argv, "contains \"'\"")


def test_an_instance_whose_game_id_cannot_name_a_folder(capsys, stocked_cwd):
    data = {"experiments": [{"name": "e", "game_instances": [{"game_id": 10**400}]}]}
    check_refused(capsys, stocked_cwd, EVAL + ["--instance_set", "./huge.json"], "game_id 1000000000000000000000",
                  {"huge.json": json.dumps(data)})


@pytest.mark.parametrize("case", PATHS)
def test_paths(capsys, stocked_cwd, case):
    argv, message = PATHS[case]
    check_refused(capsys, stocked_cwd, argv, message.format(home=stocked_cwd))


def test_binary_instances_file(capsys, stocked_cwd):
    check_refused(capsys, stocked_cwd, EVAL + ["--instance_set", "./binary.bin"], "binary.bin is not a text file")
