"""The package's import graph: arrows point down (the layers in `LAYERS`, no cycle, the library never imports
the CLI or the demo) and no private (`_name`) crosses a module boundary. Every import counts: those inside
functions, those of the front ends and those under `if TYPE_CHECKING:` (an annotation's import is a
dependency too, and a cycle through one is a cycle)."""

from __future__ import annotations

import ast
import re
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
    return _imports_in(ast.parse(path.read_text(), str(path)), package)


def _imports_in(tree: ast.Module, package: str) -> list[tuple[str, str | None, int]]:
    """The olmax imports of a parsed module whose package is `package` (relative imports resolved)."""
    out = []
    for node in ast.walk(tree):
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
    assert "olmax.data.stream_cli" in edges["olmax.audit.audit_cli"]


def test_no_import_cycle():
    assert find_cycle(graph()) is None, " -> ".join(find_cycle(graph()))


def test_type_only_imports_count():
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from olmax.model.model_config import ModelConfig\n"
    assert _imports_in(ast.parse(source), "olmax.model") == [("olmax.model.model_config", "ModelConfig", 3)]


def test_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


# The layers, bottom to top. A module imports from its own layer and the layers below, never from one above:
# each area's front end (`AREA_cli.py` and other `*_cli.py`) sits in its area's layer, and only the `olmax` command, the
# top-level front ends and the demo sit on top. Where a command needs an area above its own, `olmax.cli`
# hands it in (olmax train's in-loop evals, olmax model convert's reading of a run).
LAYERS = (
    "base",  # olmax's top-level modules: errors, atomic, jsonio, storage, recipe, metrics, beam, hashing, ...
    "dedup",  # the dedup algorithms prepare and the audits share
    "data",
    "evalsets",
    "audit",
    "model",
    "train",
    "evals",
    "top",  # olmax.cli, olmax.assets_cli, olmax.demo_cli, olmax.demo
    "testing",  # generators and test-data builders for tests/ and bench/; nothing in the package imports them
)
TOP = {"olmax.cli", "olmax.assets_cli", "olmax.demo_cli", "olmax.demo"}


def layer(name: str) -> str:
    """The layer of module `name`: its area (the folder under olmax/), or base / top for a top-level one."""
    parts = name.split(".")
    if name in TOP or name.startswith("olmax.demo."):
        return "top"
    return parts[1] if len(parts) > 2 or parts[-1] in LAYERS else "base"


