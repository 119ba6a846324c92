"""`olmax audit leaks`: which held-out eval items does the training data contain?

Method. Eval items are tokenized with the mix's tokenizer and both sides are turned into the same
normalized *words* (normalize.py: case, spacing, punctuation and BPE splits do not matter). The eval
side is indexed exactly: every n-word window (default n = 13) of every item, and for items shorter
than n words (but at least --min-item-words) the whole item, as rolling hashes (hashing.py) keyed by
length, in one sorted array behind a byte-array prefilter. The training side is probed at every
word position: per file (the map; files in parallel threads) words are hashed in 1M-token chunks at
each probed length and looked up; a hit keeps (key, file, document, word index, token offset). The
reduce counts each key's document frequency (df) and keeps hit details for its first
boilerplate_docs + 1 documents only (bounded memory: at most that many documents per eval key).

Decision (per item, on the single best training document):
- short item (fewer than n words): an exact whole-item match anywhere;
- otherwise contaminated when one contiguous matched span covers >= span_fraction of the item, or
  when one document holds >= coverage of the item's non-boilerplate n-grams (an n-gram found in >=
  boilerplate_docs documents is boilerplate: alone it never flags an item, so an item that only
  shares a common sentence with training documents stays clean);
- items shorter than min_item_words are too short to decide (reported, never flagged).
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np
import xxhash

from olmax.audit.hashing import PrefixHasher
from olmax.audit.normalize import NORMALIZATION, WordTables, word_tables
from olmax.audit.report import Check, checks_json, failed, summary_lines
from olmax.audit.spans import documents, require_local
from olmax.data.shards import read_tokens

MAX_NEAR_MISSES = 1000
HIT_REC = np.dtype([("key", "<i8"), ("file", "<i4"), ("doc", "<i8"), ("cpos", "<i8"), ("pos", "<i8")])


@dataclass(frozen=True)
class LeakConfig:
    mix: str
    evals: tuple[str, ...]
    base_dir: str | None = None
    mix_tokenizer: str | None = None
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


def length_salt(k: int) -> np.uint64:
    """Keys of different window lengths live in one table: xor each length's hashes with its own salt."""
    return np.uint64(xxhash.xxh3_64_intdigest(f"olmax-window-{k}".encode()))


