"""Preference pairs for `playpen train reward`, in TRL's preference format (implicit prompt):
{"chosen": str, "rejected": str} (plain text) or {"chosen": [messages], "rejected": [messages]} (conversations,
the prompt repeated at the start of both).

Sources:
- a jsonl of preference rows {"chosen", "rejected"[, "prompt"]} (strings or message lists; DPO's pairs files and
  `preference_pairs` output are such rows);
- a jsonl of labelled texts {"text", "label": number[, "prompt"]}, e.g. `playpen meter ... --classifier vader`'s
  labelled.jsonl: texts answering the same prompt are compared, a higher label is preferred (by more than
  `label_margin`), each text is chosen over up to `pairs_per_text` lower-labelled ones drawn with the seed;
- playpen-records or clem results: player views of episodes of the same instance (the same game, experiment,
  instance and role: a GRPO group, DPO's branches of one instance, evaluations of several models), the better
  episode preferred: matched best with worst, second best with second worst, ... (ties skipped). Branches share
  their history up to the reply they differ in, so their pair isolates that reply, as DPO's pairs do.

Not here: best-of-N advocates' pairs (playpen.debate_tools.best_of_n_pairs), the branch pairs DPO trains on while
it plays (playpen.rollout.branching), a model and its partner in eval (playpen.eval.partners).
"""
from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

from playpen.errors import PlaypenError
from playpen.reward.prompts import as_messages
from playpen import training_data


def _side_problem(value, name: str) -> str | None:
    if isinstance(value, str):
        return None if value else f"'{name}' is empty"
    problem = training_data.check_messages(value, need_assistant=False)
    return f"'{name}': {problem}" if problem else None


def _row_problem(row: dict) -> str | None:
    if "text" in row or "label" in row:
        if not isinstance(row.get("text"), str) or not row["text"]:
            return "labelled rows need a non-empty string 'text'"
        label = row.get("label")
        if isinstance(label, bool) or not isinstance(label, (int, float)):
            return "labelled rows need a number 'label' (higher = preferred)"
        return _side_problem(row["prompt"], "prompt") if "prompt" in row else None
    for name in ("chosen", "rejected"):
        if name not in row:
            return f"missing '{name}' (rows are {{chosen, rejected[, prompt]}} or {{text, label[, prompt]}})"
        if problem := _side_problem(row[name], name):
            return problem
    if problem := training_data.same_sides(row):
        return problem
    return _side_problem(row["prompt"], "prompt") if "prompt" in row else None


def _conversation(prompt, reply) -> list[dict]:
    reply = [{"role": "assistant", "content": reply}] if isinstance(reply, str) else [dict(m) for m in reply]
    return (as_messages(prompt) if prompt is not None else []) + reply


def _preference(row: dict) -> dict:
    prompt, chosen, rejected = row.get("prompt"), row["chosen"], row["rejected"]
    if prompt is None and isinstance(chosen, str) and isinstance(rejected, str):
        return {"chosen": chosen, "rejected": rejected}
    return {"chosen": _conversation(prompt, chosen), "rejected": _conversation(prompt, rejected)}


def _labelled_pairs(rows: list[dict], margin: float, per_text: int, seed: int) -> list[dict]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        groups[repr(row.get("prompt"))].append(row)
    rng = random.Random(seed)
    pairs = []
    for group in groups.values():
        for row in group:
            lower = [other for other in group if other["label"] < row["label"] - margin
                     and other["text"] != row["text"]]  # one text labelled twice prefers nothing
            for other in rng.sample(lower, min(per_text, len(lower))):
                pairs.append(_preference({"prompt": row.get("prompt"), "chosen": row["text"],
                                          "rejected": other["text"]}))
    return pairs


def read_pairs_file(path: str, where: str, label_margin: float = 0.0, pairs_per_text: int = 1,
                    seed: int = 0) -> list[dict]:
    """Pairs from a jsonl of preference rows or of labelled texts (not both in one file)."""
    rows = training_data.read_jsonl_rows(path, where, "data", _row_problem)
    labelled = ["text" in row for row in rows]
    if any(labelled) and not all(labelled):
        line = labelled.index(not labelled[0]) + 1
        raise PlaypenError(f"{path}: mixes labelled texts and chosen/rejected rows (row {line} differs from row 1); "
                           f"use one kind per file")
    if labelled[0]:
        pairs = _labelled_pairs(rows, label_margin, pairs_per_text, seed)
        if not pairs:
            raise PlaypenError(f"{path}: no two texts for the same prompt differ in label by more than "
                               f"{label_margin}; nothing to prefer")
    else:
        pairs = [_preference(row) for row in rows]
    return _one_format(pairs, path)


def _one_format(pairs: list[dict], source) -> list[dict]:
    kinds = {isinstance(p["chosen"], str) for p in pairs}
    if len(kinds) > 1:
        raise PlaypenError(f"{source}: some pairs are plain text and some are conversations (rows with a prompt or "
                           f"messages); TRL trains on one kind: give every row a prompt, or none")
    return pairs


def pair_format(pairs: list[dict]) -> str:
    return "text" if isinstance(pairs[0]["chosen"], str) else "conversation"


def _episode_value(meta: dict) -> float | None:
    """How good a player's episode was, as GRPO's episode reward: -1 aborted, else main score / 100."""
    if meta.get("outcome") == "aborted":
        return -1.0
    if meta.get("main_score") is not None:
        return float(meta["main_score"]) / 100.0
    return {"success": 1.0, "lose": 0.0}.get(meta.get("outcome"))


def pairs_from_records(folder: str, where: str, game: str | None = None) -> list[dict]:
    """Pairs from the player views of episodes of the same instance under a records or results folder."""
    from playpen.dataset_from_records import episode_rows
    from playpen.records import interactions_files

    root = Path(folder).expanduser()
    if not root.is_dir():
        raise PlaypenError(f"{where}: records folder {folder} not found (a run's playpen-records or clem results)")
    files = interactions_files(root)
    if not files:
        raise PlaypenError(f"{where}: no interactions.json under {folder}")
    groups: dict[tuple, list[tuple[float, list[dict]]]] = defaultdict(list)
    for path in files:
        try:
            rows = episode_rows(path)
        except ValueError:
            continue  # partial or corrupt records: `playpen data` lists them
        for row in rows:
            meta = row["meta"]
            value = _episode_value(meta)
            if value is None or (game and meta["game"] != game):
                continue
            key = (meta["game"], meta["experiment"], meta["task_id"], meta["game_role"])
            groups[key].append((value, row["messages"]))
    pairs = []
    for key in sorted(groups, key=repr):
        ranked = sorted(groups[key], key=lambda item: item[0])
        for i in range(len(ranked) // 2):
            (low, rejected), (high, chosen) = ranked[i], ranked[-1 - i]
            if high > low and chosen != rejected:
                pairs.append({"chosen": chosen, "rejected": rejected})
    if not pairs:
        which = f" of game {game}" if game else ""
        raise PlaypenError(f"{where}: no preference pairs in {folder}: the episodes{which} of each instance all "
                           f"score the same ({len(files)} interactions files, {len(groups)} instance/role groups)")
    return pairs


def split_held_out(pairs: list[dict], share: float, seed: int) -> tuple[list[dict], list[dict]]:
    """(train, held-out): a seeded shuffle, `share` of the pairs held out (at least one when share > 0)."""
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)
    held = min(len(pairs) - 1, max(1, round(share * len(pairs)))) if share > 0 else 0
    return [pairs[i] for i in order[held:]], [pairs[i] for i in order[:held]]