def upward(edges: dict[str, set[str]]) -> list[str]:
    """Every import that climbs to a higher layer, as `module -> imported (layer -> layer)`."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    return [
        f"{m} -> {t} ({layer(m)} -> {layer(t)})"
        for m, targets in sorted(edges.items())
        for t in sorted(targets)
        if rank[layer(t)] > rank[layer(m)]
    ]


def test_every_module_has_a_layer():
    assert {layer(m) for m in MODULES} <= set(LAYERS), sorted({layer(m) for m in MODULES} - set(LAYERS))
    assert layer("olmax.train.train_cli") == "train" and layer("olmax.errors") == "base"
    assert layer("olmax.demo.pipeline") == "top" and layer("olmax.testing.leak_plants") == "testing"


def test_no_import_runs_up():
    bad = upward(graph())
    assert not bad, "imports that run back up:\n" + "\n".join(bad)


def test_upward_finder_finds_one():
    assert upward({"olmax.data.loader": {"olmax.train.config"}}) == [
        "olmax.data.loader -> olmax.train.config (data -> train)"
    ]
    assert upward({"olmax.train.train_cli": {"olmax.data.loader"}}) == []


def test_nothing_in_the_package_imports_the_testing_package():
    """olmax.testing (generators, test-data builders) serves tests/ and bench/; the library, its front ends
    and the demo never import it."""
    bad = [
        f"{MODULES[m]}:{line} imports {t}"
        for m in MODULES
        if layer(m) != "testing"
        for t, _, line in _imports(m)
        if t == "olmax.testing" or t.startswith("olmax.testing.")
    ]
    assert not bad, "\n".join(bad)


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
    "olmax.dedup.spill": "spilled hash records (the content audits, MinHash out of core)",
    "olmax.audit.monitor": "arrays saved in the loader monitor's state",
    "olmax.model.safetensors_io": "safetensors files, mapped as bytes",
    "olmax.model.parity": "the bytes of a parity prompt's text",
    "olmax.dedup.shingles": "documents' UTF-8 text as bytes (word hashing)",
    "olmax.dedup.substring": "documents' UTF-8 text as bytes (byte windows)",
    "olmax.data.readers": "the compiled JSON-lines reader's text ends and EOS flags, as bytes",
    "olmax.data.tokenize": "texts' UTF-8 as bytes, handed to the engine whole",
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


# ------------------------------------------------------------------------------------ one folder per concept
def _closure(start: str, edges: dict[str, set[str]]) -> set[str]:
    """Every module `start` imports, directly or through others (every import counts, as in `graph`)."""
    seen, todo = set(), [start]
    while todo:
        for n in edges.get(todo.pop(), ()):
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


def _outside(package: str) -> list[str]:
    """The library modules outside `package` that import one of its modules (front ends and the demo aside)."""
    edges = graph()
    return sorted(
        m
        for m, targets in edges.items()
        if not (m == package or m.startswith(package + "."))
        and not _is_front_end(m)
        and any(t == package or t.startswith(package + ".") for t in targets)
    )


def test_the_loader_never_imports_prepare():
    """Reading batches never pulls in the write pipeline: the demo mix is prepared by the commands."""
    reached = _closure("olmax.data.loader", graph())
    assert not [m for m in reached if m.startswith("olmax.data.prepare")], sorted(reached)


def test_prepare_lives_in_its_folder():
    """Prepare's modules are under olmax/data/prepare/ and only the front ends call into them (olmax.testing
    builds test inputs for it, named after it)."""
    misplaced = [
        m
        for m in MODULES
        if m.rsplit(".", 1)[-1].startswith("prepare") and ".data.prepare" not in m and layer(m) != "testing"
    ]
    assert not misplaced, misplaced
    assert _outside("olmax.data.prepare") == []


def test_the_leak_audit_lives_in_its_folder():
    """The leak audit's modules are under olmax/audit/leaks/; the rest of the package reaches it only
    through the front ends (its report is read as JSON)."""
    misplaced = [
        m
        for m in MODULES
        if "leak" in m.rsplit(".", 1)[-1] and ".audit.leaks" not in m and layer(m) != "testing"
    ]
    assert not misplaced, misplaced
    assert _outside("olmax.audit.leaks") == []


def test_eval_sets_have_one_home():
    """Reading a set, its name rule and the `--eval` option live in olmax.evalsets: nothing else parses
    eval rows or registers `--eval`."""
    readers = [
        m
        for m in MODULES
        if not m.startswith("olmax.evalsets")
        and any(t == "olmax.data.readers" and name == "read_rows" for t, name, _ in _imports(m))
    ]
    assert not readers, readers
    option = [
        str(MODULES[m])
        for m in MODULES
        if not m.startswith("olmax.evalsets")
        and re.search(r"add_argument\(\s*\"--eval\"", MODULES[m].read_text())
    ]
    assert not option, option


def test_hashing_has_one_home():
    """splitmix64 (the mixer dedup's hashes and the keyed orders are built on) is written once."""
    holders = [
        str(p)
        for m, p in MODULES.items()
        if "0xBF58476D1CE4E5B9" in p.read_text().upper().replace("0X", "0x")
    ]
    assert holders == [str(MODULES["olmax.hashing"])], holders


def test_basenames_do_not_repeat():
    """One basename per module across the package (an area's front end is `AREA_cli.py`): a name says which
    module it is without its folder."""
    by_name: dict[str, list[str]] = {}
    for p in MODULES.values():
        if p.name != "__init__.py":
            by_name.setdefault(p.stem, []).append(str(p.relative_to(ROOT.parent)))
    assert not {k: v for k, v in by_name.items() if len(v) > 1}


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs] + [x for x in (a.vararg, a.kwarg) if x]
    return len(names) - (1 if names and names[0].arg in ("self", "cls") else 0)


def test_no_function_takes_eight_parameters():
    """Eight or more parameters is a config or a small dataclass waiting to be named: in the library, its
    front ends and the demo alike."""
    wide = [
        f"{MODULES[m]}:{node.lineno} {node.name} ({_parameters(node)})"
        for m in MODULES
        for node in ast.walk(ast.parse(MODULES[m].read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _parameters(node) >= 8
    ]
    assert not wide, "\n".join(wide)


def _top_imports(path: Path) -> set[str]:
    """The top-level names of every absolute import in `path` (`bench` for `from bench.harness import x`)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_the_package_and_bench_never_import_the_tests_and_the_package_never_imports_bench():
    """tests/ sits on top of bench/, bench/ on top of olmax: builders both need live in olmax.testing."""
    repo = ROOT.parent
    bad = [
        f"{p.relative_to(repo)}: tests" for p in (repo / "bench").rglob("*.py") if "tests" in _top_imports(p)
    ]
    bad += [
        f"{p.relative_to(repo)}: {sorted(_top_imports(p) & {'bench', 'tests'})}"
        for p in MODULES.values()
        if _top_imports(p) & {"bench", "tests"}
    ]
    assert not bad, "\n".join(bad)
