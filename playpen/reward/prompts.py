"""The prompts jsonl that `playpen meter` generates from and GRPO trains on (`prompts:`): single-turn generation.

One row per line, {"prompt": "text"} or {"prompt": [chat messages ending with a user turn]}; blank lines are
skipped. Every problem is one line naming the file and line number (via playpen.training_data.read_jsonl_rows).
"""
from __future__ import annotations

from playpen import training_data
from playpen.config import config_file


def _row_problem(row: dict) -> str | None:
    if "prompt" not in row:
        return "missing 'prompt' (rows look like {\"prompt\": \"...\"} or {\"prompt\": [messages]})"
    prompt = row["prompt"]
    if isinstance(prompt, str):
        return None if prompt.strip() else "'prompt' is empty"
    problem = training_data.check_messages(prompt, need_assistant=False)
    if problem:
        return f"'prompt': {problem}"
    if prompt[-1]["role"] != "user":
        return "'prompt' must end with a user message (the model answers it)"
    return None


def as_messages(prompt) -> list[dict]:
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]


def read_prompts(path: str | None, where: str, key: str = "prompts", limit: int | None = None) -> list[list[dict]]:
    """The prompts of a jsonl file as chat message lists."""
    path = config_file(path) if path else path  # a file, or a shipped one (reward/prompts/...)
    rows = training_data.read_jsonl_rows(path, where, key, _row_problem, limit)
    return [as_messages(row["prompt"]) for row in rows]
