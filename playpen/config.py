"""Typed experiment configs: YAML files + `key=value` overrides → frozen dataclasses.

Every config error is one line naming the file, the key and what is allowed, raised before anything runs.
Sections that are handed to a library (TRL's `trainer:` arguments, PEFT's `lora:`) are checked against that
library's own dataclass fields by `check_keys`, so a typo never reaches the library silently.
"""
from __future__ import annotations

import dataclasses
import difflib
import inspect
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from playpen.errors import PlaypenError

T = TypeVar("T")


def load_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise PlaypenError(f"config file {path} not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise PlaypenError(f"{where}: YAML syntax error: {e.problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PlaypenError(f"{path}: top level must be a mapping of keys, got {type(data).__name__}")
    return data


def parse_overrides(pairs: list[str]) -> dict:
    """["trainer.max_steps=5", "model=smol-135m"] → nested dict; values are parsed as YAML scalars."""
    out: dict = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise PlaypenError(f"override {pair!r} must look like key=value (e.g. trainer.max_steps=10)")
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise PlaypenError(f"override {pair!r} conflicts with an earlier override of {part}")
        node[leaf] = yaml.safe_load(raw) if raw else ""
    return out


def merge(base: dict, extra: dict) -> dict:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def check_keys(data: dict, allowed: typing.Iterable[str], where: str) -> None:
    allowed = sorted(allowed)
    for key in data:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=3)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise PlaypenError(f"{where}: unknown key '{key}'; {hint}allowed: {', '.join(allowed)}")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check `value` against annotation `tp`; build nested dataclasses. Ints are accepted for floats."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        real = [o for o in options if o is not type(None)]
        if len(real) == 1:  # Optional[X]: X's own error is the useful one
            return _coerce(value, real[0], where)
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, where)
            except PlaypenError:
                continue
        raise PlaypenError(f"{where}: expected {' or '.join(_type_name(o) for o in options)}, got {value!r}")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise PlaypenError(f"{where}: expected a mapping of {tp.__name__} keys, got {value!r}")
        return build(tp, value, where)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise PlaypenError(f"{where}: expected a list, got {value!r}")
        (item_type, *_) = typing.get_args(tp) or (Any,)
        return [_coerce(v, item_type, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise PlaypenError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is Path and isinstance(value, str):
        return Path(value)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):
        try:  # YAML 1.1 reads "1e-4" as a string
            return float(value)
        except ValueError:
            pass
    if isinstance(tp, type) and not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
        raise PlaypenError(f"{where}: expected {_type_name(tp)}, got {value!r}")
    return value


def signature_dataclass(func, name: str, skip: tuple[str, ...] = (), extra: tuple = ()) -> type:
    """A config dataclass whose keys are `func`'s own keyword arguments (types and defaults included), plus
    `extra` (name, type, default) fields: a job's YAML keys cannot drift from the function the job calls."""
    hints = typing.get_type_hints(func)
    fields = []
    for param in inspect.signature(func).parameters.values():
        if param.name in skip or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        default = dataclasses.MISSING if param.default is param.empty else param.default
        fields.append((param.name, hints.get(param.name, Any), dataclasses.field(default=default)))
    fields += [(n, tp, dataclasses.field(default=d)) for n, tp, d in extra]
    return dataclasses.make_dataclass(name, fields, frozen=True)


def build(cls: type[T], data: dict, where: str) -> T:
    """Build dataclass `cls` from `data`; `where` is "file.yaml" or "file.yaml: section" for messages."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    check_keys(data, fields, where)
    hints = typing.get_type_hints(cls)
    kwargs = {name: _coerce(value, hints[name], f"{where}: {name}") for name, value in data.items()}
    missing = [n for n, f in fields.items() if n not in kwargs
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise PlaypenError(f"{where}: missing required key(s): {', '.join(missing)}")
    return cls(**kwargs)


def load_config(cls: type[T], path: str | Path | None = None, overrides: list[str] = (), **defaults) -> T:
    """defaults < YAML file < key=value overrides."""
    data = merge(defaults, load_yaml(path) if path else {})
    data = merge(data, parse_overrides(list(overrides)))
    return build(cls, data, str(path) if path else "overrides")


def to_dict(obj: Any) -> Any:
    return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj


def dump_yaml(obj: Any) -> str:
    return yaml.safe_dump(to_dict(obj), sort_keys=False)
