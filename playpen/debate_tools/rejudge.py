"""Offline re-judging: show another judge (or the same one) the recorded judge's view of each debate or
consultancy episode and compare its verdict with the recorded one.

    playpen debate rejudge RECORDS_DIR --judge MODEL [-o rejudged.json] [-L 300] [-T 0]

RECORDS_DIR: any folder of clem records (playpen eval results, a run's playpen-records, a tournament's records).
The new judge gets exactly the messages the recorded judge got at its last turn (its own earlier questions in a
consultancy stay as they were, so the consultant's answers still fit); its reply's last line must be a verdict.
MODEL: a registry name (local or remote, see `playpen list models`) or "programmatic". Output: one row per
episode (recorded and new verdict, agreement) and a summary (agreement, accuracy of either judge).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from playpen.debate_tools.recorded_episodes import Episode, episodes_under, mean
from playpen.defaults import MAX_NEW_TOKENS, TEMPERATURE, add_max_new_tokens
from playpen.errors import PlaypenError
from playpen.games.debate import protocol as pr
from playpen.storage import check_output_file, write_output

PROGRAMMATIC = "programmatic"


def load_judge(judge, max_tokens: int = MAX_NEW_TOKENS, temperature: float = TEMPERATURE):
    """A callable messages -> reply for a judge name or a clemcore Model."""
    if judge is None or judge == "":
        raise PlaypenError("re-judging needs a judge: --judge <registry model name> or --judge programmatic")
    if judge == PROGRAMMATIC:
        return pr.judge_reply
    if isinstance(judge, str):
        from playpen.models import service

        judge = service.load_player(service.resolve(judge, "judge"), max_tokens, temperature)
    return lambda messages: judge.generate_response(messages)[2]


def rejudge_episode(episode: Episode, ask) -> dict:
    view = episode.judge_view()
    recorded_reply = view.pop()["content"] if view and view[-1]["role"] == "assistant" else None
    if not view:
        raise PlaypenError(f"{episode.path}: the judge was never asked (the episode broke off before its turn)")
    reply = ask([dict(m) for m in view])
    try:
        new = pr.parse_verdict(reply)
    except ValueError:
        new = None
    old = episode.verdict
    return {"episode": str(episode.path), "game": episode.game, "experiment": episode.experiment,
            "game_id": episode.game_id, "correct": episode.correct, "recorded_judge": episode.seats.get("Judge"),
            "recorded": None if old is None else {"side": old["side"], "probability": old["probability"]},
            "new": None if new is None else {"side": new[0], "probability": round(new[1], 4)},
            "recorded_reply": recorded_reply, "new_reply": reply, "agree": (old and old["side"]) == (new and new[0])}


def rejudge(records_dir: str | Path, judge, max_tokens: int = MAX_NEW_TOKENS,
            temperature: float = TEMPERATURE, out: str | Path | None = None) -> dict:
    """Re-judge every debate/consultancy episode under records_dir; returns {"summary", "rows"} (and writes it
    to `out` when given)."""
    folder = Path(records_dir)
    if not folder.is_dir():
        raise PlaypenError(f"{folder} is not a folder of records")
    if out is not None:
        out = check_output_file(out, "-o")
    ask = load_judge(judge, max_tokens, temperature)
    episodes = [e for e in episodes_under(folder) if len(e.judge_view()) > 0]
    if not episodes:
        raise PlaypenError(f"no debate or consultancy episode (of any kind) with a judge turn under {folder}")
    rows = [rejudge_episode(e, ask) for e in episodes]
    summary = {
        "episodes": len(rows), "judge": judge if isinstance(judge, str) else getattr(judge, "name", str(judge)),
        "agreement": mean(float(r["agree"]) for r in rows),
        "recorded_accuracy": mean(float(r["recorded"]["side"] == r["correct"]) for r in rows if r["recorded"]),
        "new_accuracy": mean(float(r["new"]["side"] == r["correct"]) for r in rows if r["new"]),
        "recorded_without_verdict": sum(r["recorded"] is None for r in rows),
        "new_without_verdict": sum(r["new"] is None for r in rows)}
    summary = {k: None if isinstance(v, float) and v != v else v for k, v in summary.items()}  # NaN: no data
    result = {"summary": summary, "rows": rows}
    if out is not None:
        write_output(out, json.dumps(result, indent=2, ensure_ascii=False, default=str), "-o")
    return result


def add_arguments(parser) -> None:
    parser.add_argument("records_dir", type=Path)
    parser.add_argument("--judge", default=None, help="registry model name, or programmatic")
    parser.add_argument("-o", "--output", type=Path, default=None)
    add_max_new_tokens(parser)
    parser.add_argument("-T", "--temperature", type=float, default=TEMPERATURE)


def main(args) -> int:
    result = rejudge(args.records_dir, args.judge, args.max_new_tokens, args.temperature, args.output)
    print(json.dumps(result["summary"], indent=2))
    return 0


if __name__ == "__main__":  # python -m playpen.debate_tools.rejudge: an alias of `playpen debate rejudge`
    from playpen.cli import main as playpen_main

    sys.exit(playpen_main(["debate", "rejudge", *sys.argv[1:]]))
