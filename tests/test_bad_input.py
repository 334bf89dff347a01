"""Every value checked when it is read (issues 16 and 17): config values (types, ranges, inf/nan), TRL's own
`trainer:` keys, sweep files, cluster profiles, job specs, command-line flags, and every kind of path a user
may give (missing, a folder where a file belongs, a binary file, an unreadable one, broken JSON or YAML).

Each bad input is the command as a user types it, in a working folder of its own, and must end the same way:
exit 2, exactly one stderr line starting `playpen: error: ` that names the key, flag or file, and the working
folder byte-for-byte as it was (no run folder, no results folder, no output file). Nothing here loads a model:
every case fails before that, which is the point."""
from __future__ import annotations

import json
import os
from pathlib import Path

import clemcore  # noqa: F401  (importing it opens ./clembench.log: done here, outside the folders compared)
import pytest

from playpen.cli import main
from playpen.model_registry import playpen_home
from tests.test_integrity import refused, snapshot

REPO = Path(__file__).resolve().parents[1]
SFT = ["train", "sft", "experiment=x", "data=sft.jsonl", "storage_root=runs", "cpu_threads=1"]
GRPO = ["train", "grpo", "experiment=x", "game=arithmetic", "storage_root=runs", "cpu_threads=1"]
DPO = ["train", "dpo", "experiment=x", "game=wordle", "storage_root=runs", "cpu_threads=1"]
EVAL = ["eval", "playpen-tiny", "-g", "wordle", "-r", "res"]
SUBMIT = ["submit", "sft", "--config", "sft.yaml", "--executor", "local", "--dry-run"]
SUBMIT_GRPO = ["submit", "grpo", "--config", "grpo.yaml", "--executor", "local", "--dry-run"]
SUBMIT_EVAL = ["submit", "eval", "--config", "e.yaml", "--executor", "local", "--dry-run"]
METER = ["meter", "playpen-tiny", "--classifier", "vader", "--prompts", "p.jsonl"]
TOURNAMENT = ["debate", "tournament", "debate/tournament_tiny"]  # (a shipped config, by name)
UNREADABLE = "/proc/self/mem"  # a file that exists and cannot be read (permission bits do not stop root)
READ_ONLY = "/sys"  # a folder that exists and takes no file


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A working folder with one file of each kind, and a home without key.json (models and caches stay where
    they are, so nothing is rebuilt)."""
    monkeypatch.setenv("PLAYPEN_HOME", str(playpen_home()))
    monkeypatch.setenv("HF_HOME", os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface"))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.delenv("PLAYPEN_STORAGE", raising=False)
    monkeypatch.delenv("PLAYPEN_CLUSTER", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    row = {"messages": [{"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "4"}]}
    (work / "sft.jsonl").write_text(json.dumps(row) + "\n")
    (work / "sft.yaml").write_text("experiment: x\ndata: sft.jsonl\ntrainer:\n  max_steps: 2\n")
    (work / "grpo.yaml").write_text("experiment: x\ngame: taboo\ntrainer:\n  max_steps: 2\n")
    (work / "binary.bin").write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe\x00\x00" * 8)
    (work / "folder").mkdir()
    (work / "folder" / "notes.txt").write_text("not a model, not a config")
    (work / "broken.json").write_text('{"experiments": [{"name": "a", "game_instances": [}')
    (work / "broken.yaml").write_text("experiment: x\ntrainer: [unclosed\n")
    (work / "list.yaml").write_text("- experiment\n- x\n")
    (work / "t.py").write_text("from playpen.train.base import BasePlaypenTrainer\n"
                               "class T(BasePlaypenTrainer):\n    def learn(self):\n        open('ran', 'w')\n")
    (work / "project").mkdir()  # a folder with a model registry that is not a training run
    (work / "project" / "model_registry.json").write_text(json.dumps([
        {"model_name": "mine", "backend": "huggingface_local", "huggingface_id": "x/y"}]))
    return work


def check(capsys, home: Path, argv: list[str], message: str, files: dict[str, str | bytes] | None = None) -> str:
    """Write the case's own files, run it: exit 2, one line containing `message`, the folder unchanged."""
    for name, content in (files or {}).items():
        path = home / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    err = refused(capsys, argv, home)
    assert message in err, err
    return err


