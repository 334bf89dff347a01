"""Training data files: jsonl rows, each checked by the caller's row check (errors name the file and line), and
the check of a list of chat messages that SFT, DPO and reward data share.

Not here: building a dataset from played episodes (`playpen data`: playpen.dataset_from_records).
"""
from __future__ import annotations

from pathlib import Path

from playpen.config import read_text
from playpen.reading import DATA_MAX_BYTES
from playpen.errors import PlaypenError
from playpen.storage import jsonl_lines


def same_sides(row: dict) -> str | None:
    """A preference row whose chosen and rejected are the same prefers nothing: trained on, it teaches noise (a
    reward model of accuracy 0), so it is refused with its line like any other bad row."""
    if row.get("chosen") == row.get("rejected"):
        return "'chosen' and 'rejected' are the same; a pair must prefer one reply over a different one"
    return None


def read_jsonl_rows(path: str | None, where: str, key: str, check_row, limit: int | None = None) -> list[dict]:
    """Rows of a jsonl file, each checked by `check_row(row) -> error or None`; errors name the line."""
    import json

    if not path:
        raise PlaypenError(f"{where}: {key} is required (a jsonl file)")
    file = Path(path).expanduser()
    try:
        text = read_text(file, f"{key} file", DATA_MAX_BYTES)
    except PlaypenError as e:
        raise PlaypenError(f"{where}: {e}") from None
    rows = []
    for number, line in enumerate(jsonl_lines(text), 1):  # (at newlines only: U+2028 is a JSON string's)
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise PlaypenError(f"{file}:{number}: malformed JSON: {e.msg}") from None
        except RecursionError:
            raise PlaypenError(f"{file}:{number}: nested too deep to read; flatten the row") from None
        problem = check_row(row) if isinstance(row, dict) else "expected a JSON object"
        if problem:
            raise PlaypenError(f"{file}:{number}: {problem}")
        rows.append(row)
        if limit and len(rows) >= limit:
            break
    if not rows:
        raise PlaypenError(f"{where}: {key} file {path} holds no rows")
    return rows


def check_messages(messages, need_assistant: bool = True) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "expected a non-empty list of chat messages"
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            return "every message needs string 'role' and 'content'"
    if need_assistant and not any(m["role"] == "assistant" for m in messages):
        return "no assistant message to learn from"
    return None
