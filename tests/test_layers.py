"""The packages read one way (pyproject's [tool.importlinter], docs/development.md), private names stay in their
package, and no function grows past what one reads on a screen or two; the test files share code through
tests/helpers.py and tests/conftest.py only. Modules are cut by concern, not by size:
their cap is a loose tripwire, never a reason to split one concern over several files."""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "playpen"
MAX_FUNCTION_LINES = 80  # the longest today is ~75 (rollout's decoding wave); decorators and docstring count
MAX_MODULE_LINES = 800  # a tripwire for a module that holds several concerns, not a target to split at


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


def test_no_function_is_over_80_lines():
    """A function longer than this does several things: give each its own function (named for what it does)."""
    long = {}
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([d.lineno for d in node.decorator_list] + [node.lineno])
                if (n := node.end_lineno - start + 1) > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = n
    assert not long, long


def test_no_module_is_over_800_lines():
    long = {str(p.relative_to(ROOT)): n for p in modules()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, long


def test_bench_imports_only_playpen():
    """bench/ and its studies (bench/studies/) run against the installed package: no imports of tests/, no sys.path
    edits (a study imports its sibling bench_learning as Python puts the script's own folder first)."""
    studies = {p.stem for p in (ROOT / "bench" / "studies").glob("*.py")}
    found = []
    for path in sorted((ROOT / "bench").rglob("*.py")):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(ROOT)} imports {n}" for n in names if n.split(".")[0] == "tests"]
            if path.parent.name == "bench":  # a benchmark runs from bench/: a study's module is not importable there
                found += [f"{path.relative_to(ROOT)} imports the study {n}" for n in names if n in studies]
        if "sys.path" in text:
            found.append(f"{path.relative_to(ROOT)} edits sys.path")
    assert not found, found


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of every import in `path`; `from tests import x` is tests.x, relative ones keep dots."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            found += [(node.lineno, f"{base}.{a.name}" if base and not base.endswith(".") else base + a.name)
                      for a in node.names]
    return found


def test_no_test_file_imports_another():
    """Fixtures live in tests/conftest.py (pytest hands them over by name), plain helpers in tests/helpers.py: a
    test file importing another would collect that file's tests and fixtures twice, under a second meaning."""
    found = []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        for line, name in imported_modules(path):
            parts = name.lstrip(".").split(".")
            local = name.startswith(".") or parts[0] == "tests"
            if local and any(p.startswith("test_") or p == "conftest" for p in parts):
                found.append(f"tests/{path.name}:{line} imports {name}")
    assert not found, found


def test_every_test_file_opens_with_what_it_tests():
    missing = [p.name for p in sorted((ROOT / "tests").glob("test_*.py"))
               if not (ast.get_docstring(ast.parse(p.read_text())) or "").strip()]
    assert not missing, missing

