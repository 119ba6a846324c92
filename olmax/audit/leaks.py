"""`olmax audit leaks`: which held-out eval items does the training data contain, and where?

Retrieve, then verify. Eval items are tokenized with the mix's tokenizer and both sides are turned into
the same normalized *words* (normalize.py: case, spacing, line wraps, punctuation, curly quotes and
dashes, Unicode compatibility forms and accents, BPE splits do not matter). Eval items with the same
words are deduplicated first (reported). The eval side is indexed exactly (evalindex.py): every n-word
window (default n = 8: a substitution or a drop every 10 words still leaves whole windows) of every
item, and for items shorter than n words (but at least --min-item-words) the whole item; a window that
--template-items distinct items share is a template of the eval side ("which of the following ...")
and is not indexed. The training side is probed at every word position (per file, files in parallel
threads, 1M-token chunks, a prefilter with no false negatives in front of the exact lookup); a hit
keeps (key, file, document, word index, token offset).

Candidates. The hits of one (item, document) pair are a candidate when their windows cover at least
max(n, --min-cover x k) of the item's k words. Being common in the training text does not disqualify
an n-gram: an item copied onto many pages is found on every one (each key keeps the hits of its first
--max-docs-per-key documents; a key that reaches that cap is reported as saturated).

Verify. Each candidate's item words are aligned against the document's words around the hits (the
longest chain of hits in the item's order, extended by the item's words outside it, plus slack): the
longest common subsequence of the two, computed bit-parallel, tolerates inserted words (markup, a
sentence added), dropped and substituted words. The score is the aligned fraction of the item's words;
an item is contaminated when one document scores >= --threshold (default 0.75). Items under
--min-item-words words are not decided. Every document that passes is reported: source, file, document
id, token span and score.

Short items and symbols. Items of at most --short-words words also index their own `short_ngram`-word
windows (4), so one with a word edited is still retrieved (a candidate when its windows cover what its
allowed edits leave of its indexed words), and are decided by the text check: the item and the
document's text around the span, decoded and read as tokens that keep numbers and operators
(normalize.text_tokens: written-out operators and numerals read as their symbols), placed by a
semi-global edit distance (align.text_check); contaminated at <= min(short_edits, words // 7) token
edits. The text check also reads every candidate of an item holding a number or an operator: one of
them standing where the document has a different one (a sign flip, another number) makes that
document not a copy (score 0, `not_a_copy`), whatever its alignment score.

Bounded memory. Hits are kept only for each key's first max_docs_per_key documents (in file, document
order), merged as they arrive (HitSet): memory grows with the eval index and how often its keys recur,
never with the training corpus.

Runners. Two phases map over training files: probing (`probe_path`) and verification (`verify_file`, each
file's candidates, opened once); the driver indexes the eval side, merges the hits (`merge_probes`),
computes the candidates (`candidates`) and assembles the report (`assemble`). The local runner maps in
threads; `--runner beam` maps the same functions in Apache Beam pipelines (leaks_beam.py) and gives the
same report (all but "timing"). Training files may be fsspec URLs: each is read through a local copy
(`olmax.data.shards.local_shard`: `file://` in place, any other URL copied to scratch with its sidecar while it is read);
the report names files as the mix gives them.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import numpy as np

from olmax.assets import tokenizer_path
from olmax.audit.align import text_check, verify_candidates
from olmax.audit.config import LeakConfig
from olmax.audit.evalindex import EvalIndex
from olmax.audit.evalside import (
    PARTS,
    SHORT_WORDS_PER_EDIT,
    SIGN_CHARS,
    EvalSide,
    index_evals,
    short_allowed,
)
from olmax.audit.leaks_beam import BeamRunner
from olmax.audit.normalize import (
    NORMALIZATION,
    SIGN_NORMALIZATION,
    WORD,
    WordTables,
    text_tokens,
    word_tables,
)
from olmax.audit.paraphrase import (
    MAX_WORDS,
    MIN_STEMS,
    NEAR,
    PAIR_MAX_DOCS,
    PAIR_WINDOW,
    ParaCandidate,
    pair_candidates,
    paraphrase_entries,
    verify_paraphrases,
)
from olmax.audit.report import Check, checks_json, failed, summary_lines
from olmax.audit.spans import documents
from olmax.data.loader import file_index
from olmax.data.shards import local_shard
from olmax.data.tokenfile import read_tokens
from olmax.jsonio import write_jsonl

MAX_NEAR_MISSES = 1000
TEXT_CHECK_FLOOR = 0.5  # candidates scoring below this are not read as text (no threshold goes lower)
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
    tokens = read_tokens(path)
    docs = None  # read on the first hit (an EOS scan of the file when there is no sidecar)
    carry = index.carry
    prev = np.zeros(0, np.uint64)
    prev_pos = np.zeros(0, np.int64)
    cbase = 0  # word index of prev[0]
    hits = HitSet(cap_docs, pair_from=index.num_keys if index.paraphrase else None)
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
                docs = documents(path, tokens)
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


def _in_order(pool: ThreadPoolExecutor, fn, items, ahead: int):
    """pool.map, but with at most `ahead` files submitted and not yet consumed: a slow file never
    lets the finished ones behind it pile up."""
    waiting: deque = deque()
    for it in items:
        waiting.append(pool.submit(fn, it))
        if len(waiting) >= ahead:
            yield waiting.popleft().result()
    while waiting:
        yield waiting.popleft().result()


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
        pair_from = ev.index.num_keys if ev.index.paraphrase else None
        hits, train_tokens = merge_probes(
            runner.probe(paths, ev.index, tables, cfg), cfg.max_docs_per_key, pair_from
        )
        probe_s = time.perf_counter() - t1
        t2 = time.perf_counter()
        found = decide(hits, ev, paths, [sources.get(p) for p in paths], tables, cfg, runner)
    contaminated, near, flagged, stats, paraphrases = found
    verify_s = time.perf_counter() - t2
    per_set, checks = _per_set(ev, flagged, cfg)
    for e in paraphrases:
        per_set[e["eval"]]["paraphrase_candidates"] += 1
    for e in contaminated:
        for part in e["parts"]:
            per_set[e["eval"]]["by_part"][part] += 1
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
        "sets": per_set,
        "contaminated": contaminated,
        "near_misses": near,  # verified items below the threshold, best first (first MAX_NEAR_MISSES)
        "paraphrase_candidates": paraphrases,  # apart: never counted as contaminated (paraphrase.py)
        "checks": checks_json(checks),
        "ok": not failed(checks),
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
    """Map over (file index, path or URL): `probe_file` on a local copy of the file."""
    f, path = task
    with local_shard(path) as local:
        return probe_file(local, f, index, tables, cap_docs=cap_docs, chunk_tokens=chunk_tokens)


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


@dataclass(frozen=True)
class Candidate:
    """An (item, document) pair to verify: the item's position `q` and the token offset `pos` of each
    hit, the alignment window `n` (min(ngram, item words)), `short` (an exact whole-item match needed)
    and whether one of its keys reached --max-docs-per-key (`saturated`)."""

    item: int
    file: int
    doc: int
    q: np.ndarray
    pos: np.ndarray
    n: int
    short: bool
    saturated: bool
    floor: float = TEXT_CHECK_FLOOR  # the alignment score from which the text check reads it


@dataclass(frozen=True)
class FileCandidates:
    """One training file's candidates (`ids`: their indices in the list `candidates` returned) and the
    words of their items: what `verify_file` needs, on any machine."""

    file: int
    path: str
    ids: tuple[int, ...]
    candidates: tuple[Candidate, ...]
    words: dict  # unit -> its packed word values
    texts: dict  # unit -> its text, which the text check reads (short units, and those with signs)
    rivals: dict  # unit -> the same part of its item's wrong continuations (answer-side units)
    joins: dict = field(default_factory=dict)  # answer unit -> its join's text (EvalSide.joins)
    paraphrase_ids: tuple[int, ...] = ()  # indices in the list `pair_candidates` returned
    paraphrases: tuple[ParaCandidate, ...] = ()
    signatures: dict = field(default_factory=dict)  # item -> its paraphrase Signature
    number_words: np.ndarray | None = None  # ParaphraseIndex.number_values


@dataclass(frozen=True)
class FileVerdicts:
    """What `verify_file` found in one training file."""

    copies: list  # (candidate id, score, token start, token end, document id, text edits, conflict)
    paraphrases: list  # (paraphrase candidate id, score, token start, token end, document id)


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
    order = np.lexsort((-h_w, h_q, h_doc, h_file, h_item))  # the widest window first at a position
    h_item, h_q, h_w, h_file, h_doc, h_pos, h_sat = (
        x[order] for x in (h_item, h_q, h_w, h_file, h_doc, h_pos, h_sat)
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
    # a short item: its windows' coverage after its allowed edits, wherever they fall (EvalIndex.min_cover;
    # templates are not indexed, a templated item's core runs are)
    keep = np.where(
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
    out = [
        Candidate(
            int(h_item[lo]),
            int(h_file[lo]),
            int(h_doc[lo]),
            h_q[lo:hi],
            h_pos[lo:hi],
            min(n, kk),
            kk < n or kk <= cfg.short_words,
            bool(st),
            fl,
        )
        for lo, hi, kk, st, fl in zip(
            bounds[:-1][keep].tolist(),
            bounds[1:][keep].tolist(),
            k[keep].tolist(),
            sat[keep].tolist(),
            text_floors(k[keep], ev.signed[h_item[starts][keep]], cfg).tolist(),
        )
    ]
    return out, stats


def file_tasks(
    cands: list[Candidate], paths: list[str], ev: EvalSide, para: list[ParaCandidate] = ()
) -> list[FileCandidates]:
    """The candidates (and paraphrase candidates) grouped by training file, in file order, with their
    units' words and texts (read by the text check on the worker, only for the candidates that reach
    it) and their items' signatures."""
    by_file: dict[int, list[int]] = {}
    for g, c in enumerate(cands):
        by_file.setdefault(c.file, []).append(g)
    para_of: dict[int, list[int]] = {}
    for g, c in enumerate(para):
        para_of.setdefault(c.file, []).append(g)
        by_file.setdefault(c.file, [])
    tasks = []
    for f, ids in sorted(by_file.items()):
        pids = para_of.get(f, [])
        tasks.append(
            FileCandidates(
                f,
                paths[f],
                tuple(ids),
                tuple(cands[g] for g in ids),
                {cands[g].item: ev.words[cands[g].item] for g in ids},
                {cands[g].item: ev.texts[cands[g].item] for g in ids},
                {cands[g].item: ev.rivals[cands[g].item] for g in ids if ev.rivals[cands[g].item]},
                {cands[g].item: ev.joins[cands[g].item] for g in ids if ev.joins[cands[g].item]},
                tuple(pids),
                tuple(para[g] for g in pids),
                {para[g].item: ev.signatures[para[g].item] for g in pids},
                ev.index.paraphrase.number_values if pids else None,
            )
        )
    return tasks


