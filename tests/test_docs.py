"""Every docs/ reference in the README, code, configs and benches resolves inside the repository."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("README.md", "Makefile", "pyproject.toml", "olmax", "bench", "configs", "tests", "docs")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".cfg"}
# Notes that lived outside the repository; built from parts so this file does not match itself.
GONE = tuple(name + ".md" for name in ("ARCHITECTURE", "FIELD-NOTES", "OLMO3"))
DOC_PATH = re.compile(r"(?<![\w/.-])docs/[\w./-]+?\.md(?:#[\w-]+)?")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _files() -> list[Path]:
    out = []
    for name in SCANNED:
        p = ROOT / name
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            out += [
                f
                for f in sorted(p.rglob("*"))
                if f.is_file() and f.suffix in SUFFIXES and "__pycache__" not in f.parts
            ]
    return out


def _anchors(md: Path) -> set[str]:
    """GitHub-style heading slugs of a markdown file; a benchmark record's (bench/results/*.json) figure names."""
    if md.suffix == ".json":
        return set(json.loads(md.read_text(encoding="utf-8")).get("figures", {}))
    slugs = set()
    for line in md.read_text(encoding="utf-8").splitlines():
        if m := re.match(r"#{1,6}\s+(.*)", line):
            text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            slugs.add(text.replace(" ", "-"))
    return slugs


def _check(target: Path, anchor: str | None, where: str) -> list[str]:
    if not target.is_file():
        return [f"{where}: {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target} missing"]
    if anchor and anchor not in _anchors(target):
        return [f"{where}: no heading #{anchor} in {target.relative_to(ROOT)}"]
    return []


def test_docs_folder_exists():
    for name in ("README.md", "architecture.md", "olmo3.md", "field-notes.md"):
        assert (ROOT / "docs" / name).is_file(), f"docs/{name} missing"


def _problems(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    problems = []
    for m in DOC_PATH.finditer(text):
        file, _, anchor = m.group(0).partition("#")
        where = f"{path.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}"
        problems += _check(ROOT / file, anchor or None, where)
    if path.suffix == ".md":  # relative markdown links, resolved against the file's own folder
        for m in MD_LINK.finditer(text):
            link = m.group(1)
            if re.match(r"[a-z]+:", link) or link.startswith("#"):
                continue
            file, _, anchor = link.partition("#")
            where = f"{path.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}"
            problems += _check((path.parent / file).resolve(), anchor or None, where)
    return problems


def test_doc_paths_resolve():
    problems = [p for f in _files() for p in _problems(f)]
    assert not problems, "\n".join(problems)


def test_checker_catches_a_dangling_reference():
    bad = ROOT / "docs" / "no-such-note.md"
    assert _check(bad, None, "x") and _check(ROOT / "docs" / "olmo3.md", "no-such-heading", "x")
    assert not _check(ROOT / "docs" / "field-notes.md", "loaders", "x")
    assert DOC_PATH.findall("see docs/olmo3.md#sources, not mydocs/x.md") == ["docs/olmo3.md#sources"]


def test_no_references_to_notes_outside_the_repository():
    hits = [
        f"{f.relative_to(ROOT)}: {name}"
        for f in _files()
        if f != Path(__file__).resolve()
        for name in GONE
        if name in f.read_text(encoding="utf-8", errors="replace")
    ]
    assert not hits, "cite docs/ instead:\n" + "\n".join(hits)