# ---------------------------------------------------------------- training configs: every numeric key

TRAIN_VALUES = {  # name: (argv, what the line says)
    # the cases of the first bad-input review
    "max_new_tokens 0": (GRPO + ["max_new_tokens=0"], "overrides: max_new_tokens: must be at least 1, got 0"),
    "temperature inf": (GRPO + ["temperature=inf"], "temperature: must be a finite number, got 'inf'"),
    "temperature nan": (GRPO + ["temperature=nan"], "temperature: must be a finite number, got 'nan'"),
    "temperature .inf (YAML)": (GRPO + ["temperature=.inf"], "temperature: must be a finite number, got inf"),
    "rollout_batch_size 0": (GRPO + ["rollout_batch_size=0"], "rollout_batch_size: must be at least 1, got 0"),
    "validation_instances -1": (GRPO + ["validation_instances=-1"],
                                "validation_instances: must be at least 0, got -1"),
    "group_size 1 (GRPO)": (GRPO + ["group_size=1"], "group_size: must be at least 2, got 1 (GRPO's advantage "
                                                     "compares the episodes of a group)"),
    # the family around them
    "max_new_tokens -5": (GRPO + ["max_new_tokens=-5"], "max_new_tokens: must be at least 1, got -5"),
    "max_new_tokens 1.5": (GRPO + ["max_new_tokens=1.5"], "max_new_tokens: expected int, got 1.5"),
    "max_new_tokens abc": (GRPO + ["max_new_tokens=abc"], "max_new_tokens: expected int, got 'abc'"),
    "max_new_tokens true": (GRPO + ["max_new_tokens=true"], "max_new_tokens: expected int, got True"),
    "temperature 0 (sampling)": (GRPO + ["temperature=0"], "temperature: must be greater than 0, got 0.0"),
    "temperature -1": (GRPO + ["temperature=-1"], "temperature: must be greater than 0, got -1.0"),
    "temperature -inf": (GRPO + ["temperature=-.inf"], "temperature: must be a finite number, got -inf"),
    "temperature abc": (GRPO + ["temperature=abc"], "temperature: expected float, got 'abc'"),
    "rollout_batch_size -1": (GRPO + ["rollout_batch_size=-1"], "rollout_batch_size: must be at least 1"),
    "group_size 0 (GRPO)": (GRPO + ["group_size=0"], "group_size: must be at least 2, got 0"),
    "group_size 1 (DPO)": (DPO + ["group_size=1"],
                           "group_size: must be at least 2, got 1 (a preference pair compares two episodes"),
    "instances 0": (GRPO + ["instances=0"], "instances: must be at least 1, got 0"),
    "partner_seats without a partner": (GRPO + ["game=debate", "partner_seats=[2]"],
                                        "partner_seats [2] needs a partner (partner=<model>)"),
    "teacher_seats out of range": (GRPO + ["game=debate", "partner=playpen-tiny", "partner_seats=[3]"],
                                   "partner_seats must be seat numbers of debate (0..2), leaving the learner at "
                                   "least one; got [3]"),
    "teacher_seats every seat": (GRPO + ["game=debate", "partner=playpen-tiny", "partner_seats=[0, 1, 2]"],
                                 "partner_seats must be seat numbers of debate (0..2)"),
    "instances -3 (DPO)": (DPO + ["instances=-3"], "instances: must be at least 1, got -3"),
    "iterations 0 (DPO)": (DPO + ["iterations=0"], "iterations: must be at least 1, got 0"),
    "validation_every -2": (GRPO + ["validation_every=-2"], "validation_every: must be at least 0, got -2"),
    "validation_temperature -0.5": (GRPO + ["validation_temperature=-0.5"],
                                    "validation_temperature: must be at least 0, got -0.5"),
    "validation_temperature nan": (GRPO + ["validation_temperature=.nan"],
                                   "validation_temperature: must be a finite number, got nan"),
    "reward_weight nan": (GRPO + ["reward_weight=nan"], "reward_weight: must be a finite number"),
    "game_reward_weight inf": (GRPO + ["game_reward_weight=inf"], "game_reward_weight: must be a finite number"),
    "seed -1": (SFT + ["seed=-1"], "seed: must be at least 0, got -1"),
    "seed 2^32": (SFT + ["seed=4294967296"], "seed: must be at most 4294967295, got 4294967296"),
    "cpu_threads 10^6": (SFT + ["cpu_threads=1000000"], "cpu_threads: must be at most 4096, got 1000000"),
    "seed abc": (SFT + ["seed=abc"], "seed: expected int, got 'abc'"),
    "cpu_threads 0": (SFT + ["cpu_threads=0"], "cpu_threads: must be at least 1, got 0"),
    "max_rows 0 (SFT)": (SFT + ["max_rows=0"], "max_rows: must be at least 1, got 0"),
    "in the config file": (["train", "sft", "--config", "cfg.yaml"], "cfg.yaml: max_rows: must be at least 1, got -2"),
}


