"""The wheels `bench/gpu_check.sh` carries to a GPU node that has no internet and only a stock CUDA PyTorch
environment (torch, transformers, peft, accelerate and what they need).

    python bench/gpu_wheels.py plan  [--node-freeze FILE]               # what would be carried (offline)
    python bench/gpu_wheels.py fetch [--node-freeze FILE] [--budget-mib 50] [--dest bench/wheels]

The list is the dependency closure (this venv's metadata, which is requirements/lock.txt's) of what the check
imports, phase by phase (GROUPS: doctor and rollouts, deepspeed, training, 4-bit), minus the closure of what the
node has: by default torch, transformers, peft and accelerate; with --node-freeze, the names in the node's
`pip freeze`. Each is pinned to the lock. `fetch` downloads them for CPython 3.12 on manylinux x86_64 (an sdist
where a package ships no wheel: deepspeed, whose ops build just in time on the node) in that order and keeps each
while the folder stays under the budget (the files that travel to the node are capped at 64 MiB, the repository takes ~11): the rest is
named in <dest>/LEFT_OUT.txt and the check reports the phases that need it as failed. bench/wheels/ is git-ignored.
"""
from __future__ import annotations

import argparse
import importlib.metadata as md
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements" / "lock.txt"
NODE_HAS = ("torch", "transformers", "peft", "accelerate")  # a stock CUDA PyTorch environment
# what the check imports, by phase: the groups are kept in this order while the budget holds. clemcore declares
# datasets and pandas but its game and backend code imports neither: they go with training, which needs them.
GROUPS = (("doctor, rollouts", ("clemcore", "submitit")), ("deepspeed", ("deepspeed",)),
          ("training", ("trl", "datasets", "tensorboard", "matplotlib")), ("4-bit", ("bitsandbytes",)))
TRAINING_ONLY = ("datasets", "pandas", "pyarrow")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "any")
TARGET = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
          "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
          "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_pins() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line.strip())
        if m:
            pins[norm(m[1])] = m[2]
    return pins


def requires(name: str) -> list[str]:
    from packaging.requirements import Requirement

    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        return []
    found = []
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate(TARGET):
            found.append(norm(req.name))
    return found


def closure(roots) -> set[str]:
    seen, stack = set(), [norm(r) for r in roots]
    while stack:
        name = stack.pop()
        if name not in seen:
            seen.add(name)
            stack += requires(name)
    return seen


def node_packages(freeze: str | None) -> set[str]:
    if freeze is None:
        return closure(NODE_HAS)
    names = (re.split(r"[=<>@ ]", line.strip())[0] for line in Path(freeze).read_text().splitlines())
    return {norm(n) for n in names if n and not n.startswith("#")}


def plan(freeze: str | None = None) -> list[tuple[str, str]]:
    """(name, lock version) of every distribution to carry, in the order they are kept under the budget: each
    group's closure less what the node and the earlier groups have (pyarrow last of training: the biggest)."""
    pins = lock_pins()
    have = node_packages(freeze)
    order: list[str] = []
    for group, roots in GROUPS:
        new = closure(roots) - have - set(order)
        if group == GROUPS[0][0]:
            new -= closure(TRAINING_ONLY) - closure(("submitit",))
        order += sorted(new - {"pyarrow"}) + (["pyarrow"] if "pyarrow" in new else [])
    unpinned = [n for n in order if n not in pins]
    if unpinned:
        raise SystemExit(f"gpu_wheels: not in {LOCK}: {', '.join(unpinned)} (run make lock)")
    return [(n, pins[n]) for n in order]


def download(name: str, version: str, dest: Path) -> Path:
    before = set(dest.iterdir())
    binary = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
              "--python-version", "3.12", "--implementation", "cp", *[a for p in PLATFORMS for a in ("--platform", p)],
              "-d", str(dest), f"{name}=={version}"]
    if subprocess.run(binary, capture_output=True, text=True).returncode != 0:  # no wheel: the sdist
        source = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary=:all:", "-d", str(dest),
                  f"{name}=={version}"]
        proc = subprocess.run(source, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"gpu_wheels: cannot download {name}=={version}: {proc.stderr.strip()[-300:]}")
    [path] = set(dest.iterdir()) - before
    return path


def fetch(freeze: str | None, budget_mib: float, dest: Path) -> int:
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.iterdir():
        if old.is_file():
            old.unlink()
    kept, left, used = [], [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, version in plan(freeze):
            path = download(name, version, Path(tmp))
            size = path.stat().st_size
            if used + size > budget_mib * 2**20:
                left.append(f"{name}=={version}  {size / 2**20:.1f} MiB")
                path.unlink()
                continue
            shutil.move(str(path), dest / path.name)
            used += size
            kept.append(f"{path.name}  {size / 2**20:.1f} MiB")
    (dest / "MANIFEST.txt").write_text("\n".join(kept) + f"\n# {used / 2**20:.1f} MiB of {budget_mib} MiB\n")
    (dest / "LEFT_OUT.txt").write_text("".join(line + "\n" for line in left))
    print(f"gpu_wheels: {len(kept)} files, {used / 2**20:.1f} MiB in {dest}")
    for line in left:
        print(f"gpu_wheels: left out (over the {budget_mib} MiB budget): {line}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=("plan", "fetch"))
    p.add_argument("--node-freeze", default=None, help="`pip freeze` of the GPU node: what it has already")
    p.add_argument("--budget-mib", type=float, default=50, help="the most the wheels may take (default 50)")
    p.add_argument("--dest", default=str(REPO / "bench" / "wheels"))
    args = p.parse_args(argv)
    if args.command == "plan":
        for name, version in plan(args.node_freeze):
            print(f"{name}=={version}")
        return 0
    return fetch(args.node_freeze, args.budget_mib, Path(args.dest))


if __name__ == "__main__":
    sys.exit(main())
