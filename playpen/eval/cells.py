"""One sweep cell (a model or checkpoint × one game, or × one meter): its state on disk and `run_cell`, what a
job-array task runs. A meter cell is `playpen meter` on that model (playpen.reward.meter): its mean score.

    cells/<model>/<game>/result.json       a finished cell (atomic); holds the fingerprint of what it evaluated
    cells/<model>/<game>/state.json        running (with a heartbeat every 30 s) or failed (with the error line)
    cells/<model>/<game>/attempts/<id>/    each attempt's clem records (own folder: concurrent runs never collide)

Cells carry absolute paths and resolved model specs only, so a job on another node, in another working
directory, runs them the same; `Cell` and `run_cell` are top-level, hence picklable for submitit.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
import traceback
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from playpen.errors import PlaypenError
from playpen.records import claim_dir
from playpen.storage import atomic_write_json, make_folder, new_run_id, read_json_or_none

SWEEP_FILE = "sweep.json"
CELLS_DIR = "cells"
RESULT_FILE = "result.json"
STATE_FILE = "state.json"
HEARTBEAT_S = 30
STALE_AFTER_S = 300  # a running cell without a heartbeat for this long died with its job
STATES = ("done", "running", "failed", "pending")


@dataclass
class Cell:
    """One model (or checkpoint) × one game: everything a job needs, with absolute paths only."""
    key: str  # "<model>/<game>": its folder under cells/
    model: str  # row label: registry name, or run label
    spec: dict  # clemcore ModelSpec
    game: str
    game_path: str
    game_spec: dict
    static: bool
    instance_set: str
    max_instances: int | None
    max_tokens: int
    temperature: float
    batch_size: int
    run: str | None = None
    step: int | None = None  # checkpoint step (0: the base model of the run)
    player: str = "auto"
    checkpoint: str | None = None
    meter: dict | None = None  # a meter cell: playpen meter's settings (classifier, prompts, samples, ...)
    partner: dict | None = None  # clemcore ModelSpec of the second seat (as `clem run -m MODEL PARTNER`)

    def fingerprint(self) -> str:
        """What decides the result; batch size, player and folder locations do not."""
        what = [self.spec, self.game, self.instance_set, self.max_instances, self.max_tokens, self.temperature]
        if self.meter is not None:  # (cells of earlier sweeps keep their fingerprint)
            what.append({k: v for k, v in self.meter.items() if k != "batch_size"})
        if self.partner is not None:
            what.append(self.partner)
        return hashlib.sha1(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls, data: dict) -> "Cell":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def headline(result: dict) -> str:
    """A done cell's result in a few words (status lines, logs)."""
    if "meter_mean" in result:
        return f"mean {result['meter_mean']:.4f} ± {result['meter_stderr']:.4f}"
    return f"clemscore {result['clemscore']}"


# ---------------------------------------------------------------- state

def _read(path: Path) -> dict | None:
    """A cell's (or the sweep's) JSON file; None when missing, unreadable or not a regular file."""
    value = read_json_or_none(path)
    return value if isinstance(value, dict) else None


def _dead_here(state: dict) -> bool:
    """The cell's process ran on this host and is gone (killed with -9, the node's job ended): a heartbeat
    would take STALE_AFTER_S to say so. Another host's process cannot be asked."""
    if state.get("host") != socket.gethostname() or not isinstance(state.get("pid"), int) or state["pid"] <= 0:
        return False
    try:
        os.kill(state["pid"], 0)
    except ProcessLookupError:
        return True
    except OSError:  # (another user's process: alive)
        return False
    return False


def cell_state(sweep_dir: str | Path, cell: Cell) -> dict:
    """{"state": done|running|failed|pending, ...}: result.json (matching fingerprint) wins, then state.json."""
    cell_dir = Path(sweep_dir) / CELLS_DIR / cell.key
    result = _read(cell_dir / RESULT_FILE)
    if result and result.get("fingerprint") == cell.fingerprint():
        return {"state": "done", "result": result}
    state = _read(cell_dir / STATE_FILE) or {}
    changed = {"note": "settings changed since the last result"} if result else {}
    if state.get("state") == "running":
        try:
            age = time.time() - float(state.get("heartbeat", 0))
        except (TypeError, ValueError):
            age = float("inf")
        if _dead_here(state):
            return {**state, "state": "failed", "error": f"its process (pid {state['pid']} on this host) is gone "
                                                         f"(killed?)"}
        if age < STALE_AFTER_S:
            return {**state, "state": "running"}
        return {**state, "state": "failed", "error": f"no heartbeat for {age:.0f} s (the job died?)"}
    if state.get("state") == "failed" and state.get("fingerprint") == cell.fingerprint():
        return {**state, "state": "failed"}
    return {"state": "pending", **changed}


class _Heartbeat:
    """Rewrites state.json every HEARTBEAT_S seconds while the cell runs."""

    def __init__(self, path: Path, state: dict):
        self.path, self.state, self.stop = path, state, threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while not self.stop.wait(HEARTBEAT_S):
            self.state["heartbeat"] = time.time()
            try:
                atomic_write_json(self.path, self.state)
            except OSError:
                pass

    def __enter__(self):
        atomic_write_json(self.path, self.state)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        return False


