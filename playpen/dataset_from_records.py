"""`playpen data`: every interactions.json under a folder -> a conversational dataset (jsonl).

    playpen data results/ -o dataset.jsonl [--game wordle] [--outcome success] [--model playpen-tiny]
    playpen data --expert wordle -o dataset.jsonl [--split train] [--count N] [--seed S]

One row per (episode, model player): that player's own view of the dialogue, `messages` alternating user/assistant
and ending with its last reply, plus `meta {game, experiment, task_id, player_name, game_role, model, outcome,
main_score, source}`. Both players of a 2-player game give a row each; the game master and programmatic players
are not learners and give none. Rows load directly into TRL's SFTTrainer (conversational format).

Two layouts are read:
- clemcore 3.x results and playpen-records: `<model>[/<tag>]/<game>/<experiment>/instance_NNNNN/`, interactions
  with `meta` and `players` as {"Player 1": {"game_role", "model_name"}};
- published clembench v2.0 runs: `<model-pair>/<game>/<N_experiment>/episode_N/`, no `meta`, players as strings
  ("WordGuesser, Llama-3.3-70B-Instruct" or "Word Guesser (Llama-3.3-70B-Instruct)"), scores.json with bare NaN.

Outcome: from the sibling scores.json if present, else the Aborted/Success/Lose keys the game logged, else the
game master's final note (e.g. v2.0 taboo's "correct guess"): one of success, lose, aborted, unknown.
Unreadable, truncated or incomplete interactions files are listed and skipped; the conversion never crashes on
them.

`--expert GAME` plays a built-in game's instances with its programmatic expert (every role, full skill) and
writes the same rows, `model` "programmatic": data to train on before any model has won a game. An SFT config
names that source directly as `data: expert:GAME` (every train instance once, seed 0).

Not here: reading and checking the data files the recipes train on (playpen.training_data); writing records
(playpen.records).
"""
from __future__ import annotations

import argparse
import difflib
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from playpen import records
from playpen.errors import PlaypenError
from playpen.games.scores import main_score
from playpen.reading import DATA_MAX_BYTES, read_bytes
from playpen.storage import check_output_file, write_output

OUTCOMES = ("success", "lose", "aborted", "unknown")
OUTCOME_ALIASES = {"failure": "lose", "loss": "lose", "lost": "lose", "abort": "aborted", "won": "success"}
NON_LEARNERS = {"programmatic", "mock", "dry_run", "human", "terminal", "custom", ""}


@dataclass
class Stats:
    files: int = 0  # interactions.json files found
    episodes: int = 0  # files converted
    rows: int = 0  # rows written
    filtered: int = 0  # player rows left out by --game/--outcome/--model
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file, reason)
    outcomes: Counter = field(default_factory=Counter)  # rows per outcome
    games: Counter = field(default_factory=Counter)  # rows per game

    def summary(self) -> str:
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items())) or "none"
        return (f"{self.rows} rows from {self.episodes} episodes ({self.files} interactions files; "
                f"{len(self.skipped)} skipped, {self.filtered} player views filtered out); outcomes: {outcomes}")


# ---------------------------------------------------------------- reading one episode

def _load_lenient(path: Path):
    """json.loads accepts NaN/Infinity, as clembench's score files need. A file that is not a regular one (a FIFO
    planted among the records) or not JSON is a ValueError: the episode is skipped with the reason."""
    try:
        data = read_bytes(path, "records file", DATA_MAX_BYTES)
    except PlaypenError as e:
        raise ValueError(f"unreadable: {e}") from None
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested too deep to read") from None


def _parse_player(name: str, value, pair_models: list[str]) -> tuple[str, str]:
    """(game_role, model) of one entry of the interactions' `players`."""
    if isinstance(value, dict):
        return str(value.get("game_role", "")), str(value.get("model_name", ""))
    text = str(value)
    match = re.fullmatch(r"(.*?)\s*\(([^()]*)\)\s*", text)  # "Word Guesser (Llama-3.3-70B-Instruct)"
    if match:
        return match.group(1).strip(), match.group(2).strip()
    if "," in text:  # "WordDescriber, Llama-3.3-70B-Instruct"
        role, model = text.rsplit(",", 1)
        return role.strip(), model.strip()
    index = re.fullmatch(r"Player (\d+)", name)
    model = pair_models[int(index.group(1)) - 1] if index and int(index.group(1)) <= len(pair_models) else ""
    return text.strip(), model


def _is_learner(name: str, model: str) -> bool:
    return name != "GM" and name.startswith("Player") and model.strip().lower() not in NON_LEARNERS


def _outcome_from_scores(scores: dict) -> str | None:
    episode = scores.get("episode scores") if isinstance(scores, dict) else None
    if not isinstance(episode, dict):
        return None
    return _outcome_from_keys(episode)


