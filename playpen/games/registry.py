"""Which games exist and which one a name means: the one place that answers it for eval, training, rollouts,
sweeps, `playpen list` and `playpen data` alike.

Games are found in clem's own order (clemcore's `GameRegistry.from_directories_and_cwd_files`), and the first
game of a name wins, as `clem run -g NAME` picks it:
  1. `./game_registry.json`: `[{"benchmark_path": "<clembench checkout>"}]` (folders searched for clemgame.json
     like clem: up to 3 levels down) or full specs with a `game_path`;
  2. game folders under the working directory (the same search);
  3. `$CLEMBENCH_HOME`, only when 1 and 2 found nothing (as clem);
  4. playpen's built-in games, last. A built-in whose name a benchmark game already has is shadowed: the name
     means the benchmark's game (as in clem), and the built-in stays reachable as `playpen-<name>`.

A clemgame.json holds one spec or a list of them (clembench's `wordle/` defines wordle, wordle_withclue,
wordle_withcritic); every key clemcore honours is kept as written (`main_game`, `instances`, `players`, `roles`,
`benchmark`, ...). Unlike clem, which logs a warning and goes on, a broken registry or clemgame.json is an error
naming the file: a silently missing game makes a silently different benchmark.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from playpen.reading import read_json
from playpen.errors import PlaypenError
from playpen.storage import NAME_RULE, is_safe_name

BUILTIN_DIR = Path(__file__).parent
BUILTIN_GAMES = ("wordle", "taboo", "referencegame", "arithmetic", "debate", "consultancy", "double_consultancy",
                 "numberguess")
BUILTIN_SOURCE = "built-in"
BUILTIN_ALIAS = "playpen-"  # a shadowed built-in's name: playpen-<game>
REGISTRY_FILE = "game_registry.json"
CLEMBENCH_HOME = "CLEMBENCH_HOME"
SEARCH_DEPTH = 3  # clem's max_depth
SKIPPED_DIRS = {"venv", "__pycache__", "docs", "in", "resources", "utils", "evaluation", "files"}  # clem's list
SUITES = ("clem", "static", "all")


@dataclass(frozen=True)
class GameEntry:
    name: str  # what the game is called here (and in records): its game_name, or playpen-<name> when shadowed
    path: Path  # the folder holding clemgame.json and master.py
    source: str  # "built-in", the game_registry.json that listed it, "working directory" or "$CLEMBENCH_HOME"
    spec: dict  # its clemgame.json entry as written

    @property
    def players(self) -> int:
        return int(self.spec.get("players") or 1)

    @property
    def roles(self) -> list[str]:
        return list(self.spec.get("roles") or [])

    @property
    def static(self) -> bool:
        return is_static(self.spec)

    @property
    def builtin(self) -> bool:
        return self.source == BUILTIN_SOURCE

    def clem_spec(self):
        """clemcore's GameSpec of this game (game_path set; game_name is this entry's name)."""
        from clemcore.clemgame import GameSpec

        return GameSpec.from_dict({**self.spec, "game_name": self.name, "game_path": str(self.path)})

    def describe(self) -> str:
        return f"{self.name} ({self.path})"


def is_static(spec) -> bool:
    """A static game (single-shot items with a checkable answer) counts towards statscore, not clemscore.
    clembench tags its static datasets with versioned tags ("static_1.0"), playpen's built-in one with "static":
    any benchmark tag that starts with "static" makes a game static. Takes a clemgame.json dict or a GameSpec."""
    tags = spec.get("benchmark") if isinstance(spec, dict) else getattr(spec, "benchmark", None)
    return any(str(tag).startswith("static") for tag in (tags or []))


# ---------------------------------------------------------------- finding games

def _read_json(path: Path) -> object:
    return read_json(path, "game file")


def _checked_spec(spec: object, where: str) -> dict:
    if not isinstance(spec, dict):
        raise PlaypenError(f"{where}: a game spec must be a JSON object, got {type(spec).__name__}")
    name = spec.get("game_name")
    if not isinstance(name, str) or not name.strip():
        raise PlaypenError(f"{where}: a game spec needs a string 'game_name' (clemcore's clemgame.json format); "
                           f"fix the file or remove it from the search path")
    if not is_safe_name(name):  # it names results and records folders
        raise PlaypenError(f"{where}: game_name {name!r} is not a safe name (it names results folders); use "
                           f"{NAME_RULE}, or remove the file from the search path")
    players = spec.get("players", 1)
    if isinstance(players, bool) or not isinstance(players, (int, str)) or not str(players).isdigit() \
            or int(players) < 1:
        raise PlaypenError(f"{where}: game '{name}' needs 'players' as a positive integer, got {players!r}")
    return spec


def games_in_folder(folder: Path, source: str, depth: int = 0) -> list[GameEntry]:
    """Games below `folder` as clem searches them: a folder with clemgame.json is a game folder (one spec or a
    list); otherwise its sub-folders, sorted, up to SEARCH_DEPTH levels, skipping hidden and clem's skipped dirs."""
    spec_file = folder / "clemgame.json"
    try:
        has_spec = spec_file.is_file()
    except OSError:  # a folder that cannot be looked into (/proc/1/fdinfo): no game there
        return []
    if has_spec:
        data = _read_json(spec_file)
        if not isinstance(data, list):
            return [GameEntry(_checked_spec(data, str(spec_file))["game_name"], folder, source, data)]
        return [GameEntry(_checked_spec(s, f"{spec_file}[{i}]")["game_name"], folder, source, s)
                for i, s in enumerate(data)]
    if depth >= SEARCH_DEPTH:
        return []
    found = []
    try:
        children = sorted(folder.iterdir())
    except OSError:  # unreadable (another user's folder, /proc): clem skips it too
        return []
    for child in children:
        try:
            is_dir = child.is_dir()
        except OSError:  # e.g. /proc/1/cwd: a link that cannot be followed
            continue
        if is_dir and not child.name.startswith(".") and child.name not in SKIPPED_DIRS:
            found += games_in_folder(child, source, depth + 1)
    return found


