"""`olmax audit leaks`: which held-out eval items does the training data contain?

Method. Eval items are tokenized with the mix's tokenizer and both sides are turned into the same
normalized *words* (normalize.py: case, spacing, punctuation and BPE splits do not matter). The eval
side is indexed exactly (evalindex.py): every n-word window (default n = 13) of every item, and for
items shorter than n words (but at least --min-item-words) the whole item, as rolling hashes
(hashing.py) keyed by length, in one sorted array behind a bit-table prefilter with no false
negatives (prefilter.py). The training side is probed at every word position: per file (the map;
files in parallel threads) words are made in 1M-token chunks, every window passes the prefilter
or not, and only the ~0.4% that pass are hashed and looked up; a hit keeps (key, file, document,
word index, token offset).

Bounded memory. Hits are kept only for each key's first boilerplate_docs + 1 documents (in file,
document order), merged as they arrive (HitSet: within a file chunk by chunk, then across files):
memory grows with the eval index and how often its keys recur in those documents, never with the
training corpus. A key's document frequency (df) is counted on the kept hits, so it saturates at
boilerplate_docs + 1, which is all the boilerplate test (df >= boilerplate_docs) needs.

Decision (per item, on the single best training document):
- short item (fewer than n words): an exact whole-item match anywhere;
- otherwise contaminated when one contiguous matched span covers >= span_fraction of the item, or
  when one document holds >= coverage of the item's non-boilerplate n-grams (an n-gram found in >=
  boilerplate_docs documents is boilerplate: alone it never flags an item, so an item that only
  shares a common sentence with training documents stays clean);
- items shorter than min_item_words are too short to decide (reported, never flagged).
"""

from __future__ import annotations

import os
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np

from olmax.audit.evalindex import EvalIndex
from olmax.audit.normalize import NORMALIZATION, WordTables, word_tables
from olmax.audit.report import Check, checks_json, failed, summary_lines
from olmax.audit.spans import documents, require_local
from olmax.data.shards import read_tokens
from olmax.data.stream import StreamSpec

MAX_NEAR_MISSES = 1000
HIT_REC = np.dtype([("key", "<i8"), ("file", "<i4"), ("doc", "<i8"), ("cpos", "<i8"), ("pos", "<i8")])


@dataclass(frozen=True)
class LeakConfig:
    """The training mix (`stream`: its mix, base dir and {TOKENIZER} value are read), the eval sets, the
    tokenizer the mix was tokenized with, and the detection rule's settings."""

    stream: StreamSpec
    evals: tuple[str, ...]
    tokenizer: str = "dolma2"
    ngram: int = 13
    min_item_words: int = 4
    coverage: float = 0.5
    span_fraction: float = 0.9
    boilerplate_docs: int = 3
    gate: tuple[str, ...] | None = None  # None: every set gates
    clean_dir: str | None = None
    threads: int = 2
    chunk_tokens: int = 1 << 20


def probe_file(path: str, file_index: int, index: EvalIndex, tables: WordTables, *, cap_docs: int,
               chunk_tokens: int = 1 << 20) -> tuple[np.ndarray, int]:
    """Map: the hits of one training file (those of each key's first cap_docs documents), tokens.

    Hit positions: `cpos` counts words from the file's start, `pos` is the token offset of the
    matched span's first word."""
    tokens = read_tokens(path)
    docs = None  # read on the first hit (an EOS scan of the file when there is no sidecar)
    carry = max(index.lengths, default=1) - 1
    prev = np.zeros(0, np.uint64)
    prev_pos = np.zeros(0, np.int64)
    cbase = 0  # word index of prev[0]
    hits = HitSet(cap_docs)
    a, total = 0, len(tokens)
    while a < total:
        b = min(total, a + chunk_tokens)
        vals, first_tok, consumed = tables.packed_words(tokens[a:b], final=b == total)
        if consumed == 0:  # one word longer than a chunk: cut it here
            vals, first_tok, consumed = tables.packed_words(tokens[a:b], final=True)
        cc = np.concatenate([prev, vals])
        key, start = index.probe(cc, prev.size)
        if key.size:
            if docs is None:
                docs = documents(path, tokens)
            at = np.concatenate([prev_pos, first_tok + a])[start]
            rec = np.empty(key.size, dtype=HIT_REC)
            rec["key"], rec["file"], rec["cpos"], rec["pos"] = key, file_index, start + cbase, at
            rec["doc"] = docs.doc_at(at)
            hits.add(rec)
        # carry the last words (and their token offsets) into the next chunk
        tail = min(carry, cc.size)
        k_new = min(tail, first_tok.size)
        prev_pos = np.concatenate([prev_pos[prev_pos.size - (tail - k_new):],
                                   first_tok[first_tok.size - k_new:] + a])
        prev = cc[cc.size - tail:]
        cbase += cc.size - tail
        a += consumed
    return hits.result(), len(tokens)