_PLAYER_CACHE: dict = {}  # the last player, so a local sweep loads one model once for all its games


def _player_for(cell: Cell):
    from playpen.eval.evaluation import make_player

    key = json.dumps([cell.spec, cell.max_tokens, cell.temperature, cell.batch_size, cell.player, cell.partner],
                     sort_keys=True)
    if key not in _PLAYER_CACHE:
        _PLAYER_CACHE.clear()
        _PLAYER_CACHE[key] = make_player(cell.spec, cell.max_tokens, cell.temperature, cell.batch_size, cell.player,
                                         partner=cell.partner)
    return _PLAYER_CACHE[key]


def _play(cell: Cell, records: Path) -> dict:
    from playpen.eval.evaluation import in_file_order, score_game, scored_episodes
    from playpen.eval.partners import results_folder
    from playpen.eval.scoring import load_episode_scores, summarize_game
    from playpen.games.instances import instances_file, read_instances
    from playpen.games.registry import GameEntry

    entry = GameEntry(cell.game, Path(cell.game_path), "sweep", cell.game_spec)
    pairs = in_file_order(read_instances(instances_file(entry, cell.instance_set)), cell.max_instances)
    player = _player_for(cell)
    player.play(entry, pairs, records)
    game_dir = records / results_folder(cell.spec, cell.partner) / cell.game
    scored = scored_episodes(game_dir) if player.scores_while_playing else score_game(entry, game_dir)
    if scored == 0:
        raise RuntimeError(f"no episode of {cell.game} finished (see clembench.log)")
    summary = summarize_game(cell.game, load_episode_scores(records, model=game_dir.parent.name, games=[cell.game]))
    return {**summary.to_dict(), "instances": len(pairs), "missing": len(pairs) - summary.episodes}


def _meter(cell: Cell, records: Path) -> dict:
    from playpen.reward.meter import check_settings, meter_specs, parse_config

    args = parse_config({**cell.meter, "model": cell.model}, f"sweep cell {cell.key}")
    prompts, scorer = check_settings(args)
    summary, = meter_specs(args, prompts, [(cell.model, cell.spec)], scorer, records)
    return {f"meter_{k}": summary[k] for k in ("mean", "stderr", "stderr_by_prompt", "share_above", "threshold",
                                              "n", "prompts")} | {"classifier": summary["classifier"]}


def run_cell(sweep_dir: str | Path, cell: Cell | dict) -> dict:
    """Play and score one cell (or meter it); writes cells/<key>/result.json atomically and returns it. Raises on
    failure (after recording it in state.json), so a job array marks the task failed."""
    sweep_dir = Path(sweep_dir).expanduser().absolute()
    if not (sweep_dir / SWEEP_FILE).is_file():
        raise PlaypenError(f"{sweep_dir} is not a sweep directory (no {SWEEP_FILE})")
    cell = Cell.from_dict(cell) if isinstance(cell, dict) else cell
    cell_dir = make_folder(sweep_dir / CELLS_DIR / cell.key, "sweep folder", root=sweep_dir)
    # clemcore writes its records by name in here: a folder made now (never one that was there), unique even for
    # a rerun in the same second
    records = claim_dir(make_folder(cell_dir / "attempts", "sweep folder", root=sweep_dir), new_run_id())
    attempt = records.name
    state = {"state": "running", "attempt": attempt, "host": socket.gethostname(), "pid": os.getpid(),
             "job": os.environ.get("SLURM_ARRAY_JOB_ID", os.environ.get("SLURM_JOB_ID")),
             "task": os.environ.get("SLURM_ARRAY_TASK_ID"), "started": time.time(), "heartbeat": time.time(),
             "fingerprint": cell.fingerprint()}
    started = time.time()
    with _Heartbeat(cell_dir / STATE_FILE, state) as beat:
        try:
            measured = _meter(cell, records) if cell.meter is not None else _play(cell, records)
        except BaseException as e:
            beat.stop.set()
            beat.thread.join()
            message = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            atomic_write_json(cell_dir / STATE_FILE, {**state, "state": "failed", "finished": time.time(),
                                                      "error": f"{type(e).__name__}: {message}"[:500],
                                                      "traceback": traceback.format_exc()[-4000:]})
            raise
    result = {**{k: v for k, v in asdict(cell).items() if k not in ("spec", "game_spec")}, **measured,
              "fingerprint": cell.fingerprint(), "attempt": attempt,
              "records": str(records.relative_to(sweep_dir)), "seconds": round(time.time() - started, 1),
              "finished": time.strftime("%Y-%m-%dT%H:%M:%S"), "model_name": cell.spec["model_name"]}
    atomic_write_json(cell_dir / RESULT_FILE, result)
    atomic_write_json(cell_dir / STATE_FILE, {**state, "state": "done", "finished": time.time()})
    return result
