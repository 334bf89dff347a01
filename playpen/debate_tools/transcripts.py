"""Winning transcripts of the expert advocates, as SFT rows (`playpen train sft data=...`): a warm start for a
model that has never seen the debate format (playpen-tiny), before learning from judge preferences.

    playpen debate transcripts -o runs/data/debate_won.jsonl [--game debate] [--episodes 400]

Each episode plays a train instance with expert advocates (skill drawn from 0.5-1, so some lose) and the
programmatic judge; the row is the winner's own view of the dialogue (the debater whose answer the judge picked,
or the consultant when the judge picked its answer), in `playpen data`'s format. Models that already play the
game get their winning transcripts from their own records instead: `playpen data RECORDS --game debate
--outcome success` (on the train split, success means the judge picked player 1's answer).
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from playpen.debate_tools.recorded_episodes import ADVOCATES
from playpen.errors import PlaypenError
from playpen.storage import check_output_file, write_output



def winning_transcripts(game: str = "debate", episodes: int = 400, seed: int = 0, split: str = "train") -> list[dict]:
    """Rows {"messages", "meta"} of the winning advocates of `episodes` expert games (deterministic in seed)."""
    from playpen import games

    if game not in ADVOCATES:
        raise PlaypenError(f"winning transcripts are made for {', '.join(ADVOCATES)}, not '{game}'")
    rows_in = list(games.load_instances(game, split))
    rng = random.Random(f"{seed}-{game}-won")
    rows = []
    for episode in range(episodes):
        row = rows_in[rng.randrange(len(rows_in))]
        model = games.expert_model(skill=rng.uniform(0.5, 1.0), seed=rng.randrange(2 ** 32))
        master = games.play_episode(game, row, [model])
        if master.verdict is None:
            continue
        side = master.verdict[0]
        if len(ADVOCATES[game]) == 2:
            role = ADVOCATES[game]["AB".index(side)]
        else:
            role = "Consultant" if side == master.player_1_side else None
        winner = next((p for p in master.get_players() if p.game_role == role), None)
        if winner is None:
            continue
        messages = [{"role": m["role"], "content": m["content"]} for m in winner.get_perspective()]
        rows.append({"messages": messages, "meta": {
            "game": game, "experiment": row["experiment"]["name"], "task_id": row["game_instance"]["game_id"],
            "game_role": role, "model": "expert", "outcome": "success",
            "source": f"{game} experts, episode {episode}"}})
    return rows


def add_arguments(parser) -> None:
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("--game", default="debate")
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)


def main(args) -> int:
    output = check_output_file(args.output, "-o")
    rows = winning_transcripts(args.game, args.episodes, args.seed)
    write_output(output, "".join(json.dumps(r) + "\n" for r in rows), "-o")
    print(f"{args.output}: {len(rows)} winning transcripts of {args.episodes} {args.game} episodes")
    return 0


if __name__ == "__main__":  # python -m playpen.debate_tools.transcripts: an alias of `playpen debate transcripts`
    from playpen.cli import main as playpen_main

    sys.exit(playpen_main(["debate", "transcripts", *sys.argv[1:]]))