def verify_file(task: FileCandidates, tables: WordTables) -> FileVerdicts:
    """Map over files: the verdicts of one training file's candidates (the file opened once): copies
    (`verify_copies`) and paraphrase candidates (paraphrase.verify_paraphrases)."""
    if not task.candidates and not task.paraphrases:
        return FileVerdicts([], [])
    with local_shard(task.path) as local:
        tokens = read_tokens(local)
        docs = documents(local, tokens)
        copies = verify_copies(task, tokens, docs, tables) if task.candidates else []
        paras = verify_paraphrases(
            tokens, docs, tables, task.paraphrases, task.paraphrase_ids, task.signatures, task.number_words
        )
    return FileVerdicts(copies, paras)


def verify_copies(
    task: FileCandidates, tokens: np.ndarray, docs, tables: WordTables
) -> list[tuple[int, float, int, int, str, int, str]]:
    """(candidate id, score, token start, token end, document id, text edits, conflict) of each
    candidate of one training file, aligned as in the module docstring (align.verify_candidates); the
    text check (`text_edits`) of the candidates scoring at least their `floor`, when their unit is
    short, holds a number or an operator, or has rivals, gives the edits and the conflict (-1 and ''
    where it did not run)."""
    cands = task.candidates
    d = np.asarray([c.doc for c in cands], dtype=np.int64)
    items = list(dict.fromkeys(c.item for c in cands))
    slot = {it: i for i, it in enumerate(items)}
    words = [task.words[it] for it in items]
    scores, t0, t1 = verify_candidates(
        tokens,
        tables.kernel_tables,
        docs.starts[d],
        docs.ends[d],
        np.concatenate([[0], np.cumsum([c.q.size for c in cands])]),
        np.concatenate([c.q for c in cands]),
        np.concatenate([c.pos for c in cands]),
        np.concatenate(words),
        np.concatenate([[0], np.cumsum([w.size for w in words])]),
        np.asarray([slot[c.item] for c in cands]),
        np.asarray([c.n for c in cands]),
        np.asarray([c.short for c in cands]),
    )
    out = []
    unit_toks: dict[int, tuple | None] = {}  # the text check's tokens of a unit, None: not read
    rival_toks: dict[int, list[tuple]] = {}  # a unit's rivals' text tokens, read on first use
    for j, (g, s, a, b, doc) in enumerate(
        zip(task.ids, scores.tolist(), t0.tolist(), t1.tolist(), d.tolist())
    ):
        c = cands[j]
        edits, conflict, joined = -1, "", -1
        has_rivals = c.item in task.rivals
        if s == 1.0 and not has_rivals and not SIGN_CHARS.search(task.texts[c.item]):
            edits = 0  # an exact word match of an item with no digit or operator: nothing to check
        elif s >= c.floor:
            if c.item not in unit_toks:
                toks = text_tokens(task.texts[c.item])
                read = c.short or has_rivals or any(k != WORD for k in toks[1])
                unit_toks[c.item] = toks if read else None
            if unit_toks[c.item] is not None:
                if has_rivals and c.item not in rival_toks:
                    rival_toks[c.item] = [text_tokens(r) for r in task.rivals[c.item]]
                edits, conflict, joined = text_edits(
                    tokens,
                    tables,
                    unit_toks[c.item],
                    rival_toks.get(c.item, []),
                    a,
                    b,
                    int(docs.starts[doc]),
                    int(docs.ends[doc]),
                    text_tokens(task.joins[c.item]) if c.item in task.joins else None,
                )
        out.append((g, float(s), int(a), int(b), docs.id_of(int(doc)), edits, conflict, joined))
    return out


