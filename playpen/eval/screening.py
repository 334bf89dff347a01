"""`playpen screen`: which train instances can GRPO learn from? Each instance's pass rate under a model, and an
instances file of those whose rate lies strictly between 0 and 1.

    playpen screen MODEL -g GAME [--split train] [-k 8] [-T 0.7] -o screened.json [--partner programmatic
                   --partner-seats 0] [--instances N]
    then in a GRPO config:  split: screened.json   (any instances file path)

An instance that a model always wins or always loses gives every group of its episodes the same reward: zero
advantage, no gradient (TRL logs the share as frac_reward_zero_std). Screening keeps the instances with signal;
the rate is the share of `k` episodes that clemcore's scorer counts as Success. Works on any game playpen plays,
benchmark games registered through game_registry.json included. The written file is clemcore's instances format
(experiments with their game_instances), each kept instance with its `pass_rate`.
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from playpen.defaults import OldSpelling, add_max_new_tokens
from playpen.errors import PlaypenError


MAX_SAMPLES = 1024  # episodes per instance: a pass rate finer than 1/1024 tells a GRPO group nothing more


def pass_rates(episodes) -> dict[tuple[str, object], list[bool]]:
    """(experiment, game_id) → the Success of each of its episodes."""
    rates: dict[tuple[str, object], list[bool]] = defaultdict(list)
    for e in episodes:
        rates[(e.experiment, e.game_id)].append(bool(e.success))
    return rates


def screened_file(instances: list[tuple[dict, dict]], rates: dict) -> tuple[dict, int]:
    """The clemcore instances file of the instances whose pass rate is strictly between 0 and 1; and their count."""
    experiments: dict[str, dict] = {}
    kept = 0
    for experiment, instance in instances:
        outcomes = rates[(experiment["name"], instance["game_id"])]
        rate = sum(outcomes) / len(outcomes)
        if 0 < rate < 1:
            entry = experiments.setdefault(experiment["name"], {**experiment, "game_instances": []})
            entry["game_instances"].append({**instance, "pass_rate": rate})
            kept += 1
    return {"experiments": list(experiments.values())}, kept


def screen(model: str, game: str, output: str | Path, split: str = "train", samples: int = 8,
           temperature: float = 1.0, partner: str | None = None, partner_seats: list[int] | None = None,
           instances: int | None = None, max_new_tokens: int = 64, seed: int = 0, batch_size: int = 64,
           use_vllm: bool = False) -> dict:
    from playpen.games import expert_model
    from playpen.games.instances import load_instances
    from playpen.rollout import RolloutEngine
    from playpen.storage import check_output_file, write_output
    from playpen.models.service import load_frozen, resolve_local
    from playpen.rollout import LocalPolicy

    from playpen.config import Bounds
    from playpen.defaults import EVAL_BOUNDS

    for flag, value, bounds in (("-k/--samples", samples, Bounds(le=MAX_SAMPLES)), ("--instances", instances,
                                EVAL_BOUNDS["instances"]), ("-L/--max-new-tokens", max_new_tokens,
                                EVAL_BOUNDS["max_new_tokens"]), ("-b/--batch-size", batch_size,
                                EVAL_BOUNDS["batch_size"]), ("--seed", seed, EVAL_BOUNDS["seed"])):
        bounds.check(value, flag)  # (before k × instances episodes are planned: 10^9 fills the memory)
    if samples < 2 or temperature <= 0:
        raise PlaypenError(f"screening needs at least 2 samples at a temperature > 0 (got -k {samples}, "
                           f"-T {temperature}): one greedy play has no pass rate between 0 and 1")
    output = check_output_file(output, "-o")
    if use_vllm:
        from playpen.models.vllm_engine import require_vllm

        require_vllm("--use-vllm")
    pairs = load_instances(game, split, limit=instances, seed=None if instances is None else seed)
    if not pairs:
        raise PlaypenError(f"game {game} has no instances in set {split}")
    partner = expert_model(seed=seed) if partner == "programmatic" else partner
    spec = resolve_local(model, role=None)
    policy = LocalPolicy(*load_frozen(spec), name=spec["model_name"])
    if use_vllm:  # (k samples of each instance: the shared prompt is vLLM's prefix cache's to reuse)
        from playpen.rollout.vllm_backend import generator_for

        policy.vllm = generator_for(policy.model, policy.tokenizer, seed)
    engine = RolloutEngine(policy, partner=partner,
                           partner_seats=partner_seats, max_new_tokens=max_new_tokens, temperature=temperature,
                           batch_size=batch_size, seed=seed)
    rates = pass_rates(engine.play(game, pairs, group_size=samples))
    data, kept = screened_file(pairs, rates)
    if not kept:
        raise PlaypenError(f"no instance of {game} ({split}) has a pass rate strictly between 0 and 1 under {model} "
                           f"at T={temperature:g} with {samples} samples; nothing written (try another temperature "
                           f"or model)")
    write_output(output, json.dumps(data, indent=2, ensure_ascii=False, default=str), "-o")
    always = sum(all(v) for v in rates.values())
    never = sum(not any(v) for v in rates.values())
    summary = {"instances": len(rates), "kept": kept, "always_won": always, "never_won": never,
               "mean_pass_rate": sum(sum(v) / len(v) for v in rates.values()) / len(rates), "file": str(output)}
    print(f"[playpen] screened {len(rates)} instances of {game} ({split}) under {model}, {samples} samples at "
          f"T={temperature:g}: kept {kept} (always won {always}, never won {never}) -> {output}")
    return summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="registry name, run folder or Hugging Face model folder")
    parser.add_argument("-g", "--game", required=True)
    parser.add_argument("-o", "--output", required=True, help="instances file to write (a GRPO config's split:)")
    parser.add_argument("--split", default="train", help="instance set to screen (default: train)")
    parser.add_argument("-k", "--samples", type=int, default=8, help="episodes per instance")
    parser.add_argument("-T", "--temperature", type=float, default=1.0, help="the rollout temperature you train at")
    parser.add_argument("-p", "--partner", default=None, help="partner model, or programmatic (the game's expert)")
    parser.add_argument("--partner-seats", type=int, nargs="+", default=None, help="seats the partner holds")
    # the spellings before distillation's teacher came: still read as the partner, with a note
    parser.add_argument("-t", "--teacher", dest="partner", action=OldSpelling, help=argparse.SUPPRESS)
    parser.add_argument("--teacher-seats", dest="partner_seats", type=int, nargs="+", action=OldSpelling,
                        help=argparse.SUPPRESS)
    parser.add_argument("--instances", type=int, default=None, help="screen N instances (shuffled with --seed)")
    add_max_new_tokens(parser, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-b", "--batch-size", type=int, default=64)
    parser.add_argument("--use-vllm", action="store_true", help="vLLM generates the episodes (docs/rollouts.md)")


def main(args: argparse.Namespace) -> int:
    screen(args.model, args.game, args.output, split=args.split, samples=args.samples, temperature=args.temperature,
           partner=args.partner, partner_seats=args.partner_seats, instances=args.instances,
           max_new_tokens=args.max_new_tokens, seed=args.seed, batch_size=args.batch_size, use_vllm=args.use_vllm)
    return 0