class EvalIndex:
    """Exact index of the eval side: sorted keys → (set, item, n-gram position), plus a prefilter."""

    def __init__(self, seqs: list[list[np.ndarray]], n: int, min_item_words: int):
        self.n = n
        self.lengths_of = np.asarray([s[0].size for s in seqs], dtype=np.int64)
        keys, items, qs, first_half = [], [], [], []
        for i, s in enumerate(seqs):
            k = s[0].size
            if k < min_item_words:
                continue
            w = n if k >= n else k
            h = PrefixHasher(s).windows(w)
            if w == n:
                first_half.append(h >> np.uint64(32))
            keys.append(h ^ length_salt(w))
            items.append(np.full(h.size, i, dtype=np.int64))
            qs.append(np.arange(h.size, dtype=np.int64))
        key = np.concatenate(keys) if keys else np.zeros(0, np.uint64)
        order = np.argsort(key, kind="stable")
        key = key[order]
        self.rec_item = (np.concatenate(items) if items else np.zeros(0, np.int64))[order]
        self.rec_q = (np.concatenate(qs) if qs else np.zeros(0, np.int64))[order]
        self.ukeys, first = np.unique(key, return_index=True)
        self.rec_ptr = np.concatenate([first, [key.size]]).astype(np.int64)
        self.lengths = sorted({n if k >= n else int(k) for k in self.lengths_of.tolist()
                               if k >= min_item_words})
        self.short_lengths = [k for k in self.lengths if k < n]
        # Short items are found through an anchor: their first `anchor` words, probed at every
        # position; only anchor hits are hashed at the items' full lengths (exact lookup after).
        self.anchor = min(self.short_lengths, default=0)
        shorts = [s for s in seqs if min_item_words <= s[0].size < n] if self.anchor else []
        anchors = np.asarray([PrefixHasher(s).windows(self.anchor)[0] for s in shorts], dtype=np.uint64)
        bit = np.asarray([1 << (s[0].size - self.anchor) for s in shorts], dtype=np.int64)
        self.anchors, inv = np.unique(anchors, return_inverse=True)
        # which item lengths each anchor starts (bit j: length anchor + j), so a hit is only
        # hashed at the lengths of the items it could begin
        self.anchor_lengths = np.zeros(self.anchors.size, dtype=np.int64)
        np.bitwise_or.at(self.anchor_lengths, inv.reshape(-1), bit)
        # Prefilters: one byte per slot, indexed by the low bits of a window's base-1 half (the
        # training side computes only that half everywhere, the full hash only where a slot is set).
        # About 8 slots per key: ~12% of positions pass to the exact lookup, which is cheap with
        # sorted queries, while a smaller table keeps the per-position gather in cache.
        def table(values: np.ndarray) -> tuple[np.ndarray, np.uint32]:
            bits = int(min(30, max(12, np.ceil(np.log2(max(1, values.size) * 8)))))
            t = np.zeros(1 << bits, dtype=np.uint8)
            t[(values & np.uint64((1 << bits) - 1)).astype(np.intp)] = 1
            return t, np.uint32((1 << bits) - 1)

        halves = np.concatenate(first_half) if first_half else np.zeros(0, np.uint64)
        self.filter, self.mask = table(halves)
        self.anchor_filter, self.anchor_mask = table(self.anchors >> np.uint64(32))

    @staticmethod
    def _slot(h1: np.ndarray, mask: np.uint32) -> np.ndarray:
        """Prefilter slot of each base-1 half (values < 2^31: the low 32-bit word holds them)."""
        low = h1.view(np.uint32)[0::2] if sys.byteorder == "little" else h1.astype(np.uint32)
        return np.bitwise_and(low, mask)

    @property
    def num_keys(self) -> int:
        return int(self.ukeys.size)

    def probe(self, c: list[np.ndarray], first_new: int) -> tuple[np.ndarray, np.ndarray]:
        """(key index, window start) of every window of the word values `c` (one array per base)
        that ends at or after index first_new."""
        hasher = PrefixHasher(c)
        keys, starts = [], []

        def lookup(h: np.ndarray, at: np.ndarray) -> None:
            order = np.argsort(h)  # sorted queries: the binary searches walk the table in order
            h, at = h[order], at[order]
            idx = np.minimum(np.searchsorted(self.ukeys, h), self.ukeys.size - 1)
            ok = self.ukeys[idx] == h
            keys.append(idx[ok])
            starts.append(at[ok])

        lo = max(0, first_new - self.n + 1)
        h1 = hasher.base_windows(self.n)[lo:]
        if h1.size:
            cand = np.flatnonzero(self.filter[self._slot(h1, self.mask)]) + lo
            lookup(hasher.windows_at(self.n, cand) ^ length_salt(self.n), cand)
        if self.anchor:
            lo = max(0, first_new - max(self.short_lengths) + 1)
            h1 = hasher.base_windows(self.anchor)[lo:]
            cand = np.flatnonzero(self.anchor_filter[self._slot(h1, self.anchor_mask)]) + lo
            hc = hasher.windows_at(self.anchor, cand)
            order = np.argsort(hc)
            hc, cand = hc[order], cand[order]
            idx = np.minimum(np.searchsorted(self.anchors, hc), max(0, self.anchors.size - 1))
            ok = self.anchors[idx] == hc if self.anchors.size else np.zeros(hc.size, dtype=bool)
            at, bits = cand[ok], self.anchor_lengths[idx[ok]]
            for k in self.short_lengths:
                # windows of a length some item with this anchor has, that fit and end in the new
                # part (older ones were probed with the last chunk)
                ak = at[((bits >> (k - self.anchor)) & 1).astype(bool) & (at + k <= c[0].size) &
                        (at + k > first_new)]
                if ak.size:
                    lookup(hasher.windows_at(k, ak) ^ length_salt(k), ak)
        if not keys:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(keys).astype(np.int64), np.concatenate(starts).astype(np.int64)