def _registry_games(registry: Path) -> list[GameEntry]:
    listed = _read_json(registry)
    if not isinstance(listed, list):
        raise PlaypenError(f'{registry}: must be a JSON list like [{{"benchmark_path": "path/to/clembench"}}]')
    found = []
    for i, item in enumerate(listed):
        where = f"{registry}: entry {i}"
        if not isinstance(item, dict) or not (item.get("benchmark_path") or item.get("game_path")):
            raise PlaypenError(f'{where} needs a "benchmark_path" (a benchmark folder) or a full game spec with '
                               f'"game_path"; got {item!r}')
        raw = item.get("benchmark_path") or item["game_path"]
        path = (registry.parent / Path(str(raw)).expanduser()).resolve()
        if not path.is_dir():
            what = "is a file, not a folder" if path.exists() else "does not exist"
            raise PlaypenError(f"{where}: {'benchmark_path' if 'benchmark_path' in item else 'game_path'} {raw} "
                               f"{what} ({path}); fix the path or remove the entry")
        if "benchmark_path" in item:
            games = games_in_folder(path, str(registry))
            if not games:
                raise PlaypenError(f"{where}: no clemgame.json found in {path} (searched {SEARCH_DEPTH} levels "
                                   f"down); is it a clembench checkout?")
            found += games
        else:
            spec = {k: v for k, v in _checked_spec(item, where).items() if k not in ("game_path", "lookup_source")}
            found.append(GameEntry(spec["game_name"], path, str(registry), spec))
    return found


def _builtin_games() -> list[GameEntry]:
    return [entry for name in BUILTIN_GAMES for entry in games_in_folder(BUILTIN_DIR / name, BUILTIN_SOURCE)]


def all_games(cwd: Path | None = None) -> list[GameEntry]:
    """Every game found, in precedence order, duplicates of a name included (the first one wins)."""
    cwd = (cwd or Path.cwd()).resolve()
    found = _registry_games(cwd / REGISTRY_FILE) if os.path.exists(cwd / REGISTRY_FILE) else []
    found += games_in_folder(cwd, "working directory")
    home = os.environ.get(CLEMBENCH_HOME)
    if not found and home and Path(home).is_dir():
        found += games_in_folder(Path(home).expanduser().resolve(), f"${CLEMBENCH_HOME}")
    # one folder found twice (listed in game_registry.json and under the working directory, or the built-ins
    # under a working directory holding a playpen checkout) is one game, not two rivals
    builtins = _builtin_games()
    unique, seen = [], {(e.name, e.path.resolve()) for e in builtins}
    for entry in found:
        key = (entry.name, entry.path.resolve())
        if key not in seen:
            seen.add(key)
            unique.append(entry)
    return unique + builtins


def game_entries(cwd: Path | None = None, found: list[GameEntry] | None = None) -> list[GameEntry]:
    """The games a name can reach, one per name, in precedence order; shadowed built-ins as playpen-<name>."""
    entries, seen = [], set()
    for entry in all_games(cwd) if found is None else found:
        if entry.name not in seen:
            entries.append(entry)
            seen.add(entry.name)
        elif entry.builtin and BUILTIN_ALIAS + entry.name not in seen:
            entries.append(GameEntry(BUILTIN_ALIAS + entry.name, entry.path, entry.source, entry.spec))
            seen.add(BUILTIN_ALIAS + entry.name)
    return entries


def shadowed(found: list[GameEntry]) -> dict[tuple[Path, str], GameEntry]:
    """(folder, game_name) of every game that loses its name to an earlier one → the winner."""
    winners: dict[str, GameEntry] = {}
    lost = {}
    for entry in found:
        if entry.name in winners:
            lost[(entry.path, entry.name)] = winners[entry.name]
        else:
            winners[entry.name] = entry
    return lost


