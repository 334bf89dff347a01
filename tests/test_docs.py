"""The Markdown files of the repository: every relative link points to a file or folder that exists, and every
`#anchor` into a Markdown file to one of its headings, so a moved guide or result file breaks here first."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")  # [text](target) and ![alt](target)
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)  # links inside code are examples, not links


def markdown_files() -> list[Path]:
    """The tracked .md files (git ls-files); without git (an unpacked copy), every .md outside hidden folders."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "*.md"], cwd=ROOT, capture_output=True, check=True).stdout
        files = [ROOT / name for name in out.decode().split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        files = [p for p in ROOT.rglob("*.md") if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)]
    return sorted(p for p in files if p.is_file())


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes (repeats get -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for line in CODE.sub("", path.read_text(encoding="utf-8")).splitlines():
        if match := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line):
            slug = re.sub(r"[^\w\- ]", "", match.group(1).lower()).replace(" ", "-")
            found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return found


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """'FILE: TARGET (why)' for each relative link of `path` that leads nowhere (FILE relative to `root`)."""
    broken = []
    for target in LINK.findall(CODE.sub("", path.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
            continue  # http:, https:, mailto:
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists():
            broken.append(f"{path.relative_to(root)}: {target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{path.relative_to(root)}: {target} (no such heading)")
    return broken


def test_every_relative_link_in_the_markdown_files_resolves():
    files = markdown_files()
    assert ROOT / "README.md" in files and len(files) > 10
    broken = [line for path in files for line in broken_links(path)]
    assert not broken, "\n".join(broken)


def test_the_link_check_catches_a_missing_file_and_a_missing_heading(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A page: its title\n\nSee [it](page.md#a-page-its-title), [gone](gone.md), "
                    "[bad](page.md#nope), [web](https://example.org/x.md) and `[code](gone.md)`.\n")
    assert broken_links(page, tmp_path) == ["page.md: gone.md (no such file)",
                                            "page.md: page.md#nope (no such heading)"]


def test_every_guide_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in LINK.findall(CODE.sub("", readme))}
    guides = sorted((ROOT / "docs").glob("*.md"))
    assert guides and not [str(g.relative_to(ROOT)) for g in guides if g.resolve() not in linked]


def test_the_readme_stays_a_door():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 150
