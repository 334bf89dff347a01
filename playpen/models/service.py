"""The one place a name or folder becomes a model: the engine, the trainers and their teachers, `playpen run`, the
meter, the scorers, screening and eval all come here.

    spec = resolve("gpt-4o", role="teacher")      # name/folder → clemcore ModelSpec dict, key.json checked
    spec = resolve_local("playpen-tiny")          # the same, refused unless transformers can load it here
    model = load_player(spec, max_tokens=300, temperature=0.0)   # any clemcore backend (mock, APIs, local HF)
    model, tokenizer = load_frozen(spec)          # local HF weights, frozen (quantization/dtype decided once)

Names resolve with clem's own precedence (playpen.model_registry): ./model_registry.json, the runs' registries,
playpen's packaged entries, clemcore's packaged registry and `mock`; folders are training runs, checkpoints or
Hugging Face model folders (playpen.models.specs). Packaged weights (playpen-tiny, smollm2-135m-instruct-q4) are
made on first use. Inside `resolving_once()` (a whole training run) the registries are read once and each name
resolved once.
"""
from __future__ import annotations

import copy
import functools
from collections import Counter
from contextlib import contextmanager

from playpen.errors import PlaypenError
from playpen.models import ensure_packaged_weights
from playpen.models.loading import load_frozen, quantization  # noqa: F401  (the service's loading half)
from playpen.model_registry import check_remote_key, model_entries

RESOLVED: Counter = Counter()  # name → times it was resolved in this process (tests count a run's resolutions)
_scope: list[dict] = []  # the innermost resolving_once() scope: {"entries": [...], "specs": {name: spec}}


@contextmanager
def resolving_once():
    """Within it the model registries are read once and every name resolved once (a training run's learner and
    teacher: checked, then loaded, then registered from the same resolution)."""
    _scope.append({"entries": None, "specs": {}})
    try:
        yield
    finally:
        _scope.pop()


def once(function):
    """`function` (a whole run) inside resolving_once()."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        with resolving_once():
            return function(*args, **kwargs)
    return wrapper


def entries():
    """The registries' entries: read once per resolving_once() scope, else on every call (files may change)."""
    if not _scope:
        return model_entries()
    if _scope[-1]["entries"] is None:
        _scope[-1]["entries"] = model_entries()
    return _scope[-1]["entries"]


def registered_entry(name: str) -> dict | None:
    """A name's registry entry as written (placeholders such as {playpen_models} unexpanded), or None."""
    return next((copy.deepcopy(e.spec) for e in entries() if e.name == name), None)


def resolve(model: str | dict, role: str | None = "model") -> dict:
    """The clemcore ModelSpec dict of a name, folder or spec dict, its packaged weights made here; with a `role`
    ("model", "teacher", "learner") the backend's key.json entry (or a hub model's availability offline) is checked
    now, in one line naming the model, the backend and where key.json is looked up. A fresh copy every call."""
    from playpen.models.specs import resolve_eval_model

    key = model if isinstance(model, str) else None
    specs = _scope[-1]["specs"] if _scope and key is not None else None
    if specs is not None and key in specs:
        spec = copy.deepcopy(specs[key])
    else:
        spec = resolve_eval_model(model, entries())
        _check_backend(spec)
        ensure_packaged_weights(spec)
        if key is not None:
            RESOLVED[key] += 1
        if specs is not None:
            specs[key] = copy.deepcopy(spec)
    if role:
        check_remote_key(spec, role)
    return spec


def resolve_local(model: str, role: str | None = "model") -> dict:
    """resolve() for what transformers loads here (training, the meter, frozen teachers given as such)."""
    spec = resolve(model, role)
    if spec.get("backend") != "huggingface_local" or not spec.get("huggingface_id"):
        raise PlaypenError(f"model '{model}' uses backend '{spec.get('backend')}'; only huggingface_local models "
                           f"can be trained or loaded with transformers (pick a local model, e.g. playpen-tiny)")
    return spec


def _check_backend(spec: dict) -> None:
    """The spec's backend is one clemcore has (packaged or a ./<name>_api.py): one line now, not at load time.
    huggingface_local is always there and needs no import of clemcore (whose logging config an SFT run need not get)."""
    if spec.get("backend") == "huggingface_local":
        return
    from clemcore.backends import BackendRegistry

    if not BackendRegistry.from_packaged_and_cwd_files().is_supported(spec.get("backend")):
        raise PlaypenError(f"model '{spec['model_name']}' names backend '{spec.get('backend')}', which clemcore does "
                           f"not have (see `clem list backends`; a custom one is a ./<name>_api.py file)")


def load_player(spec: dict, max_tokens: int, temperature: float):
    """A clemcore Model for a resolved spec (any backend, as `clem run` loads it), generation arguments set."""
    from clemcore.backends import BackendRegistry, ModelSpec

    ensure_packaged_weights(spec)  # (a spec built from a checkpoint of a packaged model names its folder)
    model_spec = ModelSpec.from_dict(spec)
    backend = BackendRegistry.from_packaged_and_cwd_files().get_backend_for(model_spec.backend)
    model = backend.get_model_for(model_spec)
    model.set_gen_args(max_tokens=max_tokens, temperature=temperature)
    return model
