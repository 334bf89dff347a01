"""`playpen debate TOOL ...`: each tool module provides add_arguments(parser) and main(args) (light at import)."""
from __future__ import annotations

import argparse
import importlib

TOOLS = {
    "tournament": ("playpen.debate_tools.tournament",
                   "every pair of debaters before every judge: table, ratings, heatmap"),
    "curve": ("playpen.debate_tools.curve", "judge win rate per round of an iterative-DPO debate run"),
    "rejudge": ("playpen.debate_tools.rejudge",
                "show recorded judges' views to another judge and compare verdicts"),
    "transcripts": ("playpen.debate_tools.transcripts",
                    "the expert advocates' winning transcripts as SFT rows"),
    "pairs": ("playpen.debate_tools.best_of_n_pairs",
              "best-of-N advocates' recorded choices as DPO preference pairs"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    tools = parser.add_subparsers(dest="tool", required=True, metavar="TOOL")
    for name, (module, help_text) in TOOLS.items():
        tool = importlib.import_module(module)
        tool.add_arguments(tools.add_parser(name, help=help_text, description=tool.__doc__,
                                            formatter_class=argparse.RawDescriptionHelpFormatter))


def main(args: argparse.Namespace) -> int:
    return importlib.import_module(TOOLS[args.tool][0]).main(args)