class HitSet:
    """Bounded hit collection: the hits of each key's first cap_docs documents in (file, doc) order,
    merged as they arrive (any arrival order gives the same set). Holds at most twice that set plus
    min_merge plus the last batch (a merge runs once the pending hits outgrow both what is kept and
    min_merge), whatever the corpus size: memory grows with the eval side and with how often its
    keys recur inside those first documents, not with the training data."""

    def __init__(self, cap_docs: int, min_merge: int = 1 << 16):
        self.cap_docs = cap_docs
        self.min_merge = min_merge
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
            self.kept = cap_hits(np.concatenate([self.kept, *self.pending]), self.cap_docs)
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


def cap_hits(hits: np.ndarray, cap_docs: int) -> np.ndarray:
    """The hits of each key's first cap_docs documents in (file, doc) order, sorted by
    (key, file, doc, cpos)."""
    if hits.size == 0:
        return hits
    hits = hits[np.lexsort((hits["cpos"], hits["doc"], hits["file"], hits["key"]))]
    new_doc = _new_docs(hits)
    new_key = np.ones(hits.size, dtype=bool)
    new_key[1:] = hits["key"][1:] != hits["key"][:-1]
    doc_no = np.cumsum(new_doc)
    key_first_doc = np.maximum.accumulate(np.where(new_key, doc_no, 0))
    rank = doc_no - key_first_doc  # 0 for the key's first document
    return hits[rank < cap_docs]


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


def _decide(item_hits: np.ndarray, q: np.ndarray, boiler: np.ndarray, k: int, n: int,
            ngrams: int, nb_total: int, cfg: LeakConfig) -> dict:
    """Best document evidence for one item: matched n-grams, longest span, coverage, decision."""
    best = None
    fd = item_hits["file"].astype(np.int64) * (1 << 40) + item_hits["doc"]
    for u in np.unique(fd).tolist():
        sel = np.flatnonzero(fd == u)
        hq, hc, hb = q[sel], item_hits["cpos"][sel], boiler[sel]
        uq = np.unique(hq)
        nb_matched = int(np.unique(hq[~hb]).size)
        if k < n:
            span, at = k, sel[0]
        else:
            diag = hc - hq
            order = np.lexsort((hq, diag))
            dq, dd = hq[order], diag[order]
            brk = np.ones(dq.size, dtype=bool)
            brk[1:] = (dd[1:] != dd[:-1]) | (dq[1:] != dq[:-1] + 1)
            run_id = np.cumsum(brk)
            lengths = np.bincount(run_id)
            r = int(np.argmax(lengths))
            span = int(lengths[r]) + n - 1
            at = sel[order[np.flatnonzero(run_id == r)[0]]]
        covered = np.zeros(k, dtype=bool)
        for qq in uq.tolist():
            covered[qq:qq + (n if k >= n else k)] = True
        ev = {"matched_ngrams": int(uq.size), "matched_nonboilerplate": nb_matched,
              "longest_span_words": span, "span_fraction": round(span / k, 4),
              "covered_fraction": round(float(covered.mean()), 4),
              "coverage_nonboilerplate": round(nb_matched / nb_total, 4) if nb_total else 0.0,
              "file": int(item_hits["file"][at]), "doc": int(item_hits["doc"][at]),
              "offset": int(item_hits["pos"][at])}
        if best is None or (ev["span_fraction"], ev["coverage_nonboilerplate"]) > \
                (best["span_fraction"], best["coverage_nonboilerplate"]):
            best = ev
    best["contaminated"] = bool(best["span_fraction"] >= cfg.span_fraction or k < n or (
        nb_total > 0 and best["coverage_nonboilerplate"] >= cfg.coverage))
    best["ngrams"] = ngrams
    return best


