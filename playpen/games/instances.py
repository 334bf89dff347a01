"""A game's instances: which file a split means, reading and checking it, fresh ones from the game's generator,
and the game's clemcore GameBenchmark. Eval, training, rollouts and sweeps all come through here.

Instance sets (`split` in training configs, `--instance-set` in eval, `instance_set` in sweeps):
- `validation`: the file `clem run` plays: the spec's own `"instances"` file (clembench's wordle_withcritic names
  `instances_withcritic`), else `in/instances.json`;
- `train`: `in/instances_train.json` (playpen's built-in games ship one; clembench games do not);
- any other name: that file in the game's `in/` folder (`instances_v2.0`, with or without `.json`), or a path.
Generated sets: the game's own `instancegenerator.py` run in memory under a seed (`generate_instances`); every
generated instance equal in content to a validation instance is dropped and counted, so training never sees the
held-out set.
"""
from __future__ import annotations

import contextlib
import importlib.util
import inspect
import json
import random
import sys
from pathlib import Path

from playpen.errors import PlaypenError
from playpen.games.registry import GameEntry, resolve_game
from playpen.storage import NAME_RULE, is_safe_name

VALIDATION, TRAIN = "validation", "train"
TRAIN_FILE = "instances_train"
# an instance key naming the group of instances that are variants of one another (see _pick_variant_groups)
VARIANT_GROUP = "variant_group"
GENERATOR_FILE = "instancegenerator.py"

_BENCHMARKS: dict[tuple[str, str], object] = {}


def game_entry(game: str | GameEntry) -> GameEntry:
    return game if isinstance(game, GameEntry) else resolve_game(game)


def load_benchmark(game: str | GameEntry):
    """clemcore's GameBenchmark for a game, loaded as `clem run` loads it, once per process."""
    entry = game_entry(game)
    key = (entry.name, str(entry.path))
    if key not in _BENCHMARKS:
        from clemcore.clemgame import GameBenchmark

        try:
            _BENCHMARKS[key] = GameBenchmark.load_from_spec(entry.clem_spec())
        except Exception as e:  # noqa: BLE001 - any import/definition error of a game's master.py
            raise PlaypenError(f"game '{entry.name}' ({entry.path / 'master.py'}) cannot be loaded: "
                               f"{type(e).__name__}: {e}") from None
    return _BENCHMARKS[key]


def validation_file_name(entry: GameEntry) -> str:
    return str(entry.spec.get("instances") or "instances")


def instances_file(game: str | GameEntry, split: str = VALIDATION) -> Path:
    """The file an instance set means for this game (see the module doc); missing files are one line that says
    what to use instead."""
    entry = game_entry(game)
    if not isinstance(split, str) or not split.strip():
        raise PlaypenError(f"an instance set must be a non-empty name, got {split!r}")
    name = {VALIDATION: validation_file_name(entry), TRAIN: TRAIN_FILE}.get(split, split)
    path = entry.path / "in" / f"{name.removesuffix('.json')}.json"
    if "/" in name:  # a path, not a name in the game's in/ folder
        path = Path(name).expanduser()
    if path.is_file():
        return path
    available = sorted(p.stem for p in (entry.path / "in").glob("*.json"))
    options = f"files in {entry.path / 'in'}: {', '.join(available) or 'none'}"
    if split == TRAIN:
        generate = " or generate: {seed: N} (fresh instances from its instancegenerator.py)" \
            if (entry.path / GENERATOR_FILE).is_file() else ""
        raise PlaypenError(f"game '{entry.name}' ({entry.source}) ships no train split ({path.name} is missing); "
                           f"name an instances file with split: <name> ({options}; training on evaluation "
                           f"instances evaluates on seen ones){generate}")
    raise PlaypenError(f"game '{entry.name}' has no instance set '{split}' ({path}); use validation, train or "
                       f"one of the {options}")


def read_instances(path: str | Path) -> list[tuple[dict, dict]]:
    """(experiment without its game_instances, instance) pairs of a clemcore instances file, checked."""
    from playpen.reading import DATA_MAX_BYTES, read_json

    path = Path(path)
    return instance_pairs(read_json(path, "instances file", DATA_MAX_BYTES), str(path))