@pytest.mark.parametrize("case", TRAIN_VALUES)
def test_training_values(capsys, home, case):
    argv, message = TRAIN_VALUES[case]
    check(capsys, home, argv, message, {"cfg.yaml": "experiment: x\ndata: sft.jsonl\nmax_rows: -2\n"})


# ---------------------------------------------------------------- TRL's own `trainer:` keys

TRAINER_VALUES = {
    "learning_rate abc": (SFT + ["trainer.learning_rate=abc"], "trainer.learning_rate: expected float, got 'abc'"),
    "learning_rate 0": (SFT + ["trainer.learning_rate=0"], "trainer.learning_rate: must be greater than 0, got 0"),
    "learning_rate -1e-4": (SFT + ["trainer.learning_rate=-1e-4"], "trainer.learning_rate: must be greater than 0"),
    "learning_rate nan": (SFT + ["trainer.learning_rate=nan"], "trainer.learning_rate: must be a finite number"),
    "learning_rate inf": (SFT + ["trainer.learning_rate=.inf"], "trainer.learning_rate: must be a finite number"),
    "per_device_train_batch_size 0": (SFT + ["trainer.per_device_train_batch_size=0"],
                                      "trainer.per_device_train_batch_size: must be at least 1, got 0"),
    "per_device_train_batch_size 2.5": (SFT + ["trainer.per_device_train_batch_size=2.5"],
                                        "trainer.per_device_train_batch_size: expected int, got 2.5"),
    "per_device_train_batch_size, GRPO": (GRPO + ["trainer.per_device_train_batch_size=0"],
                                          "trainer.per_device_train_batch_size: must be at least 1, got 0"),
    "max_steps 0": (SFT + ["trainer.max_steps=0"], "trainer.max_steps: must be at least 1, got 0 (leave max_steps "
                                                   "out to train num_train_epochs epochs instead)"),
    "max_steps -1 (one epoch)": (SFT + ["trainer.max_steps=-1"], "trainer.max_steps: must be at least 1, got -1"),
    "max_steps abc": (SFT + ["trainer.max_steps=abc"], "trainer.max_steps: expected int, got 'abc'"),
    "gradient_accumulation_steps 0": (SFT + ["trainer.gradient_accumulation_steps=0"],
                                      "trainer.gradient_accumulation_steps: must be at least 1"),
    "num_train_epochs 0": (SFT + ["trainer.num_train_epochs=0"], "trainer.num_train_epochs: must be greater than 0"),
    "warmup_steps -1": (SFT + ["trainer.warmup_steps=-1"], "trainer.warmup_steps: must be at least 0, got -1.0"),
    "max_grad_norm -1": (SFT + ["trainer.max_grad_norm=-1"], "trainer.max_grad_norm: must be at least 0"),
    "weight_decay nan": (SFT + ["trainer.weight_decay=nan"], "trainer.weight_decay: must be a finite number"),
    "logging_steps 0": (SFT + ["trainer.logging_steps=0"], "trainer.logging_steps: must be greater than 0"),
    "save_steps 0": (SFT + ["trainer.save_steps=0"], "trainer.save_steps: must be greater than 0"),
    "max_length 0": (SFT + ["trainer.max_length=0"], "trainer.max_length: must be at least 1"),
    "beta -0.1 (GRPO)": (GRPO + ["trainer.beta=-0.1"], "trainer.beta: must be at least 0, got -0.1 (the weight of "
                                                       "the KL penalty"),
    "bf16 maybe": (SFT + ["trainer.bf16=maybe"], "trainer.bf16: expected bool, got 'maybe'"),
    # TRL's own checks, run when the config is read (the TRL config class is built then)
    "lr_scheduler_type bogus": (SFT + ["trainer.lr_scheduler_type=bogus"],
                                "overrides: trainer: bogus is not a valid SchedulerType"),
    "GRPO batch not a multiple of group_size": (
        GRPO + ["group_size=2", "trainer.per_device_train_batch_size=3"],
        "generation_batch_size (3) must be divisible by num_generations (2). (num_generations is playpen's "
        "group_size)"),
    "a key playpen sets (GRPO)": (GRPO + ["trainer.num_generations=4"],
                                  "trainer.num_generations follows from playpen's group_size; set that instead"),
}


