"""The collectives of a compiled step, read from its optimized HLO text: kind, dtype, bytes, runs per step.

What crosses the devices is decided by XLA's partitioner and then rewritten by the backend (a TPU turns a
reduce-scatter fused into a matmul into a loop of collective-permutes, a "windowed einsum", and a plain
one into an all-reduce followed by a slice), so the compiled module is the one place that says what a
step really moves. Each collective is counted once per channel id, kind and array (XLA clones an
asynchronous collective into its start and done fusions) and weighted by how many times a step runs the
computation holding it: the product of the trip counts of the while loops around it (the microbatch
scan, the layer scan, a windowed einsum's ring), each read from its loop condition's bound.

`bytes` is the size of the array a device holds after the collective (all-gather: the gathered whole;
all-reduce: the reduced array; reduce-scatter: its input; collective-permute and all-to-all: what one
device sends). The step-time model (`olmax.train.plan`) turns these into seconds on a topology.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

KINDS = ("all-gather", "all-reduce", "reduce-scatter", "collective-permute", "all-to-all")
_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "bf16": 2, "f16": 2, "s32": 4, "u32": 4}
_DTYPE_BYTES.update({"f32": 4, "s64": 8, "u64": 8, "f64": 8, "f8e4m3fn": 1, "f8e5m2": 1})

_COMP_HEAD = re.compile(r"^(?:ENTRY\s+)?%([\w.\-]+)\s+\(.*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=\s*(.+?)\s+([\w\-]+)\((.*)$")
_ARRAY = re.compile(r"\b([a-z]+\d*(?:e\dm\d\w*)?)\[([\d,]*)\]")
_CALLS = re.compile(r"\b(?:calls|to_apply|body|condition)=%([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_WHILE = re.compile(r"condition=%([\w.\-]+).*?body=%([\w.\-]+)|body=%([\w.\-]+).*?condition=%([\w.\-]+)")
_CHANNEL = re.compile(r"channel_id=(\d+)")
_GROUPS = re.compile(r"replica_groups=\{\{([\d,]*)\}")
_MESH_GROUPS = re.compile(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}")


@dataclass(frozen=True)
class Collective:
    """One collective of the step: its kind, the dtype and shape it moves, how many devices take part in
    each of its groups, and how many times one step runs it."""

    kind: str
    dtype: str
    shape: tuple[int, ...]
    group: int
    runs: int
    op_name: str

    @property
    def bytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * _DTYPE_BYTES.get(self.dtype, 4)

    @property
    def bytes_per_step(self) -> int:
        return self.bytes * self.runs


@dataclass
class _Instr:
    name: str
    type_text: str
    op: str
    rest: str


def _logical_lines(text: str) -> list[str]:
    """The module's lines with each instruction whole (an attribute's value can run over several lines)."""
    out: list[str] = []
    for line in text.splitlines():
        starts = (
            line.startswith(("%", "ENTRY", "HloModule"))
            or line.strip() == "}"
            or line.lstrip().startswith(("%", "ROOT "))
        )
        if starts or not out:
            out.append(line)
        else:
            out[-1] += " " + line.strip()
    return out


def _computations(text: str) -> tuple[dict[str, list[_Instr]], str]:
    comps: dict[str, list[_Instr]] = {}
    entry, current = "", None
    for line in _logical_lines(text):
        head = _COMP_HEAD.match(line)
        if head:
            current = head.group(1)
            comps[current] = []
            if line.startswith("ENTRY"):
                entry = current
            continue
        if current is None:
            continue
        if line.strip() == "}":
            current = None
            continue
        m = _INSTR.match(line)
        if m:
            comps[current].append(_Instr(m.group(1), m.group(2), m.group(3), m.group(4)))
    return comps, entry


def _trip_count(loop: _Instr, cond: list[_Instr]) -> int:
    """A while loop's trip count: XLA's own `known_trip_count` when the loop carries one, else the largest
    integer constant its condition compares against (JAX's scans and XLA's windowed einsums count from 0
    up to it); 1 when neither is there."""
    known = re.search(r'known_trip_count":\{"n":"(\d+)"', loop.rest)
    if known:
        return max(int(known.group(1)), 1)
    bounds = [
        int(m.group(1))
        for ins in cond
        if ins.op == "constant" and re.match(r"[su]\d+\[\]", ins.type_text)
        for m in [re.match(r"\s*(-?\d+)\)", ins.rest)]
        if m
    ]
    return max([b for b in bounds if b > 0], default=1)


def _multiplicities(comps: dict[str, list[_Instr]], entry: str) -> dict[str, int]:
    """How many times one run of the entry computation runs each computation (the smallest count over the
    places that call it: a loop body reached through a clone counts its loop once)."""
    mult: dict[str, int] = {entry: 1}
    order = [entry]
    seen = {entry}
    while order:
        comp = order.pop()
        for ins in comps.get(comp, []):
            callees: list[tuple[str, int]] = []
            if ins.op == "while":
                w = _WHILE.search(ins.rest)
                if w:
                    cond, body = (w.group(1), w.group(2)) if w.group(1) else (w.group(4), w.group(3))
                    n = _trip_count(ins, comps.get(cond, []))
                    callees += [(body, n), (cond, n + 1)]
            else:
                callees += [(c, 1) for c in _CALLS.findall(ins.rest)]
                for branch in _BRANCHES.findall(ins.rest):
                    callees += [(c.strip().lstrip("%"), 1) for c in branch.split(",") if c.strip()]
            for callee, n in callees:
                runs = mult[comp] * n
                if callee not in mult or runs < mult[callee]:
                    mult[callee] = runs
                if callee not in seen:
                    seen.add(callee)
                    order.append(callee)
    return mult


def _moved_array(ins: _Instr) -> tuple[str, tuple[int, ...]] | None:
    """The (dtype, shape) a collective instruction moves, per the module docstring."""
    arrays = [
        (m.group(1), tuple(int(x) for x in m.group(2).split(",") if x))
        for m in _ARRAY.finditer(ins.type_text)
    ]
    arrays = [a for a in arrays if a[0] in _DTYPE_BYTES]
    if not arrays:
        return None
    if ins.op == "all-gather-start":  # (operand, result, ...)
        return arrays[1] if len(arrays) > 1 else arrays[0]
    if ins.op == "reduce-scatter":
        operand = _ARRAY.search(ins.rest)
        return (
            arrays[0]
            if operand is None
            else (operand.group(1), tuple(int(x) for x in operand.group(2).split(",") if x))
        )
    return arrays[0]


def _group_size(ins: _Instr) -> int:
    mesh = _MESH_GROUPS.search(ins.rest)
    if mesh:
        sizes = dict(re.findall(r"'?([\w]+)'?=(\d+)", mesh.group(1)))
        axes = re.findall(r"'([\w]+)'", mesh.group(2))
        return int(np.prod([int(sizes[a]) for a in axes if a in sizes])) if axes else 1
    groups = _GROUPS.search(ins.rest)
    if groups:
        return len([x for x in groups.group(1).split(",") if x])
    return 2 if ins.op.startswith("collective-permute") else 1


def collectives(hlo_text: str) -> list[Collective]:
    """Every collective of a compiled module's text (`compiled.as_text()`), once per channel id."""
    comps, entry = _computations(hlo_text)
    mult = _multiplicities(comps, entry)
    best: dict[tuple, tuple[int, Collective]] = {}
    for comp, instrs in comps.items():
        if comp not in mult:
            continue
        for ins in instrs:
            kind = ins.op[: -len("-start")] if ins.op.endswith("-start") else ins.op
            if kind not in KINDS or ins.op.endswith("-done"):
                continue
            moved = _moved_array(ins)
            if moved is None:
                continue
            name = re.search(r'op_name="([^"]*)"', ins.rest)
            c = Collective(
                kind, moved[0], moved[1], _group_size(ins), mult[comp], name.group(1) if name else ""
            )
            channel = _CHANNEL.search(ins.rest)
            # XLA reuses channel ids across unrelated collectives: a clone shares its original's kind and array too
            key = (channel.group(1), kind, moved) if channel else (comp, ins.name)
            if key not in best or c.runs < best[key][0]:
                best[key] = (c.runs, c)
    return [c for _, c in best.values()]


