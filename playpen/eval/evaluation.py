"""`playpen eval`: play a game's validation instances with one model, score them with the game's clemcore
scorer, and write `<results_dir>/<model>.val.json` (clemscore, statscore, per game) plus clemcore's
raw.csv / results.csv / results.html.

Results layout (clemcore's, the files `clem run` and `clem score` write, so `clem score`, `clem transcribe` and
`clem eval` work on it too):
    <results_dir>/<model>/run.json                      clemcore's RunFileSaver: one entry per game played
    <results_dir>/<model>/<game>/<experiment>/experiment.json
    <results_dir>/<model>/<game>/<experiment>/instance_NNNNN/{instance.json, interactions.json, completed.json,
                                                             player_N.requests.json, scores.json}
    <results_dir>/<model>/<game>/playpen_eval.json      what was asked for (instances, generation settings)
    <results_dir>/<model>.val.json, raw.csv, results.csv, results.html

`model` is a registry name, a training run directory, or a checkpoint folder (`<run>/checkpoints/checkpoint-<step>`,
adapter or full weights; see playpen.models.specs). Games are played through playpen's rollout engine for local
Hugging Face models, and through clemcore's own runner for every other backend (API models) or on request.
"""
from __future__ import annotations

import contextlib
import io
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from playpen.reading import RECORD_MAX_BYTES, check_regular_file, read_bytes
from playpen.defaults import BATCH_SIZE, MAX_NEW_TOKENS, TEMPERATURE
from playpen.errors import PlaypenError
from playpen.eval.clemlog import clemcore_log, library_bars
from playpen.games.instances import instances_file, load_benchmark, read_instances, spread
from playpen.games.registry import SUITES, GameEntry, game_entries, resolve_game, select_games
from playpen.models import service
from playpen.eval.partners import pair_games, resolve_partner, results_folder, select_experiments
from playpen.records import ERROR, EXPERIMENT, INSTANCE, interactions_files
from playpen.storage import (atomic_write_bytes, atomic_write_json, check_location, exclusive_folder, not_a_link,
                             path_under, private_folder, publish, read_json_or_none, remove_abandoned, replace_folder,
                             timestamp)

DEFAULT_RESULTS_ROOT = "playpen-eval"
PLAYERS = ("auto", "engine", "vllm", "clemcore")
VAL_SUFFIX = ".val.json"
GAME_META = "playpen_eval.json"
STAGING_DIR = ".playing"  # a game is played in a private .playing.* folder; its records replace the earlier ones
                          # only if an episode finished
TABLES_DIR = ".tables"  # clemcore's tables are made in a private .tables.* folder
CLEM_TABLES = ("raw.csv", "results.csv", "results.html")  # what clemcore's `clem eval` writes into a results folder
RUN_FILE = "run.json"  # clemcore's RunFileSaver: <results>/<model>/run.json, one entry per game played there


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _eval_log(verbose: bool):
    """playpen's own lines: into the results folder's log with clemcore's, on screen too when verbose."""
    import logging

    def log(message: str) -> None:
        logging.getLogger("playpen.eval").info(message)
        if verbose:
            _stderr(message)
    return log


# ---------------------------------------------------------------- playing

