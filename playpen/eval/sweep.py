"""Eval sweeps: models and training-run checkpoints × games (and × meters), one cell each, idempotent and resumable.

    sweep = load_sweep("sweeps/tiny", ["max_new_tokens=32"])   # all checks; nothing runs or is written
    cells = sweep.pending_cells()          # writes <sweep_dir>/sweep.json; cells that are not done (or running)
    for cell in cells: run_cell(sweep.dir, cell)      # what one job-array task does (picklable, cwd-independent)
    aggregate(sweep.dir)                   # sweep.csv, sweep.html, plots/*.png
    status(sweep.dir)                      # done / running / failed / pending per cell
    run_local(sweep)                       # the pending cells in this process, then aggregate

Sweep directory (default <storage_root>/sweeps/<name>):
    sweep.json                             the resolved cells (model specs, game paths, generation settings)
    cells/<model>/<game>/...               one folder per cell: result.json, state.json, attempts/ (cells.py)
    cells/<model>/meter-<name>/...         a meter cell: `playpen meter` on the model (its attempt holds the CSV)
    sweep.csv, sweep.html, plots/          the aggregate (plots.py)
    logs/                                  python -m playpen.submit's submission records and job logs
A cell is done when its result.json matches the cell's current fingerprint (model spec, game, instance set,
generation settings); change any of these and the cell runs again. A running cell whose heartbeat stopped
(job killed) counts as failed, so a rerun picks it up.
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from playpen.config import bounded, documented
from playpen.errors import PlaypenError
from playpen.eval.cells import (CELLS_DIR, RESULT_FILE, STATE_FILE, STATES, SWEEP_FILE, Cell,  # noqa: F401
                                _read, cell_state, headline, run_cell)
from playpen.defaults import BATCH_SIZE, EVAL_BOUNDS, EVAL_HELP, MAX_NEW_TOKENS, TEMPERATURE
from playpen.storage import (DEFAULT_STORAGE, STORAGE_ENV, Location, Name, absolute_location, atomic_write_json,
                             check_name, checkpoint_step, checkpoints_in, make_folder, not_a_link, path_under, slug,
                             slug_joined)


# ---------------------------------------------------------------- the YAML file

@dataclass
class RunSelector:
    path: str = documented(help="a training run folder (<run>/checkpoints/checkpoint-<step>/)")
    every: int = bounded(1, ge=1, help="every k-th checkpoint, counted back from the last (the last is always "
                                       "included)")
    base: bool = documented(False, help="also evaluate the untrained base model, as step 0")
    final: bool = documented(False, help="also evaluate the run's registered final model (needs "
                                         "<run>/model_registry.json)")
    label: str | None = documented(None, help="row name in the tables (default <experiment>/<run_id>)")


@dataclass
class GameSelector:
    name: str = documented(help="a game name (`playpen list games`)")
    instances: str | None = documented(None, help="validation, train or an instances file of the game's in/ "
                                                   "(default: the sweep's)")
    max_instances: int | None = EVAL_BOUNDS["instances"].field(None, help="default: the sweep's")


@dataclass
class SweepConfig:
    name: Name = documented(help="the sweep's name: its folder is <storage_root>/sweeps/<name>")
    models: list[str] = documented(help="registry names, run folders or checkpoint folders", factory=list)
    runs: list[str | RunSelector] = documented(help="training runs whose checkpoints to evaluate: a run folder, or "
                                                    "a mapping with the keys below", factory=list)
    partners: list[str] = documented(help="second seats of two-player games, each a cell of its own as `clem run "
                                          "-m MODEL PARTNER` (self: the model alone)", factory=list)
    games: list[str | GameSelector] = documented(help="game names, all, or mappings with the keys below",
                                                 factory=lambda: ["all"])
    instances: str = documented("validation", help="instance set of every game: validation, train or an instances "
                                                   "file")
    # generation settings of every cell: evaluate()'s arguments, in the same ranges
    max_instances: int | None = EVAL_BOUNDS["instances"].field(None, help="per game, spread over experiments (null: "
                                                                          "all)")
    max_new_tokens: int = EVAL_BOUNDS["max_new_tokens"].field(MAX_NEW_TOKENS, help=EVAL_HELP["max_new_tokens"])
    temperature: float = EVAL_BOUNDS["temperature"].field(TEMPERATURE, help=EVAL_HELP["temperature"])
    batch_size: int = EVAL_BOUNDS["batch_size"].field(BATCH_SIZE, help=EVAL_HELP["batch_size"])
    player: str = documented("auto", help="auto (rollout engine for local HF models, else clemcore's runner), "
                                          "engine or clemcore")
    meters: list[dict] = documented(help="`playpen meter` on every model too: each entry its keys (classifier, "
                                         "prompts, samples, label, max_new_tokens, temperature, threshold, limit, "
                                         "seed, batch_size; `playpen submit meter -h`) and an optional name "
                                         "(default <classifier>-<prompts stem>)", factory=list)
    output_dir: Location | None = documented(None, help="default <storage_root>/sweeps/<name>")
    storage_root: Location | None = documented(None, help="default: $PLAYPEN_STORAGE, else ./runs")


SELF = "self"  # partners: the model in every seat, as without partners


# ---------------------------------------------------------------- cells

def _cell_key(row: str, column: str) -> str:
    """<row>/<column>, each an @-composition of names (`grpo_r1@step10`): storage.slug's parts, the @ kept, so an
    existing sweep's cell folders keep their names and its finished cells do not run again."""
    return f"{slug_joined(row.split('@'), '@')}/{slug_joined(column.split('@'), '@')}"


