"""What each `playpen submit` command sends (a Plan): its config checked by the command's own checks, the folder
its results go to, the job(s). Nothing here submits or writes beyond creating the storage root.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from playpen.config import config_file, load_config, read_text
from playpen.errors import PlaypenError
from playpen.reading import read_json
from playpen.storage import (DEFAULT_STORAGE, STORAGE_ENV, RunDir, check_location, not_a_link, path_under,
                             read_json_or_none, resolve_storage_root, slug, slug_joined, timestamp)
from playpen.submit import executor as exe
from playpen.submit import jobs, status
from playpen.submit.profiles import ClusterProfile


@dataclass
class Plan:
    """What one submission sends: the callable(s), where logs and results go."""

    kind: str  # train | eval | meter | sweep | tournament
    directory: Path  # run dir, eval results dir, sweep or tournament dir
    storage_root: Path
    job: jobs.PlaypenJob
    array: list[list] | None = None  # sweep/tournament: the cells (matches) of each job (one job per entry)
    aggregate: tuple[Callable, Any] | None = None  # after the array: on SLURM a dependent job, with --wait here
    report: Callable[[], str] | None = None  # what --wait prints at the end
    verdict: Callable[[], int] | None = None  # --wait's exit code once the job succeeded (doctor: 1 if a check FAILED)


def storage_root_for(profile: ClusterProfile, configured: str | None, check: bool) -> Path:
    """The config's storage_root, else the profile's, else $PLAYPEN_STORAGE or ./runs. A real submission
    creates it and checks that it is writable; a dry run only names it (it is the cluster's path)."""
    root = configured or profile.storage_root
    if check:
        return resolve_storage_root(root)
    root = check_location(str(root or os.environ.get(STORAGE_ENV) or DEFAULT_STORAGE), "storage_root")
    return Path(root).expanduser().absolute()


def plan_train(args: argparse.Namespace, profile: ClusterProfile, config: str, res: exe.Resources) -> Plan:
    """The trainer's own config class checks keys and types now; the run id is pinned so the job, its
    requeues and a resubmission of the same command all use one run dir (the trainer's default id)."""
    from playpen.train.runner import check_config, keys_help, load_recipe, run_id_of

    recipe = load_recipe(args.command)
    cfg = load_config(recipe.Config, config, list(args.overrides), keys_help=keys_help(args.command))
    check_config(recipe, cfg, config)  # trainer values, key.json: refused now, not after the job started
    from playpen.games.registry import resolve_game
    from playpen.model_registry import resolve_model

    if "/" not in cfg.model:  # a registry name (a folder may exist on the cluster only); its weights load in the job
        resolve_model(cfg.model)
    if getattr(cfg, "game", None):  # (data files are read by the job: they may exist on the cluster only)
        resolve_game(cfg.game)
    run_id = run_id_of(args.command, cfg)
    root = storage_root_for(profile, cfg.storage_root, check=not args.dry_run)
    run_dir = RunDir.for_experiment(root, cfg.experiment, run_id).path if not args.dry_run else \
        path_under(root, cfg.experiment, run_id, what="run folder")
    job = jobs.TrainJob(args.command, config, list(args.overrides), run_id, str(status.log_dir(run_dir)),
                        profile.max_requeues, use_gpus=res.gpus_per_node > 0)
    return Plan("train", run_dir, root, job)


def plan_eval(args: argparse.Namespace, profile: ClusterProfile, config: str, res: exe.Resources) -> Plan:
    if res.nodes > 1:
        raise PlaypenError("eval runs on one node; drop --nodes (use a sweep to spread models over nodes)")
    from playpen.eval.partners import pair_games, resolve_partner
    from playpen.games.registry import select_games
    from playpen.models.specs import resolve_eval_model

    spec = load_config(jobs.EvalSpec, config, list(args.overrides), keys_help="every key: `playpen submit eval --help`")
    try:  # the model and games now, as a sweep's are, not when the job starts
        resolve_eval_model(spec.model)
        entries = select_games(spec.games, spec.suite)
        if spec.partner is not None:  # as `playpen eval MODEL PARTNER` and a sweep's partners: key.json, 2 seats
            pair_games(entries, resolve_partner(spec.partner), named=bool(spec.games))
    except PlaypenError as e:
        raise PlaypenError(f"{config}: {e}") from None
    root = storage_root_for(profile, spec.storage_root, check=not args.dry_run)
    # the pair in the default folder's name, as clem names the records inside (MODEL--PARTNER)
    safe = slug_joined([Path(m).name for m in (spec.model, spec.partner) if m is not None], "--")
    results = not_a_link(Path(spec.results_dir).expanduser().absolute(), "results_dir") if spec.results_dir else \
        path_under(root, "eval", f"{safe}-{timestamp()}", what="results folder")
    job = jobs.EvalJob(spec, str(results), str(status.log_dir(results)), profile.max_requeues,
                       use_gpus=res.gpus_per_node > 0)
    return Plan("eval", results, root, job)


def plan_meter(args: argparse.Namespace, profile: ClusterProfile, config: str, res: exe.Resources) -> Plan:
    """`playpen meter` with the YAML's keys as its flags; checked now by the command's own parser and checks."""
    from playpen.config import load_yaml, merge, parse_overrides
    from playpen.reward.meter import check_inputs, parse_config

    if res.nodes > 1:
        raise PlaypenError("meter runs on one node; drop --nodes")
    settings = merge(load_yaml(config), parse_overrides(list(args.overrides)))
    root = storage_root_for(profile, settings.pop("storage_root", None), check=not args.dry_run)
    prompts = config_file(str(settings.get("prompts", "")))  # here, else the packaged copy (as deepspeed: files)
    if settings.get("prompts") and prompts.is_file():
        settings["prompts"] = str(prompts.absolute())  # the job may start elsewhere
    safe = slug(Path(str(settings.get("model", ""))).name)
    settings["output"] = str(Path(settings["output"]).expanduser().absolute()) if settings.get("output") else \
        str(path_under(root, "meter", f"{safe}-{timestamp()}", what="meter folder"))
    check_inputs(parse_config(settings, config))  # prompts, models and the classifier: before anything is submitted
    job = jobs.MeterJob(settings, str(status.log_dir(Path(settings["output"]))), profile.max_requeues,
                        use_gpus=res.gpus_per_node > 0)
    return Plan("meter", Path(settings["output"]), root, job)


def plan_doctor(args: argparse.Namespace, profile: ClusterProfile, res: exe.Resources) -> Plan:
    """`playpen doctor` as a job: one task per GPU (one per node on CPU), as training runs, so the rendezvous
    and all-reduce are the ones a training job would do. The report goes to <storage_root>/doctor/<time>-job-<host>/."""
    import time

    from playpen.doctor import DOCTOR_FILE, output_folder

    if args.overrides:
        raise PlaypenError(f"doctor takes no key=value overrides (got {' '.join(args.overrides)}); "
                           f"use --storage-root and --skip")
    root = storage_root_for(profile, args.storage_root, check=not args.dry_run)
    folder = output_folder(root, "job")
    job = jobs.DoctorJob(str(folder), str(status.log_dir(folder)), submitted=time.time(), skip=tuple(args.skip),
                         storage_root=str(root), timeout_s=args.timeout, use_gpus=res.gpus_per_node > 0)

    def report() -> str:
        from playpen.doctor.report import from_dicts, table

        path = folder / DOCTOR_FILE
        if not path.is_file():
            return f"no {path}: the job ended before rank 0 wrote it (see its logs: playpen submit logs {folder})"
        return table(from_dicts(read_json(path, "doctor report")["checks"])) + f"\nreport: {path}"

    def verdict() -> int:
        path = folder / DOCTOR_FILE
        return 0 if path.is_file() and (read_json_or_none(path) or {}).get("overall") not in (None, "FAILED") else 1

    return Plan("doctor", folder, root, job, report=report, verdict=verdict)


def plan_sweep(args: argparse.Namespace, profile: ClusterProfile, config: str, res: exe.Resources,
               kind: str) -> Plan | None:
    """Pending cells only (done ones are skipped): one array task each on SLURM; on the local executor
    `array_parallelism` worker processes share them."""
    from playpen.eval import sweep as sweep_mod

    if res.nodes > 1:
        raise PlaypenError("sweep cells run on one node each; drop --nodes")
    sweep = sweep_mod.load_sweep(config, list(args.overrides))
    root = storage_root_for(profile, sweep.config.storage_root, check=not args.dry_run)
    cells = sweep.cells if args.dry_run else sweep.pending_cells()
    if not cells:
        sweep_mod.aggregate(sweep.dir)
        print(f"sweep {sweep.config.name}: all {len(sweep.cells)} cells are done; nothing submitted "
              f"(aggregate refreshed in {sweep.dir})")
        return None
    workers = 1 if kind == "slurm" else max(1, min(profile.array_parallelism, len(cells)))
    array = [[c] for c in cells] if kind == "slurm" else [cells[i::workers] for i in range(workers)]
    job = jobs.SweepCellsJob(str(sweep.dir), str(status.log_dir(sweep.dir)), profile.max_requeues,
                             use_gpus=res.gpus_per_node > 0, aggregate=kind == "local")
    return Plan("sweep", sweep.dir, root, job, array, aggregate=(jobs.aggregate_sweep, str(sweep.dir)),
                report=lambda: sweep_mod.format_status(sweep_mod.status(sweep.dir)))


def plan_tournament(args: argparse.Namespace, profile: ClusterProfile, config: str, res: exe.Resources,
                    kind: str) -> Plan | None:
    """The matches not yet played (every model and key checked first): one array task each on SLURM; on the
    local executor `array_parallelism` workers share them. A dependent job writes the table and heatmap."""
    from dataclasses import asdict

    from playpen.debate_tools import tournament

    if res.nodes > 1:
        raise PlaypenError("tournament matches run on one node each; drop --nodes")
    cfg = load_config(tournament.TournamentConfig, config, list(args.overrides), keys_help=tournament.KEYS_HELP)
    tournament.check(cfg, config)
    root = storage_root_for(profile, None, check=not args.dry_run)
    cfg.output_dir = str(Path(cfg.output_dir).expanduser().absolute())  # jobs run in another working directory
    folder = tournament.tournament_dir(cfg)
    seatings = [list(s) for s in (tournament.matches(cfg) if args.dry_run else tournament.pending_matches(cfg))]
    if not seatings:
        tournament.aggregate(cfg)
        print(f"tournament {cfg.name}: all {len(tournament.matches(cfg))} matches are played; nothing submitted "
              f"(results refreshed in {folder})")
        return None
    workers = 1 if kind == "slurm" else max(1, min(profile.array_parallelism, len(seatings)))
    array = [[s] for s in seatings] if kind == "slurm" else [seatings[i::workers] for i in range(workers)]
    job = jobs.TournamentMatchesJob(asdict(cfg), str(status.log_dir(folder)), profile.max_requeues,
                                    use_gpus=res.gpus_per_node > 0, aggregate=kind == "local")
    return Plan("tournament", folder, root, job, array, aggregate=(jobs.aggregate_tournament, asdict(cfg)),
                report=lambda: read_text(folder / "results.md", "tournament results"))