class ClemcorePlayer:
    """Plays through clemcore's own runner (batchwise when batch_size > 1 and the backend batches): works for
    every clemcore backend (API models included). The model is loaded once, on the first game."""

    scores_while_playing = False  # its records are scored afterwards (score_game), as `clem score` does

    def __init__(self, spec: dict, max_tokens: int, temperature: float, batch_size: int, seed: int = 0,
                 verbose: bool = False, partner: dict | None = None):
        self.spec, self.batch_size, self.partner_spec = spec, batch_size, partner
        self.max_tokens, self.temperature = max_tokens, temperature
        self.verbose = verbose  # clemcore's progress bars on screen
        self.seed = seed  # the rollout engine's sampling seed; clemcore's backends sample unseeded
        self._model = self._partner = None

    @property
    def model(self):
        """clemcore's Model for the spec (for huggingface_local: `.model` and `.tokenizer` are the HF objects)."""
        if self._model is None:
            # (clemcore's HF backend pins torch to one CPU thread; kept: on shared CPUs more threads were 10-20x
            # slower for small models here, and on GPU it does not matter)
            self._model = service.load_player(self.spec, self.max_tokens, self.temperature)
        return self._model

    @property
    def partner(self):
        """clemcore's Model for the partner (its own backend, the same generation arguments, as `clem run`), or None."""
        if self._partner is None and self.partner_spec is not None:
            self._partner = service.load_player(self.partner_spec, self.max_tokens, self.temperature)
        return self._partner

    def play(self, entry: GameEntry, pairs: list[tuple[dict, dict]], results_dir: Path) -> None:
        with library_bars(self.verbose):
            models = [self.model] + ([self.partner] if self.partner_spec else [])  # clem run -m MODEL PARTNER
            failed = clemcore_play(entry, pairs, models, results_dir, self.batch_size)
        if failed:
            _stderr(f"[eval] {entry.name}: {failed}")


def clemcore_play(entry: GameEntry, pairs: list[tuple[dict, dict]], models: list, results_dir: Path,
                  batch_size: int) -> str | None:
    """Play the (experiment, instance) pairs with clemcore Models, one per seat, through clemcore's own runner
    (batchwise when every model batches), recorded in clem's results layout under `results_dir`. Returns the
    runner's error message when episodes failed (it raises after the batch), else None."""
    from clemcore.backends import Model
    from clemcore.clemgame import (ExperimentFileSaver, GameBenchmarkCallbackList, GameInstances,
                                   InstanceFileSaver, InteractionsFileSaver, ResultsFolder, RunFileSaver)
    from clemcore.clemgame.callbacks.files import PlayerFileSaver, SignalFileSaver
    from clemcore.clemgame.runners import dispatch

    folder = ResultsFolder(results_dir, run_dir=Model.to_identifier(models))
    infos = Model.to_infos(models)
    callbacks = GameBenchmarkCallbackList([  # `clem run`'s list (clemcore.cli.run)
        InstanceFileSaver(folder), ExperimentFileSaver(folder, player_model_infos=infos),
        InteractionsFileSaver(folder, player_model_infos=infos), RunFileSaver(folder, player_model_infos=infos),
        PlayerFileSaver(folder), SignalFileSaver(folder)])
    rows = GameInstances(entry.name, [{"game_name": entry.name, "experiment": e, "game_instance": i}
                                      for e, i in pairs])
    if any(e.get("best_of_n") for e, _ in pairs):
        batch_size = 1  # best-of-n players sample and choose themselves; clemcore's batch runner bypasses players
    try:
        dispatch.run(load_benchmark(entry), rows, models, callbacks=callbacks, batch_size=batch_size)
    except RuntimeError as e:
        return str(e)
    return None


def carry_run_file(results_dir: Path, staging: Path, folder: str) -> None:
    """Put `<results_dir>/<folder>/run.json` where clemcore's RunFileSaver will write in `staging`, so that it adds
    the game played now to the games played there before, as `clem run` does on a results folder it reuses."""
    earlier = read_json_or_none(results_dir / folder / RUN_FILE)
    if isinstance(earlier, dict) and isinstance(earlier.get("games"), dict):  # (else RunFileSaver starts anew)
        atomic_write_json(staging / folder / RUN_FILE, earlier, root=staging)


def publish_run_file(staging: Path, results_dir: Path, folder: str) -> None:
    """Move the run.json clemcore's RunFileSaver wrote in `staging` to `<results_dir>/<folder>/run.json`."""
    staged = staging / folder / RUN_FILE
    if staged.is_file() and not staged.is_symlink():
        publish(staged, results_dir / folder / RUN_FILE, results_dir)  # (every level checked: no link followed)