def summarize(found: list[Collective]) -> dict[str, dict]:
    """Per kind and dtype: instructions, runs per step and bytes per step."""
    out: dict[str, dict] = {}
    for c in found:
        row = out.setdefault(
            f"{c.kind} {c.dtype}", {"collectives": 0, "runs_per_step": 0, "bytes_per_step": 0}
        )
        row["collectives"] += 1
        row["runs_per_step"] += c.runs
        row["bytes_per_step"] += c.bytes_per_step
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["bytes_per_step"]))


def fp32_weight_gathers(found: list[Collective], weight_shapes: set[tuple[int, ...]]) -> list[Collective]:
    """All-gathers that move a weight (an array of a parameter's full shape, or of one layer's) in fp32."""
    return [c for c in found if c.kind == "all-gather" and c.dtype == "f32" and c.shape in weight_shapes]


def whole_gradient_all_reduces(
    found: list[Collective], weight_shapes: set[tuple[int, ...]]
) -> list[Collective]:
    """All-reduces of an array of a weight's full shape: a gradient summed whole on every device instead of
    reduce-scattered onto its shards."""
    return [c for c in found if c.kind == "all-reduce" and c.shape in weight_shapes]


def compact(found: list[Collective]) -> list[dict]:
    """The collectives as a record keeps them: identical ones (kind, dtype, shape, group, runs, inside a
    loop or not) counted once with `count`; `expand` gives the list back for the step-time model."""
    rows: dict[tuple, int] = {}
    for c in found:
        key = (c.kind, c.dtype, c.shape, c.group, c.runs, "while/body" in c.op_name)
        rows[key] = rows.get(key, 0) + 1
    return [
        {"kind": k, "dtype": d, "shape": list(s), "group": g, "runs": r, "in_loop": loop, "count": n}
        for (k, d, s, g, r, loop), n in sorted(rows.items(), key=lambda kv: -kv[1] * _size(kv[0]))
    ]


def _size(key: tuple) -> int:
    return int(np.prod(key[2], dtype=np.int64)) * _DTYPE_BYTES.get(key[1], 4) * key[4]


def expand(rows: list[dict]) -> list[Collective]:
    """`compact`'s rows as Collectives again (a loop's collective named as inside one)."""
    return [
        Collective(
            r["kind"],
            r["dtype"],
            tuple(r["shape"]),
            r["group"],
            r["runs"],
            "while/body" if r["in_loop"] else "",
        )
        for r in rows
        for _ in range(r["count"])
    ]