def instance_pairs(data: object, where: str) -> list[tuple[dict, dict]]:
    """Pairs of an instances dict ({"experiments": [{"name", ..., "game_instances": [...]}]}), checked."""
    if not isinstance(data, dict) or not isinstance(data.get("experiments"), list) or not data["experiments"]:
        raise PlaypenError(f'{where}: expected {{"experiments": [{{"name": ..., "game_instances": [...]}}, ...]}} '
                           f"with at least one experiment")
    pairs = []
    for i, experiment in enumerate(data["experiments"]):
        here = f"{where}: experiments[{i}]"
        if not isinstance(experiment, dict) or not isinstance(experiment.get("name"), str) or not experiment["name"]:
            raise PlaypenError(f"{here} needs a non-empty string 'name'")
        if not is_safe_name(experiment["name"]):  # it names a results folder (<game>/<experiment>/instance_N)
            raise PlaypenError(f"{here}: name {experiment['name']!r} is not a safe name; use {NAME_RULE}")
        instances = experiment.get("game_instances")
        if not isinstance(instances, list):
            raise PlaypenError(f"{here} ('{experiment['name']}') needs a list 'game_instances'")
        config = {k: v for k, v in experiment.items() if k != "game_instances"}
        for j, instance in enumerate(instances):
            pairs.append((config, check_instance(config, instance, f"{here}.game_instances[{j}]")))
    seen = set()
    for config, instance in pairs:
        key = (config["name"], instance["game_id"])
        if key in seen:
            raise PlaypenError(f"{where}: experiment '{key[0]}' has game_id {key[1]} twice")
        seen.add(key)
    if not pairs:  # else a run would play nothing and blame the episodes ("no episode finished")
        raise PlaypenError(f"{where}: has no game instances (every experiment's game_instances is empty); "
                           f"generate instances or pick another instance set")
    return pairs


MAX_GAME_ID = 10**15  # instance_<game_id> stays a short folder name


def check_instance(experiment: object, instance: object, where: str) -> dict:
    if not isinstance(experiment, dict) or not isinstance(experiment.get("name"), str):
        raise PlaypenError(f"{where}: the experiment must be a dict with a string 'name'")
    if not isinstance(instance, dict):
        raise PlaypenError(f"{where}: a game instance must be a JSON object, got {type(instance).__name__}")
    game_id = instance.get("game_id")
    if isinstance(game_id, bool) or not isinstance(game_id, int):
        raise PlaypenError(f"{where}: needs an integer 'game_id' (got {game_id!r})")
    if not 0 <= game_id <= MAX_GAME_ID:  # it names the episode's folder (instance_<game_id>)
        raise PlaypenError(f"{where}: game_id {game_id} is outside 0..{MAX_GAME_ID}; number the instances from 0")
    return instance


def normalize(instances) -> list[tuple[dict, dict]]:
    """Accept (experiment, instance) pairs or clemcore rows ({"experiment", "game_instance"})."""
    pairs = []
    for i, item in enumerate(instances):
        if isinstance(item, dict) and "game_instance" in item:
            experiment, instance = item.get("experiment"), item["game_instance"]
        elif isinstance(item, (tuple, list)) and len(item) == 2:
            experiment, instance = item
        else:
            raise PlaypenError(f"instances[{i}]: expected an (experiment, instance) pair, got {type(item).__name__}")
        check_instance(experiment, instance, f"instances[{i}]")
        experiment = {k: v for k, v in experiment.items() if k != "game_instances"}
        pairs.append((experiment, instance))
    return pairs


def spread(pairs: list[tuple[dict, dict]], limit: int | None) -> list[tuple[dict, dict]]:
    """At most `limit` pairs taken round-robin over experiments, so each experiment is represented."""
    if limit is None:
        return list(pairs)
    queues: dict[str, list] = {}
    for pair in pairs:
        queues.setdefault(pair[0]["name"], []).append(pair)
    chosen, lanes = [], [list(q) for q in queues.values()]
    while len(chosen) < limit and any(lanes):
        for lane in lanes:
            if lane and len(chosen) < limit:
                chosen.append(lane.pop(0))
    return chosen


def load_instances(game: str | GameEntry, split: str = TRAIN, limit: int | None = None,
                   seed: int | None = None, experiment: str | None = None) -> list[tuple[dict, dict]]:
    """A game's instances of one set as (experiment, instance) pairs; shuffled when seed is given, then cut."""
    entry = game_entry(game)
    pairs = read_instances(instances_file(entry, split))
    return _pick(entry, pairs, limit, seed, experiment)


def _pick(entry: GameEntry, pairs: list, limit: int | None, seed: int | None, experiment: str | None) -> list:
    if experiment is not None:
        names = sorted({e["name"] for e, _ in pairs})
        pairs = [(e, i) for e, i in pairs if e["name"] == experiment]
        if not pairs:
            raise PlaypenError(f"game '{entry.name}' has no experiment '{experiment}'; available: {', '.join(names)}")
    if any(VARIANT_GROUP in i for _, i in pairs):
        return _pick_variant_groups(pairs, limit, seed)
    if seed is not None:
        random.Random(seed).shuffle(pairs)
    if limit is not None:
        pairs = pairs[:max(0, int(limit))]
    return pairs


def _pick_variant_groups(pairs: list, limit: int | None, seed: int | None) -> list:
    """Instances that are variants of one another (the same grids with the target in each position) stay next to
    each other, in their file order: shuffled and cut as whole groups (`limit` rounded down to whole groups, at
    least one), so a GRPO step that takes whole groups sees every variant and a constant answer earns chance."""
    groups: dict[object, list] = {}
    for pair in pairs:
        groups.setdefault(pair[1].get(VARIANT_GROUP, ("single", pair[1].get("game_id"))), []).append(pair)
    ordered = list(groups.values())
    if seed is not None:
        random.Random(seed).shuffle(ordered)
    chosen: list = []
    for group in ordered:
        if limit is not None and chosen and len(chosen) + len(group) > limit:
            break
        chosen += group
    return chosen


