"""Preference pairs from the records of best-of-N advocates, for `playpen train dpo data=PAIRS`: NYU's DPO data.

    playpen debate pairs RECORDS_DIR -o pairs.jsonl [--min-margin 0.05]

RECORDS_DIR: any folder of clem records (playpen eval results, a run's playpen-records, a tournament's records)
of debate, consultancy or double consultancy episodes with best-of-N advocates. Every recorded choice ("best of
n" note: all candidates, their scores, the choice) gives one pair: the chosen speech against the lowest-scored
candidate, when their scores differ by more than --min-margin (with the judge as chooser, scores are the judge's
probabilities for the advocate's side; both are in each row's meta). Rows: {prompt: the advocate's view,
chosen: [reply], rejected: [reply], meta}.

Not the reward model's pairs (playpen.reward.preference_pairs) nor the branch pairs DPO trains on while it
plays (playpen.rollout.branching).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from playpen.debate_tools.recorded_episodes import episodes_under, mean
from playpen.errors import PlaypenError
from playpen.storage import check_output_file, write_output


def best_of_n_pairs(records_dir: str | Path, min_margin: float = 0.0) -> tuple[list[dict], dict]:
    """(pairs, summary) of every best-of-N choice recorded under records_dir."""
    from playpen.games.debate.best_of_n import NOTE, preference_pairs
    from playpen.games.common import episode_gm_events

    folder = Path(records_dir)
    if not folder.is_dir():
        raise PlaypenError(f"{folder} is not a folder of records")
    if min_margin < 0:
        raise PlaypenError(f"--min-margin must be >= 0, got {min_margin}")
    episodes = episodes_under(folder)
    choices = sum(len(episode_gm_events(e.interactions, NOTE)) for e in episodes)
    if not choices:
        raise PlaypenError(f"no best-of-n choice recorded under {folder} ({len(episodes)} debate or consultancy "
                           f"episodes): play with best_of_n set in the experiment or the tournament file")
    pairs = [pair for e in episodes for pair in preference_pairs(e.interactions, min_margin)]
    summary = {"episodes": len(episodes), "choices": choices, "pairs": len(pairs),
               "chosen_score": mean(p["meta"]["chosen_score"] for p in pairs),
               "rejected_score": mean(p["meta"]["rejected_score"] for p in pairs)}
    return pairs, {k: None if isinstance(v, float) and v != v else v for k, v in summary.items()}


def add_arguments(parser) -> None:
    parser.add_argument("records_dir", type=Path)
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("--min-margin", type=float, default=0.0,
                        help="keep pairs whose scores differ by more than this (default 0: any difference)")


def main(args) -> int:
    output = check_output_file(args.output, "-o")
    pairs, summary = best_of_n_pairs(args.records_dir, args.min_margin)
    write_output(output, "".join(json.dumps(p) + "\n" for p in pairs), "-o")
    print(json.dumps(summary, indent=2))
    print(f"{args.output}: {len(pairs)} pairs (playpen train dpo ... data={args.output})")
    return 0


if __name__ == "__main__":  # python -m playpen.debate_tools.best_of_n_pairs: an alias of `playpen debate pairs`
    from playpen.cli import main as playpen_main

    sys.exit(playpen_main(["debate", "pairs", *sys.argv[1:]]))