class EnginePlayer(ClemcorePlayer):
    """Local Hugging Face models through playpen's rollout engine (continuous batching, KV cache between turns):
    the weights, adapter, chat template and padding are loaded exactly as clemcore's huggingface_local backend
    loads them; game masters and scorers are the games' own, records are in clem's layout, with the files
    clemcore's run, player and signal savers write. Episodes are scored as they end."""

    _engine = None
    scores_while_playing = True
    use_vllm = False  # vLLM generates the turns (`--player vllm`; playpen.rollout.vllm_backend)

    def play(self, entry: GameEntry, pairs: list[tuple[dict, dict]], results_dir: Path) -> None:
        from playpen.rollout.engine import RolloutEngine
        from playpen.rollout.policy import LocalPolicy

        if self._engine is None:
            hf = self.model
            policy = LocalPolicy(hf.model, hf.tokenizer, name=self.spec["model_name"],
                                 chat_template_kwargs=hf.chat_template_kwargs)
            if self.use_vllm:
                from playpen.rollout.vllm_backend import generator_for

                policy.vllm = generator_for(hf.model, hf.tokenizer, self.seed)
            # the partner holds every seat but the first, as clemcore seats `-m MODEL PARTNER` in two-player games
            self._engine = RolloutEngine(policy, self.partner, max_new_tokens=self.max_tokens,
                                         temperature=self.temperature, batch_size=self.batch_size, progress=True,
                                         seed=self.seed)
        self._engine.play(entry, pairs, records_dir=results_dir, clem_files=True)


def make_player(spec: dict, max_tokens: int, temperature: float, batch_size: int, player: str = "auto",
                seed: int = 0, verbose: bool = False, partner: dict | None = None):
    """The rollout engine for local Hugging Face models, clemcore's runner for everything else; `player` forces
    one."""
    if player not in PLAYERS:
        raise PlaypenError(f"unknown player '{player}'; choose one of {', '.join(PLAYERS)}")
    local = spec.get("backend") == "huggingface_local" and not spec.get("model_config", {}).get("multimodal")
    if player in ("engine", "vllm") and not local:
        raise PlaypenError(f"the rollout engine plays local Hugging Face models only; {spec['model_name']} uses "
                           f"backend {spec.get('backend')} (use --player clemcore)")
    if player == "vllm":
        from playpen.models.vllm_engine import require_vllm

        if any(spec.get("model_config", {}).get(k) for k in ("load_in_4bit", "load_in_8bit", "quantization")):
            raise PlaypenError(f"--player vllm: {spec['model_name']} is loaded quantized (bitsandbytes), which vLLM's "
                               f"merged-weight engine cannot hold; use --player engine")
        require_vllm("--player vllm")
        runner = EnginePlayer(spec, max_tokens, temperature, batch_size, seed, verbose, partner)
        runner.use_vllm = True
        return runner
    if player == "engine" or (player == "auto" and local):
        return EnginePlayer(spec, max_tokens, temperature, batch_size, seed, verbose, partner)
    return ClemcorePlayer(spec, max_tokens, temperature, batch_size, seed, verbose, partner)


# ---------------------------------------------------------------- scoring and tables

def score_game(entry: GameEntry, game_dir: Path, verbose: bool = False) -> int:
    """(Re)score every episode under `game_dir` with the game's clemcore scorer; returns episodes scored. The game
    is loaded once per process (`load_benchmark`), for playing and scoring alike."""
    # episodes that broke off with an error (error.json from the rollout engine) are not scored: like clemcore's
    # runner, which records no episode that raised, they count as missing, not as played or aborted
    interactions = interactions_files(game_dir, finished=True)
    check_episode_files(interactions)
    for stale in game_dir.rglob("scores.json"):
        stale.unlink()
    if interactions:
        # clemcore writes each scores.json by name (open "w"), which would follow a link planted there: it scores
        # a private copy of the records, and each scores.json is then written into place (a link is replaced)
        with private_folder(tempfile.gettempdir(), "playpen-scoring.") as private:
            copies = _private_records(game_dir, interactions, private)
            with library_bars(verbose):
                load_benchmark(entry).compute_scores(copies)
            for copy in copies:
                if (scores := copy.parent / "scores.json").is_file():
                    atomic_write_bytes(game_dir / scores.relative_to(private), scores.read_bytes(), root=game_dir)
    return scored_episodes(game_dir)


def scored_episodes(game_dir: Path) -> int:
    return sum(1 for _ in game_dir.rglob("scores.json"))


