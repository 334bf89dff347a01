"""`playpen train METHOD --config FILE [key=value ...]` (light at import: torch/TRL load in main);
`playpen train METHOD --help` lists the method's config keys."""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("method", metavar="METHOD", help="sft, dpo, grpo, rloo, reward, rft (expert iteration) or "
                        "distill (on-policy distillation); `playpen train METHOD -h` lists its config keys")
    parser.add_argument("-c", "--config", default=None,
                        help="YAML config (its first line shows the command), e.g. grpo/demo")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="override config keys, e.g. trainer.max_steps=10 run_id=try2 lora=null")
    parser.keys_help = lambda args: method_keys(getattr(args, "method", None))


def method_keys(method: str | None) -> str:
    """Every config key of `method` with its type, default, range and help ("" for no or an unknown method)."""
    from playpen.config_help import format_keys, key_docs
    from playpen.train import METHODS
    from playpen.train.runner import load_recipe

    if method not in METHODS:
        return ""
    recipe = load_recipe(method)
    return format_keys(f"config keys of {method} (in the --config file, or key=value after it; trainer: takes the "
                       f"fields of trl.{recipe.trl_config}):", key_docs(recipe.Config))


def main(args: argparse.Namespace) -> int:
    from playpen.train import METHODS, train
    from playpen.errors import PlaypenError

    if args.method not in METHODS:
        raise PlaypenError(f"unknown method '{args.method}'; choose one of: {', '.join(METHODS)}")
    train(args.method, args.config, args.overrides)
    return 0