@pytest.mark.parametrize("case", TRAINER_VALUES)
def test_trainer_values(capsys, home, case):
    check(capsys, home, *TRAINER_VALUES[case])


# ---------------------------------------------------------------- every path a user gives

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
def test_output_files_named_by_a_user_are_checked_first(capsys, home, case):
    (home / "link.jsonl").symlink_to(home / "sft.jsonl")
    check(capsys, home, OUTPUTS[case], "-o link.jsonl is a symbolic link" if case != "data -o"
          else "output link.jsonl is a symbolic link")
    (home / "link.jsonl").unlink()
    argv = [a if a != "link.jsonl" else "out'$(x).jsonl" for a in OUTPUTS[case]]
    check(capsys, home, argv, "contains \"'\"")


def test_an_instance_whose_game_id_cannot_name_a_folder(capsys, home):
    data = {"experiments": [{"name": "e", "game_instances": [{"game_id": 10**400}]}]}
    check(capsys, home, EVAL + ["--instance_set", "./huge.json"], "game_id 1000000000000000000000",
          {"huge.json": json.dumps(data)})


@pytest.mark.parametrize("case", PATHS)
def test_paths(capsys, home, case):
    argv, message = PATHS[case]
    check(capsys, home, argv, message.format(home=home))


def test_binary_instances_file(capsys, home):
    check(capsys, home, EVAL + ["--instance_set", "./binary.bin"], "binary.bin is not a text file")


# ---------------------------------------------------------------- key.json and model registries

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
def test_keys_and_registries(capsys, home, case):
    argv, files, message = KEYS_AND_REGISTRIES[case]
    err = check(capsys, home, argv, message.format(home=home), files)
    assert "sk-not-a-secret" not in err


# ---------------------------------------------------------------- command-line flags