def probe_file(path: str, file_index: int, index: EvalIndex, tables: WordTables, *, cap_docs: int,
               chunk_tokens: int = 1 << 20) -> tuple[np.ndarray, np.ndarray, int]:
    """Map: the hits of one training file (at most cap_docs documents per key), df per key, tokens.

    Hit positions: `cpos` counts words from the file's start, `pos` is the token offset of the
    matched span's first word."""
    tokens = read_tokens(path)
    docs = documents(path, tokens)
    carry = max(index.lengths, default=1) - 1
    prev = [np.zeros(0, np.uint64), np.zeros(0, np.uint64)]
    prev_pos = np.zeros(0, np.int64)
    cbase = 0  # word index of prev[0][0]
    out = []
    a, total = 0, len(tokens)
    while a < total:
        b = min(total, a + chunk_tokens)
        vals, first_tok, consumed = tables.words(tokens[a:b], final=b == total)
        if consumed == 0:  # one word longer than a chunk: cut it here
            vals, first_tok, consumed = tables.words(tokens[a:b], final=True)
        cc = [np.concatenate([p, v]) for p, v in zip(prev, vals)]
        pos = np.concatenate([prev_pos, first_tok + a])
        key, start = index.probe(cc, prev[0].size)
        if key.size:
            rec = np.empty(key.size, dtype=HIT_REC)
            rec["key"], rec["file"], rec["cpos"], rec["pos"] = key, file_index, start + cbase, pos[start]
            rec["doc"] = docs.doc_at(pos[start])
            out.append(rec)
        size = cc[0].size
        tail = min(carry, size)
        cbase += size - tail
        prev, prev_pos = [c[size - tail:] for c in cc], pos[size - tail:]
        a += consumed
    hits = np.concatenate(out) if out else np.zeros(0, HIT_REC)
    hits, df = cap_hits(hits, index.num_keys, cap_docs)
    return hits, df, len(tokens)


