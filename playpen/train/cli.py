"""`playpen train METHOD --config FILE [key=value ...]` (light at import: torch/TRL load in main);
`playpen train METHOD --help` lists the method's config keys."""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("method", metavar="METHOD", nargs="?", default=None,
                        help="sft, dpo, grpo, rloo, reward, rft (expert iteration) or distill (on-policy "
                             "distillation); `playpen train METHOD -h` lists its config keys")
    parser.add_argument("-c", "--config", default=None,
                        help="YAML config (its first line shows the command), e.g. grpo/demo")
    parser.add_argument("overrides", nargs="*", default=[], metavar="key=value",
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
    from playpen.config import packaged_config_names
    from playpen.errors import PlaypenError
    from playpen.train import METHODS, train

    if args.method is None:
        raise PlaypenError(f"playpen train needs a METHOD, one of: {', '.join(METHODS)} (e.g. playpen train sft "
                           f"--config sft/tiny_lora; `playpen train METHOD -h` lists its keys)")
    if args.method not in METHODS:
        raise PlaypenError(f"unknown method '{args.method}'; choose one of: {', '.join(METHODS)}")
    if args.config is None and not any(o.partition("=")[0].strip() == "experiment" for o in args.overrides):
        # (without a file every required key would have to come as key=value: a config is what was meant)
        shipped = [name for name in packaged_config_names() if name.startswith(f"{args.method}/")]
        shipped.sort(key=lambda name: ("/demo" not in name, "/tiny" not in name, name))  # the quick ones first
        example = f"e.g. --config {shipped[0]} " if shipped else ""
        raise PlaypenError(f"playpen train {args.method} needs --config NAME_OR_FILE, {example}(the shipped "
                           f"configs: `playpen configs list`)")
    train(args.method, args.config, args.overrides)
    return 0
