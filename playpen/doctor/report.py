"""What `playpen doctor` finds: one Check per line (OK / WARN / FAILED / SKIPPED, a one-line detail and what to do),
run one at a time under `attempt`, shown as a table (row by row as each check ends, under `streaming`) and written
as JSON."""
from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

OK, WARN, FAILED, SKIPPED = "OK", "WARN", "FAILED", "SKIPPED"


@dataclass
class Check:
    section: str  # software | device | feature | storage | distributed
    name: str
    status: str
    detail: str  # one line: what was measured, or why it failed / was skipped
    advice: str = ""  # one line: what to do (FAILED, WARN, SKIPPED)
    seconds: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)


class Finding(Exception):
    """Raised inside a check to end it with a status other than OK: `Finding(FAILED, why, what to do)`."""

    def __init__(self, status: str, detail: str, advice: str = "", **data: Any) -> None:
        super().__init__(detail)
        self.status, self.detail, self.advice, self.data = status, detail, advice, data


def missing_package(name: str, pin: str | None, needed_for: str) -> Finding:
    """The one line for a package that does not import."""
    spec = f"{name}=={pin}" if pin else name
    return Finding(FAILED, f"{name} is not installed ({needed_for} needs it)",
                   f"pip install {spec} (the version in requirements/lock.txt), or run inside the image")


@contextlib.contextmanager
def captured(lines: list[str], keep: int = 20) -> Iterator[None]:
    """What libraries print while a check runs (C code included: file descriptors 1 and 2), kept out of the table:
    its last `keep` lines are appended to `lines` for the JSON report."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved, streams = [os.dup(1), os.dup(2)], (sys.stdout, sys.stderr)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        sys.stdout = sys.stderr = open(1, "w", buffering=1, closefd=False)  # Python's own prints, wherever
        try:                                                               # sys.stdout pointed (pytest's capture)
            yield
        finally:
            sys.stdout.flush()
            sys.stdout, sys.stderr = streams
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            sink.seek(0)
            text = sink.read().decode(errors="replace")
            lines.extend(line for line in text.splitlines()[-keep:] if line.strip())


_listeners: list[Callable[[Check], None]] = []  # told of each check as it ends (streaming)


@contextlib.contextmanager
def streaming(listener: Callable[[Check], None]) -> Iterator[None]:
    """`listener(check)` is called as each check ends (after its output capture), e.g. to print its row then:
    the slow checks (features: ~90 s) would otherwise leave the screen blank until the whole table is ready."""
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)


def ended(check: Check) -> Check:
    """A check that is done: the streaming listeners hear of it; returned as it is."""
    for listener in list(_listeners):
        listener(check)
    return check


def attempt(section: str, name: str, fn: Callable[[], tuple[str, dict] | str], quiet: bool = True) -> Check:
    """Run one check: its return value is the OK line (and data); a Finding sets another status; any other
    exception is FAILED with its first line, the traceback's last frame kept in data for the JSON. With `quiet`
    what it prints goes to the JSON (data["output"]), not the screen."""
    start = time.perf_counter()
    output: list[str] = []
    try:
        with captured(output) if quiet else contextlib.nullcontext():
            result = fn()
        detail, data = result if isinstance(result, tuple) else (result, {})
        check = Check(section, name, OK, detail, data=data)
    except Finding as f:
        check = Check(section, name, f.status, f.detail, f.advice, data=f.data)
    except Exception as e:  # noqa: BLE001  (a doctor reports every failure as a line, it never stops at one)
        first = (str(e).strip().splitlines() or [""])[0][:300]
        frame = traceback.extract_tb(e.__traceback__)[-1]
        check = Check(section, name, FAILED, f"{type(e).__name__}: {first}",
                      "see the traceback location in the JSON report, and the package's own docs",
                      data={"where": f"{frame.filename}:{frame.lineno}"})
    check.seconds = round(time.perf_counter() - start, 3)
    if output:
        check.data["output"] = output
    return ended(check)


def worst(checks: list[Check]) -> str:
    statuses = {c.status for c in checks}
    return next((s for s in (FAILED, WARN) if s in statuses), OK)


def table(checks: list[Check], width: int = 120) -> str:
    """One row per check: section, name, status, detail; advice on an indented line below a non-OK row."""
    w_sec = max([len(c.section) for c in checks] + [7])
    w_name = max([len(c.name) for c in checks] + [5])
    rows = [row(c, w_sec, w_name) for c in checks]
    return "\n".join([table_header(w_sec, w_name, width), *rows, table_summary(checks)])


def table_header(w_sec: int, w_name: int, width: int = 120) -> str:
    return f"{'section':{w_sec}}  {'check':{w_name}}  {'status':7}  detail\n" + "-" * min(width, 100)


def row(check: Check, w_sec: int, w_name: int) -> str:
    """A check's row of the table (and its advice line below, when not OK)."""
    line = (f"{check.section:{w_sec}}  {check.name:{w_name}}  {check.status:7}  {check.detail}"
            + (f"  ({check.seconds:.1f} s)" if check.seconds >= 1 else ""))
    if check.advice and check.status != OK:
        line += f"\n{'':{w_sec}}  {'':{w_name}}  {'':7}  → {check.advice}"
    return line


def table_summary(checks: list[Check]) -> str:
    counts = {s: sum(c.status == s for c in checks) for s in (OK, WARN, FAILED, SKIPPED)}
    return ", ".join(f"{n} {s}" for s, n in counts.items() if n) + f"; overall {worst(checks)}"


def as_json(checks: list[Check], **meta: Any) -> str:
    return json.dumps({**meta, "overall": worst(checks), "checks": [asdict(c) for c in checks]}, indent=2,
                      default=str)


def from_dicts(rows: list[dict]) -> list[Check]:
    return [Check(**row) for row in rows]