def _checkpoints(run_dir: Path) -> list[Path]:
    return [path for _, path in checkpoints_in(run_dir / "checkpoints")]


def _run_models(sel: RunSelector, where: str) -> list[dict]:
    """(label, spec, step, checkpoint) for every selected checkpoint of one run."""
    from playpen.models.specs import base_spec_for, checkpoint_spec, is_checkpoint
    from playpen.model_registry import resolve_model

    run_dir = Path(sel.path).expanduser().absolute()
    if not run_dir.is_dir():
        raise PlaypenError(f"{where}: run directory {run_dir} does not exist")
    ckpts = _checkpoints(run_dir)
    if not ckpts:
        raise PlaypenError(f"{where}: run {run_dir} has no checkpoints (expected {run_dir}/checkpoints/"
                           f"checkpoint-<step>/); train it first or remove it from the sweep")
    for ckpt in ckpts:
        if not is_checkpoint(ckpt):
            raise PlaypenError(f"{where}: checkpoint {ckpt} is empty (no adapter_config.json or config.json); "
                               f"delete it or wait for the save to finish")
    label = sel.label or f"{run_dir.parent.name}/{run_dir.name}"
    registered = (run_dir / "model_registry.json").is_file()
    base = resolve_model(str(run_dir)) if registered else base_spec_for(ckpts[-1])
    chosen = ckpts[::-1][::sel.every][::-1]
    out = []
    if sel.base:  # the weights the adapters sit on (a full fine-tune's base is not recorded: say so)
        if not (ckpts[-1] / "adapter_config.json").is_file():
            raise PlaypenError(f"{where}: base: true needs adapter checkpoints; {ckpts[-1]} holds full weights")
        spec = json.loads(json.dumps(base))
        spec.setdefault("model_config", {}).pop("peft_model", None)
        spec["model_name"] = f"{base['model_name']}-step0"
        out.append(dict(model=label, spec=spec, step=0, checkpoint=None))
    for ckpt in chosen:
        step = checkpoint_step(ckpt)
        spec = checkpoint_spec(ckpt, base, name=f"{base['model_name']}-step{step}")
        out.append(dict(model=label, spec=spec, step=step, checkpoint=str(ckpt)))
    if sel.final:
        if not registered:
            raise PlaypenError(f"{where}: final: true needs {run_dir}/model_registry.json (written when the run "
                               f"finishes)")
        out.append(dict(model=label, spec=base, step=None, checkpoint="final"))
    for item in out:
        item["run"] = str(run_dir)
    return out


def _row(m: dict) -> str:
    return m["model"] + ("" if m["step"] is None else f"@step{m['step']}") + \
        ("@final" if m["checkpoint"] == "final" else "")


def _meters(entries: list, where: str) -> dict[str, dict]:
    """Each meters: entry checked by playpen meter's own parser and checks (prompts read, scorer resolved);
    name → its settings, with every default filled in and paths absolute (a job runs in another folder)."""
    from playpen.reward.meter import check_settings, parse_config

    out = {}
    for i, entry in enumerate(entries):
        at = f"{where}: meters[{i}]"
        if not isinstance(entry, dict):
            raise PlaypenError(f"{at}: expected a mapping of playpen meter's flags (classifier:, prompts:, ...)")
        entry = dict(entry)
        name = str(entry.pop("name", "") or "")
        for key in ("model", "compare", "output"):
            if key in entry:
                raise PlaypenError(f"{at}: {key}: is not a meter setting in a sweep (the sweep's models are "
                                   f"metered, into their cells)")
        args = parse_config({**entry, "model": "sweep"}, at)
        try:
            check_settings(args)
        except PlaypenError as e:
            raise PlaypenError(f"{at}: {e}") from None
        settings = {k: v for k, v in vars(args).items() if k not in ("model", "compare", "output")}
        settings["prompts"] = str(Path(args.prompts).expanduser().absolute())
        if Path(args.classifier).expanduser().exists():
            settings["classifier"] = str(Path(args.classifier).expanduser().absolute())
        name = check_name(name, f"{at}: name") if name else slug(f"{Path(args.classifier).name}-"
                                                                    f"{Path(args.prompts).stem}")
        if name in out:
            raise PlaypenError(f"{at}: a second meter named {name!r}; give each a distinct name:")
        out[name] = settings
    return out