def audit_leaks(cfg: LeakConfig) -> dict:
    """Find the eval items inside the training data; returns the report (`ok` False when an item of a
    gated set is contaminated). Phases: index the eval items → probe every training file → decide
    each item that has hits → per-set counts and clean subsets → report."""
    from olmax.assets import tokenizer_path

    t0 = time.perf_counter()
    index = cfg.stream.open_index(seq_len=1, allow_short_files=True)
    tok_path = str(tokenizer_path(cfg.tokenizer, quiet=True))
    tables = word_tables(tok_path)
    ev = _index_evals(cfg, tok_path, tables)
    t_index = time.perf_counter() - t0
    # Map over distinct training files (a path listed twice is probed once), reduce in file order.
    paths = list(dict.fromkeys(index.paths))
    require_local(paths, "the leak probe")
    t1 = time.perf_counter()
    hits, train_tokens = _probe(paths, ev.index, tables, cfg)
    probe_s = time.perf_counter() - t1
    contaminated, near, flagged = _decide_items(hits, ev, paths, cfg)
    per_set, checks = _per_set(ev, flagged, cfg)
    eidx = ev.index
    report = {
        "command": "audit leaks", "settings": asdict(cfg), "normalization": NORMALIZATION,
        "hashing": (f"{cfg.ngram}-word rolling hashes (two Karp-Rabin bases mod p = 2^31-1 over two "
                    f"polynomial word hashes), per-pair collision <= ((n-1+l)/p)^2 for words of <= l "
                    f"bytes: {((cfg.ngram - 1 + 64) / (2**31 - 1)) ** 2:.1e} at l = 64; short items as "
                    f"whole-item windows"),
        "rule": (f"contaminated if one training document holds a contiguous match of >= "
                 f"{cfg.span_fraction} of the item, or >= {cfg.coverage} of its non-boilerplate n-grams "
                 f"(boilerplate: in >= {cfg.boilerplate_docs} documents); items under {cfg.ngram} tokens "
                 f"need an exact whole-item match; items under {cfg.min_item_words} tokens are not "
                 f"decided"),
        "training": {"files": len(paths), "tokens": train_tokens},
        "eval_index": {"items": len(ev.items), "keys": eidx.num_keys, "lengths": eidx.lengths},
        "timing": {"index_s": round(t_index, 3), "probe_s": round(probe_s, 3),
                   "probe_tokens_per_s": round(train_tokens / max(probe_s, 1e-9))},
        "sets": per_set, "contaminated": contaminated,
        "near_misses": near,  # items with matches that the rule did not flag (first MAX_NEAR_MISSES)
        "checks": checks_json(checks),
        "ok": not failed(checks),
    }
    report["summary"] = summary_lines(f"olmax audit leaks: {cfg.stream.mix} ({train_tokens:,} training tokens, "
                                      f"{len(ev.items)} eval items, {eidx.num_keys:,} keys)", checks)
    return report


@dataclass
class _Evals:
    """The eval items of every set, in one list: their set, their word sequences and the n-gram index."""

    sets: list[tuple[str, list]]  # (set name, its items)
    set_of: np.ndarray  # int64 (items,): which set each item is from
    items: list  # EvalItem, all sets concatenated
    index: EvalIndex


def _index_evals(cfg: LeakConfig, tok_path: str, tables: WordTables) -> _Evals:
    from olmax.audit.evalsets import load_eval
    from olmax.data.tokenize import load_tokenizer
    from olmax.errors import OlmaxError

    sets = [load_eval(spec) for spec in cfg.evals]
    if not sets:
        raise OlmaxError("no eval set given; pass --eval NAME=PATH (or a bundled NAME) at least once")
    tok = load_tokenizer(tok_path)
    set_of, seqs, all_items = [], [], []
    for s, (_, items) in enumerate(sets):
        ids = tok.encode_batch([it.text for it in items], num_threads=max(1, cfg.threads))
        for it, t in zip(items, ids):
            seqs.append(tables.words(np.asarray(t, dtype=np.int64))[0])
            set_of.append(s)
            all_items.append(it)
    return _Evals(sets, np.asarray(set_of, dtype=np.int64), all_items, EvalIndex(seqs, cfg.ngram, cfg.min_item_words))


def _probe(paths: list[str], eidx: EvalIndex, tables: WordTables, cfg: LeakConfig) -> tuple[np.ndarray, int]:
    """Every (key, file, document) hit, each key's first `boilerplate_docs + 1` documents kept, and the
    number of training tokens probed."""
    # df is counted on the capped hits: min(df, cap_docs), which decides df >= boilerplate_docs.
    cap_docs = cfg.boilerplate_docs + 1
    kept, train_tokens = HitSet(cap_docs), 0
    threads = max(1, cfg.threads)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for file_hits, n_tokens in _in_order(pool, lambda fp: probe_file(
                fp[1], fp[0], eidx, tables, cap_docs=cap_docs, chunk_tokens=cfg.chunk_tokens),
                enumerate(paths), ahead=2 * threads):
            kept.add(file_hits)
            train_tokens += n_tokens
    return kept.result(), train_tokens