def _private_records(game_dir: Path, interactions: list[Path], private: Path) -> list[Path]:
    """The files clemcore's scorer reads (interactions.json, instance.json beside it, experiment.json above it),
    copied into `private` in the same layout; an episode with one of them not a regular file is left out, said."""
    copies = []
    for path in interactions:
        episode = path.parent.relative_to(game_dir)
        try:
            files = {episode / name: read_bytes(game_dir / episode / name, "record file", RECORD_MAX_BYTES)
                     for name in (path.name, "instance.json")}
            files[episode.parent / "experiment.json"] = read_bytes(game_dir / episode.parent / "experiment.json",
                                                                   "record file", RECORD_MAX_BYTES)
        except PlaypenError as e:
            print(f"playpen: warning: {e}; that episode is not scored", file=sys.stderr, flush=True)
            continue
        for relative, data in files.items():
            (private / relative).parent.mkdir(parents=True, exist_ok=True)
            (private / relative).write_bytes(data)
        copies.append(private / episode / path.name)
    return copies


def check_episode_files(interactions: list[Path]) -> None:
    """The files clemcore's scorer opens by name for each episode (interactions.json, the instance.json beside it,
    the experiment.json above it) are regular files within the records' size bound, checked before it opens them:
    a FIFO planted there would hang its plain open() and a huge sparse file take the machine's memory."""
    for path in interactions:
        for file in (path, path.parent / INSTANCE, path.parent.parent / EXPERIMENT):
            try:
                check_regular_file(file, "episode record", RECORD_MAX_BYTES)
            except PlaypenError as e:
                raise PlaypenError(f"{e} (clemcore's scorer reads it); move that episode folder "
                                   f"{path.parent} away to score the others") from None


def write_clem_tables(results_dir: Path) -> None:
    """raw.csv, results.csv and results.html over every model in the folder, exactly as `clem eval` makes them.
    clemcore reads and writes by name, so it runs on a private copy of the folder's scores.json files (regular
    files only: a FIFO or device planted there is left out) and its tables are moved into `results_dir` from
    there: a link planted at raw.csv is replaced, never written through."""
    from clemcore import clemeval

    with private_folder(results_dir, f"{TABLES_DIR}.") as tables:
        for scores in results_dir.rglob("*scores.json"):  # (clemeval's own pattern; rglob enters no linked folder)
            relative = scores.relative_to(results_dir)
            if relative.parts[0].startswith(".") or scores.is_symlink() or not scores.is_file():
                continue
            try:
                data = read_bytes(scores, "scores file")
            except PlaypenError:
                continue
            (tables / relative).parent.mkdir(parents=True, exist_ok=True)
            (tables / relative).write_bytes(data)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            clemeval.perform_evaluation(str(tables))  # (its progress bars and prints are noise here)
        for name in CLEM_TABLES:
            if (tables / name).is_file():
                publish(tables / name, results_dir / name)


def in_file_order(pairs: list[tuple[dict, dict]], limit: int | None) -> list[tuple[dict, dict]]:
    """The instances `--instances N` picks (spread over experiments), played in the file's order as clem does."""
    chosen = {(e["name"], i["game_id"]) for e, i in spread(pairs, limit)}
    return [(e, i) for e, i in pairs if (e["name"], i["game_id"]) in chosen]


def _game_meta(game_dir: Path) -> dict:
    meta = read_json_or_none(game_dir / GAME_META)
    return meta if isinstance(meta, dict) else {}


def games_recorded(results_dir: Path, folder: str) -> list[str]:
    model_dir = results_dir / folder
    if not model_dir.is_dir():
        return []
    return sorted(d.name for d in model_dir.iterdir() if d.is_dir() and interactions_files(d))


