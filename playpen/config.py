"""Typed experiment configs: YAML files + `key=value` overrides → frozen dataclasses.

Every config error is one line naming the file, the key and what is allowed, raised before anything runs.
`build` is the one validation layer of every schema (train configs, job specs, sweep files, cluster profiles):
types from the annotations, finiteness of every float (no inf/nan), and the ranges declared next to the fields
with `bounded(default, ge=..)` (or a `bounds=` dict for schemas derived from a function's signature). CLI flags
that mean the same thing are checked with the same `Bounds`. Each key's help text is data too, in the field's
metadata (`documented(default, help=..)`, `bounded(.., help=..)`), which `playpen.config_help` lists for
`playpen train METHOD -h` and `playpen submit KIND -h`; an unknown key is refused naming its close matches and
where that help is. Sections that are handed to a library (TRL's
`trainer:` arguments, PEFT's `lora:`) are checked against that library's own dataclass fields by `check_keys`,
so a typo never reaches the library silently.
"""
from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import re
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, TypeVar

import yaml

from playpen.errors import PlaypenError
# how files are read (regular files under a size bound, YAML without aliases) is playpen.reading's; read_text and
# load_yaml are imported from here too, as they always were
from playpen.reading import load_yaml, read_text, yaml_value  # noqa: F401

if TYPE_CHECKING:
    from _typeshed import DataclassInstance  # (typeshed's: what dataclasses.fields accepts)

T = TypeVar("T", bound="DataclassInstance")  # a config dataclass
BOUNDS = "playpen.bounds"  # dataclass field metadata key of a field's Bounds
HELP = "help"  # dataclass field metadata key of a key's help text (the key TRL's and open-r1's fields use)


@dataclass(frozen=True)
class Bounds:
    """The range a numeric value must lie in; `hint` says why, or what to do instead."""

    ge: float | None = None  # value >= ge
    gt: float | None = None  # value > gt
    le: float | None = None  # value <= le
    hint: str = ""

    def check(self, value: Any, where: str) -> None:
        """One line naming `where` when `value` is out of range or not a finite number (None passes: unset)."""
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PlaypenError(f"{where}: expected a number, got {value!r}")
        if not math.isfinite(value):
            raise PlaypenError(f"{where}: must be a finite number, got {value}")
        hint = f" ({self.hint})" if self.hint else ""
        if (self.ge is not None and value < self.ge) or (self.gt is not None and value <= self.gt):
            raise PlaypenError(f"{where}: must be {self._low()}, got {value}{hint}")
        if self.le is not None and value > self.le:
            raise PlaypenError(f"{where}: must be at most {_number(self.le)}, got {value}{hint}")

    def _low(self) -> str | None:
        """The lower bound in words ("at least 1", "greater than 0"), None without one."""
        if self.ge is not None:
            return f"at least {_number(self.ge)}"
        return f"greater than {_number(self.gt)}" if self.gt is not None else None

    def allowed(self) -> str:
        """The range in words (`--help` shows it): "at least 1", "at least 0 and at most 4294967295"."""
        high = f"at most {_number(self.le)}" if self.le is not None else None
        return " and ".join(part for part in (self._low(), high) if part)

    def field(self, default: Any = dataclasses.MISSING, help: str = "") -> Any:
        """A dataclass field with these bounds, enforced by `build`, and its help text."""
        return dataclasses.field(default=default, metadata={BOUNDS: self, HELP: help})