FLAGS = {
    "eval -T inf": (EVAL + ["-T", "inf"], "-T/--temperature: must be a finite number, got inf"),
    "eval -T nan": (EVAL + ["-T", "nan"], "-T/--temperature: must be a finite number, got nan"),
    "eval -T -1": (EVAL + ["-T", "-1"], "-T/--temperature: must be at least 0, got -1.0 (0 is greedy)"),
    "eval -L 0": (EVAL + ["-L", "0"], "-L/--max-new-tokens: must be at least 1, got 0"),
    "eval -L -3": (EVAL + ["-L", "-3"], "-L/--max-new-tokens: must be at least 1, got -3"),
    "eval -b 0": (EVAL + ["-b", "0"], "-b/--batch-size: must be at least 1, got 0"),
    "eval --instances 0": (EVAL + ["--instances", "0"], "--instances: must be at least 1, got 0"),
    "eval --instances -2": (EVAL + ["--instances", "-2"], "--instances: must be at least 1, got -2"),
    "eval --seed -1": (EVAL + ["--seed", "-1"], "--seed: must be at least 0, got -1"),
    "eval --seed 2^32": (EVAL + ["--seed", "4294967296"], "--seed: must be at most 4294967295"),
    "eval -L 10^9": (EVAL + ["-L", "1000000000"], "-L/--max-new-tokens: must be at most 131072"),
    "meter -n 10^9": (METER + ["-n", "1000000000"], "-n: must be at most 10000, got 1000000000"),
    "meter --seed 2^40": (METER + ["--seed", str(2**40)], "--seed: must be at most 4294967295"),
    "meter --batch-size 10^9": (METER + ["--batch-size", "1000000000"], "--batch-size: must be at most 65536"),
    "tournament max_instances 10^9": (TOURNAMENT + ["max_instances=1000000000"],
                                      "max_instances: must be at most 10000000"),
    "tournament batch_size 10^9": (TOURNAMENT + ["batch_size=1000000000"], "batch_size: must be at most 65536"),
    "tournament temperature 1e9": (TOURNAMENT + ["temperature=1e9"], "temperature: must be at most 100"),
    "tournament max_new_tokens 0": (TOURNAMENT + ["max_new_tokens=0"], "max_new_tokens: must be at least 1"),
    "eval -r not UTF-8": (["eval", "playpen-tiny", "-g", "wordle", "-r", os.fsdecode(b"res-\xff")],
                          "holds bytes that are not UTF-8"),
    "run -L 0": (["run", "t.py", "-l", "playpen-tiny", "-L", "0"], "-L/--max-new-tokens: must be at least 1, got 0"),
    "run -T -1": (["run", "t.py", "-l", "playpen-tiny", "-T", "-1"], "-T/--temperature: must be at least 0"),
    "run -T nan": (["run", "t.py", "-l", "playpen-tiny", "-T", "nan"], "-T/--temperature: must be a finite number"),
    "submit --executor local --nodes 3 --dry-run": (SUBMIT + ["--nodes", "3"], "--nodes 3 needs SLURM"),
    "submit --nodes 0 --dry-run": (SUBMIT + ["--nodes", "0"], "--nodes must be ≥ 1"),
    "submit --gpus-per-node -1 --dry-run": (SUBMIT + ["--gpus-per-node", "-1"], "--gpus-per-node ≥ 0"),
    "eval of an API model without its key": (["eval", "gpt-4o-mini", "-g", "wordle", "-r", "res"],
                                             "model 'gpt-4o-mini' uses the remote backend 'openai' but key.json "
                                             "has no 'openai' entry"),
    # usage mistakes argparse finds: one line too (not usage + error)
    "eval -L abc": (EVAL + ["-L", "abc"], "playpen eval: argument -L/--max-new-tokens: invalid int value: 'abc'"),
    "submit --nodes x": (SUBMIT + ["--nodes", "x"], "argument --nodes: invalid int value: 'x'"),
    "train without a method": (["train"], "the following arguments are required"),
    "unknown option": (SFT + ["--bogus"], "unrecognized arguments: --bogus"),
}


@pytest.mark.parametrize("case", FLAGS)
def test_flags(capsys, home, case):
    check(capsys, home, *FLAGS[case])
    assert not (home / "ran").exists()


# ---------------------------------------------------------------- jobs: what `playpen submit` sends

def profile(**values) -> str:
    return "".join(f"{k}: {v}\n" for k, v in {"time": 60, **values}.items())


