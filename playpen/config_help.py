"""Config keys as their own documentation: every key of a config dataclass with its type, default, range and help
(the field metadata `playpen.config.documented` and `bounded` write), listed for `playpen train METHOD -h` and
`playpen submit KIND -h`, as TRL's and open-r1's dataclass fields describe their own arguments.
"""
from __future__ import annotations

import dataclasses
import shutil
import textwrap
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from playpen.config import BOUNDS, HELP, Checked, to_dict


@dataclass(frozen=True)
class KeyDoc:
    """One config key as `--help` lists it."""

    name: str  # nested keys are dotted: container.image, runs[].path
    type: str  # as YAML spells it: str, int, list[str], mapping, ... | null
    default: str | None  # as YAML writes it; None: required
    allowed: str = ""  # the range, and why
    help: str = ""


def key_docs(cls: type, prefix: str = "") -> list[KeyDoc]:
    """Every key of config dataclass `cls` in field order, each followed by the keys of a section it holds."""
    hints = typing.get_type_hints(cls)
    docs = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp = hints[f.name]
        bounds = f.metadata.get(BOUNDS)
        allowed = bounds.allowed() + (f" ({bounds.hint})" if bounds.hint else "") if bounds else ""
        sections = _sections(tp)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            default = None
        elif dataclasses.is_dataclass(tp):  # a section: its own keys follow, each with its default
            default = ""
        elif f.default_factory is not dataclasses.MISSING:  # (a field has a default or a factory, never both)
            default = value_text(f.default_factory())
        else:
            default = value_text(f.default)
        docs.append(KeyDoc(prefix + f.name, type_text(tp), default, allowed, f.metadata.get(HELP, "")))
        for section in sections:
            inside = "[]." if typing.get_origin(tp) in (list, tuple) else "."
            docs += key_docs(section, prefix + f.name + inside)
    return docs


def _sections(tp: Any) -> list[type]:
    """The config dataclasses a key of type `tp` holds (a section, or a list of them)."""
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # (an annotation: a class, never an instance)
        return [tp]
    return [s for arg in typing.get_args(tp) for s in _sections(arg)]


def type_text(tp: Any) -> str:
    """An annotation as a YAML user reads it: `int | null`, `list[str]`, `mapping`."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(option) for option in typing.get_args(tp))
    if origin in (list, tuple):
        args = typing.get_args(tp)
        return f"list[{type_text(args[0])}]" if args else "list"
    if tp is type(None):
        return "null"
    if tp is dict or origin is dict or dataclasses.is_dataclass(tp):
        return "mapping"
    if tp is Any:
        return "any"
    if tp is Path:
        return "path"
    if isinstance(tp, type) and issubclass(tp, Checked):
        return tp.__name__.lower()  # name, location: what playpen.storage checks them to be
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def value_text(value: Any) -> str:
    """A default as YAML writes it (null, true, [all], {}), on one line."""
    text = yaml.safe_dump(to_dict(value), default_flow_style=True, width=10_000).strip()
    return text.removesuffix("...").strip()


def help_width() -> int:
    """The width argparse wraps --help to (the terminal's), so that what is listed under it lines up with it."""
    return max(shutil.get_terminal_size().columns - 2, 40)


def format_keys(title: str, docs: list[KeyDoc], width: int | None = None) -> str:
    """`title`, then one entry per key with its help indented under it, wrapped as argparse wraps --help:
        group_size: int = 8, at least 2 (...)
            episodes per instance ..."""
    width = width or help_width()
    lines = textwrap.wrap(title, width, break_long_words=False, break_on_hyphens=False)
    for doc in docs:
        head = f"  {doc.name}: {doc.type}" + (" (required)" if doc.default is None else
                                                f" = {doc.default}" if doc.default else "")
        head += f", {doc.allowed}" if doc.allowed else ""
        lines += textwrap.wrap(head, width, subsequent_indent=" " * 6, break_long_words=False, break_on_hyphens=False)
        if doc.help:
            lines += textwrap.wrap(doc.help, width, initial_indent=" " * 6, subsequent_indent=" " * 6,
                                   break_long_words=False, break_on_hyphens=False)
    return "\n".join(lines)
