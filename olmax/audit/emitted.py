"""`olmax audit stream`: audit the rows a loader actually emitted (any loader) against the mix.

Input: one `.npy` per host of shape (steps, rows, L), int32 or uint32, in host order. Every emitted
row and every instance window of the mix (one pass over its distinct physical files) is hashed with
xxh3-64 over its uint32 bytes; both record kinds go through the same hash-partitioned spill
(partition.py), and each partition is joined on its own (bounded memory). Definitions:
- rows: all emitted rows; distinct_rows: distinct row contents; repeated_rows = rows - distinct_rows
  (rows whose content was emitted earlier in the window);
- planned multiplicity of a content: the number of mix instances holding it (a path listed twice
  gives 2) per epoch, where step s belongs to epoch s // (N // G) (G = all hosts' rows per step);
  unplanned_repeated_rows: rows beyond it within an epoch;
- foreign_rows: rows equal to no instance of the mix, each listed with its kind (`foreign_kinds`):
  misaligned (the file's tokens at an offset that is no window start; `shift` = offset mod L),
  corrupted (starts like the mix's tokens, differs later), unknown (start found nowhere in the mix);
- instances_never_seen: mix instances whose content was emitted fewer times than the instances
  holding it (a statement about the data only when the window covers an epoch: `covers_epoch`,
  rows >= N - N mod G with G = all hosts' rows per step);
- cross_host_rows: rows whose content also appears on a different host in the same step, every copy
  counted (the first host's included: two hosts emitting one content in a step give 2);
  cross_host_contents: distinct contents that two or more hosts emitted in one same step (each
  counted once, however many copies or steps); unplanned_cross_host_rows: the cross_host_rows whose
  content appears in that step more times than mix instances hold it (a path the mix lists twice may
  legitimately put both copies of a window in one step, on two hosts), every copy counted;
- source shares: observed tokens per label (of the instance a row is) vs the mix's plan.
A row hash equal to an instance hash is confirmed by comparing the bytes before it counts as that
instance (collisions become foreign rows). Exit 1 on an unplanned repeat, a foreign row or an
unplanned cross-host row.
"""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np

from olmax.audit.audit_config import StreamConfig
from olmax.audit.checks import Check, checks_json, failed, summary_lines, verdict
from olmax.audit.file_pass import PassSettings, file_pass
from olmax.audit.partition import equal_runs
from olmax.audit.spans import physical_ids
from olmax.data.loader import stream_index
from olmax.data.packing import PackedIndex
from olmax.data.token_reads import TokenFile
from olmax.dedup.spill import PartitionSpill
from olmax.errors import OlmaxError
from olmax.hashing import packed_row_hashes, row_hashes, window_hashes

# What each count in the report means; written into every report as "definitions".
DEFINITIONS = {
    "rows": "every emitted row, all hosts and steps",
    "distinct_rows": "distinct row contents (token sequences)",
    "repeated_rows": "rows - distinct_rows: rows whose content was emitted earlier in the window",
    "unplanned_repeated_rows": "per epoch (step // (N // G)), emissions of a content beyond the number "
    "of mix instances holding it",
    "foreign_rows": "rows equal to no instance of the mix",
    "instances_never_seen": "sum over the mix's contents of max(0, instances holding it - times emitted)",
    "cross_host_rows": "rows whose content also appears on a different host in the same step, every "
    "copy counted (two hosts emitting one content in a step give 2)",
    "cross_host_contents": "distinct contents that two or more hosts emitted in one same step, each "
    "counted once",
    "unplanned_cross_host_rows": "cross_host_rows whose content appears in that step more times than "
    "mix instances hold it (a path listed k times may put its k copies of a "
    "window in one step), every copy counted",
}

# kind 0: a mix instance (a = global instance id); kind 1: an emitted row (a = host, b = step, c = row)
REC = np.dtype([("hash", "<u8"), ("kind", "<u1"), ("a", "<i8"), ("b", "<i8"), ("c", "<i8")])


def _open_batches(path: str, seq_len: int) -> np.ndarray:
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
        raise OlmaxError(
            f"{path}: not a readable .npy array ({e}); pass each host's emitted token "
            f"ids as a (steps, rows, L) .npy"
        ) from e
    if arr.ndim != 3 or arr.shape[2] != seq_len or arr.dtype not in (np.int32, np.uint32):
        raise OlmaxError(
            f"{path}: expected a (steps, rows, {seq_len}) int32/uint32 array, got {arr.shape} {arr.dtype}"
        )
    return arr