JOBS = {  # name: (argv, files, what the line says)
    "profile max_nodes 0": (SUBMIT + ["--cluster", "p.yaml"], {"p.yaml": profile(max_nodes=0)},
                            "p.yaml: max_nodes: must be at least 1, got 0"),
    "profile max_nodes -1": (SUBMIT + ["--cluster", "p.yaml"], {"p.yaml": profile(max_nodes=-1)},
                             "p.yaml: max_nodes: must be at least 1, got -1"),
    "profile max_nodes abc": (SUBMIT + ["--cluster", "p.yaml"], {"p.yaml": profile(max_nodes="abc")},
                              "p.yaml: max_nodes: expected int, got 'abc'"),
    "profile array_parallelism 0": (SUBMIT + ["--cluster", "p.yaml"], {"p.yaml": profile(array_parallelism=0)},
                                    "array_parallelism: must be at least 1, got 0"),
    "profile max_requeues -1": (SUBMIT + ["--cluster", "p.yaml"], {"p.yaml": profile(max_requeues=-1)},
                                "max_requeues: must be at least 0, got -1"),
    "profile gpus_per_node -2": (SUBMIT + ["--cluster", "p.yaml"], {"p.yaml": profile(gpus_per_node=-2)},
                                 "gpus_per_node: must be at least 0, got -2"),
    "profile cpus_per_task 0": (SUBMIT + ["--cluster", "p.yaml"], {"p.yaml": profile(cpus_per_task=0)},
                                "cpus_per_task: must be at least 1, got 0"),
    "profile signal_delay_s -5": (SUBMIT + ["--cluster", "p.yaml"], {"p.yaml": profile(signal_delay_s=-5)},
                                  "signal_delay_s: must be at least 0, got -5"),
    "profile time 0": (SUBMIT + ["--cluster", "p.yaml"], {"p.yaml": profile(time=0)}, "time: must be positive"),
    "profile a folder": (SUBMIT + ["--cluster", "folder/p.yaml"], {"folder/p.yaml/x": "x"},
                         "cluster profile folder/p.yaml is a folder, not a file"),
    "profile binary": (SUBMIT + ["--cluster", "p.yaml"], {"p.yaml": b"\xff\xfe\x00"},
                       "cluster profile p.yaml is not a text file"),
    "profile missing": (SUBMIT + ["--cluster", "nope.yaml"], {}, "cluster profile file nope.yaml not found"),
    # trainer keys and key.json: refused before a job is sent, not when it starts
    "train job: learning_rate abc": (SUBMIT + ["trainer.learning_rate=abc"], {},
                                     "sft.yaml: trainer.learning_rate: expected float, got 'abc'"),
    "train job: max_steps 0": (SUBMIT + ["trainer.max_steps=0"], {}, "trainer.max_steps: must be at least 1"),
    "train job: group_size 1": (SUBMIT_GRPO + ["group_size=1"], {}, "grpo.yaml: group_size: must be at least 2"),
    "train job: teacher without key": (SUBMIT_GRPO + ["partner=gpt-4o-mini"], {},
                                       "partner 'gpt-4o-mini' uses the remote backend 'openai' but key.json has no"),
    "train job: key.json broken": (SUBMIT_GRPO + ["partner=gpt-4o-mini"], {"key.json": "{"},
                                   "key.json:1:2: malformed JSON"),
    "train job: teacher a project folder": (SUBMIT_GRPO + ["partner=project"], {},
                                            "project is a folder with a model registry (mine), not a model"),
    # eval job specs: evaluate()'s arguments, in the ranges of `playpen eval`'s flags
    "eval job: temperature nan": (SUBMIT_EVAL,
                                  {"e.yaml": "model: playpen-tiny\ntemperature: .nan\n"},
                                  "e.yaml: temperature: must be a finite number, got nan"),
    "eval job: max_new_tokens 0": (SUBMIT_EVAL,
                                   {"e.yaml": "model: playpen-tiny\nmax_new_tokens: 0\n"},
                                   "max_new_tokens: must be at least 1"),
    "eval job: batch_size 0": (SUBMIT_EVAL,
                               {"e.yaml": "model: playpen-tiny\nbatch_size: 0\n"}, "batch_size: must be at least 1"),
    "eval job: instances -1": (SUBMIT_EVAL,
                               {"e.yaml": "model: playpen-tiny\ninstances: -1\n"}, "instances: must be at least 1"),
    "eval job: partner in a one-player game": (
        SUBMIT_EVAL,
        {"e.yaml": "model: playpen-tiny\npartner: mock\ngames: [arithmetic]\n"},
        "a partner plays the second seat of two-player games (as `clem run -m MODEL PARTNER`); arithmetic has 1"),
    "eval job: unknown partner": (SUBMIT_EVAL,
                                  {"e.yaml": "model: playpen-tiny\npartner: nope-model\ngames: [taboo]\n"},
                                  "e.yaml: unknown model 'nope-model'"),
    "eval job: partner without key": (SUBMIT_EVAL,
                                      {"e.yaml": "model: playpen-tiny\npartner: gpt-4o-mini\ngames: [taboo]\n"},
                                      "partner 'gpt-4o-mini' uses the remote backend 'openai' but key.json has no"),
}


