"""Games and their instances: loading a clemcore GameBenchmark by name, reading and checking instance files.

Splits: `validation` is the game's `in/instances.json` (what `clem run` plays), `train` is
`in/instances_train.json` (playpen's built-in games ship both; a clembench game without a train file is an error,
never a silent fallback to the validation set).
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from playpen.errors import PlaypenError
from playpen.registry import GameEntry, resolve_game

SPLIT_FILES = {"validation": "instances", "train": "instances_train"}

_BENCHMARKS: dict[tuple[str, str], object] = {}


def game_entry(game: str | GameEntry) -> GameEntry:
    return game if isinstance(game, GameEntry) else resolve_game(game)


def load_benchmark(entry: GameEntry):
    """clemcore's GameBenchmark for a game (loaded once per process: master.py is imported as a module)."""
    key = (entry.name, str(entry.path))
    if key not in _BENCHMARKS:
        from clemcore.clemgame import GameBenchmark, GameSpec

        spec = GameSpec.from_dict({**entry.spec, "game_path": str(entry.path)})
        try:
            _BENCHMARKS[key] = GameBenchmark.load_from_spec(spec)
        except Exception as e:  # noqa: BLE001 - any import/definition error of a game's master.py
            raise PlaypenError(f"game '{entry.name}' ({entry.path / 'master.py'}) cannot be loaded: "
                               f"{type(e).__name__}: {e}") from None
    return _BENCHMARKS[key]


def instances_file(entry: GameEntry, split: str) -> Path:
    if split not in SPLIT_FILES:
        raise PlaypenError(f"unknown split '{split}'; use one of: {', '.join(SPLIT_FILES)}")
    name = SPLIT_FILES[split]
    if split == "validation":
        name = entry.spec.get("instances", name)
    path = entry.path / "in" / f"{name}.json"
    if not path.is_file():
        hint = " (playpen's built-in games ship in/instances_train.json; add one for this game)" \
            if split == "train" else ""
        raise PlaypenError(f"game '{entry.name}' has no {split} instances: {path} is missing{hint}")
    return path


def read_instances(path: Path) -> list[tuple[dict, dict]]:
    """(experiment without its game_instances, instance) pairs of a clemcore instances file, checked."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise PlaypenError(f"{path}:{e.lineno}:{e.colno}: malformed JSON: {e.msg}") from None
    except OSError as e:
        raise PlaypenError(f"{path}: cannot be read ({e.strerror})") from None
    if not isinstance(data, dict) or not isinstance(data.get("experiments"), list) or not data["experiments"]:
        raise PlaypenError(f'{path}: expected {{"experiments": [{{"name": ..., "game_instances": [...]}}, ...]}} '
                           f"with at least one experiment")
    pairs = []
    for i, experiment in enumerate(data["experiments"]):
        where = f"{path}: experiments[{i}]"
        if not isinstance(experiment, dict) or not isinstance(experiment.get("name"), str) or not experiment["name"]:
            raise PlaypenError(f"{where} needs a non-empty string 'name'")
        instances = experiment.get("game_instances")
        if not isinstance(instances, list):
            raise PlaypenError(f"{where} ('{experiment['name']}') needs a list 'game_instances'")
        config = {k: v for k, v in experiment.items() if k != "game_instances"}
        for j, instance in enumerate(instances):
            pairs.append((config, check_instance(config, instance, f"{where}.game_instances[{j}]")))
    seen = set()
    for config, instance in pairs:
        key = (config["name"], instance["game_id"])
        if key in seen:
            raise PlaypenError(f"{path}: experiment '{key[0]}' has game_id {key[1]} twice")
        seen.add(key)
    return pairs


def check_instance(experiment: object, instance: object, where: str) -> dict:
    if not isinstance(experiment, dict) or not isinstance(experiment.get("name"), str):
        raise PlaypenError(f"{where}: the experiment must be a dict with a string 'name'")
    if not isinstance(instance, dict):
        raise PlaypenError(f"{where}: a game instance must be a JSON object, got {type(instance).__name__}")
    game_id = instance.get("game_id")
    if isinstance(game_id, bool) or not isinstance(game_id, int):
        raise PlaypenError(f"{where}: needs an integer 'game_id' (got {game_id!r})")
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


def load_instances(game: str | GameEntry, split: str = "train", limit: int | None = None,
                   seed: int | None = None, experiment: str | None = None) -> list[tuple[dict, dict]]:
    """A game's instances of one split as (experiment, instance) pairs; shuffled when seed is given, then cut."""
    entry = game_entry(game)
    pairs = read_instances(instances_file(entry, split))
    if experiment is not None:
        names = sorted({e["name"] for e, _ in pairs})
        pairs = [(e, i) for e, i in pairs if e["name"] == experiment]
        if not pairs:
            raise PlaypenError(f"game '{entry.name}' has no experiment '{experiment}'; available: {', '.join(names)}")
    if seed is not None:
        random.Random(seed).shuffle(pairs)
    if limit is not None:
        pairs = pairs[:max(0, int(limit))]
    return pairs