def write_val_json(results_dir: Path, spec: dict, extra: dict | None = None, partner: dict | None = None) -> dict:
    """Recompute `<folder>.val.json` from every scored game of this model (pair) in `results_dir`."""
    from playpen.eval.scoring import load_episode_scores, summarize, val_scores

    folder = results_folder(spec, partner)
    summaries = summarize(load_episode_scores(results_dir, model=folder))
    metas = {game: _game_meta(results_dir / folder / game) for game in summaries}
    registered = {e.name: e for e in game_entries()}
    static = [g for g in summaries if metas[g].get("static", g in registered and registered[g].static)]
    body = val_scores(summaries, static)
    for game, info in body["games"].items():
        meta = metas[game]
        info["game_path"], info["source"] = meta.get("game_path"), meta.get("source")
        info["instances"] = meta.get("instances")
        info["missing"] = None if meta.get("instances") is None else meta["instances"] - info["episodes"]
    val = {"model": spec["model_name"], "partner": partner and partner["model_name"], "folder": folder,
           "clemscore": body.pop("clemscore"), "statscore": body.pop("statscore"),
           **body, "results_dir": str(results_dir.absolute()), "model_spec": spec,
           **({"partner_spec": partner} if partner else {}),
           "created": time.strftime("%Y-%m-%dT%H:%M:%S"), **(extra or {})}
    atomic_write_json(results_dir / f"{folder}{VAL_SUFFIX}", val)
    return val


# ---------------------------------------------------------------- the command

def evaluate(model: str | dict, games: list[str] | None = None, results_dir: str | Path | None = None,
             skip_gameplay: bool = False, suite: str = "all", max_new_tokens: int = MAX_NEW_TOKENS,
             temperature: float = TEMPERATURE, instances: int | None = None,
             batch_size: int = BATCH_SIZE, instance_set: str = "validation", player: str = "auto",
             seed: int = 0, verbose: bool = False, log=None, partner: str | dict | None = None,
             experiments: list[str] | None = None) -> dict:
    """Play (unless skip_gameplay), score, and write `<results_dir>/<model>.val.json` + results.csv/html.

    Returns the val.json dict (clemscore, statscore, games{name: played/quality/clemscore/...}, results_dir).
    Games played now replace that game's earlier results for this model in `results_dir` (unless no episode of
    the replay finished: then the earlier records stay); the scores are then recomputed over every game of the
    model recorded there. `instances` caps episodes per game (round-robin over
    experiments); `instance_set` is validation (default), train, or an instances file name of the game;
    `player` is auto (rollout engine for local HF models, clemcore's runner otherwise), engine or clemcore;
    `seed` seeds the rollout engine's sampling (temperature > 0: another seed plays other episodes).
    clemcore's log and playpen's own lines go to `<results_dir>/clembench.log`; `verbose` (or a `log` function)
    shows them too. `partner` takes the other seat of two-player games as in `clem run -m MODEL PARTNER` (records
    and val.json under `MODEL--PARTNER`); `experiments` plays only those, as `clem run -e` (see playpen.eval.partners).
    """
    started = time.time()
    if suite not in SUITES:
        raise PlaypenError(f"unknown suite '{suite}'; choose one of {', '.join(SUITES)}")
    spec = service.resolve(model, "model")  # an API model without its key.json entry: one line, before anything runs
    partner_spec = resolve_partner(partner)
    folder = results_folder(spec, partner_spec)
    who = spec["model_name"] + (f" with partner {partner_spec['model_name']}" if partner_spec else "")
    results = Path(check_location(str(results_dir), "-r")) if results_dir else \
        Path(DEFAULT_RESULTS_ROOT) / timestamp()
    not_a_link(results, "results folder")
    if results.exists() and not results.is_dir():
        raise PlaypenError(f"results dir {results} is a file; give a folder with -r")
    _check_outputs(results, folder)
    if skip_gameplay:
        if experiments:
            raise PlaypenError("-e chooses what is played; --skip-gameplay plays nothing (drop one of them)")
        entries, plan = _recorded_games(results, folder, who, games, suite), []
    else:
        plan = _games_to_play(games, suite, partner_spec, instances, instance_set, experiments)
        entries = [e for e, _, _ in plan]
    # one process writes a results folder at a time: two evals into one -r would mix their episodes and tables
    with _exit_on_sigterm(), exclusive_folder(results, f"results folder {results} is in use by another playpen eval",
                                              "wait for it to end, or pick another -r"), \
            clemcore_log(results, verbose) as log_file:
        # what an eval killed here left (this one holds -r now, so none of them is in use)
        remove_abandoned(results, (f"{STAGING_DIR}.", f"{TABLES_DIR}."))
        log = log or _eval_log(verbose)
        played: dict[str, int | None] = {}  # episodes scored per game played now (None: earlier records kept)
        if not skip_gameplay:
            runner = make_player(spec, max_new_tokens, temperature, batch_size, player, seed, verbose, partner_spec)
            settings = {"partner": partner_spec and partner_spec["model_name"], "experiments": experiments,
                        "instance_set": instance_set, "max_tokens": max_new_tokens, "temperature": temperature,
                        "seed": seed}
            played = _play_games(runner, plan, results, folder, who, log, verbose, settings)
        empty = _score_games(entries, results, folder, log, verbose, log_file, played)
        val = write_val_json(results, spec, {"suite": suite, "seconds": round(time.time() - started, 1),
                                             "games_without_episodes": empty}, partner_spec)
        write_clem_tables(results)
    return val