def text_edits(
    tokens: np.ndarray,
    tables: WordTables,
    unit_toks: tuple,
    rivals: list[tuple],
    t0: int,
    t1: int,
    ds: int,
    de: int,
    join: tuple | None = None,
) -> tuple[int, str, int]:
    """The text check of one candidate: the unit's text tokens placed in the document's text around its
    span [t0, t1) (as many tokens as the unit, or its longest rival, has text tokens, plus 8, on each
    side, within the document [ds, de)); (edits, conflict, join edits): edits and conflict of
    align.text_check; a rival (a wrong continuation of the same item) placed there with at most as many
    edits is a conflict (the text is no closer to the gold answer than to a wrong one); an answer unit's
    `join` tokens placed there give the join edits (-1: no join, or a conflict)."""
    room = max(len(t[0]) for t in [unit_toks, *rivals]) + 8
    region = text_tokens(tables.text(tokens[max(ds, t0 - room) : min(de, t1 + room)]))
    edits, conflict = text_check(unit_toks, region)
    joined = text_check(join, region)[0] if join is not None and not conflict else -1
    if not conflict:
        for r in rivals:
            other, _ = text_check(r, region)
            # fewer edits wins; a tie is the gold's only when the wrong choice is a run of the gold one
            # (the text holds it inside the gold): else both are there (a page listing the choices)
            if other < edits or (other == edits and not _sub_run(r[0], unit_toks[0])):
                return (
                    edits,
                    f"as close to a wrong choice ({other} vs {edits} edits): {' '.join(r[0][:12])!r}",
                    -1,
                )
    return edits, conflict, joined