@dataclass
class Sweep:
    config: SweepConfig
    source: str  # the YAML file
    dir: Path
    cells: list[Cell]

    def write_manifest(self) -> Path:
        """sweep.json: what status/aggregate/run_cell read; rewritten on every (re)submission."""
        try:
            make_folder(self.dir, "sweep folder")
        except PlaypenError as e:
            raise PlaypenError(f"{e}; set output_dir or storage_root to a writable folder") from None
        return atomic_write_json(self.dir / SWEEP_FILE, {
            "name": self.config.name, "source": self.source, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "config": asdict(self.config), "cells": [asdict(c) for c in self.cells]})

    def pending_cells(self) -> list[Cell]:
        """Writes sweep.json, then returns the cells that still need a run: missing, failed, died, or changed
        (fingerprint differs). Cells running right now (fresh heartbeat) are left alone."""
        self.write_manifest()
        return [c for c in self.cells if cell_state(self.dir, c)["state"] in ("pending", "failed")]


def load_sweep(path: str | Path, overrides: list[str] = (), storage_root: str | Path | None = None) -> Sweep:
    """Read and check a sweep file: every model, run, checkpoint and game resolved now (one-line errors);
    nothing is written. The sweep dir is output_dir, else <storage_root>/sweeps/<name> with the file's
    storage_root, else the `storage_root` argument (e.g. a cluster profile's), else $PLAYPEN_STORAGE or ./runs."""
    from playpen.config import find_config, load_config

    path = find_config(path, "sweep file")  # a file, or a shipped sweep's name (sweeps/tiny)
    config = load_config(SweepConfig, path, list(overrides), keys_help="every key: `playpen submit sweep --help`")
    where = str(path)
    if config.player not in ("auto", "engine", "clemcore"):
        raise PlaypenError(f"{where}: player must be auto, engine or clemcore, got {config.player!r}")
    if not config.models and not config.runs:
        raise PlaypenError(f"{where}: list at least one entry under models: or runs:")
    models = _sweep_models(config, where)
    partners = _sweep_partners(config, where)
    games = _sweep_games(config, where)
    keys: set = set()
    cells = _game_cells(config, where, models, partners, games, keys)
    for partner in partners:
        if partner and not any(c.partner == partner for c in cells):
            raise PlaypenError(f"{where}: partners: {partner['model_name']} plays none of the games (a partner takes "
                               f"the second seat of two-player games; programmatic: built-in games only)")
    cells += _meter_cells(config, where, models, keys)
    return Sweep(config, str(Path(path).absolute()), _sweep_dir(config, where, storage_root), cells)


def _sweep_models(config: SweepConfig, where: str) -> list[dict]:
    """models: (registry names, folders) then runs: (their checkpoints), each resolved now."""
    from playpen.models.specs import resolve_eval_model

    models = []
    for name in config.models:
        try:
            spec = resolve_eval_model(name)
        except PlaypenError as e:
            raise PlaypenError(f"{where}: models: {e}") from None
        label = spec["model_name"] if Path(name).expanduser().exists() else name  # paths: their model's name
        models.append(dict(model=label, spec=spec, step=None, checkpoint=None, run=None))
    for i, run in enumerate(config.runs):
        sel = RunSelector(path=run) if isinstance(run, str) else run
        models += _run_models(sel, f"{where}: runs[{i}]")
    return models


def _sweep_partners(config: SweepConfig, where: str) -> list[dict | None]:
    from playpen.eval.partners import resolve_partner

    partners = []
    for name in config.partners or [SELF]:
        try:
            partners.append(None if name == SELF else resolve_partner(name))
        except PlaypenError as e:
            raise PlaypenError(f"{where}: partners: {e}") from None
    return partners