def _outcome_from_keys(record: dict) -> str | None:
    keys = ("Aborted", "Success", "Lose")
    if not any(k in record for k in keys):
        return None

    def flag(key):
        value = record.get(key)
        try:
            return bool(value) and not (isinstance(value, float) and math.isnan(value))
        except TypeError:
            return False

    if flag("Aborted"):
        return "aborted"
    if flag("Success"):
        return "success"
    if flag("Lose"):
        return "lose"
    if "Success" not in record and "Aborted" in record and "Lose" in record:
        return "success"  # v2.0 wordle logs only Aborted/Lose: neither means solved
    return None


def _outcome_from_events(interactions: dict) -> str:
    """The game master's last notes to itself: clembench v2.0 games end with e.g. 'correct guess' or
    'game_result = ABORT' / 'game_result = LOSS'."""
    turns = interactions.get("turns") or []
    for round_events in reversed(turns):
        notes = [e for e in round_events if isinstance(e, dict) and e.get("from") == "GM" and e.get("to") == "GM"]
        for event in reversed(notes):
            action = event.get("action") or {}
            text = f"{action.get('type', '')} {action.get('content', '')}".lower()
            if "abort" in text or "invalid format" in text or "violation" in text:
                return "aborted"
            if "correct guess" in text and "incorrect" not in text or "game_result = win" in text \
                    or "success" in text:
                return "success"
            if "loss" in text or "lose" in text or "incorrect guess" in text or "failure" in text:
                return "lose"
        if notes:
            break
    return "unknown"


def _main_score(scores: dict | None) -> float | None:
    """None (null in the dataset) where the game logged no finite Main Score."""
    value = main_score((scores or {}).get("episode scores") if isinstance(scores, dict) else None)
    return None if math.isnan(value) else value


def _conversation(turns: list, player: str) -> list[dict]:
    """The player's own view (player_view), cut after its last answer: a training row ends with the player."""
    messages = player_view(turns, player)
    while messages and messages[-1]["role"] != "assistant":
        messages.pop()
    if messages and messages[0]["role"] != "user":
        return []
    return messages


def player_view(turns: list, player: str) -> list[dict]:
    """What the GM sent a player (user) and what it answered (assistant), from clemcore's interactions turns,
    consecutive messages of one role merged (as clemcore's backends merge them)."""
    messages: list[dict] = []
    for round_events in turns:
        for event in round_events:
            if not isinstance(event, dict):
                continue
            action = event.get("action") or {}
            if event.get("to") == player and action.get("type") == "send message":
                role = "user"
            elif event.get("from") == player and event.get("to") == "GM" and action.get("type") == "get message":
                role = "assistant"
            else:
                continue
            content = action.get("content")
            if not isinstance(content, str):
                content = json.dumps(content, ensure_ascii=False)
            if messages and messages[-1]["role"] == role:
                messages[-1]["content"] += "\n\n" + content
            else:
                messages.append({"role": role, "content": content})
    return messages


def episode_rows(path: Path) -> list[dict]:
    """All learner rows of one interactions.json (raises ValueError with a reason if it cannot be used)."""
    try:
        interactions = _load_lenient(path)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON (truncated or corrupt?): line {e.lineno} col {e.colno}: {e.msg}")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"unreadable: {e}")
    if not isinstance(interactions, dict) or not isinstance(interactions.get("turns"), list) \
            or not isinstance(interactions.get("players"), dict):
        raise ValueError("not an interactions record (needs 'players' and 'turns')")
    meta = interactions.get("meta") if isinstance(interactions.get("meta"), dict) else {}
    if meta and meta.get("completed") is not True:
        raise ValueError("partial record: the game did not complete (meta.completed is not true)")
    where = records.episode_location(path)  # what the folder layout says, where `meta` is missing
    game = meta.get("game_name") or where.game
    experiment = meta.get("experiment_name") or where.experiment_name
    task_id = meta.get("game_id", where.task_id)
    scores = records.sidecar(path, records.SCORES)
    if task_id is None and isinstance(instance := records.sidecar(path, records.INSTANCE), dict):
        task_id = instance.get("game_id")
    outcome = _outcome_from_scores(scores) or _outcome_from_keys(interactions) or _outcome_from_events(interactions)
    pair_models = records.model_names(where.model_dir)
    rows = []
    for name, value in interactions["players"].items():
        role, model = _parse_player(name, value, pair_models)
        if not _is_learner(name, model):
            continue
        messages = _conversation(interactions["turns"], name)
        if not messages:
            continue
        rows.append({"messages": messages,
                     "meta": {"game": game, "experiment": experiment, "task_id": task_id, "player_name": name,
                              "game_role": role, "model": model, "outcome": outcome,
                              "main_score": _main_score(scores), "source": str(path)}})
    return rows