# ---------------------------------------------------------------- fresh instances from the game's generator

@contextlib.contextmanager
def _generator_paths(entry: GameEntry):
    """sys.path while a game's generator is imported and run: its folder first (as clemcore imports master.py),
    and, after everything else so they shadow nothing, the folders above it: clembench runs generators from the
    benchmark root, so they import their own package (`from wordle.utils import ...`) and `privateshared`."""
    first = [str(entry.path)]
    last = [str(p) for p in list(entry.path.parents)[:2]]
    sys.path[:0] = first
    sys.path.extend(last)
    try:
        yield
    finally:  # the entries added, not earlier ones with the same path
        sys.path.remove(first[0])
        for path in last:
            del sys.path[len(sys.path) - 1 - sys.path[::-1].index(path)]


def _generator_class(entry: GameEntry):
    """The GameInstanceGenerator subclass in the game's instancegenerator.py, imported as clemcore imports
    master.py (the game folder, and its parent for clembench's naming convention, on sys.path meanwhile)."""
    from clemcore.clemgame import GameInstanceGenerator

    file = entry.path / GENERATOR_FILE
    if not file.is_file():
        raise PlaypenError(f"game '{entry.name}' has no {GENERATOR_FILE} in {entry.path}; name an instances file "
                           f"with split: <name> instead")
    with _generator_paths(entry):
        try:
            spec = importlib.util.spec_from_file_location(f"{entry.name}_instancegenerator", file)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        except Exception as e:  # noqa: BLE001 - any error of the game's own generator file
            raise PlaypenError(f"{file} cannot be imported: {type(e).__name__}: {e}") from None
    found = [c for _, c in inspect.getmembers(module, inspect.isclass)
             if issubclass(c, GameInstanceGenerator) and c.__module__ == module.__name__ and not inspect.isabstract(c)]
    if not found:
        raise PlaypenError(f"{file} defines no GameInstanceGenerator subclass")
    return found[0], getattr(module, "SEED", None)


def _content(instance: dict) -> str:
    return json.dumps({k: v for k, v in instance.items() if k != "game_id"}, sort_keys=True, default=str)


def generate_instances(game: str | GameEntry, seed: int, args: dict | None = None) -> tuple[dict, int]:
    """Fresh instances from the game's generator under `seed`, without instances that equal (in content, game_id
    aside) one of the validation set; returns (instances dict in clemcore's format, number dropped)."""
    entry = game_entry(game)
    cls, validation_seed = _generator_class(entry)
    if validation_seed is not None and seed == validation_seed:
        raise PlaypenError(f"generate seed {seed} is the seed {entry.path / GENERATOR_FILE} makes its own instances "
                           f"with (SEED = {seed}); pick another one")
    import numpy as np

    saved = random.getstate(), np.random.get_state()  # the caller's random streams stay as they were
    try:
        with _generator_paths(entry):  # (generators may import lazily)
            generator = cls()
            # GameInstanceGenerator.generate() seeds like this, then writes into the game's own in/ folder: the
            # checkout stays untouched here, the instances stay in memory
            random.seed(seed)
            np.random.seed(seed)
            generator.on_generate(seed, **(args or {}))
    except Exception as e:  # noqa: BLE001 - the game's own generator failed
        raise PlaypenError(f"{entry.path / GENERATOR_FILE} failed with seed {seed}: {type(e).__name__}: {e}") from None
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
    held_out = {_content(i) for _, i in read_instances(instances_file(entry, VALIDATION))}
    dropped = 0
    for experiment in generator.instances["experiments"]:
        kept = [i for i in experiment["game_instances"] if _content(i) not in held_out]
        dropped += len(experiment["game_instances"]) - len(kept)
        experiment["game_instances"] = kept
    generator.instances["experiments"] = [e for e in generator.instances["experiments"] if e["game_instances"]]
    if not generator.instances["experiments"]:
        raise PlaypenError(f"every instance {entry.name}'s generator made with seed {seed} is also a validation "
                           f"instance ({dropped}); pick another seed")
    return json.loads(json.dumps(generator.instances, default=str)), dropped


def pick_generated(game: str | GameEntry, instances: dict, seed: int, limit: int | None = None,
                   shuffle_seed: int | None = None) -> list[tuple[dict, dict]]:
    """generate_instances' dict as checked (experiment, instance) pairs, shuffled and cut like load_instances."""
    entry = game_entry(game)
    return _pick(entry, instance_pairs(instances, f"{entry.name}'s generator (seed {seed})"), limit, shuffle_seed,
                 None)