def _check_outputs(results: Path, folder: str) -> None:
    """One line, before anything is played, when a folder stands where eval writes a file (clem's tables,
    val.json, run.json): the move into place would fail after the games were played."""
    for name in (*CLEM_TABLES, f"{folder}{VAL_SUFFIX}", f"{folder}/{RUN_FILE}"):
        path = results / name
        if path.is_dir() and not path.is_symlink():
            raise PlaypenError(f"{path} is a folder where playpen eval writes a file; move it away or pick "
                               f"another -r")


@contextlib.contextmanager
def _exit_on_sigterm():
    """SIGTERM (scancel, kill) ends the eval as Ctrl-C does, so its private folders are removed on the way out;
    left as it is where a handler is already installed (submitit's, in a job) or off the main thread."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _recorded_games(results: Path, folder: str, who: str, games: list[str] | None, suite: str) -> list:
    """--skip-gameplay: the games of `suite` recorded for the model in `results` (the named ones, each recorded)."""
    recorded = games_recorded(results, folder)
    if not recorded:
        raise PlaypenError(f"no records of model {who} in {results}; "
                           f"play first (drop --skip-gameplay) or pick the right -r")
    missing = sorted(set(games or []) - set(recorded))
    if missing:
        raise PlaypenError(f"no records of {', '.join(missing)} for {who} in {results}; "
                           f"recorded: {', '.join(recorded)}")
    in_suite = lambda e: suite == "all" or e.static == (suite == "static")  # noqa: E731
    entries = select_games(games, suite) if games else [e for e in map(resolve_game, recorded) if in_suite(e)]
    if not entries:
        raise PlaypenError(f"no {suite}-suite games of {who} recorded in {results}")
    return entries


def _games_to_play(games: list[str] | None, suite: str, partner_spec: dict | None, instances: int | None,
                   instance_set: str, experiments: list[str] | None) -> list[tuple]:
    """[(game entry, instances file, the instances played)]: every game's instances are read and checked before
    the model loads; -e chooses, then --instances cuts."""
    entries = pair_games(select_games(games, suite), partner_spec, named=bool(games))
    if instances is not None and instances < 1:
        raise PlaypenError(f"--instances must be at least 1, got {instances}")
    plan = [(e, path, read_instances(path)) for e, path in ((e, instances_file(e, instance_set)) for e in entries)]
    return [(e, path, in_file_order(pairs, instances)) for e, path, pairs in select_experiments(plan, experiments)]


def _play_games(runner, plan: list[tuple], results: Path, folder: str, who: str, log, verbose: bool,
                settings: dict) -> dict[str, int | None]:
    """Play each game into a staging folder, score it there (once), and let it replace the game's earlier records
    (and its entry in run.json) once an episode of it finished; returns the episodes scored per game played, None
    for a game whose replay finished none while earlier records of it are there (they stay)."""
    played = {}
    for entry, path, pairs in plan:
        with private_folder(results, f"{STAGING_DIR}.") as staging:
            game_started = time.time()
            log(f"[eval] {who} plays {entry.name}: {len(pairs)} instances "
                f"({path.name}, {entry.path})")
            carry_run_file(results, staging, folder)
            runner.play(entry, pairs, staging)
            staged = path_under(staging, folder, entry.name, what="game folder")
            atomic_write_json(staged / GAME_META, {
                "game": entry.name, "game_path": str(entry.path), "source": entry.source,
                "static": entry.static, "partner": settings["partner"], "experiments": settings["experiments"],
                "instances_file": str(path), "instances": len(pairs), "instance_set": settings["instance_set"],
                "max_tokens": settings["max_tokens"], "temperature": settings["temperature"],
                "seed": settings["seed"], "player": type(runner).__name__,
                "seconds": round(time.time() - game_started, 1)})
            game_dir = path_under(results, folder, entry.name, what="game folder")
            scored = scored_episodes(staged) if runner.scores_while_playing else score_game(entry, staged, verbose)
            played[entry.name] = scored if scored or not game_dir.exists() else None
            if played[entry.name] is not None:
                replace_folder(staged, game_dir, results)  # the new records replace the old ones
                publish_run_file(staging, results, folder)
    return played


def _score_games(entries: list, results: Path, folder: str, log, verbose: bool, log_file,
                 played: dict[str, int | None]) -> list:
    """Score the records of every game not played now (those played now were scored as they were staged);
    returns the games without a finished episode, said loudly (and an error when that is all of them)."""
    empty = []
    kept = [game for game, scored in played.items() if scored is None]  # their earlier records stay: scored here
    for entry in entries:
        scored = played.get(entry.name)
        if scored is None:
            scored = score_game(entry, path_under(results, folder, entry.name, what="game folder"), verbose)
        log(f"[eval] {entry.name}: {scored} episodes scored")
        if not scored:
            empty.append(entry.name)
    if len(empty) == len(entries):  # nothing to score: a val.json or tables now would only mislead
        # why each episode broke is in clemcore's log, where the rollout engine's warnings go too; the first
        # episode's own error (the context window exceeded, ...) is the likely cause of all
        why = next((error for entry in entries
                    if (error := first_episode_error(path_under(results, folder, entry.name, what="game folder")))),
                   None)
        raise PlaypenError(f"no episode of {', '.join(empty)} finished" + (f" (first error: {why})" if why else "")
                           + f"; see {log_file}")
    if kept:
        _stderr(f"[eval] WARNING: no episode of {', '.join(kept)} finished this time (see {log_file}); their "
                f"earlier records in {results} were kept and are scored")
    if empty:  # clemcore's tables leave such a game out, and so do the scores: say it loudly
        _stderr(f"[eval] WARNING: no episode of {', '.join(empty)} finished (see {log_file}); "
                f"these games are missing from clemscore/statscore")
    return empty


def first_episode_error(game_dir: Path) -> str | None:
    """The message of the first episode under `game_dir` that broke off (the rollout engine's error.json)."""
    for path in interactions_files(game_dir) if game_dir.is_dir() else []:
        error = read_json_or_none(path.parent / ERROR)
        if isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"].strip():
            return " ".join(error["message"].split())[:300]
    return None


def format_val(val: dict) -> str:
    """A short human summary of a val.json dict."""
    lines = [f"{'game':20s} {'episodes':>8s} {'% played':>9s} {'quality':>8s} {'clemscore':>9s}"]
    for game, g in val["games"].items():
        quality = "-" if g["quality"] is None else f"{g['quality']:.2f}"
        lines.append(f"{game + (' (static)' if g['static'] else ''):20s} {g['episodes']:8d} {g['played']:9.2f} "
                     f"{quality:>8s} {g['clemscore']:9.2f}")
        if g.get("own"):  # the game's own episode scores (means over the episodes that logged them)
            lines.append(f"{'':20s} " + ", ".join(f"{key} {value:.3g}" for key, value in g["own"].items()))
    fmt = lambda x: "n/a" if x is None else f"{x:.2f}"  # noqa: E731
    lines.append(f"clemscore {fmt(val['clemscore'])}   statscore {fmt(val['statscore'])}   "
                 f"({val['results_dir']}/{val.get('folder', val['model'])}{VAL_SUFFIX})")
    return "\n".join(lines)
