"""The packages read one way (pyproject's [tool.importlinter], README's Layout), private names stay in their
package, and no module grows past the size one reads in a sitting."""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "playpen"
MAX_LINES = 400


def modules():
    return [p for p in sorted(PACKAGE.rglob("*.py")) if "playpen-tiny" not in p.parts]


def owner(module: str) -> str:
    """The package (or top-level module) a dotted name belongs to: playpen.train.grpo -> playpen.train."""
    return ".".join(module.split(".")[:2])


def test_the_layer_contracts_hold():
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    if not Path(lint).exists():
        pytest.skip("import-linter is not installed (pip install -e .[dev])")
    done = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_private_names_are_not_imported_across_packages():
    found = []
    for path in modules():
        here = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("playpen"):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                if private and owner(node.module) != owner(here):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {private} from {node.module}")
    assert not found, "\n".join(found)


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_packaged_defaults_are_the_top_level_configs():
    """playpen/configs/ (package data: pip install, the image) holds the defaults the code falls back to; each is
    its top-level configs/ namesake, byte for byte, so the user examples and the defaults never drift apart."""
    packaged = PACKAGE / "configs"
    files = [p for p in packaged.rglob("*") if p.is_file() and p.name != "README.md"]
    assert files
    differ = [str(p.relative_to(packaged)) for p in files
              if p.read_bytes() != (ROOT / "configs" / p.relative_to(packaged)).read_bytes()]
    assert not differ, f"edit configs/ and copy to playpen/configs/: {differ}"


def test_a_wheel_ships_the_defaults_the_code_names(tmp_path, monkeypatch):
    """What the code falls back to (submit's defaults, the demo's config, cluster profiles, DeepSpeed files) is in
    the package, so an install without the repository has it."""
    from playpen.config import config_file, packaged_configs
    from playpen.submit.cli import DEFAULT_CONFIGS
    from playpen.submit.profiles import search_dirs

    assert packaged_configs() == PACKAGE / "configs"
    for relative in DEFAULT_CONFIGS.values():
        assert (packaged_configs() / relative).is_file(), relative
    assert packaged_configs() / "cluster" in search_dirs()
    for name in ("zero2", "zero3", "zero3_offload"):
        assert (packaged_configs() / "deepspeed" / f"{name}.json").is_file()
    monkeypatch.chdir(tmp_path)  # nothing named configs/ here
    assert config_file("configs/deepspeed/zero2.json") == packaged_configs() / "deepspeed" / "zero2.json"
    assert config_file("configs/nope.json") == Path("configs/nope.json")


def test_bench_imports_only_playpen():
    """bench/ runs against the installed package: no imports of tests/, no sys.path edits."""
    found = []
    for path in sorted((ROOT / "bench").glob("*.py")):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.name} imports {n}" for n in names if n.split(".")[0] == "tests"]
        if "sys.path" in text:
            found.append(f"{path.name} edits sys.path")
    assert not found, found
