"""Trainers: one readable module per method over shared parts.

    from playpen.train import train
    run = train("grpo", "grpo/demo", ["trainer.max_steps=20"])   # -> RunDir

`train` is what `playpen train` and SLURM jobs call, once per rank under torchrun (RANK/WORLD_SIZE/... set).
Rerunning the same call resumes from the last checkpoint in the same run directory.

Modules: `runner` (a run's life cycle every method shares, top to bottom: check the config and the reruns of a
run id, the run folder, build, fit, register the final model), `recipe` (the API a method implements), one
recipe per method: `sft`, `dpo`, `grpo`, `reward`, `rloo`, `rft` (expert iteration), `distill` (on-policy
distillation), `learned_reward` (GRPO's reward model); `game_play` (what the game methods share about playing
games: partners, frozen policies, rounds of play), `rounds` (the play → train loop of dpo, rft and distill),
`sequences` (the token rows rft and distill train on), `dynamic_sampling` (GRPO's refilled groups), `trl_args`
(TRL's arguments from `trainer:`), `checkpoints` (find, validate, resume state), `metrics` (metrics.jsonl,
tensorboard, learning curve), `trackers` (wandb, trackio, mlflow), `base` (BasePlaypenTrainer and `playpen
run`), `cli` (`playpen train`). Below train: `playpen.models.modeling` (model spec, tokenizer, weights, LoRA,
quantization, DeepSpeed config), `playpen.training_data` (jsonl rows, chat messages), `playpen.distributed` (ranks
and collectives).
This file stays light: torch and TRL are imported only when training starts.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from playpen.storage import RunDir

METHODS = {"sft": "playpen.train.sft", "dpo": "playpen.train.dpo", "grpo": "playpen.train.grpo",
           "reward": "playpen.train.reward", "rloo": "playpen.train.rloo", "rft": "playpen.train.rft",
           "distill": "playpen.train.distill"}


def train(method: str, config: str | None = None, overrides: Iterable[str] = ()) -> "RunDir":
    """Train with `method` (sft, dpo, grpo) from a YAML config plus key=value overrides; returns the run dir."""
    from playpen.train.runner import run

    return run(method, config, list(overrides))


__all__ = ["METHODS", "train"]