def resolve_game(name: str, cwd: Path | None = None) -> GameEntry:
    """The game a name means (see the module doc); `playpen-<built-in>` always means the built-in."""
    if not isinstance(name, str) or not name.strip():
        raise PlaypenError(f"a game name must be a non-empty string, got {name!r}; see `playpen list games`")
    entries = game_entries(cwd)
    for entry in entries:
        if entry.name == name:
            return entry
    builtin = name.removeprefix(BUILTIN_ALIAS)
    if name.startswith(BUILTIN_ALIAS) and builtin in BUILTIN_GAMES:  # not shadowed: it goes by its own name
        return next(e for e in entries if e.builtin and e.spec["game_name"] == builtin)
    import difflib

    names = sorted(e.name for e in entries)
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise PlaypenError(f"unknown game '{name}'; {hint}available: {', '.join(names) or 'none'} "
                       f"(`playpen list games`)")


def _alias(entry: GameEntry) -> bool:
    """A shadowed built-in, reachable by its playpen-<name> only (selections like "all" leave it out)."""
    return entry.builtin and entry.name != entry.spec["game_name"]


def default_games(entries: list[GameEntry]) -> list[GameEntry]:
    """What "every game" means: the games clem sees (registered or under the working directory) when there are
    any, as `clem run -g all` plays them; playpen's built-ins only when no benchmark is around."""
    benchmark = [e for e in entries if not e.builtin]
    return benchmark or [e for e in entries if not _alias(e)]


def is_selector(text: str) -> bool:
    """clem's game selector strings: a JSON-ish dict such as "{'benchmark':['2.0']}", or "all"."""
    return text == "all" or text.lstrip().startswith("{")


def _select(selector: str, entries: list[GameEntry]) -> list[GameEntry]:
    """clemcore's own selection (GameRegistry.get_game_specs_that_unify_with) over the games a name reaches,
    shadowed built-ins left out (clem would not see them)."""
    entries = [e for e in entries if not _alias(e)]
    if selector == "all":
        return default_games(entries)
    from clemcore.clemgame import GameRegistry

    by_name = {e.name: e for e in entries}
    try:
        chosen = GameRegistry([e.clem_spec() for e in entries]).get_game_specs_that_unify_with(selector,
                                                                                               verbose=False)
    except (ValueError, KeyError) as e:
        raise PlaypenError(f"game selector {selector}: {str(e).strip(chr(34) + chr(39))}") from None
    _warn_unknown_keys(selector, entries)
    return [by_name[spec["game_name"]] for spec in chosen]


def _warn_unknown_keys(selector: str, entries: list[GameEntry]) -> None:
    """clem unifies a selector with each game's spec, so a key no spec has (a typo: {'lang': 'de'} for
    'language') matches every game. playpen selects what clem selects, but says so."""
    try:
        keys = set(json.loads(selector.replace("'", '"')))
    except (ValueError, TypeError):
        return
    known = {key for e in entries for key in e.spec} | {"benchmark"}
    if unknown := sorted(keys - known):
        print(f"playpen: warning: game selector {selector}: no game has the key(s) {', '.join(unknown)}, so (as in "
              f"`clem run`) they match every game; known keys: {', '.join(sorted(known))}", file=sys.stderr,
              flush=True)


def select_games(selectors: list[str] | None = None, suite: str = "all", cwd: Path | None = None) -> list[GameEntry]:
    """Games for -g/`games:` values: names and clem selector strings, in order, without repeats; default (and
    "all"): default_games(). Filtered by suite; errors are one line."""
    if suite not in SUITES:
        raise PlaypenError(f"unknown suite '{suite}'; choose one of {', '.join(SUITES)}")
    entries = game_entries(cwd)
    if selectors:
        chosen: dict[str, GameEntry] = {}
        for selector in selectors:
            found = _select(selector, entries) if is_selector(selector) else [resolve_game(selector, cwd)]
            chosen.update((e.name, e) for e in found)
        wanted = list(chosen.values())
    else:
        wanted = default_games(entries)
    in_suite = [e for e in wanted if suite == "all" or e.static == (suite == "static")]
    if selectors and len(in_suite) < len(wanted) and not any(is_selector(s) for s in selectors):
        odd = ", ".join(e.name for e in wanted if e not in in_suite)
        raise PlaypenError(f"game(s) {odd} are not in suite '{suite}' "
                           f"({'static' if suite == 'static' else 'dialogue'} games only); drop --suite or -g")
    if not in_suite:
        raise PlaypenError(f"no game matches {' '.join(selectors or [])} in suite '{suite}'; "
                           f"see `playpen list games`")
    return in_suite
