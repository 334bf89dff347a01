"""`playpen configs list|copy`: the shipped configs (playpen/configs/), by the names `--config` takes.

    playpen configs list                          every shipped config and the command its first line shows
    playpen configs copy grpo/demo [DEST]         your own copy to edit (default ./configs/grpo/demo.yaml)

A copy at ./configs/NAME.yaml is what `--config configs/NAME.yaml` reads from that folder (an existing path comes
before a shipped name), and a copied cluster profile there is what `--cluster NAME` finds first; `--config NAME`
without the folder always means the shipped one.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from playpen.config import packaged_config_names, packaged_configs
from playpen.errors import PlaypenError
from playpen.storage import check_output_file, write_output


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("list", help="every shipped config by name, with the command that runs it")
    copy = actions.add_parser("copy", help="copy a shipped config to edit it (as torchtune's `tune cp`)")
    copy.add_argument("name", metavar="NAME", help="a name from `playpen configs list`, e.g. grpo/demo")
    copy.add_argument("dest", metavar="DEST", nargs="?", default=None,
                      help="file or existing folder to copy to (default: ./configs/NAME.yaml)")
    copy.add_argument("--force", action="store_true", help="overwrite DEST when it exists")


def summary(path: Path) -> str:
    """A config's first comment line: the command that runs it (a cluster profile's: what it is)."""
    if path.suffix != ".yaml":
        return ""
    first = (path.read_text(encoding="utf-8").splitlines() or [""])[0]
    return first[1:].strip() if first.startswith("#") else ""


def shipped_file(name: str) -> Path:
    """The shipped file a name means (`grpo/demo`, `grpo/demo.yaml`, `configs/grpo/demo.yaml`), or one line with
    the names there are."""
    stem = name.removeprefix("configs/").removesuffix(".yaml")
    if stem not in packaged_config_names():
        import difflib

        close = difflib.get_close_matches(stem, packaged_config_names(), n=3, cutoff=0.5)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise PlaypenError(f"no shipped config named {name}; {hint}(playpen configs list)")
    path = packaged_configs() / stem
    return path if path.is_file() else path.with_name(path.name + ".yaml")


def list_configs() -> None:
    names = packaged_config_names()
    width = max(len(n) for n in names if "." not in n)  # (data files, listed without a command, may run over)
    print(f"shipped configs (in {packaged_configs()}); --config NAME runs one, playpen configs copy NAME edits one")
    for name in names:
        print(f"{name:{width}s}  {summary(shipped_file(name))}".rstrip())


def copy_config(name: str, dest: str | None, force: bool = False) -> Path:
    source = shipped_file(name)
    target = Path(dest).expanduser() if dest else Path("configs") / source.relative_to(packaged_configs())
    if target.is_dir():
        target = target / source.name
    if target.exists() and not force:
        raise PlaypenError(f"{target} exists; pass --force to overwrite it")
    target = check_output_file(target, "target") if target.parent.exists() else target
    return write_output(target, source.read_bytes(), "target")  # (a link is replaced, a device written to)


def main(args: argparse.Namespace) -> int:
    if args.action == "list":
        list_configs()
        return 0
    target = copy_config(args.name, args.dest, args.force)
    flag = "--cluster" if args.name.removeprefix("configs/").startswith("cluster/") else "--config"
    hint = f"; use it with {flag} {target}" if target.suffix == ".yaml" else ""
    print(f"copied {args.name} to {target}{hint}")
    return 0