def _sweep_games(config: SweepConfig, where: str) -> dict[str, tuple]:
    """{game name: (its selector, its registry entry)}: a game named on its own keeps its own options over one a
    selector brings."""
    from playpen.games.registry import is_selector, select_games

    selectors = [GameSelector(name=g) if isinstance(g, str) else g for g in config.games]
    if not selectors and not config.meters:
        raise PlaypenError(f"{where}: games: is empty; name games or use [all] (or list meters:)")
    games: dict[str, tuple] = {}
    for sel in sorted(selectors, key=lambda s: is_selector(s.name)):
        try:
            found = select_games([sel.name])
        except PlaypenError as e:
            raise PlaypenError(f"{where}: games: {e}") from None
        games.update((entry.name, (sel, entry)) for entry in found if entry.name not in games)
    return games


def _game_cells(config: SweepConfig, where: str, models: list[dict], partners: list, games: dict[str, tuple],
                keys: set) -> list[Cell]:
    """A cell per game × model × partner that plays it; `keys` collects the cells' keys (none twice)."""
    from playpen.eval.partners import plays_with
    from playpen.games.instances import instances_file

    cells = []
    for sel, entry in games.values():
        instance_set = sel.instances or config.instances
        try:
            instances_file(entry, instance_set)
        except PlaypenError as e:
            raise PlaypenError(f"{where}: {e}") from None
        limit = sel.max_instances if sel.max_instances is not None else config.max_instances
        for m, partner in ((m, p) for p in partners for m in models if plays_with(entry, p)):
            row = _row(m) + (f"--{partner['model_name']}" if partner else "")  # clem's MODEL--PARTNER
            game_key = entry.name + ("" if instance_set == "validation" else f"~{instance_set}")
            key = _cell_key(row, game_key)
            if key in keys:
                raise PlaypenError(f"{where}: {row} × {game_key} is listed twice")
            keys.add(key)
            cells.append(Cell(key=key, model=m["model"], spec=m["spec"], game=entry.name,
                              game_path=str(entry.path.absolute()), game_spec=entry.spec, static=entry.static,
                              instance_set=instance_set, max_instances=limit, max_tokens=config.max_new_tokens,
                              temperature=config.temperature, batch_size=config.batch_size, run=m["run"],
                              step=m["step"], checkpoint=m["checkpoint"], player=config.player, partner=partner))
    return cells


def _meter_cells(config: SweepConfig, where: str, models: list[dict], keys: set) -> list[Cell]:
    """A cell per meter × model; `keys` as in _game_cells."""
    cells = []
    for name, settings in _meters(config.meters, where).items():
        for m in models:
            row = _row(m)
            key = _cell_key(row, f"meter-{name}")
            if key in keys:
                raise PlaypenError(f"{where}: {row} × meter {name} is listed twice")
            keys.add(key)
            cells.append(Cell(key=key, model=m["model"], spec=m["spec"], game=f"meter:{name}", game_path="",
                              game_spec={}, static=False, instance_set="", max_instances=None,
                              max_tokens=settings["max_new_tokens"], temperature=settings["temperature"],
                              batch_size=settings["batch_size"], run=m["run"], step=m["step"],
                              checkpoint=m["checkpoint"], meter=settings))
    return cells


def _sweep_dir(config: SweepConfig, where: str, storage_root: str | Path | None) -> Path:
    if config.output_dir:
        sweep_dir = not_a_link(absolute_location(config.output_dir, f"{where}: output_dir"), f"{where}: output_dir")
    else:
        root = str(config.storage_root or storage_root or os.environ.get(STORAGE_ENV) or DEFAULT_STORAGE)
        sweep_dir = path_under(absolute_location(root, "storage_root"), "sweeps", config.name, what="sweep folder")
    if sweep_dir.exists() and not (sweep_dir / SWEEP_FILE).is_file():
        other = [p.name for p in sweep_dir.iterdir() if p.name != "logs"] if sweep_dir.is_dir() else ["(a file)"]
        if other:
            raise PlaypenError(f"{where}: output dir {sweep_dir} exists and is not a sweep's (no {SWEEP_FILE}); "
                               f"choose another output_dir")
    return sweep_dir


# ---------------------------------------------------------------- the whole sweep

def read_manifest(sweep_dir: str | Path) -> tuple[dict, list[Cell]]:
    sweep_dir = Path(sweep_dir).expanduser()
    manifest = _read(sweep_dir / SWEEP_FILE) if sweep_dir.is_dir() else None
    if manifest is None:
        raise PlaypenError(f"{sweep_dir} is not a sweep directory (no readable {SWEEP_FILE}); give the output_dir "
                           f"of a sweep that was submitted or run")
    return manifest, [Cell.from_dict(c) for c in manifest["cells"]]