def _sub_run(small: list[str], big: list[str]) -> bool:
    """Whether `small` occurs in `big` as a run of consecutive tokens (and is shorter)."""
    k = len(small)
    return 0 < k < len(big) and any(big[i : i + k] == small for i in range(len(big) - k + 1))


def assemble(
    cands: list[Candidate],
    verified: Iterable[tuple],
    ev: EvalSide,
    paths: list[str],
    sources: list,
    cfg: LeakConfig,
) -> tuple[list[dict], list[dict], np.ndarray]:
    """(contaminated items, near misses, flagged mask over all items) from every candidate's verification
    (in any order): each item's documents in candidate order (its own text's first, then its answer
    side's; a document that passes for several parts listed once, with each part), the threshold
    applied, duplicates decided as their first copy."""
    eidx, n_items = ev.index, len(ev.items)
    result = {g: rest for g, *rest in verified}

    def document(g: int, passed: bool) -> dict:
        c = cands[g]
        score, t0, t1, doc_id, edits, conflict, joined = result[g]
        doc = {
            "source": sources[c.file],
            "file": paths[c.file],
            "doc": doc_id,
            "token_start": t0,
            "token_end": t1,
            "score": round(score, 4),
            "saturated_keys": c.saturated,
            "parts": [PARTS[int(ev.part[c.item])]],
        }
        if c.item >= n_items:  # an answer-side unit: its own length
            doc["part_words"] = int(eidx.lengths_of[c.item])
        if edits >= 0:
            doc["text_edits"] = edits
        if conflict:  # another number or operator in the item's place, or a wrong answer: not a copy
            doc.update(score=0.0, aligned_score=round(score, 4), not_a_copy=conflict)
        if passed and 0 <= joined <= short_allowed(int(ev.join_words[c.item]), cfg):
            doc["parts"].append("context+answer")  # the context's end is there too
        return doc

    # first the decisions alone, as arrays (most candidates are neither passed nor an item's best); then
    # the report's documents for what is shown: each item's passed documents, else its best
    m = len(cands)
    unit = np.asarray([c.item for c in cands], dtype=np.int64)
    score = np.asarray([result[g][0] for g in range(m)], dtype=np.float64)
    edits = np.asarray([result[g][4] for g in range(m)], dtype=np.int64)
    conflict = np.asarray([bool(result[g][5]) for g in range(m)], dtype=bool)
    k = eidx.lengths_of[unit] if m else np.zeros(0, np.int64)
    allowed = np.minimum(cfg.short_edits, k // SHORT_WORDS_PER_EDIT)
    ok = ~conflict & np.where(k <= cfg.short_words, (edits >= 0) & (edits <= allowed), score >= cfg.threshold)
    owner = ev.owner[unit] if m else np.zeros(0, np.int64)
    shown = np.where(conflict, 0.0, np.round(score, 4))
    order = np.lexsort((np.arange(m), -shown, owner))  # per item: best score first, then candidate order
    first = np.ones(m, dtype=bool)
    first[1:] = owner[order][1:] != owner[order][:-1]
    best = dict(zip(owner[order][first].tolist(), ((0.0, g) for g in order[first].tolist())))
    passes: dict[int, list[int]] = {}  # item -> its passing candidates, in candidate order
    for g in np.flatnonzero(ok).tolist():
        passes.setdefault(int(owner[g]), []).append(g)
    found: dict[int, tuple[list[dict], dict]] = {}  # item -> (passed documents, best document)
    for item, (_, g_best) in best.items():
        docs_passed = [document(g, True) for g in passes.get(item, [])]
        found[item] = (docs_passed, document(g_best, g_best in passes.get(item, [])))
    contaminated, near, flagged = [], [], np.zeros(n_items, dtype=bool)
    entry_of: dict[int, dict] = {}
    for item, (docs_passed, top) in found.items():
        k = int(ev.words[item].size)
        passed: dict[tuple, dict] = {}  # (file, document) -> its entry, parts merged
        for x in docs_passed:
            prev = passed.setdefault((x["file"], x["doc"]), x)
            if prev is not x:
                prev["parts"] += [p for p in x["parts"] if p not in prev["parts"]]
        parts = {p for x in passed.values() for p in x["parts"]}
        entry = {
            "eval": ev.sets[int(ev.set_of[item])][0],
            "id": ev.items[item].report_id,
            "kind": "short" if k <= cfg.short_words else "aligned",
            "item_words": k,
            "parts": [p for p in PARTS if p in parts],
            "score": top["score"],
            "n_documents": len(passed),
            "documents": list(passed.values()) or [top],
        }
        if passed:
            flagged[item] = True
            contaminated.append(entry)
            entry_of[item] = entry
        else:
            near.append(entry)
    # duplicates are decided as their first copy
    for i in np.flatnonzero(ev.rep_of != np.arange(n_items)).tolist():
        r = int(ev.rep_of[i])
        if flagged[r]:
            flagged[i] = True
            src = entry_of[r]
            contaminated.append(
                {
                    **src,
                    "eval": ev.sets[int(ev.set_of[i])][0],
                    "id": ev.items[i].report_id,
                    "same_as": {"eval": src["eval"], "id": src["id"]},
                }
            )
    near.sort(key=lambda e: -e["score"])
    return contaminated, near[:MAX_NEAR_MISSES], flagged


def rule_lines(cfg: LeakConfig) -> dict[str, str]:
    """The detection rule as the report states it, a line per step: why an item was or was not reported."""
    n, s = cfg.ngram, cfg.short_ngram
    lines = {
        "retrieve": (
            f"exact {n}-word windows of each unit (an item's text, and its answer side); windows shared "
            f"by >= {cfg.template_items} items are templates, not used"
        ),
        "candidate": (
            f"a (unit, document) pair whose matched windows cover >= max({n}, {cfg.min_cover} x unit "
            f"words); a unit shorter than {n} words: the whole unit"
        ),
        "verify": (
            "longest common subsequence of the unit's words and the document's words around the matches "
            "(inserted, dropped and substituted words tolerated), score = aligned words / unit words; "
            f"contaminated when a document scores >= {cfg.threshold}"
        ),
        "short units": (
            f"units of <= {cfg.short_words} words are also found through their own {s}-word windows "
            f"(a candidate when the windows cover what its allowed edits leave of them wherever the edits "
            f"fall) and are contaminated when their text tokens (normalization.text_check) differ from a "
            f"run of the document's by at most min({cfg.short_edits}, words // {SHORT_WORDS_PER_EDIT}) "
            "edits"
        ),
        "templated short units": (
            f"a short unit whose {s}-word windows are mostly templates (one template, other numbers) is also "
            f"indexed by each run of {s - 1} words no template window covers (its numbers, its "
            "names), so an edit inside the template still leaves a window to find it by"
        ),
        "text check": (
            "a unit holding a number or an operator, every short unit and every answer-side unit is read "
            "once more as text; a number or operator of the unit standing where the document has another "
            "one (a sign flip, another number) makes the document not a copy (score 0, `not_a_copy` says "
            "which), one only missing or replaced by a word is an edit; a single-letter variable renamed "
            "the same way everywhere is one edit"
        ),
        "too short": f"items under {cfg.min_item_words} words are not decided",
    }
    if cfg.paraphrases:
        lines["paraphrase candidates"] = (
            f"items of {cfg.min_item_words} to {MAX_WORDS} words with a number, two numbers of two or "
            "more digits or names, and a name, an operator or a rare word are also looked for as "
            f"paraphrases: pairs of their long numbers and names within {PAIR_WINDOW} words retrieve; a "
            "document window of at most 1.5 x the item's text tokens holding every number (59x apart "
            f"from 59) and name of the item, no other number (0 and 1 aside) in or within {NEAR} tokens "
            "of it, no operator it lacks (nor more of one) and one of its own if it has any, and one of "
            f"its rare words nearby (items of >= {MIN_STEMS}, or with no name and no operator) is a "
            "paraphrase candidate; reported "
            "apart (`paraphrase_candidates`), never counted as contaminated, not for an item reported "
            "as a copy"
        )
    if cfg.answers:
        lines["answer side"] = (
            "a completion task's item (HellaSwag, SWAG, PIQA, COPA, StoryCloze, a `continuation` or "
            f"`completion` field) is also looked for as its gold continuation alone (>= {cfg.answer_words} "
            f"words; part `answer`) and as its context's last {cfg.join_words} words joined to the "
            f"answer's first {cfg.answer_words} (part `context+answer`), each decided as a unit of its "
            "length; a document as close (text edits) to a wrong continuation of the same item as to the "
            "gold one is not an answer leak (`not_a_copy`; a tie is the gold's when the wrong one is a "
            "run of it); a completion "
            f"task's context of under {cfg.answer_words} words is not looked for alone"
        )
    return lines


def text_floors(k: np.ndarray, signed: np.ndarray, cfg: LeakConfig) -> np.ndarray:
    """The alignment score from which each candidate (its unit's words `k`) is read as text: for a unit
    of more than --short-words words the threshold (below it the unit is no copy whatever the text
    says), for a short unit that of its allowed edits, and for one holding a number or an operator
    (`signed`) two written-out numerals more (each a word changed); at least TEXT_CHECK_FLOOR."""
    allowed = np.minimum(cfg.short_edits, k // SHORT_WORDS_PER_EDIT)
    short = (k - allowed - np.where(signed, 2, 0)) / np.maximum(1, k) - 1e-9
    return np.maximum(TEXT_CHECK_FLOOR, np.where(k > cfg.short_words, cfg.threshold - 1e-9, short))


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
            yield from _in_order(
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
            probe_path,
            (eidx, tables),
            task_file,
            cap_docs=cfg.max_docs_per_key,
            chunk_tokens=cfg.chunk_tokens,
        )

    def verify(self, tasks: list[FileCandidates], tables: WordTables) -> list[FileVerdicts]:
        return self.beam.map_files("verify", tasks, verify_file, (tables,), task_file)


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


def _per_set(ev: EvalSide, flagged: np.ndarray, cfg: LeakConfig) -> tuple[dict, list[Check]]:
    """Each set's counts (and clean subset, with `clean_dir`) and its gate check."""
    eidx, n_items = ev.index, len(ev.items)
    ngrams_of = np.bincount(ev.owner[eidx.rec_item], minlength=n_items)
    n_words = np.asarray([w.size for w in ev.words[:n_items]], dtype=np.int64)
    too_short = n_words < cfg.min_item_words
    gate = set(cfg.gate) if cfg.gate is not None else {name for name, _ in ev.sets}
    per_set, checks = {}, []
    for s, (name, _items) in enumerate(ev.sets):
        sel = ev.set_of == s
        n_bad = int(flagged[sel].sum())
        per_set[name] = {
            "items": int(sel.sum()),
            "contaminated": n_bad,
            "percent_contaminated": round(100.0 * n_bad / max(1, int(sel.sum())), 3),
            "too_short_to_decide": int(too_short[sel].sum()),
            "duplicates": int((sel & (ev.rep_of != np.arange(len(ev.items)))).sum()),
            "ngrams": int(ngrams_of[sel].sum()),
            "gated": name in gate,
            "by_part": dict.fromkeys(PARTS, 0),  # contaminated items per part that leaked
            "paraphrase_candidates": 0,  # reported apart, not in `contaminated`
        }
        if cfg.clean_dir:
            clean = [ev.items[i] for i in np.flatnonzero(sel & ~flagged).tolist()]
            out = os.path.join(cfg.clean_dir, f"{name}.jsonl")
            write_jsonl(out, ({"id": it.report_id, "text": it.text} for it in clean))
            per_set[name]["clean_subset"] = out
        checks.append(
            Check(
                f"contaminated:{name}",
                n_bad == 0,
                n_bad,
                0,
                gated=name in gate,
                detail=f"{per_set[name]['percent_contaminated']}% of {per_set[name]['items']} items",
            )
        )
    return per_set, checks