def _number(value: float) -> str:
    """A bound as written: 4294967295, not 4.29497e+09."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def bounded(default: Any = dataclasses.MISSING, *, ge: float | None = None, gt: float | None = None,
            le: float | None = None, hint: str = "", help: str = "") -> Any:
    """`max_new_tokens: int = bounded(64, ge=1, help="per reply")`: a config key whose range `build` checks;
    `playpen train METHOD --help` shows the range, the hint and the help."""
    return Bounds(ge, gt, le, hint).field(default, help)


def documented(default: Any = dataclasses.MISSING, *, help: str, factory: Any = dataclasses.MISSING) -> Any:
    """`game: str | None = documented(None, help="...")`: a config key with its help text as data, which
    `playpen train METHOD --help` and `playpen submit KIND --help` list (`factory` makes a mutable default)."""
    return dataclasses.field(default=default, default_factory=factory, metadata={HELP: help})


class Checked(str):
    """An annotation for str values that `coerce` hands to `cls.check(value, where)`: values that become file
    names or reach a job script (playpen.storage.Name, Location) are refused where the config is read."""

    @classmethod
    def check(cls, value: str, where: str) -> str:
        return value


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
        node[leaf] = _scalar(pair, raw)
    return out


def _scalar(pair: str, raw: str) -> Any:
    """An override's value as YAML reads it; text that is not YAML (`x=[1`, a tab) is one line, not a traceback."""
    if not raw:
        return ""
    try:
        return yaml_value(raw)
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or " ".join(str(e).split())[:80]
        raise PlaypenError(f"override {pair!r}: the value is not valid YAML ({problem}); quote it, e.g. "
                           f"key='\"text\"'") from None


def merge(base: dict, extra: dict) -> dict:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


Sections = typing.Mapping[str, typing.Callable[[], typing.Collection[str]]]  # section -> its keys (asked lazily)


