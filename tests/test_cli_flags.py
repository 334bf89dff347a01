"""Command-line flags of every playpen command: a value out of range or a usage mistake is one line, nothing run."""
from __future__ import annotations

import os

import pytest

from tests.helpers import check_refused

SFT = ["train", "sft", "experiment=x", "data=sft.jsonl", "storage_root=runs", "cpu_threads=1"]
EVAL = ["eval", "playpen-tiny", "-g", "wordle", "-r", "res"]
SUBMIT = ["submit", "sft", "--config", "sft.yaml", "--executor", "local", "--dry-run"]
METER = ["meter", "playpen-tiny", "--classifier", "vader", "--prompts", "p.jsonl"]
TOURNAMENT = ["debate", "tournament", "debate/tournament_tiny"]  # (a shipped config, by name)


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
    "screen -k 10^9": (["screen", "playpen-tiny", "-g", "wordle", "-o", "o.json", "-k", "1000000000"],
                       "-k/--samples: must be at most 1024, got 1000000000"),
    "meter --seed 2^40": (METER + ["--seed", str(2**40)], "--seed: must be at most 4294967295"),
    "meter --batch-size 10^9": (METER + ["--batch-size", "1000000000"], "--batch-size: must be at most 65536"),
    "tournament max_instances 10^9": (TOURNAMENT + ["max_instances=1000000000"],
                                      "max_instances: must be at most 10000000"),
    "tournament batch_size 10^9": (TOURNAMENT + ["batch_size=1000000000"], "batch_size: must be at most 65536"),
    "tournament temperature 1e9": (TOURNAMENT + ["temperature=1e9"], "temperature: must be at most 100"),
    "tournament max_new_tokens 0": (TOURNAMENT + ["max_new_tokens=0"], "max_new_tokens: must be at least 1"),
    "eval -r not UTF-8": (["eval", "playpen-tiny", "-g", "wordle", "-r", os.fsdecode(b"res-\xff")],
                          "holds bytes that are not UTF-8"),
    "eval -r a name of 300 bytes": (["eval", "playpen-tiny", "-g", "wordle", "-r", "r" * 300],
                                    "has a name of 300 bytes, above the 255 a file system allows"),
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
    "train without a method": (["train"], "playpen train needs a METHOD, one of: sft,"),
    "unknown option": (SFT + ["--bogus"], "unrecognized arguments: --bogus"),
}


@pytest.mark.parametrize("case", FLAGS)
def test_flags(capsys, stocked_cwd, case):
    check_refused(capsys, stocked_cwd, *FLAGS[case])
    assert not (stocked_cwd / "ran").exists()