def cap_hits(hits: np.ndarray, num_keys: int, cap_docs: int) -> tuple[np.ndarray, np.ndarray]:
    """(hits of each key's first cap_docs documents in (file, doc) order, distinct documents per key)."""
    if hits.size == 0:
        return hits, np.zeros(num_keys, np.int64)
    hits = hits[np.lexsort((hits["cpos"], hits["doc"], hits["file"], hits["key"]))]
    k, f, d = hits["key"], hits["file"], hits["doc"]
    new_doc = np.ones(hits.size, dtype=bool)
    new_doc[1:] = (k[1:] != k[:-1]) | (f[1:] != f[:-1]) | (d[1:] != d[:-1])
    new_key = np.ones(hits.size, dtype=bool)
    new_key[1:] = k[1:] != k[:-1]
    doc_no = np.cumsum(new_doc)
    key_first_doc = np.maximum.accumulate(np.where(new_key, doc_no, 0))
    rank = doc_no - key_first_doc  # 0 for the key's first document
    df = np.bincount(k[new_doc], minlength=num_keys).astype(np.int64)
    return hits[rank < cap_docs], df


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
    from olmax.assets import tokenizer_path
    from olmax.audit.evalsets import load_eval
    from olmax.data.index import open_index
    from olmax.data.tokenize import load_tokenizer

    t0 = time.perf_counter()
    index = open_index(cfg.mix, 1, base_dir=cfg.base_dir, tokenizer=cfg.mix_tokenizer,
                       allow_short_files=True)
    tok_path = str(tokenizer_path(cfg.tokenizer, quiet=True))
    tok = load_tokenizer(tok_path)
    tables = word_tables(tok_path)
    sets = [load_eval(spec) for spec in cfg.evals]
    if not sets:
        from olmax.errors import OlmaxError

        raise OlmaxError("no eval set given; pass --eval NAME=PATH (or a bundled NAME) at least once")
    set_of, seqs, all_items = [], [], []
    for s, (_, items) in enumerate(sets):
        ids = tok.encode_batch([it.text for it in items], num_threads=max(1, cfg.threads))
        for it, t in zip(items, ids):
            seqs.append(tables.words(np.asarray(t, dtype=np.int64))[0])
            set_of.append(s)
            all_items.append(it)
    set_of = np.asarray(set_of, dtype=np.int64)
    eidx = EvalIndex(seqs, cfg.ngram, cfg.min_item_words)
    t_index = time.perf_counter() - t0

    # Map over distinct training files (a path listed twice is probed once), reduce in file order.
    paths = list(dict.fromkeys(index.paths))
    require_local(paths, "the leak probe")
    t1 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, cfg.threads)) as pool:
        results = list(pool.map(lambda fp: probe_file(fp[1], fp[0], eidx, tables,
                                                      cap_docs=cfg.boilerplate_docs + 1,
                                                      chunk_tokens=cfg.chunk_tokens),
                                enumerate(paths)))
    probe_s = time.perf_counter() - t1
    train_tokens = sum(r[2] for r in results)
    df = np.sum([r[1] for r in results], axis=0) if results else np.zeros(eidx.num_keys, np.int64)
    hits, _ = cap_hits(np.concatenate([r[0] for r in results]), eidx.num_keys, cfg.boilerplate_docs + 1)

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
    ngrams_of = np.bincount(eidx.rec_item, minlength=len(seqs))
    boiler_of = np.bincount(eidx.rec_item[rec_boiler], minlength=len(seqs))

    doc_cache: dict[int, object] = {}
    contaminated, near, flagged = [], [], np.zeros(len(seqs), dtype=bool)
    order = np.argsort(h_item, kind="stable")
    items_hit, first = np.unique(h_item[order], return_index=True)
    bounds = np.concatenate([first, [order.size]])
    for j, item in enumerate(items_hit.tolist()):
        sel = order[bounds[j]:bounds[j + 1]]
        k = int(eidx.lengths_of[item])
        ev = _decide(hits[hit_of[sel]], h_q[sel], h_boiler[sel], k, cfg.ngram, int(ngrams_of[item]),
                     int(ngrams_of[item] - boiler_of[item]), cfg)
        if not ev["contaminated"] and len(near) >= MAX_NEAR_MISSES:
            continue
        flagged[item] = ev["contaminated"]
        f = ev.pop("file")
        if f not in doc_cache:
            doc_cache[f] = documents(paths[f])
        docs = doc_cache[f]
        s = int(set_of[item])
        (contaminated if ev["contaminated"] else near).append({
            "eval": sets[s][0], "id": all_items[item].report_id,
            "kind": "short" if k < cfg.ngram else "ngram", "item_words": k,
            **{kk: v for kk, v in ev.items() if kk != "contaminated"},
            "file": paths[f], "doc": docs.id_of(ev["doc"])})
    too_short = eidx.lengths_of < cfg.min_item_words
    gate = set(cfg.gate) if cfg.gate is not None else {name for name, _ in sets}
    per_set, checks = {}, []
    for s, (name, _items) in enumerate(sets):
        sel = set_of == s
        n_bad = int(flagged[sel].sum())
        per_set[name] = {"items": int(sel.sum()), "contaminated": n_bad,
                         "percent_contaminated": round(100.0 * n_bad / max(1, int(sel.sum())), 3),
                         "too_short_to_decide": int(too_short[sel].sum()),
                         "ngrams": int(ngrams_of[sel].sum()), "gated": name in gate}
        if cfg.clean_dir:
            from olmax.audit.report import write_text_atomic

            clean = [all_items[i] for i in np.flatnonzero(sel & ~flagged).tolist()]
            out = os.path.join(cfg.clean_dir, f"{name}.jsonl")
            write_text_atomic(out, "".join(json.dumps({"id": it.report_id, "text": it.text}) + "\n"
                                           for it in clean))
            per_set[name]["clean_subset"] = out
        checks.append(Check(f"contaminated:{name}", n_bad == 0, n_bad, 0, gated=name in gate,
                            detail=f"{per_set[name]['percent_contaminated']}% of "
                            f"{per_set[name]['items']} items"))
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
        "eval_index": {"items": len(seqs), "keys": eidx.num_keys, "lengths": eidx.lengths},
        "timing": {"index_s": round(t_index, 3), "probe_s": round(probe_s, 3),
                   "probe_tokens_per_s": round(train_tokens / max(probe_s, 1e-9))},
        "sets": per_set, "contaminated": contaminated,
        "near_misses": near,  # items with matches that the rule did not flag (first MAX_NEAR_MISSES)
        "checks": checks_json(checks),
        "ok": not failed(checks),
    }
    report["summary"] = summary_lines(f"olmax audit leaks: {cfg.mix} ({train_tokens:,} training tokens, "
                                      f"{len(seqs)} eval items, {eidx.num_keys:,} keys)", checks)
    return report
