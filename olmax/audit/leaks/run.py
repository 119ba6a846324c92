"""`olmax audit leaks`: which held-out eval items the training data holds, in which documents and where.

The phases: index the eval side (eval_side.py, item_index.py), probe every training file for its windows
(`probe_path`, in threads or on Beam: leaks_beam.py), merge the hits (`merge_probes`), make the candidates
(`candidates`, paraphrase.pair_candidates), verify each file's candidates (verify.py) and decide
(`decide`; the report's entries and counts: findings.py). How each phase works and why:
docs/leaks.md#how-the-audit-runs.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict

import numpy as np

from olmax.assets import tokenizer_path
from olmax.audit.audit_config import LeakConfig
from olmax.audit.checks import Check, checks_json, failed, summary_lines, verdict
from olmax.audit.leaks.eval_side import EvalSide, index_evals
from olmax.audit.leaks.findings import MAX_NEAR_MISSES, assemble, per_set, rule_lines
from olmax.audit.leaks.item_index import EvalIndex
from olmax.audit.leaks.leaks_beam import BeamRunner
from olmax.audit.leaks.normalize import (
    NORMALIZATION,
    SIGN_NORMALIZATION,
    WordTables,
    word_tables,
)
from olmax.audit.leaks.paraphrase import (
    PAIR_MAX_DOCS,
    pair_candidates,
    paraphrase_entries,
)
from olmax.audit.leaks.verify import (
    PARTIAL_MAX_DOCS,
    PARTIAL_WORDS,
    Candidate,
    FileCandidates,
    FileVerdicts,
    file_tasks,
    text_floors,
    verify_file,
)
from olmax.audit.spans import documents
from olmax.data.loader import file_index
from olmax.data.token_reads import TokenFile
from olmax.pools import in_order
from olmax.ranged import WithPins, export_pins

HIT_REC = np.dtype([("key", "<i8"), ("file", "<i4"), ("doc", "<i8"), ("cpos", "<i8"), ("pos", "<i8")])


def probe_file(
    path: str,
    file_index: int,
    index: EvalIndex,
    tables: WordTables,
    *,
    cap_docs: int,
    chunk_tokens: int = 1 << 20,
) -> tuple[np.ndarray, int]:
    """Map: the hits of one training file (those of each key's first cap_docs documents), tokens.

    Hit positions: `cpos` counts words from the file's start, `pos` is the token offset of the
    matched span's first word."""
    file = TokenFile(path)
    tokens = file.forward()
    # read on the first hit: the sidecar, else an EOS scan (of the memory map, or a URL's second pass)
    docs = None
    carry = index.carry
    prev = np.zeros(0, np.uint64)
    prev_pos = np.zeros(0, np.int64)
    cbase = 0  # word index of prev[0]
    hits = HitSet(cap_docs, pair_from=index.pair_from)
    a, total = 0, len(tokens)
    # Chunk by chunk; each chunk restarts at a word start (the last word is held back), so the words
    # are the same whatever the chunk size, but for a word longer than a chunk, cut there.
    while a < total:
        b = min(total, a + chunk_tokens)
        vals, first_tok, consumed = tables.packed_words(tokens[a:b], final=b == total)
        if consumed == 0:
            vals, first_tok, consumed = tables.packed_words(tokens[a:b], final=True)
        cc = np.concatenate([prev, vals])
        key, start = index.probe(cc, prev.size)
        if key.size:
            if docs is None:
                docs = documents(path, None if file.remote else tokens)
            at = np.empty(start.size, dtype=np.int64)
            old = start < prev.size  # a window that starts in the carried words
            at[old] = prev_pos[start[old]]
            at[~old] = first_tok[start[~old] - prev.size] + a
            rec = np.empty(key.size, dtype=HIT_REC)
            rec["key"], rec["file"], rec["cpos"], rec["pos"] = key, file_index, start + cbase, at
            rec["doc"] = docs.doc_at(at)
            hits.add(rec)
        # carry the last words (and their token offsets) into the next chunk
        tail = min(carry, cc.size)
        k_new = min(tail, first_tok.size)
        prev_pos = np.concatenate(
            [prev_pos[prev_pos.size - (tail - k_new) :], first_tok[first_tok.size - k_new :] + a]
        )
        prev = cc[cc.size - tail :]
        cbase += cc.size - tail
        a += consumed
    return hits.result(), len(tokens)


class HitSet:
    """Bounded hit collection: the hits of each key's first cap_docs documents in (file, doc) order,
    merged as they arrive (any arrival order gives the same set). Holds at most twice that set plus
    min_merge plus the last batch (a merge runs once the pending hits outgrow both what is kept and
    min_merge), whatever the corpus size: memory grows with the eval side and with how often its
    keys recur inside those first documents, not with the training data."""

    def __init__(self, cap_docs: int, min_merge: int = 1 << 20, pair_from: int | None = None):
        self.cap_docs = cap_docs
        self.min_merge = min_merge
        self.pair_from = pair_from  # keys from here on are pair keys (paraphrase.py): PAIR_MAX_DOCS each
        self.kept = np.zeros(0, HIT_REC)
        self.pending: list[np.ndarray] = []
        self.n_pending = 0

    def add(self, rec: np.ndarray) -> None:
        if rec.size == 0:
            return
        self.pending.append(rec)
        self.n_pending += rec.size
        if self.n_pending > max(self.min_merge, self.kept.size):
            self._merge()

    def _merge(self) -> None:
        if self.pending:
            self.kept = cap_hits(np.concatenate([self.kept, *self.pending]), self.cap_docs, self.pair_from)
            self.pending, self.n_pending = [], 0

    def result(self) -> np.ndarray:
        """The kept hits, sorted by (key, file, doc, cpos)."""
        self._merge()
        return self.kept


def cap_hits(hits: np.ndarray, cap_docs: int, pair_from: int | None = None) -> np.ndarray:
    """The hits of each key's first cap_docs documents in (file, doc) order (a pair key's, from
    `pair_from` on: its first min(cap_docs, PAIR_MAX_DOCS)), sorted by (key, file, doc, cpos)."""
    if hits.size == 0:
        return hits
    hits = hits[np.lexsort((hits["cpos"], hits["doc"], hits["file"], hits["key"]))]
    new_doc = _new_docs(hits)
    new_key = np.ones(hits.size, dtype=bool)
    new_key[1:] = hits["key"][1:] != hits["key"][:-1]
    doc_no = np.cumsum(new_doc)
    key_first_doc = np.maximum.accumulate(np.where(new_key, doc_no, 0))
    rank = doc_no - key_first_doc  # 0 for the key's first document
    if pair_from is None:
        return hits[rank < cap_docs]
    return hits[rank < np.where(hits["key"] >= pair_from, min(cap_docs, PAIR_MAX_DOCS), cap_docs)]


def doc_freq(hits: np.ndarray, num_keys: int) -> np.ndarray:
    """int64 (num_keys,): distinct documents per key among hits sorted as cap_hits leaves them. On
    capped hits this is min(df, cap_docs): enough to test df >= boilerplate_docs < cap_docs."""
    if hits.size == 0:
        return np.zeros(num_keys, np.int64)
    return np.bincount(hits["key"][_new_docs(hits)], minlength=num_keys).astype(np.int64)


def _new_docs(hits: np.ndarray) -> np.ndarray:
    """bool: where a sorted hit starts a new (key, file, doc)."""
    k, f, d = hits["key"], hits["file"], hits["doc"]
    new_doc = np.ones(hits.size, dtype=bool)
    new_doc[1:] = (k[1:] != k[:-1]) | (f[1:] != f[:-1]) | (d[1:] != d[:-1])
    return new_doc


def audit_leaks(cfg: LeakConfig, beam_options: str | None = None) -> dict:
    """Find the eval items inside the training data; returns the report (`ok` False when an item of a
    gated set is contaminated). Phases: index the eval items → probe every training file → candidates
    from the merged hits → verify each file's candidates → per-set counts and clean subsets → report.

    `beam_options` (Beam's pipeline flags, `olmax.beam.pipeline_options`): the per-file phases run as Apache
    Beam pipelines (leaks_beam.py) instead of local threads; the same functions, the same report."""
    t0 = time.perf_counter()
    index = file_index(cfg.stream)
    tok_path = str(tokenizer_path(cfg.tokenizer, quiet=True))
    tables = word_tables(tok_path)
    ev = index_evals(cfg, tok_path, tables)
    t_index = time.perf_counter() - t0
    # Map over distinct training files (a path listed twice is probed once), reduce in file order.
    paths = list(dict.fromkeys(index.paths))
    sources = {}
    for src, pth in zip(index.labels, index.paths):
        sources.setdefault(pth, src)
    with _runner(beam_options) as runner:
        t1 = time.perf_counter()
        hits, train_tokens = merge_probes(
            runner.probe(paths, ev.index, tables, cfg), cfg.max_docs_per_key, ev.index.pair_from
        )
        probe_s = time.perf_counter() - t1
        t2 = time.perf_counter()
        found = decide(hits, ev, paths, [sources.get(p) for p in paths], tables, cfg, runner)
    contaminated, near, flagged, stats, paraphrases = found
    verify_s = time.perf_counter() - t2
    sets, checks = per_set(ev, flagged, cfg, contaminated, paraphrases)
    eidx = ev.index
    report = {
        "command": "audit leaks",
        "settings": asdict(cfg),
        "normalization": {"words": NORMALIZATION, "text_check": SIGN_NORMALIZATION},
        "hashing": (
            f"{cfg.ngram}-word rolling hashes (two Karp-Rabin bases mod p = 2^31-1 over two "
            f"polynomial word hashes), per-pair collision <= ((n-1+l)/p)^2 for words of <= l "
            f"bytes: {((cfg.ngram - 1 + 64) / (2**31 - 1)) ** 2:.1e} at l = 64; short items as "
            f"whole-item windows"
        ),
        "rule": rule_lines(cfg),
        "training": {"files": len(paths), "tokens": train_tokens},
        "eval_index": {
            "items": len(ev.items),
            "distinct_items": int(len(ev.items) - len(ev.duplicates)),
            "keys": eidx.num_keys,
            "template_keys": eidx.template_keys,
            "lengths": eidx.lengths,
        },
        "eval_duplicates": ev.duplicates[:MAX_NEAR_MISSES],
        "candidates": stats,
        "timing": {
            "index_s": round(t_index, 3),
            "probe_s": round(probe_s, 3),
            "verify_s": round(verify_s, 3),
            "probe_tokens_per_s": round(train_tokens / max(probe_s, 1e-9)),
            "tokens_per_s": round(train_tokens / max(probe_s + verify_s, 1e-9)),
            "runner": runner.description,
        },
        "sets": sets,
        "contaminated": contaminated,
        "near_misses": near,  # verified items below the threshold, best first (first MAX_NEAR_MISSES)
        "paraphrase_candidates": paraphrases,  # apart: never counted as contaminated (paraphrase.py)
        "checks": checks_json(checks),
        "ok": not failed(checks),
        "verdict": verdict(checks),
    }
    info = [
        Check(
            "paraphrase_candidates",
            True,
            len(paraphrases),
            gated=False,
            detail="items whose numbers, names and rare words a document holds in other words; reported "
            "apart, not counted as contaminated",
        )
    ]
    report["summary"] = summary_lines(
        f"olmax audit leaks: {cfg.stream.mix} ({train_tokens:,} training tokens, "
        f"{len(ev.items)} eval items, {eidx.num_keys:,} keys)",
        checks + (info if cfg.paraphrases else []),
    )
    return report


def probe_path(
    task: tuple[int, str], index: EvalIndex, tables: WordTables, *, cap_docs: int, chunk_tokens: int = 1 << 20
) -> tuple[np.ndarray, int]:
    """Map over (file index, path or URL): `probe_file` on the file, read where it is."""
    f, path = task
    return probe_file(path, f, index, tables, cap_docs=cap_docs, chunk_tokens=chunk_tokens)


def merge_probes(
    results: Iterable[tuple[np.ndarray, int]], cap_docs: int, pair_from: int | None = None
) -> tuple[np.ndarray, int]:
    """Reduce: every file's hits merged (each key's first `cap_docs` documents kept, whatever the order
    the files arrive in) and the number of training tokens probed."""
    kept, train_tokens = HitSet(cap_docs, pair_from=pair_from), 0
    for file_hits, n_tokens in results:
        kept.add(file_hits)
        train_tokens += n_tokens
    return kept.result(), train_tokens


def candidates(hits: np.ndarray, ev: EvalSide, cfg: LeakConfig) -> tuple[list[Candidate], dict]:
    """The (item, document) pairs to verify, in (item, file, document) order, from the merged hits, and
    the candidate counts of the report."""
    eidx, n = ev.index, cfg.ngram
    hits = hits[hits["key"] < eidx.num_keys]  # the window keys' hits (pair keys: paraphrase.pair_candidates)
    df = doc_freq(hits, eidx.num_keys)
    saturated = df >= cfg.max_docs_per_key
    # Expand hits to (item, n-gram position) through the index's records.
    per = eidx.rec_ptr[hits["key"] + 1] - eidx.rec_ptr[hits["key"]]
    hit_of = np.repeat(np.arange(hits.size), per)
    rec = np.repeat(eidx.rec_ptr[hits["key"]], per) + (
        np.arange(hit_of.size) - np.repeat(np.cumsum(per) - per, per)
    )
    h_item, h_q, h_w = eidx.rec_item[rec], eidx.rec_q[rec], eidx.rec_w[rec]
    h_file, h_doc, h_pos = hits["file"][hit_of], hits["doc"][hit_of], hits["pos"][hit_of]
    h_sat = saturated[hits["key"][hit_of]]
    h_cpos, h_common = hits["cpos"][hit_of], df[hits["key"][hit_of]] >= PARTIAL_MAX_DOCS
    order = np.lexsort((-h_w, h_q, h_doc, h_file, h_item))  # the widest window first at a position
    h_item, h_q, h_w, h_file, h_doc, h_pos, h_sat, h_cpos, h_common = (
        x[order] for x in (h_item, h_q, h_w, h_file, h_doc, h_pos, h_sat, h_cpos, h_common)
    )
    brk = np.ones(h_item.size, dtype=bool)
    brk[1:] = (h_item[1:] != h_item[:-1]) | (h_file[1:] != h_file[:-1]) | (h_doc[1:] != h_doc[:-1])
    starts = np.flatnonzero(brk)
    # words of the item its windows cover, per pair: the union of [q, q + w) over its distinct positions
    # (sorted within the pair; w the widest window there), each adding min(w, the gap to the next one)
    distinct = brk.copy()
    distinct[1:] |= h_q[1:] != h_q[:-1]
    at = np.flatnonzero(distinct)
    gap = h_w[at].copy()
    inner = ~brk[at[1:]]  # the next distinct position is in the same pair
    gap[:-1][inner] = np.minimum(gap[:-1][inner], h_q[at[1:]][inner] - h_q[at[:-1]][inner])
    covered = np.add.reduceat(gap, np.searchsorted(at, starts)) if at.size else np.zeros(0, np.int64)
    k = eidx.lengths_of[h_item[starts]]
    # a whole-item key (k < n) is an exact match of the whole item
    whole = (
        np.logical_or.reduceat((h_w == eidx.lengths_of[h_item]) & (h_w < n), starts) if starts.size else k < 0
    )
    short = k <= cfg.short_words
    run = longest_runs(starts, h_q, h_w == n, h_cpos, h_common, n)
    partial = (run >= np.minimum(k, PARTIAL_WORDS)) & ~(short & ev.signed[h_item[starts]])
    # a short item: its windows' coverage after its allowed edits, wherever they fall (EvalIndex.min_cover;
    # templates are not indexed, a templated item's core runs are); any unit: a long run of it
    keep = partial | np.where(
        whole,
        True,
        np.where(short, covered >= ev.short_bar[h_item[starts]], covered >= np.maximum(n, cfg.min_cover * k)),
    )
    stats = {
        "pairs": int(starts.size),
        "verified": int((keep & ~whole).sum()),
        "saturated_keys": int(saturated.sum()),
    }
    bounds = np.append(starts, h_item.size)
    sat = np.logical_or.reduceat(h_sat, starts) if starts.size else np.zeros(0, bool)
    first = bounds[:-1][keep]
    # a partial match is read as text from any score: its numbers and operators must match too
    floors = np.where(partial[keep], 0.0, text_floors(k[keep], ev.signed[h_item[starts][keep]], cfg))
    out = [
        Candidate(it, f, d, h_q[lo:hi], h_pos[lo:hi], min(n, kk), kk < n or kk <= cfg.short_words, st, fl, r)
        for it, f, d, lo, hi, kk, st, fl, r in zip(
            h_item[first].tolist(),
            h_file[first].tolist(),
            h_doc[first].tolist(),
            first.tolist(),
            bounds[1:][keep].tolist(),
            k[keep].tolist(),
            sat[keep].tolist(),
            floors.tolist(),
            run[keep].tolist(),
        )
    ]
    return out, stats


def longest_runs(
    starts: np.ndarray, q: np.ndarray, full: np.ndarray, cpos: np.ndarray, common: np.ndarray, n: int
) -> np.ndarray:
    """int64 per (unit, document) pair (hits sorted by pair, `starts` their first hits): the words of
    the longest run of the unit found contiguously in the document, from its `full` n-word windows at
    consecutive unit positions `q` and consecutive document words `cpos` (r windows: r + n - 1 words);
    windows found in PARTIAL_MAX_DOCS or more documents (`common`: boilerplate) do not count. 0: none."""
    pairs = starts.size
    out = np.zeros(pairs, np.int64)
    use = full & ~common
    if not use.any():
        return out
    first = np.zeros(q.size, dtype=bool)
    first[starts] = True
    pair_of = np.cumsum(first) - 1
    p, qq, cc = pair_of[use], q[use], cpos[use]
    o = np.lexsort((qq, cc - qq, p))  # per pair, per diagonal, in unit order
    p, qq, cc = p[o], qq[o], cc[o]
    cont = np.zeros(p.size, dtype=bool)
    cont[1:] = (p[1:] == p[:-1]) & (cc[1:] - qq[1:] == cc[:-1] - qq[:-1]) & (qq[1:] == qq[:-1] + 1)
    seg = np.cumsum(~cont) - 1
    seg_len = np.bincount(seg)
    seg_pair = p[~cont]
    np.maximum.at(out, seg_pair, seg_len + n - 1)
    return out


def decide(
    hits: np.ndarray,
    ev: EvalSide,
    paths: list[str],
    sources: list,
    tables: WordTables,
    cfg: LeakConfig,
    runner: LocalRunner | BeamPhases | None = None,
) -> tuple[list[dict], list[dict], np.ndarray, dict, list[dict]]:
    """(contaminated items, near misses, flagged mask over all items, candidate counts, paraphrase
    candidates) of the merged hits: every candidate verified (module docstring) per file, by `runner`
    (default: here, one file after another)."""
    cands, stats = candidates(hits, ev, cfg)
    eidx = ev.index
    para = pair_candidates(hits, eidx.paraphrase, eidx.num_keys) if eidx.paraphrase else []
    verdicts = (runner or LocalRunner()).verify(file_tasks(cands, paths, ev, para), tables)
    copies = [v for fv in verdicts for v in fv.copies]
    contaminated, near, flagged = assemble(cands, copies, ev, paths, sources, cfg)
    paraphrases = paraphrase_entries(
        para, [v for fv in verdicts for v in fv.paraphrases], ev, paths, sources, flagged
    )
    stats["paraphrase_candidates"] = len(para)
    return contaminated, near, flagged, stats, paraphrases


class LocalRunner:
    """The per-file phases on this machine: probing in `cfg.threads` threads (files in order, at most
    two per thread ahead), verification one file after another."""

    description = "local"

    def probe(
        self, paths: list[str], eidx: EvalIndex, tables: WordTables, cfg: LeakConfig
    ) -> Iterator[tuple[np.ndarray, int]]:
        threads = max(1, cfg.threads)
        with ThreadPoolExecutor(max_workers=threads) as pool:
            yield from in_order(
                pool,
                lambda task: probe_path(
                    task, eidx, tables, cap_docs=cfg.max_docs_per_key, chunk_tokens=cfg.chunk_tokens
                ),
                enumerate(paths),
                ahead=2 * threads,
            )

    def verify(self, tasks: list[FileCandidates], tables: WordTables) -> list[FileVerdicts]:
        return [verify_file(task, tables) for task in tasks]


class BeamPhases:
    """The same per-file phases as Beam pipelines (leaks_beam.py): probing maps `probe_path` over the
    distinct files, verification maps `verify_file` over the files with candidates."""

    def __init__(self, beam):
        self.beam, self.description = beam, beam.description

    def probe(
        self, paths: list[str], eidx: EvalIndex, tables: WordTables, cfg: LeakConfig
    ) -> list[tuple[np.ndarray, int]]:
        return self.beam.map_files(
            "probe",
            list(enumerate(paths)),
            WithPins(probe_path, export_pins(paths)),
            (eidx, tables),
            task_file,
            cap_docs=cfg.max_docs_per_key,
            chunk_tokens=cfg.chunk_tokens,
        )

    def verify(self, tasks: list[FileCandidates], tables: WordTables) -> list[FileVerdicts]:
        pinned = WithPins(verify_file, export_pins([t.path for t in tasks]))
        return self.beam.map_files("verify", tasks, pinned, (tables,), task_file)


def task_file(task: tuple[int, str] | FileCandidates) -> tuple[int]:
    """A per-file task's file index: the order a worker's first failure is reported in."""
    return (task.file,) if isinstance(task, FileCandidates) else (int(task[0]),)


@contextmanager
def _runner(beam_options: str | None):
    if beam_options is None:
        yield LocalRunner()
        return
    with BeamRunner(beam_options, "audit leaks") as beam:
        yield BeamPhases(beam)
