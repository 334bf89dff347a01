"""playpen.train.rounds' schedule across rounds: the rounds' slices (transformers' own schedulers, as the Trainer
builds them) give exactly one linear schedule over all the rounds' steps, warmup in the first round only; a distill
run of 2 rounds logs those learning rates; what cannot be sliced is one line."""
from __future__ import annotations

import json

import pytest
import torch

from playpen.errors import PlaypenError
from playpen.train.rounds import round_schedule
from tests.helpers import train

LR, ROUNDS, STEPS, WARMUP = 1e-3, 3, 4, 2


def lrs(args, steps: int) -> list[float]:
    """The learning rate of each optimizer step under `args`' schedule, as transformers' Trainer makes it."""
    from transformers.optimization import get_scheduler

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=args.learning_rate)
    scheduler = get_scheduler(args.lr_scheduler_type, optimizer, num_warmup_steps=args.get_warmup_steps(steps),
                              num_training_steps=steps, scheduler_specific_kwargs=args.lr_scheduler_kwargs or {})
    out = []
    for _ in range(steps):
        out.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    return out


def sft_args(**values):
    from trl import SFTConfig

    return SFTConfig(**{"output_dir": "/tmp/unused", "max_steps": STEPS, "learning_rate": LR, "report_to": [],
                        "bf16": False, **values})


def test_the_rounds_slices_make_one_linear_schedule():
    whole = lrs(sft_args(max_steps=ROUNDS * STEPS, lr_scheduler_type="linear"), ROUNDS * STEPS)
    sliced = []
    for k in range(ROUNDS):
        base = sft_args(lr_scheduler_type="linear")
        sliced += lrs(sft_args(**{"lr_scheduler_type": "linear", **round_schedule(base, k, ROUNDS, "t")}), STEPS)
    assert sliced == pytest.approx(whole, rel=1e-6, abs=1e-12)
    restarted = lrs(sft_args(lr_scheduler_type="linear"), STEPS) * ROUNDS  # (what rounds did before)
    assert restarted != pytest.approx(whole)


def test_warmup_is_the_first_rounds_and_a_constant_schedule_stays():
    base = sft_args(lr_scheduler_type="constant_with_warmup", warmup_steps=WARMUP)
    first = lrs(sft_args(**{"warmup_steps": WARMUP, **round_schedule(base, 0, ROUNDS, "t")}), STEPS)
    later = lrs(sft_args(**{"warmup_steps": WARMUP, **round_schedule(base, 1, ROUNDS, "t")}), STEPS)
    assert first[0] == 0.0 and first[-1] == pytest.approx(LR) and later == pytest.approx([LR] * STEPS)


def test_a_cosine_schedule_is_refused_in_one_line():
    with pytest.raises(PlaypenError, match="slices a linear or constant schedule; trainer.lr_scheduler_type is "
                                           "cosine"):
        round_schedule(sft_args(lr_scheduler_type="cosine"), 1, ROUNDS, "distill")


@pytest.mark.slow
def test_a_distill_run_logs_one_schedule_over_its_rounds(tmp_path):
    run = train("distill", tmp_path / "runs", "experiment=rounds", "model=playpen-tiny", "game=numberguess",
                "rounds=2", "instances=4", "max_new_tokens=8", "lora=null", "schedule_across_rounds=true",
                "trainer.max_steps=2", "trainer.per_device_train_batch_size=2", f"trainer.learning_rate={LR}")
    logged = [r["learning_rate"] for r in map(json.loads, run.metrics.read_text().splitlines())
              if "learning_rate" in r]
    whole = lrs(sft_args(max_steps=4, lr_scheduler_type="linear"), 4)
    assert logged == pytest.approx(whole, rel=1e-6)
