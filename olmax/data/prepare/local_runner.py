"""`olmax data prepare`: raw documents → OLMo-format token shards, sidecars, manifest.json and mix.txt.

Contract:
- Deterministic: the bytes of every shard, sidecar and mix.txt depend only on the inputs and the settings,
  never on `workers` (documents are tokenized in parallel but written in input order; a shard closes at
  the first document boundary at or past the target size).
- Resumable: each finished shard is recorded in `DIR/.olmax-prepare.json` with the input position after
  its last document; a rerun of the same command skips finished shards and restarts the unfinished one
  from that position, giving the same bytes. Changed settings or inputs refuse to resume.
- Atomic: shards are written under `.tmp` names and renamed when complete; mix.txt and manifest.json are
  written last, so an error (a malformed line, say) leaves no mix.txt behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import xxhash

from olmax import storage
from olmax.assets import DOLMA2_HUB_REPO, DOLMA2_SHA256
from olmax.atomic import write_text
from olmax.data import readers
from olmax.data.index import TokenFields, data_fingerprint
from olmax.data.prepare.batches import Encoded, encode_docs, prefetch, read_batches, return_freed_arrays
from olmax.data.prepare.mixspec import plan_mix
from olmax.data.prepare.prepare_config import PrepareConfig, SourceSpec
from olmax.data.shards import PREPARE_JOURNAL, ShardInfo, ShardWriter, read_sidecar
from olmax.data.tokenize import Tokenizer
from olmax.errors import OlmaxError
from olmax.jsonio import write_json

STATE_FILE = PREPARE_JOURNAL
FORMAT = "olmax-prepare/1"


@dataclass
class SourceResult:
    label: str
    inputs: list[str]
    shards: list[ShardInfo] = field(default_factory=list)
    skipped_empty: int = 0
    bad_lines: int = 0
    bad_line_examples: list[str] = field(default_factory=list)
    duplicate_ids: dict = field(default_factory=dict)
    # the xxh3 hashes of the document ids of each shard written by this run (the first pass of
    # `duplicate_ids`); a shard finished by an earlier run is hashed from its sidecar
    id_hashes: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.shards)

    @property
    def docs(self) -> int:
        return sum(s.docs for s in self.shards)


def dedup_stages():
    """The --dedup stages' module, imported on first use: a run without --dedup never loads their numba
    kernels (a third of prepare's start-up)."""
    from olmax.data.prepare import dedup_stages as module

    return module


def tokenizer_id(tok: Tokenizer) -> str:
    """The folder shards live under and what `{TOKENIZER}` stands for in mix.txt (OLMo-core's convention:
    its mix parser requires `{TOKENIZER}` in every path and substitutes `allenai/dolma2-tokenizer`)."""

    return DOLMA2_HUB_REPO if tok.sha256 == DOLMA2_SHA256 else f"tokenizer-{tok.sha256[:12]}"


def check_label(label: str) -> None:
    if not label or not all(c.isalnum() or c in "-_." for c in label) or label.startswith("."):
        raise OlmaxError(
            f"source label {label!r} must be letters, digits, '-', '_' or '.' (it names a folder)"
        )


def settings_of(cfg: PrepareConfig, tok: Tokenizer, files: dict[str, list[str]]) -> dict:
    """Everything that determines the output bytes (not workers, progress or skip policy)."""

    def stat(f: str) -> list:
        return [f if storage.is_url(f) else os.path.abspath(f), *storage.size_and_version(f)]

    settings = {
        "format": FORMAT,
        "tokenizer_sha256": tok.sha256,
        "shard_bytes": cfg.shard_bytes,
        "text_field": cfg.text_field,
        "id_field": cfg.id_field,
        "arrayrecord": cfg.arrayrecord,
        "dolma_compat": cfg.dolma_compat,
        "sources": [
            {"label": s.label, "text_field": s.text_field, "inputs": [stat(f) for f in files[s.label]]}
            for s in cfg.sources
        ],
    }
    if cfg.dedup is not None:  # only then: a plain run's journal is today's
        settings["dedup"] = json.loads(json.dumps(asdict(cfg.dedup)))
    return settings


class Journal:
    """The resume record: per label, finished shards and where to continue reading."""

    def __init__(self, out: Path, settings: dict):
        self.path = out / STATE_FILE
        self.settings = settings
        self.labels: dict[str, dict] = {}

    def load_or_init(self, overwrite: bool) -> None:
        out = self.path.parent
        entries = [p for p in out.iterdir()] if out.exists() else []
        if self.path.exists() and not overwrite:
            saved = json.loads(self.path.read_text())
            if saved.get("settings") != self.settings:
                raise OlmaxError(
                    f"{out} holds a prepare run with other settings or changed inputs "
                    f"(see {self.path}); pass --overwrite to start over, or a new --out"
                )
            self.labels = saved["labels"]
            # a kill can leave temporaries behind (a shard being written, a journal being replaced):
            # they were never renamed into place, so nothing refers to them
            for stale in sorted(out.rglob("*.tmp")):
                stale.unlink()
            return
        if entries and not overwrite:
            raise OlmaxError(
                f"output folder {out} is not empty ({len(entries)} entries, e.g. {entries[0].name}); "
                "pass --overwrite to replace its contents, or choose a new --out"
            )
        if overwrite and out.exists():
            for p in entries:
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        out.mkdir(parents=True, exist_ok=True)
        self.save()

    def save(self) -> None:
        write_json(self.path, {"settings": self.settings, "labels": self.labels}, indent=1)


class _Progress:
    def __init__(self, enabled: bool, label: str):
        self.bar = None
        self.docs = 0
        self.t0 = time.monotonic()
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(
                desc=f"prepare {label}",
                unit="tok",
                unit_scale=True,
                file=sys.stderr,
                dynamic_ncols=True,
                mininterval=0.5,
            )

    def update(self, tokens: int, docs: int) -> None:
        self.docs += docs
        if self.bar is not None:
            self.bar.update(tokens)
            rate = self.docs / max(1e-9, time.monotonic() - self.t0)
            self.bar.set_postfix_str(f"{self.docs} docs, {rate:,.0f} docs/s", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class _SourceWriter:
    """Appends tokenized batches of one source to its shards, closing each at the first document boundary
    at or past the target size, and records every finished shard in the journal."""

    def __init__(
        self,
        cfg: PrepareConfig,
        label: str,
        out: Path,
        journal: Journal,
        result: SourceResult,
        stats: readers.ReadStats,
        tokenizer_id: str,
    ):
        self.tokenizer_id = tokenizer_id
        self.cfg, self.label, self.out, self.journal, self.result, self.stats = (
            cfg,
            label,
            out,
            journal,
            result,
            stats,
        )
        self.entry = journal.labels[label]
        self.limit = max(1, cfg.shard_bytes // 4)
        self.shard: ShardWriter | None = None
        self.records = None

    def _open(self) -> None:
        # the label is in the file name too: OLMo-core's fingerprint sees only basenames and sizes
        path = self.out / self.tokenizer_id / self.label / f"{self.label}-{len(self.result.shards):05d}.npy"
        self.shard = ShardWriter(path, self.out)
        if self.cfg.arrayrecord:
            from olmax.data.arrayrecord import DocRecordWriter

            self.records = DocRecordWriter(path.with_suffix(".arrayrecord"))

    def finish(self, pos: tuple[int, int], empty: int, bad_lines: int) -> None:
        """Close the open shard; `pos` = (file index, loc of its last document) is where a resume continues,
        `empty` and `bad_lines` what was skipped before that position (a resume reads what follows again)."""
        hashes = id_hashes(self.shard.ids())
        info = self.shard.close()
        self.result.id_hashes[info.path] = hashes
        if self.records is not None:
            self.records.close()
        self.shard = self.records = None
        self.result.shards.append(info)
        self.entry["shards"].append(shard_entry(info, pos, empty, bad_lines, self.stats.bad_line_examples))
        self.journal.save()

    def write(self, encoded: Encoded) -> None:
        tokens, lengths, kept, nbytes = encoded.tokens, encoded.lengths, encoded.kept, encoded.nbytes
        empty_base = self.result.skipped_empty
        ends = np.cumsum(lengths)
        i = 0
        while i < len(kept):
            if self.shard is None:
                self._open()
            base = int(ends[i - 1]) if i else 0
            # the first doc whose end reaches the shard's target closes the shard
            j = int(np.searchsorted(ends[i:], base + (self.limit - self.shard.tokens), side="left")) + i
            stop = min(j + 1, len(kept))
            chunk = tokens[base : int(ends[stop - 1])]
            docs = [d for _, d, _ in kept[i:stop]]
            self.shard.add_batch(chunk, lengths[i:stop], docs, sum(nbytes[i:stop]))
            if self.records is not None:
                self.records.add_docs(chunk, lengths[i:stop], docs)
            if self.shard.tokens >= self.limit:
                fi, last, bad = kept[stop - 1]
                self.finish((fi, last.loc), empty_base + encoded.empties_before(stop - 1), bad)
            i = stop
        self.result.skipped_empty = empty_base + len(encoded.empty_at)

    def abort(self) -> None:
        if self.shard is not None:
            self.shard.abort()
        if self.records is not None:
            self.records.abort()


@dataclass
class Target:
    """What every stage of writing one output folder needs: the settings, the folder, the tokenizer (and
    its tokenizer.json) and the resume journal."""

    cfg: PrepareConfig
    out: Path
    tok: Tokenizer
    tok_path: Path
    journal: Journal


def _prepare_source(
    target: Target, spec: SourceSpec, files: list[str], pool: ThreadPoolExecutor, edits: dict | None = None
) -> SourceResult:
    """`edits`: the dedup decisions of this source ((file, line) → spans to cut, or None: dropped)."""
    cfg, tok, out, journal = target.cfg, target.tok, target.out, target.journal
    entry = journal.labels.setdefault(spec.label, {"shards": [], "done": False})
    result = SourceResult(spec.label, files)
    result.shards = [ShardInfo(**rec["info"]) for rec in entry["shards"]]
    start = (0, 0)
    examples: list[str] = []
    if entry["shards"]:
        last = entry["shards"][-1]
        start, result.skipped_empty, result.bad_lines = tuple(last["next"]), last["empty"], last["bad_lines"]
        examples = list(last.get("bad_line_examples", []))
    if entry["done"]:
        result.bad_line_examples = entry.get("bad_line_examples", [])
        result.bad_lines, result.skipped_empty = entry.get("bad_lines", 0), entry.get("empty", 0)
        return result

    stats = readers.ReadStats(bad_lines=result.bad_lines, bad_line_examples=examples)
    sink = _SourceWriter(cfg, spec.label, out, journal, result, stats, tokenizer_id(tok))
    progress = _Progress(cfg.progress, spec.label)
    pending: list = []
    depth = max(1, cfg.workers) + 1  # tasks in flight: one per tokenizer thread, plus one being written

    def drain_one() -> None:
        encoded = pending.pop(0).result()
        progress.update(int(encoded.tokens.size), len(encoded.kept))
        sink.write(encoded)

    # without dedup edits (which rewrite texts as strings) the compiled reader's UTF-8 goes to the engine
    batches = read_batches(
        files,
        cfg,
        spec.text_field or cfg.text_field,
        start,
        stats,
        utf8=(tok.eos_text or "") if edits is None else None,
    )
    if edits is not None:
        batches = dedup_stages().apply_edits(batches, edits)
    try:
        for batch in prefetch(batches, depth=4):
            pending.append(pool.submit(encode_docs, tok, batch, cfg.dolma_compat))
            if len(pending) >= depth:
                drain_one()
        while pending:
            drain_one()
        if sink.shard is not None and sink.shard.tokens:
            sink.finish((len(files), 0), result.skipped_empty, stats.bad_lines)
    except BaseException:
        for f in pending:
            f.cancel()
        sink.abort()
        raise
    finally:
        progress.close()
    result.bad_lines = stats.bad_lines
    result.bad_line_examples = stats.bad_line_examples
    if not result.docs:  # dolma's known failure is a silently empty output: say so instead
        raise no_documents(spec.label, files, result.skipped_empty, stats.bad_lines)
    entry.update(
        done=True,
        bad_line_examples=stats.bad_line_examples,
        bad_lines=stats.bad_lines,
        empty=result.skipped_empty,
    )
    journal.save()
    return result


def shard_entry(info: ShardInfo, pos, empty: int, bad_lines: int, examples: list[str]) -> dict:
    """A finished shard's journal record: where a resume continues and what was skipped before it (the
    first bad-line examples up to there)."""
    return {
        "info": info.to_json(),
        "next": list(pos),
        "empty": empty,
        "bad_lines": bad_lines,
        "bad_line_examples": list(examples[: min(5, bad_lines)]),
    }


def no_documents(label: str, files: list[str], empty: int, bad_lines: int) -> OlmaxError:
    return OlmaxError(
        f"source {label!r}: no documents in {', '.join(files[:3])}{' ...' if len(files) > 3 else ''} "
        f"({empty} empty texts, {bad_lines} bad lines skipped); check the inputs, --text-field and "
        "the JSON lines"
    )


def _sidecar_ids(out: Path, result: SourceResult):
    """A function iterating over the document ids of a source's shards, in order."""

    def ids():
        for shard in result.shards:
            for row in read_sidecar(out / shard.path):
                yield row.id

    return ids


def _id_hash(doc_id: str) -> int:
    """The 64-bit xxh3 hash of a document id's UTF-8 bytes."""
    return xxhash.xxh3_64_intdigest(doc_id.encode("utf-8"))


def id_hashes(ids) -> np.ndarray:
    """`_id_hash` of each document id."""
    return np.fromiter(map(_id_hash, ids), dtype=np.uint64)


def _source_id_hashes(out: Path, result: SourceResult) -> np.ndarray:
    """The id hashes of every shard of a source, in order: kept from writing, or read from the sidecar of a
    shard an earlier run finished."""
    parts = [
        result.id_hashes[s.path]
        if s.path in result.id_hashes
        else id_hashes(row.id for row in read_sidecar(out / s.path))
        for s in result.shards
    ]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)


def duplicate_ids(ids, hashes: np.ndarray | None = None) -> dict:
    """Document ids that occur more than once within a source (reported, not fatal); `ids()` iterates
    over them. One pass keeps 8-byte hashes (bounded memory; `hashes`: that pass's result, already made);
    a second pass names the ids behind repeated hashes."""
    if hashes is None:
        hashes = id_hashes(ids())
    uniq, counts = np.unique(hashes, return_counts=True)
    suspect = set(uniq[counts > 1].tolist())
    seen: dict[str, int] = {}
    if suspect:
        for i in ids():
            if _id_hash(i) in suspect:
                seen[i] = seen.get(i, 0) + 1
    dups = sorted(i for i, n in seen.items() if n > 1)
    return {"count": len(dups), "examples": dups[:10]}


def discard_unstarted(out: Path, journal: Journal, created: bool) -> None:
    """After bad input, leave no output behind when no shard was finished: the journal and the empty
    folders go (a folder this run created goes too); finished shards stay, so a rerun resumes them."""
    if any(entry["shards"] for entry in journal.labels.values()):
        return
    journal.path.unlink(missing_ok=True)
    (out / dedup_stages().DECISIONS_FILE).unlink(missing_ok=True)
    for d in sorted((p for p in out.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()
    if created and not any(out.iterdir()):
        out.rmdir()


def prepare_into(
    cfg: PrepareConfig, out: Path, tok: Tokenizer, tok_path: Path, files: dict[str, list[str]]
) -> dict:
    """`prepare` once it holds the output folder's writer lock."""
    if readers.native_jsonl is None and any(not readers.is_table(f) for fs in files.values() for f in fs):
        print(
            "olmax: note: prepare's compiled JSON-lines reader is not built (no C compiler when olmax was "
            "installed): every line is read by simdjson, with the same output at more CPU; reinstall with "
            "a C compiler (gcc or clang) to build it",
            file=sys.stderr,
        )
    if cfg.dedup is not None:
        # with the dedup tables held, freed batch arrays must go back to the system for memory to stay
        # bounded; without them glibc reuses its own (resident memory flat over 1 GB of text, and no
        # page faults on a fresh mapping for every array: a tenth of prepare's CPU)
        return_freed_arrays()
    created = not out.exists()
    journal = Journal(out, settings_of(cfg, tok, files))
    journal.load_or_init(cfg.overwrite)
    target = Target(cfg, out, tok, tok_path, journal)
    for f in (out / "mix.txt", out / "manifest.json"):
        f.unlink(missing_ok=True)  # rewritten at the end of this run; removed first so an error leaves none
    t0, cpu0 = time.monotonic(), time.process_time()
    results = []
    decisions = None
    try:
        if cfg.dedup is not None:
            decisions = dedup_stages().load_or_plan(cfg, out, files)
        with ThreadPoolExecutor(max_workers=max(1, cfg.workers), thread_name_prefix="olmax-tok") as pool:
            for si, spec in enumerate(cfg.sources):
                edits = dedup_stages().edits_of(decisions, si) if decisions is not None else None
                results.append(_prepare_source(target, spec, files[spec.label], pool, edits))
    except OlmaxError:
        discard_unstarted(out, journal, created)
        raise
    for r in results:
        r.duplicate_ids = duplicate_ids(_sidecar_ids(out, r), _source_id_hashes(out, r))
    return finish_prepare(target, results, t0, decisions, cpu0)


def finish_prepare(
    target: Target,
    results: list[SourceResult],
    t0: float,
    decisions: dict | None = None,
    cpu0: float | None = None,
) -> dict:
    """After every source's shards are written (by either runner): warn about duplicate ids, plan the mix,
    write mix.txt and manifest.json (last: they mark the output complete). `t0` (time.monotonic) and `cpu0`
    (time.process_time, when this process did all the work) are when the run began, for its summary line."""
    cfg, out, tok, tok_path, journal = target.cfg, target.out, target.tok, target.tok_path, target.journal

    for r in results:
        if r.duplicate_ids["count"]:
            print(
                f"olmax: warning: source {r.label}: {r.duplicate_ids['count']} document ids occur more than "
                f"once (e.g. {r.duplicate_ids['examples'][:3]})",
                file=sys.stderr,
            )
    mix_lines, plan = plan_mix(cfg, results, out, journal)
    mix_text = (
        "# olmax data prepare: label,path relative to this folder, {TOKENIZER} = "
        + tokenizer_id(tok)
        + "\n# (OLMo-core's mix format); a path listed more than once is a planned repeat\n"
    )
    tid = tokenizer_id(tok)
    mix_text += "".join(f"{label},{{TOKENIZER}}{path[len(tid) :]}\n" for label, path in mix_lines)
    manifest = _manifest(cfg, tok, tok_path, results, plan, mix_lines, out)
    if decisions is not None:
        manifest["dedup"] = dedup_stages().manifest_entry(decisions)
        dedup_stages().write_removed(out, decisions)
    print(f"olmax: tokenizer engine {tok.engine_reason}", file=sys.stderr)
    tokens = sum(r.tokens for r in results)
    cost = ""
    if cpu0 is not None:  # every thread of this process: reading, tokenizing, writing, hashing
        cpu = max(time.process_time() - cpu0, 1e-9)
        cost = f", {cpu:.2f} CPU-s ({tokens / cpu / 1e6:.1f} M tokens per CPU-second)"
    print(
        f"olmax: prepared {tokens:,} tokens in {sum(r.docs for r in results):,} docs "
        f"in {time.monotonic() - t0:.1f}s{cost} → {storage.join(cfg.out, 'mix.txt')}",
        file=sys.stderr,
    )
    write_text(out / "mix.txt", mix_text)
    write_json(out / "manifest.json", manifest)
    return manifest


def _manifest(
    cfg, tok: Tokenizer, tok_path: Path, results: list[SourceResult], plan: dict, mix_lines, out: Path
) -> dict:
    size_of = {s.path: s.tokens * 4 for r in results for s in r.shards}
    fingerprint = data_fingerprint(
        [str(out / p) for _, p in mix_lines],
        sizes=[size_of[p] for _, p in mix_lines],
        fields=TokenFields(
            vocab_size=tok.vocab_size, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
        ),
    )
    return {
        "format": FORMAT,
        "tokenizer": {
            "name": cfg.tokenizer,
            "id": tokenizer_id(tok),
            "file": os.path.basename(tok_path),
            "sha256": tok.sha256,
            "engine": tok.engine,
            "engine_reason": tok.engine_reason,
            "vocab_size": tok.vocab_size,
            "eos_token_id": tok.eos_token_id,
            "pad_token_id": tok.pad_token_id,
        },
        "dtype": "uint32",
        "shard_bytes": cfg.shard_bytes,
        "sources": {
            r.label: {
                "inputs": r.inputs,
                "tokens": r.tokens,
                "docs": r.docs,
                "utf8_bytes": sum(s.utf8_bytes for s in r.shards),
                "shards": [{k: v for k, v in s.to_json().items() if k != "utf8_bytes"} for s in r.shards],
                "skipped": {
                    "empty_docs": r.skipped_empty,
                    "bad_lines": r.bad_lines,
                    "bad_line_examples": r.bad_line_examples,
                },
                "duplicate_ids": r.duplicate_ids,
            }
            for r in results
        },
        "mix": {"file": "mix.txt", "lines": len(mix_lines), "plan": plan},
        "fingerprint": fingerprint,
        "settings_sha256": hashlib.sha256(
            json.dumps(_hashed_settings(cfg), sort_keys=True).encode()
        ).hexdigest(),
    }


def _hashed_settings(cfg: PrepareConfig) -> dict:
    # the engine does not change a byte (every engine gives `tokenizers`' ids): hashed as the default
    d = asdict(cfg) | {"workers": None, "progress": None, "overwrite": None, "out": None, "engine": "auto"}
    if d["dedup"] is None:
        del d["dedup"]  # a run without --dedup hashes as it did before the option existed
    return d
