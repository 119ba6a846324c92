"""The package's import graph: arrows point down (no cycle, the library never imports the CLI or the demo)
and no private (`_name`) crosses a module boundary. Every import counts, also those inside functions;
only `if TYPE_CHECKING:` imports (annotations, never executed) do not."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "olmax"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_front_end(name: str) -> bool:
    """The CLI and the demo: the only modules allowed to sit on top of everything."""
    last = name.rsplit(".", 1)[-1]
    return last == "cli" or last.endswith("_cli") or name == "olmax.demo" or name.startswith("olmax.demo.")


def _imports(name: str) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every olmax import in module `name`."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and getattr(block.test, "id", None) == "TYPE_CHECKING"
        for stmt in block.body
        for n in ast.walk(stmt)
    }
    out = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names if a.name.startswith("olmax")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("olmax"):
                continue
            for a in node.names:
                sub = f"{mod}.{a.name}"
                out.append((sub, None, node.lineno) if sub in MODULES else (mod, a.name, node.lineno))
    return out


def graph() -> dict[str, set[str]]:
    return {m: {target for target, _, _ in _imports(m) if target in MODULES and target != m} for m in MODULES}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n) :] + [n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_the_graph_is_read():
    edges = graph()
    assert "olmax.data.stream" in edges["olmax.train.config"]
    assert "olmax.data.stream_cli" in edges["olmax.audit.cli"]


def test_no_import_cycle():
    assert find_cycle(graph()) is None, " -> ".join(find_cycle(graph()))


def test_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("name", sorted(m for m in MODULES if not _is_front_end(m)))
def test_library_never_imports_the_cli_or_the_demo(name):
    bad = [(t, line) for t, _, line in _imports(name) if _is_front_end(t) or t == "olmax.cli"]
    assert not bad, f"{MODULES[name]}: imports {bad}"


def test_no_private_name_crosses_a_module():
    crossing = [
        f"{MODULES[m]}:{line} imports {name} from {target}"
        for m in MODULES
        for target, name, line in _imports(m)
        if name and name.startswith("_") and not name.startswith("__") and target != m
    ]
    assert not crossing, "\n".join(crossing)


# Token files are opened and written in one module (olmax.data.tokenfile: dtype, size check, memory map,
# ranged reads). Other modules may map or dump raw arrays of their own files, each named here with what it
# holds; a new reader of token files has to go through tokenfile instead of being added to this list.
RAW_ARRAY_FILES = {
    "olmax.data.tokenfile": "token files",
    "olmax.data.order": "the order file: a uint32 permutation of instance ids",
    "olmax.data.trace": "the trace's inverse permutation (instance id -> position)",
    "olmax.audit.partition": "the content audits' spilled hash records",
    "olmax.audit.monitor": "arrays saved in the loader monitor's state",
    "olmax.model.safetensors_io": "safetensors files, mapped as bytes",
    "olmax.model.parity": "the bytes of a parity prompt's text",
    "olmax.dedup.shingles": "documents' UTF-8 text as bytes (word hashing)",
    "olmax.dedup.substring": "documents' UTF-8 text as bytes (byte windows)",
}
RAW_ARRAY_CALLS = {"memmap", "fromfile", "frombuffer", "tofile"}


def _raw_array_calls(path: Path) -> list[tuple[str, int]]:
    """(call, line) of every np.memmap / np.fromfile / np.frombuffer / ARRAY.tofile in `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in RAW_ARRAY_CALLS
        ):
            found.append((node.func.attr, node.lineno))
    return found


def test_token_files_are_opened_in_one_module():
    bad = [
        f"{MODULES[m]}:{line}: {call}"
        for m in MODULES
        if m not in RAW_ARRAY_FILES
        for call, line in _raw_array_calls(MODULES[m])
    ]
    assert not bad, "token files are read and written through olmax.data.tokenfile:\n" + "\n".join(bad)


def test_the_raw_array_list_is_current():
    """Every module allowed to map raw arrays still does (a stale entry would let a new reader slip in)."""
    assert all(_raw_array_calls(MODULES[m]) for m in RAW_ARRAY_FILES), [
        m for m in RAW_ARRAY_FILES if not _raw_array_calls(MODULES[m])
    ]


def test_raw_array_finder_finds_one(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import numpy as np\nx = np.memmap('f', dtype=np.uint32)\nx.tofile('g')\n")
    assert _raw_array_calls(probe) == [("memmap", 2), ("tofile", 3)]