def check_keys(data: dict, allowed: typing.Iterable[str], where: str, keys_help: str = "",
               sections: Sections | None = None) -> None:
    """Every key of `data` is allowed; an unknown one is refused with its close matches and `keys_help` (where
    every key is described, e.g. "every key: `playpen train sft --help`"), else the list of allowed keys. A key of
    one of the nested `sections` given at the top (`max_steps` for `trainer.max_steps`) is pointed there."""
    allowed = sorted(allowed)
    for key in data:
        if key not in allowed:
            rest = keys_help or f"allowed: {', '.join(allowed)}"
            section = next((name for name, keys in (sections or {}).items() if key in keys()), None)
            if section:
                raise PlaypenError(f"{where}: unknown key '{key}'; did you mean {section}.{key}? (it goes under "
                                   f"{section}:; {rest})")
            close = difflib.get_close_matches(str(key), allowed, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise PlaypenError(f"{where}: unknown key '{key}'{hint} ({rest})")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def coerce(value: Any, tp: Any, where: str) -> Any:
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
            return coerce(value, real[0], where)
        for option in real:
            try:
                return coerce(value, option, where)
            except PlaypenError:
                if isinstance(value, dict) and dataclasses.is_dataclass(option):
                    raise  # a mapping meant for that section: its own error names the key that is wrong
        raise PlaypenError(f"{where}: expected {' or '.join(_type_name(o) for o in options)}, got {value!r}")
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # (an annotation: a class, never an instance)
        if not isinstance(value, dict):
            raise PlaypenError(f"{where}: expected a mapping of {tp.__name__} keys, got {value!r}")
        return build(tp, value, where)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise PlaypenError(f"{where}: expected a list, got {value!r}")
        (item_type, *_) = typing.get_args(tp) or (Any,)
        return [coerce(v, item_type, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise PlaypenError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if isinstance(tp, type) and issubclass(tp, Checked):
        if not isinstance(value, str):
            raise PlaypenError(f"{where}: expected str, got {value!r}")
        return str(tp.check(value, where))  # a plain str: YAML dumps it, pickles carry no playpen type
    if tp is Path and isinstance(value, str):
        return Path(value)
    if tp is float and isinstance(value, (int, float, str)) and not isinstance(value, bool):
        try:  # ints are floats too; YAML 1.1 reads "1e-4" as a string
            number = float(value)
        except ValueError:
            raise PlaypenError(f"{where}: expected float, got {value!r}") from None
        if not math.isfinite(number):  # inf/nan are never a setting: they only reach the math as garbage
            raise PlaypenError(f"{where}: must be a finite number, got {value!r}")
        return number
    if isinstance(tp, type) and not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
        raise PlaypenError(f"{where}: expected {_type_name(tp)}, got {value!r}")
    return value


def signature_dataclass(func, name: str, skip: tuple[str, ...] = (), extra: tuple = (),
                        bounds: dict[str, Bounds] | None = None, types: dict[str, Any] | None = None,
                        helps: dict[str, str] | None = None) -> type:
    """A config dataclass whose keys are `func`'s own keyword arguments (types and defaults included), plus
    `extra` (name, type, default) fields: a job's YAML keys cannot drift from the function the job calls.
    `bounds` gives arguments their ranges, checked by `build` as any other field's; `types` replaces an
    argument's annotation (e.g. a path that must be a `Location` in a job's YAML); `helps` their help texts."""
    hints = {**typing.get_type_hints(func), **(types or {})}
    bounds, helps = bounds or {}, helps or {}
    fields = []
    for param in inspect.signature(func).parameters.values():
        if param.name in skip or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        default = dataclasses.MISSING if param.default is param.empty else param.default
        help_text = helps.get(param.name, "")
        field = bounds[param.name].field(default, help_text) if param.name in bounds else \
            documented(default, help=help_text)
        fields.append((param.name, hints.get(param.name, Any), field))
    fields += [(n, tp, documented(d, help=helps.get(n, ""))) for n, tp, d in extra]
    return dataclasses.make_dataclass(name, fields, frozen=True)


# Old spellings of a setting → its one spelling: still accepted (config keys and flags), with one note per process.
# `teacher` named the frozen partner of game methods until distillation's grading teacher came: a config without
# a teacher key of its own reads it as partner.
RENAMED = {"max_tokens": "max_new_tokens", "teacher": "partner", "teacher_seats": "partner_seats"}
_NOTED: set[str] = set()


def deprecated(old: str, new: str) -> None:
    """One line on stderr the first time an old spelling is used in this process (not per key, file or job)."""
    if old not in _NOTED:
        _NOTED.add(old)
        print(f"[playpen] note: {old} is deprecated; use {new}", file=sys.stderr)


def renamed(data: dict, fields: typing.Iterable[str], where: str) -> dict:
    """`data` with old key spellings (RENAMED) under their new names, for a schema that has the new one."""
    fields = set(fields)
    for old, new in RENAMED.items():
        if old in data and old not in fields and new in fields:
            if new in data:
                raise PlaypenError(f"{where}: both {old} and {new} given; keep {new} only")
            deprecated(old, new)
            data = {(new if k == old else k): v for k, v in data.items()}
    return data


def build(cls: type[T], data: dict, where: str, keys_help: str = "", sections: Sections | None = None) -> T:
    """Build dataclass `cls` from `data`; `where` is "file.yaml" or "file.yaml: section" for messages, `keys_help`
    says where every key is described and `sections` the keys of nested sections (check_keys)."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    data = renamed(data, fields, where)
    check_keys(data, fields, where, keys_help, sections)
    hints = typing.get_type_hints(cls)
    kwargs = {name: coerce(value, hints[name], f"{where}: {name}") for name, value in data.items()}
    for name, value in kwargs.items():
        if BOUNDS in fields[name].metadata:
            fields[name].metadata[BOUNDS].check(value, f"{where}: {name}")
    missing = [n for n, f in fields.items() if n not in kwargs
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise PlaypenError(f"{where}: missing required key(s): {', '.join(missing)}")
    return cls(**kwargs)


def load_config(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = (), *, keys_help: str = "",
                sections: Sections | None = None, **defaults) -> T:
    """defaults < YAML file < key=value overrides; `path` is a file or a shipped config's name (find_config);
    `keys_help` and `sections` as in `build`."""
    path = find_config(path) if path else None
    where = str(path) if path else "overrides"
    fields = [f.name for f in dataclasses.fields(cls)]
    # each layer renamed on its own: an old spelling in one layer overrides the new spelling in a lower one
    layers = [defaults, load_yaml(path) if path else {}, parse_overrides(list(overrides))]
    data: dict = {}
    for layer in layers:
        data = merge(data, renamed(layer, fields, where))
    try:
        return build(cls, data, where, keys_help, sections)
    except PlaypenError as e:
        made_for = _made_for(path) if path and "unknown key" in str(e) else None
        if made_for and made_for.split()[-1] not in keys_help:  # (another command's config: say so, not only the key)
            raise PlaypenError(f"{e}; {path} is a config of `{made_for}` (its first line says so): give it to that "
                               f"command, or a config of this one") from None
        raise


def _made_for(path: Path) -> str | None:
    """The command a shipped-style config names on its first line (`# playpen train grpo --config ...`)."""
    match = re.match(r"#\s*((?:python -m playpen\.submit|playpen(?: train| debate)?) [a-z_-]+)",
                     read_text(path, "config").split("\n", 1)[0])
    return match.group(1) if match else None


def to_dict(obj: Any) -> Any:
    return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) and not isinstance(obj, type) else obj


class _PlainDumper(yaml.SafeDumper):
    """Writes a value twice rather than as an alias: playpen's loader refuses aliases."""

    def ignore_aliases(self, data) -> bool:
        return True


def dump_yaml(obj: Any) -> str:
    return yaml.dump(to_dict(obj), Dumper=_PlainDumper, sort_keys=False)


# ---------------------------------------------------------------- packaged defaults

def packaged_configs() -> Path:
    """playpen/configs/: the one copy of every shipped config, package data (pip install, the image)."""
    from importlib.resources import files

    return Path(str(files("playpen") / "configs"))


def packaged_config_names() -> list[str]:
    """Every shipped config by the name `--config` takes: its path under playpen/configs/, a YAML file without
    its suffix (`grpo/demo`), any other file with it (`deepspeed/zero2.json`)."""
    root = packaged_configs()
    files = [p for p in root.rglob("*") if p.is_file() and p.name != "README.md" and "__pycache__" not in p.parts]
    return sorted(str(p.relative_to(root).with_suffix("") if p.suffix == ".yaml" else p.relative_to(root))
                  for p in files)


def config_file(path: str | Path) -> Path:
    """A config-side file named on a command line or in a config (`--config`, `deepspeed:`, `prompts:`): an
    existing path as given; else a shipped config by name, the same everywhere (any folder, the image):
    `grpo/demo`, `grpo/demo.yaml` and `configs/grpo/demo.yaml` all name playpen/configs/grpo/demo.yaml.
    Returns the path as given when neither exists (the caller says what is missing)."""
    given = Path(path).expanduser()
    if given.exists() or given.is_absolute() or ".." in given.parts or not given.parts:
        return given
    parts = given.parts[1:] if given.parts[0] == "configs" and len(given.parts) > 1 else given.parts
    packaged = packaged_configs().joinpath(*parts)
    for candidate in (packaged, packaged.with_name(packaged.name + ".yaml")):
        if candidate.is_file():
            return candidate
    return given


def find_config(path: str | Path, what: str = "config file") -> Path:
    """`--config NAME_OR_PATH`: config_file's answer, or one line naming what was looked for and the closest
    shipped names. A folder or an unreadable file is returned as it is (load_yaml says what is wrong)."""
    found = config_file(path)
    if found.exists():
        return found
    names = packaged_config_names()
    stem = str(path).removeprefix("configs/").removesuffix(".yaml")
    close = difflib.get_close_matches(stem, names, n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise PlaypenError(f"{what} {path} not found: no such file here, nor a shipped config of that name "
                       f"(playpen configs list){hint}")