# ---------------------------------------------------------------- conversion

def normalize_outcome(outcome: str | None) -> str | None:
    if outcome is None:
        return None
    value = OUTCOME_ALIASES.get(outcome.lower(), outcome.lower())
    if value not in OUTCOMES:
        close = difflib.get_close_matches(value, [*OUTCOMES, *OUTCOME_ALIASES], n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        raise PlaypenError(f"unknown outcome '{outcome}'; {hint}use one of: {', '.join(OUTCOMES)}")
    return value


def convert(results_or_records_dir: str | Path, out_jsonl: str | Path, game: str | None = None,
            outcome: str | None = None, model: str | None = None) -> Stats:
    """Write the dataset; returns what was converted, filtered and skipped (with reasons).

    Never writes an empty dataset: when every file was skipped, a filter names a game or model the records do
    not hold (a typo), or the filters leave no row, it raises and `out_jsonl` stays as it was. The file is
    replaced only once complete (temp file, then rename)."""
    root, out = Path(results_or_records_dir), Path(out_jsonl)
    if not root.is_dir():
        raise PlaypenError(f"{root} is not a folder; point `playpen data` at a results or playpen-records folder")
    if out.is_dir():
        raise PlaypenError(f"output {out} is a folder; give a file, e.g. -o {out / 'dataset.jsonl'}")
    out = check_output_file(out, "output")
    outcome = normalize_outcome(outcome)
    files = records.interactions_files(root)
    if not files:
        raise PlaypenError(f"no interactions.json under {root}; is it a clem results or playpen-records folder?")
    stats = Stats(files=len(files))
    rows = []
    for path in files:
        try:
            rows += episode_rows(path)
        except ValueError as e:
            stats.skipped.append((str(path), str(e)))
            continue
        stats.episodes += 1
    if not stats.episodes:
        path, reason = stats.skipped[0]
        raise PlaypenError(f"all {len(files)} interactions files under {root} were skipped (e.g. {path}: {reason}); "
                           f"{out} not written")
    _check_filter("game", game, {r["meta"]["game"] for r in rows}, _registered_games if game else set)
    _check_filter("model", model, {r["meta"]["model"] for r in rows})
    lines = []
    for row in rows:
        meta = row["meta"]
        if (game and meta["game"] != game) or (outcome and meta["outcome"] != outcome) \
                or (model and meta["model"] != model):
            stats.filtered += 1
            continue
        stats.rows += 1
        stats.outcomes[meta["outcome"]] += 1
        stats.games[meta["game"]] += 1
        lines.append(json.dumps(row, ensure_ascii=False))
    if not lines:
        filters = ", ".join(f"--{k} {v}" for k, v in (("game", game), ("outcome", outcome), ("model", model)) if v)
        why = f"{filters} left none of {len(rows)} player rows" if filters else "no learner player in them"
        raise PlaypenError(f"no rows from {stats.episodes} episodes under {root}: {why}; {out} not written")
    _write_rows(out, lines)
    return stats


def _write_rows(out: Path, lines: list[str]) -> None:
    """The one write of a dataset, through the checked output writer (a FIFO or device is streamed to, never
    renamed over; a regular file is written whole or not at all)."""
    write_output(out, "".join(line + "\n" for line in lines), "output")


# ---------------------------------------------------------------- expert transcripts

EXPERT_PREFIX = "expert:"  # `data: expert:wordle` in a training config: the game's expert transcripts
EXPERT_OUTCOMES = {"success": "success", "failure": "lose", "aborted": "aborted"}  # clemcore's Outcome -> ours


def expert_game(data: str | None) -> str | None:
    """The game a data value `expert:GAME` names, else None (a file path)."""
    if data and data.startswith(EXPERT_PREFIX):
        return data[len(EXPERT_PREFIX):].strip()
    return None


def expert_rows(game: str, split: str = "train", count: int | None = None, seed: int = 0) -> list[dict]:
    """Rows as `playpen data` writes them, from a built-in game's instances of `split` played by its expert in
    every role at full skill: each instance once (in an order drawn from `seed`) when `count` is None, else
    `count` episodes, every instance once before any repeats. Deterministic in (game, split, count, seed)."""
    import random

    from playpen.games import BUILTIN_GAMES, expert_model, load_instances, play_episode

    if game not in BUILTIN_GAMES:
        close = difflib.get_close_matches(game, BUILTIN_GAMES, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        raise PlaypenError(f"no expert for game '{game}'; {hint}the built-in games have one: "
                           f"{', '.join(BUILTIN_GAMES)}")
    if count is not None and count < 1:
        raise PlaypenError(f"--count must be at least 1, got {count}")
    instances = list(load_instances(game, split))
    if not instances:
        raise PlaypenError(f"game '{game}' has no instances in its {split} split")
    rng = random.Random(f"{seed}-{game}-{split}")
    order: list[int] = []
    rows = []
    for episode in range(len(instances) if count is None else count):
        if not order:
            order = rng.sample(range(len(instances)), len(instances))
        instance = instances[order.pop()]
        master = play_episode(game, instance, [expert_model(skill=1.0, seed=rng.randrange(2 ** 32))])
        outcome = EXPERT_OUTCOMES.get(master.state.outcome.value, "unknown")
        for player in master.get_players():
            messages = [{"role": m["role"], "content": m["content"]} for m in player.get_perspective()]
            while messages and messages[-1]["role"] != "assistant":
                messages.pop()
            if not messages or messages[0]["role"] != "user":
                continue
            rows.append({"messages": messages,
                         "meta": {"game": game, "experiment": instance["experiment"]["name"],
                                  "task_id": instance["game_instance"].get("game_id"), "player_name": player.name,
                                  "game_role": player.game_role, "model": "programmatic", "outcome": outcome,
                                  "main_score": None,
                                  "source": f"{EXPERT_PREFIX}{game} split={split} seed={seed} episode={episode}"}})
    return rows


def write_expert(game: str, out_jsonl: str | Path, split: str = "train", count: int | None = None,
                 seed: int = 0) -> Stats:
    """`playpen data --expert`: the expert's rows, checked output first, written whole."""
    out = check_output_file(Path(out_jsonl), "output")
    rows = expert_rows(game, split, count, seed)
    stats = Stats(files=0, episodes=len({r["meta"]["source"] for r in rows}), rows=len(rows))
    stats.outcomes.update(r["meta"]["outcome"] for r in rows)
    stats.games[game] = len(rows)
    _write_rows(out, [json.dumps(row, ensure_ascii=False) for row in rows])
    return stats


def _registered_games() -> set[str]:
    from playpen.games.registry import game_entries

    return {e.name for e in game_entries()}


def _check_filter(key: str, value: str | None, in_records: set[str], also_valid=set) -> None:
    """A --game/--model value that names nothing in the records (nor, for games, a registered game) is a typo:
    say so with the close matches instead of writing an empty dataset."""
    if value is None or value in in_records:
        return
    valid = in_records | also_valid()
    if value in valid:
        return
    close = difflib.get_close_matches(value, sorted(valid), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise PlaypenError(f"unknown {key} '{value}'; {hint}{key}s in these records: "
                       f"{', '.join(sorted(in_records)) or 'none'}")


# ---------------------------------------------------------------- command line

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dir", type=Path, nargs="?", default=None,
                        help="a clem results folder or a run's playpen-records folder (or give --expert)")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the jsonl file to write")
    parser.add_argument("--game", default=None, help="only this game")
    parser.add_argument("--outcome", default=None, help=f"only episodes with this outcome ({', '.join(OUTCOMES)})")
    parser.add_argument("--model", default=None, help="only players played by this model (its registry name)")
    expert = parser.add_argument_group("expert transcripts (instead of RESULTS_DIR)")
    expert.add_argument("--expert", metavar="GAME", default=None,
                        help="play a built-in game with its programmatic expert in every role and write those rows")
    expert.add_argument("--split", default="train", help="the game's instance set to play (default: train)")
    expert.add_argument("--count", type=int, default=None,
                        help="episodes to play (default: each instance of the split once)")
    expert.add_argument("--seed", type=int, default=0, help="draws the instance order and the expert's choices")


def main(args: argparse.Namespace) -> int:
    import sys

    if args.expert is not None:
        given = [flag for flag, value in (("RESULTS_DIR", args.results_dir), ("--game", args.game),
                                          ("--outcome", args.outcome), ("--model", args.model)) if value]
        if given:
            raise PlaypenError(f"--expert plays the game itself; drop {', '.join(given)} (they filter results)")
        stats = write_expert(args.expert, args.output, split=args.split, count=args.count, seed=args.seed)
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(stats.outcomes.items()))
        print(f"{args.output}: {stats.rows} rows from {stats.episodes} expert episodes of {args.expert} "
              f"({args.split} split, seed {args.seed}); outcomes: {outcomes}")
        return 0
    if args.results_dir is None:
        raise PlaypenError("give a results folder (playpen data RESULTS_DIR -o FILE) or a game's expert "
                           "(playpen data --expert GAME -o FILE)")
    stats = convert(args.results_dir, args.output, game=args.game, outcome=args.outcome, model=args.model)
    for path, reason in stats.skipped:
        print(f"playpen data: skipped {path}: {reason}", file=sys.stderr)
    print(f"{args.output}: {stats.summary()}")
    return 0


if __name__ == "__main__":  # python -m playpen.dataset_from_records: an alias of `playpen data`
    import sys

    from playpen.errors import run_command

    sys.exit(run_command("playpen data", add_arguments, main))