def status(sweep_dir: str | Path) -> dict:
    """{"name", "dir", "counts": {done, running, failed, pending}, "cells": [{key, model, step, game, state,
    error?, host?, job?}]}."""
    manifest, cells = read_manifest(sweep_dir)
    rows = []
    for cell in cells:
        st = cell_state(sweep_dir, cell)
        row = {"key": cell.key, "model": cell.model, "step": cell.step, "game": cell.game, "state": st["state"]}
        row.update({k: st[k] for k in ("error", "host", "job", "task", "note") if st.get(k)})
        if st["state"] == "done":
            row["result"] = headline(st["result"])
        rows.append(row)
    counts = {s: sum(r["state"] == s for r in rows) for s in STATES}
    return {"name": manifest["name"], "dir": str(Path(sweep_dir).absolute()), "counts": counts, "cells": rows}


def format_status(info: dict) -> str:
    counts = ", ".join(f"{n} {s}" for s, n in info["counts"].items())
    lines = [f"sweep {info['name']} ({info['dir']}): {counts}"]
    for row in info["cells"]:
        extra = row.get("error") or row.get("note") or row.get("result", "")
        where = f" [{row['host']}{' job ' + str(row['job']) if row.get('job') else ''}]" \
            if row["state"] == "running" and row.get("host") else ""
        lines.append(f"  {row['state']:8s} {row['key']:48s}{where} {extra}".rstrip())
    return "\n".join(lines)


def aggregate(sweep_dir: str | Path) -> dict:
    """sweep.csv (one row per model/checkpoint × game), sweep.html, plots/learning_curve.png and
    plots/heatmap.png, from the cells that are done. Returns the paths and whether every cell is done."""
    from playpen.eval.plots import write_aggregate

    manifest, cells = read_manifest(sweep_dir)
    results = []
    for cell in cells:
        st = cell_state(sweep_dir, cell)
        results.append((cell, st["state"], st.get("result")))
    out = write_aggregate(Path(sweep_dir), manifest["name"], results)
    out["complete"] = all(state == "done" for _, state, _ in results)
    return out


def run_local(sweep: Sweep | str | Path, overrides: list[str] = (), log=None) -> dict:
    """Run the pending cells one after the other in this process (no scheduler), then aggregate.
    Returns {"ran": [keys], "failed": {key: error}, "aggregate": {...}}."""
    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    sweep = sweep if isinstance(sweep, Sweep) else load_sweep(sweep, overrides)
    pending = sweep.pending_cells()
    log(f"[sweep] {sweep.config.name}: {len(pending)} of {len(sweep.cells)} cells to run ({sweep.dir})")
    ran, failed = [], {}
    for cell in pending:
        ran.append(cell.key)
        try:
            result = run_cell(sweep.dir, cell)
            log(f"[sweep] done   {cell.key}: {headline(result)} ({result['seconds']} s)")
        except Exception as e:  # noqa: BLE001  (recorded in the cell's state.json; the others go on)
            failed[cell.key] = cell_state(sweep.dir, cell).get("error", str(e))
            log(f"[sweep] FAILED {cell.key}: {failed[cell.key]}")
    return {"ran": ran, "failed": failed, "aggregate": aggregate(sweep.dir)}


def add_arguments(parser) -> None:
    parser.add_argument("config", nargs="?", help="sweep YAML (runs the pending cells here, one by one)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the sweep file")
    parser.add_argument("--status", metavar="SWEEP_DIR")
    parser.add_argument("--aggregate", metavar="SWEEP_DIR")


def main(args) -> int:
    """python -m playpen.eval.sweep CONFIG [key=value ...] | --status DIR | --aggregate DIR (here, no SLURM; the
    deprecated `playpen sweep-local`; `playpen submit sweep --executor local` runs the cells as local jobs)."""
    if not (args.status or args.aggregate or args.config):
        raise PlaypenError("give a sweep config, --status DIR or --aggregate DIR")
    if args.status:
        print(format_status(status(args.status)))
    elif args.aggregate:
        print(json.dumps(aggregate(args.aggregate), indent=2))
    else:
        out = run_local(args.config, args.overrides)
        print(format_status(status(out["aggregate"]["dir"])))
        return 1 if out["failed"] else 0
    return 0


if __name__ == "__main__":  # python -m playpen.eval.sweep: an alias of `playpen sweep-local`
    from playpen.errors import run_command

    sys.exit(run_command("playpen sweep-local", add_arguments, main, description=main.__doc__))