def _decide_items(hits: np.ndarray, ev: _Evals, paths: list[str], cfg: LeakConfig
                  ) -> tuple[list[dict], list[dict], np.ndarray]:
    """(contaminated items, near misses, flagged mask over all items) by the rule in `_decide`."""
    eidx, n_items = ev.index, len(ev.items)
    df = doc_freq(hits, eidx.num_keys)
    # Expand hits to (item, n-gram position) through the index's records.
    per = eidx.rec_ptr[hits["key"] + 1] - eidx.rec_ptr[hits["key"]]
    hit_of = np.repeat(np.arange(hits.size), per)
    rec = np.repeat(eidx.rec_ptr[hits["key"]], per) + (np.arange(hit_of.size) -
                                                         np.repeat(np.cumsum(per) - per, per))
    h_item, h_q = eidx.rec_item[rec], eidx.rec_q[rec]
    h_boiler = df[hits["key"][hit_of]] >= cfg.boilerplate_docs
    # boilerplate n-grams of every item (to count each item's non-boilerplate n-grams)
    key_of_rec = np.repeat(np.arange(eidx.num_keys), np.diff(eidx.rec_ptr))
    rec_boiler = df[key_of_rec] >= cfg.boilerplate_docs
    ngrams_of = np.bincount(eidx.rec_item, minlength=n_items)
    boiler_of = np.bincount(eidx.rec_item[rec_boiler], minlength=n_items)

    doc_cache: dict[int, object] = {}
    contaminated, near, flagged = [], [], np.zeros(n_items, dtype=bool)
    order = np.argsort(h_item, kind="stable")
    items_hit, first = np.unique(h_item[order], return_index=True)
    bounds = np.concatenate([first, [order.size]])
    for j, item in enumerate(items_hit.tolist()):
        sel = order[bounds[j]:bounds[j + 1]]
        k = int(eidx.lengths_of[item])
        found = _decide(hits[hit_of[sel]], h_q[sel], h_boiler[sel], k, cfg.ngram, int(ngrams_of[item]),
                        int(ngrams_of[item] - boiler_of[item]), cfg)
        if not found["contaminated"] and len(near) >= MAX_NEAR_MISSES:
            continue
        flagged[item] = found["contaminated"]
        f = found.pop("file")
        if f not in doc_cache:
            doc_cache[f] = documents(paths[f])
        docs = doc_cache[f]
        (contaminated if found["contaminated"] else near).append({
            "eval": ev.sets[int(ev.set_of[item])][0], "id": ev.items[item].report_id,
            "kind": "short" if k < cfg.ngram else "ngram", "item_words": k,
            **{kk: v for kk, v in found.items() if kk != "contaminated"},
            "file": paths[f], "doc": docs.id_of(found["doc"])})
    return contaminated, near, flagged


def _per_set(ev: _Evals, flagged: np.ndarray, cfg: LeakConfig) -> tuple[dict, list[Check]]:
    """Each set's counts (and clean subset, with `clean_dir`) and its gate check."""
    eidx = ev.index
    ngrams_of = np.bincount(eidx.rec_item, minlength=len(ev.items))
    too_short = eidx.lengths_of < cfg.min_item_words
    gate = set(cfg.gate) if cfg.gate is not None else {name for name, _ in ev.sets}
    per_set, checks = {}, []
    for s, (name, _items) in enumerate(ev.sets):
        sel = ev.set_of == s
        n_bad = int(flagged[sel].sum())
        per_set[name] = {"items": int(sel.sum()), "contaminated": n_bad,
                         "percent_contaminated": round(100.0 * n_bad / max(1, int(sel.sum())), 3),
                         "too_short_to_decide": int(too_short[sel].sum()),
                         "ngrams": int(ngrams_of[sel].sum()), "gated": name in gate}
        if cfg.clean_dir:
            from olmax.jsonio import write_jsonl

            clean = [ev.items[i] for i in np.flatnonzero(sel & ~flagged).tolist()]
            out = os.path.join(cfg.clean_dir, f"{name}.jsonl")
            write_jsonl(out, ({"id": it.report_id, "text": it.text} for it in clean))
            per_set[name]["clean_subset"] = out
        checks.append(Check(f"contaminated:{name}", n_bad == 0, n_bad, 0, gated=name in gate,
                            detail=f"{per_set[name]['percent_contaminated']}% of "
                            f"{per_set[name]['items']} items"))
    return per_set, checks
