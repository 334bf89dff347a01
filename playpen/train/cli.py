"""`playpen train METHOD --config FILE [key=value ...]` (light at import: torch/TRL load in main)."""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("method", metavar="METHOD", help="sft, dpo, grpo, rloo, reward, rft (expert iteration) or "
                        "distill (on-policy distillation)")
    parser.add_argument("-c", "--config", default=None,
                        help="YAML config (its first line shows the command), e.g. grpo/demo")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="override config keys, e.g. trainer.max_steps=10 run_id=try2 lora=null")


def main(args: argparse.Namespace) -> int:
    from playpen.train import METHODS, train
    from playpen.errors import PlaypenError

    if args.method not in METHODS:
        raise PlaypenError(f"unknown method '{args.method}'; choose one of: {', '.join(METHODS)}")
    train(args.method, args.config, args.overrides)
    return 0