def audit_stream(cfg: StreamConfig) -> dict:
    """Match every emitted row to the mix's instances by content; returns the report (`ok` False when a
    gated check fails). Phases: open the rows → hash instances and rows into one spill → tally each
    hash group → checks → report."""

    index = stream_index(cfg.stream)
    L, N = cfg.stream.seq_len, index.num_instances
    hosts = [_open_batches(p, L) for p in cfg.batches]
    steps = {h.shape[0] for h in hosts}
    G = int(sum(h.shape[1] for h in hosts))
    bpe = max(1, N // max(1, G))  # global batches per epoch, OLMo-core style (tail dropped)
    epochs = max(1, math.ceil(max(steps, default=0) / bpe))
    tally = _Tally(index, hosts, L, bpe, cfg.examples)
    with PartitionSpill(REC, bits=4, work_dir=cfg.stream.work_dir) as spill:
        _spill_hashes(index, hosts, L, spill)
        for part in spill.partitions():
            tally.partition(part)
    checks = _stream_checks(tally.stats, epochs, steps)
    return _stream_report(cfg, index, hosts, tally, checks, epochs)


def _window_hashes(path: str, L: int) -> np.ndarray:
    """uint64: xxh3-64 of every whole L-token window of token file `path` in order (file_pass.py's)."""
    parts = [rec["hash"] for _, rec in file_pass((0, path), PassSettings(seq_len=L, docs=False))]
    return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


def _spill_hashes(index, hosts: list[np.ndarray], L: int, spill) -> None:
    """One REC per instance of the mix (kind 0) and per emitted row (kind 1), keyed by content hash."""
    if isinstance(index, PackedIndex):  # packed rows: read as the loader does, hashed as emitted rows are
        h = packed_row_hashes(index)
        rec = np.zeros(h.size, REC)
        rec["hash"], rec["kind"], rec["a"] = h, 0, np.arange(h.size)
        spill.add(rec)
    phys = physical_ids(index.paths)
    hashed: dict[int, np.ndarray] = {}
    for f, path in enumerate(index.paths if not isinstance(index, PackedIndex) else ()):
        p = int(phys[f])
        if p not in hashed:
            hashed[p] = _window_hashes(path, L)
        h = hashed[p][: index.counts[f]]
        rec = np.zeros(h.size, REC)
        rec["hash"], rec["kind"], rec["a"] = h, 0, index.offsets[f] + np.arange(h.size)
        spill.add(rec)
    hashed.clear()
    for host, arr in enumerate(hosts):
        for s in range(arr.shape[0]):
            h = row_hashes(np.asarray(arr[s]))
            rec = np.zeros(h.size, REC)
            rec["hash"], rec["kind"], rec["a"], rec["b"], rec["c"] = h, 1, host, s, np.arange(h.size)
            spill.add(rec)


class _Tally:
    """The counts and examples, built one equal-hash group (rows + instances of one content) at a time."""

    def __init__(self, index, hosts: list[np.ndarray], L: int, bpe: int, examples: int):
        self.index, self.hosts, self.L, self.bpe, self.ex = index, hosts, L, bpe, examples
        self.stats = dict(
            distinct=0,
            repeated=0,
            unplanned=0,
            foreign=0,
            never=0,
            cross=0,
            cross_contents=0,
            cross_unplanned=0,
            collisions=0,
        )
        self.repeat_examples: list[dict] = []
        self.foreign_examples: list[dict] = []
        self.cross_examples: list[dict] = []
        self.observed = np.zeros(len(index.label_names), dtype=np.int64)

    def partition(self, part: np.ndarray) -> None:
        starts, ends = equal_runs(part["hash"], min_size=1)
        n_rows = np.add.reduceat(part["kind"].astype(np.int64), starts) if starts.size else starts
        n_inst = (ends - starts) - n_rows
        # Groups without rows only add never-seen instances: counted in bulk, no Python loop.
        self.stats["never"] += int(n_inst[n_rows == 0].sum())
        with_rows = np.flatnonzero(n_rows > 0)
        for a, b in zip(starts[with_rows].tolist(), ends[with_rows].tolist()):
            group = part[a:b]
            self.group(group[group["kind"] == 0], group[group["kind"] == 1])

    def _row(self, r) -> np.ndarray:
        return np.asarray(self.hosts[int(r["a"])][int(r["b"]), int(r["c"])]).view(np.uint32)

    def _instance_tokens(self, i: int) -> np.ndarray:
        if isinstance(self.index, PackedIndex):
            return self.index.read(np.asarray([i], np.int64))["input_ids"][0].view(np.uint32)
        f, start = self.index.locate(np.asarray([i]))
        return TokenFile(self.index.paths[int(f[0])]).read(int(start[0]), int(start[0]) + self.L)

    def group(self, inst: np.ndarray, rows: np.ndarray) -> None:
        stats, ex, index = self.stats, self.ex, self.index
        if (
            rows.size
            and inst.size
            and not np.array_equal(self._row(rows[0]), self._instance_tokens(int(inst[0]["a"])))
        ):
            stats["collisions"] += 1
            inst = inst[:0]  # equal hash, different bytes: not this instance
        if rows.size:
            rows = rows[np.lexsort((rows["c"], rows["a"], rows["b"]))]  # stream order
            stats["distinct"] += 1
            stats["repeated"] += rows.size - 1
            if inst.size == 0:
                stats["foreign"] += rows.size
                for r in rows[: max(0, ex - len(self.foreign_examples))]:
                    self.foreign_examples.append(
                        {"host": int(r["a"]), "step": int(r["b"]), "row": int(r["c"])}
                    )
            else:
                # planned: each instance once per epoch (epoch of a step = step // (N // G))
                per_epoch = np.bincount(rows["b"] // self.bpe)
                extra = int(np.maximum(per_epoch - inst.size, 0).sum())
                self.observed[index.source_ids(inst["a"][:1])[0]] += rows.size * self.L
                if extra > 0:
                    stats["unplanned"] += extra
                if rows.size > 1 and len(self.repeat_examples) < ex:
                    f, start, _ = index.instance_documents(int(inst[0]["a"]))[0]
                    self.repeat_examples.append(
                        {
                            "instance": int(inst[0]["a"]),
                            "file": index.paths[f],
                            "window": start // self.L,
                            "planned_per_epoch": int(inst.size),
                            "positions": [
                                {"host": int(r["a"]), "step": int(r["b"]), "row": int(r["c"])} for r in rows
                            ],
                        }
                    )
            self._cross_host(inst, rows)
        if inst.size > rows.size:
            stats["never"] += int(inst.size - rows.size)

    def _cross_host(self, inst: np.ndarray, rows: np.ndarray) -> None:
        """Same content on two hosts in one step: every copy of it in that step counts."""
        shared = False
        for step in np.unique(rows["b"]).tolist() if rows.size > 1 else []:
            at = rows[rows["b"] == step]
            hosts_at = np.unique(at["a"])
            if hosts_at.size > 1:
                self.stats["cross"] += int(at.size)
                shared = True
                if at.size > inst.size:  # more copies than instances hold this content
                    self.stats["cross_unplanned"] += int(at.size)
                if len(self.cross_examples) < self.ex:
                    self.cross_examples.append(
                        {
                            "step": step,
                            "hosts": hosts_at.tolist(),
                            "copies": int(at.size),
                            "planned": int(inst.size),
                        }
                    )
        self.stats["cross_contents"] += shared


def _stream_checks(stats: dict, epochs: int, steps: set[int]) -> list[Check]:
    checks = [
        Check(
            "unplanned_repeated_rows",
            stats["unplanned"] == 0,
            stats["unplanned"],
            0,
            detail=f"beyond each content's planned multiplicity per epoch ({epochs} epoch(s))",
        ),
        Check(
            "foreign_rows",
            stats["foreign"] == 0,
            stats["foreign"],
            0,
            detail="rows equal to no instance of the mix",
        ),
        Check(
            "unplanned_cross_host_rows",
            stats["cross_unplanned"] == 0,
            stats["cross_unplanned"],
            0,
            detail="cross-host rows beyond the copies the mix plans",
        ),
        Check(
            "cross_host_rows",
            stats["cross"] == 0,
            stats["cross"],
            0,
            gated=False,
            detail=f"{DEFINITIONS['cross_host_rows']}; {stats['cross_contents']} distinct content(s)",
        ),
        Check("hash_collisions", stats["collisions"] == 0, stats["collisions"], 0, gated=False),
    ]
    if len(steps) > 1:
        checks.append(
            Check(
                "hosts_same_steps",
                False,
                sorted(steps),
                "equal",
                gated=False,
                detail="hosts emitted different numbers of steps",
            )
        )
    return checks


def _stream_report(
    cfg: StreamConfig, index, hosts: list[np.ndarray], tally: _Tally, checks: list[Check], epochs: int
) -> dict:
    stats, N = tally.stats, index.num_instances
    rows_per_host = [h.shape[1] for h in hosts]
    total_rows = int(sum(h.shape[0] * h.shape[1] for h in hosts))
    planned = index.tokens_by_label()
    total_planned = sum(planned.values())
    matched = max(1, int(tally.observed.sum()))
    shares = {
        name: {
            "planned_share": round(planned[name] / total_planned, 6),
            "observed_share": round(float(tally.observed[i]) / matched, 6),
            "observed_tokens": int(tally.observed[i]),
        }
        for i, name in enumerate(index.label_names)
    }
    foreign = tally.foreign_examples
    report = {
        "command": "audit stream",
        "settings": asdict(cfg),
        "fingerprint": index.fingerprint,
        "instances": N,
        "hosts": len(hosts),
        "rows_per_host": rows_per_host,
        "rows": total_rows,
        "distinct_rows": stats["distinct"],
        "repeated_rows": stats["repeated"],
        "unplanned_repeated_rows": stats["unplanned"],
        "foreign_rows": stats["foreign"],
        "instances_never_seen": stats["never"],
        "cross_host_rows": stats["cross"],
        "cross_host_contents": stats["cross_contents"],
        "unplanned_cross_host_rows": stats["cross_unplanned"],
        "epochs_spanned": epochs,
        "covers_epoch": total_rows >= N - N % max(1, sum(rows_per_host)),
        "repeats": tally.repeat_examples,
        "foreign": foreign,
        "foreign_kinds": diagnose_foreign(index, hosts, foreign) if foreign else {},
        "cross_host": tally.cross_examples,
        "sources": shares,
        "hashing": "xxh3-64 of each row's and each instance's uint32 bytes; matches re-compared byte "
        "for byte",
        "definitions": DEFINITIONS,
        "checks": checks_json(checks),
        "ok": not failed(checks),
        "verdict": verdict(checks),
    }
    report["summary"] = summary_lines(
        f"olmax audit stream: {len(hosts)} host(s), {total_rows} rows ({stats['distinct']} distinct, "
        f"{stats['repeated']} repeated, {stats['foreign']} foreign, {stats['cross']} on two or more hosts "
        f"in one step ({stats['cross_contents']} distinct)), mix of {N} instances",
        checks,
    )
    return report


def diagnose_foreign(index, hosts: list[np.ndarray], foreign: list[dict], probe: int = 32) -> dict:
    """Say where each listed foreign row comes from; annotates `foreign` in place, returns counts.

    The first `probe` tokens of each row are looked up at every offset of the mix's files (rolling
    hashes, one pass): `misaligned` (the row equals the file's tokens at an offset that is not a
    window start: the loader cut its window at the wrong place), `corrupted` (it starts like a
    window or file position but differs later: a bad read), `unknown` (its start is nowhere in the
    mix: another file, or a damaged start). A start that occurs at several offsets (repeated text)
    is resolved to an offset where the whole row matches when there is one."""

    L = index.seq_len
    k = min(probe, L)
    rows = [np.asarray(hosts[e["host"]][e["step"], e["row"]]).view(np.uint32) for e in foreign]
    heads = np.asarray([window_hashes(r[:k], k)[0] for r in rows], dtype=np.uint64)
    order = np.argsort(heads)
    sorted_heads = heads[order]
    where: dict[int, tuple[int, int]] = {}  # foreign index -> (file, offset) of the first sighting
    whole: dict[int, tuple[int, int]] = {}  # foreign index -> (file, offset) where the whole row matches
    paths = list(dict.fromkeys(index.paths))
    for f, path in enumerate(paths):
        file = TokenFile(path)
        tokens = file.forward()
        step = 1 << 20
        for a in range(0, max(0, len(tokens) - k + 1), step):
            h = window_hashes(np.asarray(tokens[a : a + step + k - 1]), k)
            idx = np.minimum(np.searchsorted(sorted_heads, h), sorted_heads.size - 1)
            for off in np.flatnonzero(sorted_heads[idx] == h).tolist():
                lo = np.searchsorted(sorted_heads, h[off])
                hi = np.searchsorted(sorted_heads, h[off], side="right")
                for j in order[lo:hi].tolist():
                    if j in whole:
                        continue
                    where.setdefault(j, (f, a + off))
                    if np.array_equal(file.read(a + off, a + off + L), rows[j]):
                        whole[j] = where[j] = (f, a + off)
        if len(whole) == len(rows):
            break
    counts = {"misaligned": 0, "corrupted": 0, "unknown": 0}
    for j, e in enumerate(foreign):
        if j not in where:
            e["kind"] = "unknown"
        else:
            f, off = where[j]
            same = np.array_equal(TokenFile(paths[f]).read(off, off + L), rows[j])
            e.update(
                kind="misaligned" if same and off % L else "corrupted",
                file=paths[f],
                offset=off,
                shift=off % L,
            )
        counts[e["kind"]] += 1
    return counts