@pytest.mark.parametrize("case", JOBS)
def test_jobs(capsys, home, case):
    argv, files, message = JOBS[case]
    check(capsys, home, argv, message, files)


# ---------------------------------------------------------------- sweep files

SWEEP = "name: s\nmodels: [playpen-tiny]\ngames: [wordle]\n"
SWEEPS = {  # the sweep file's extra lines: what the line says (no cell runs, no table or heatmap is written)
    "max_instances 0": ("max_instances: 0", "s.yaml: max_instances: must be at least 1, got 0"),
    "max_instances -4": ("max_instances: -4", "max_instances: must be at least 1, got -4"),
    "temperature -1": ("temperature: -1", "temperature: must be at least 0, got -1.0"),
    "temperature inf": ("temperature: .inf", "temperature: must be a finite number, got inf"),
    "temperature nan": ("temperature: .nan", "temperature: must be a finite number, got nan"),
    "batch_size 0": ("batch_size: 0", "batch_size: must be at least 1, got 0"),
    "max_new_tokens 0": ("max_new_tokens: 0", "max_new_tokens: must be at least 1, got 0"),
    "max_new_tokens abc": ("max_new_tokens: abc", "max_new_tokens: expected int, got 'abc'"),
    "a game's max_instances 0": ("games: [{name: wordle, max_instances: 0}]",
                                 "s.yaml: games[0]: max_instances: must be at least 1, got 0"),
    "a run's every 0": ("runs: [{path: folder, every: 0}]", "s.yaml: runs[0]: every: must be at least 1, got 0"),
}


@pytest.mark.parametrize("case", SWEEPS)
def test_sweep_values(capsys, home, case):
    extra, message = SWEEPS[case]
    key = extra.split(":")[0]
    text = "\n".join(line for line in SWEEP.splitlines() if not line.startswith(key + ":")) + "\n" + extra + "\n"
    check(capsys, home, ["submit", "sweep", "--config", "s.yaml", "--executor", "local", "--dry-run"], message,
          {"s.yaml": text})


# ---------------------------------------------------------------- warned, not refused

def test_dry_run_with_a_missing_image_warns_and_prints_the_script(capsys, home):
    before = snapshot(home)
    capsys.readouterr()
    assert main(["submit", "sft", "--config", "sft.yaml", "--container", "/missing.sif", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert err.strip() == ("playpen: warning: container image /missing.sif not found here; the script names it "
                           "(build it with `make image`, or pass --container none)")
    assert "#SBATCH" in out and "/missing.sif" in out
    assert snapshot(home) == before


def test_resolve_model_takes_only_a_training_runs_registry(home):
    """`model=<folder>` for training means the folder's model only when the folder is a training run."""
    from playpen.errors import PlaypenError
    from playpen.model_registry import resolve_model

    run = home / "runs" / "x" / "r1"
    (run / "checkpoints").mkdir(parents=True)
    (run / "model_registry.json").write_text(json.dumps([
        {"model_name": "x-r1", "backend": "huggingface_local", "huggingface_id": "a/b"}]))
    assert resolve_model(str(run))["model_name"] == "x-r1"
    with pytest.raises(PlaypenError, match=r"project is a folder with a model registry \(mine\), not a model"):
        resolve_model("project")
