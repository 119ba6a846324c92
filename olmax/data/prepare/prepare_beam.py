"""`olmax data prepare --runner beam`: the same shards, sidecars, mix.txt and manifest.json as the local runner,
byte for byte, from an Apache Beam pipeline (DirectRunner here, Dataflow/Flink/Spark at scale).

The plan (two pipelines, the plan on the driver between them: a fan-in to one element inside a pipeline
is not reliable on every runner, docs/cluster.md):
1. tokenize: one task per input file (in parallel, any order): its documents tokenized with the local
   runner's `encode_docs` into a temporary `tokens.bin` (each document + EOS) and `docs.npz` + `docs.json`
   (per-document token counts, UTF-8 bytes, ids, lines: olmax.wire, never a pickle) under `OUT/.olmax-beam/files/`; a summary comes back.
2. plan (the driver, once every file's summary came back, each once): `plan_shards` cuts each source's documents, in input order, into
   shards with the local runner's rule (a shard closes at the first document boundary at or past the target
   size): shard k is a list of (file, first doc, end doc) segments. It depends only on the documents'
   token counts, never on which worker tokenized what, so the shard layout is the local runner's.
3. write: one task per shard: its segments copied from the temporaries through the local runner's
   `ShardWriter` (and `DocRecordWriter` for --format arrayrecord), renamed (or uploaded) when complete.
The driver then writes what the local runner writes last (`finish_prepare`: duplicate ids, the mix plan,
mix.txt, manifest.json) and removes the temporaries. A bad input line is reported as the local runner
reports it (one line naming the file and line); no shard is written when any file fails.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from olmax import beam, storage, wire
from olmax.data import readers
from olmax.data.prepare.batches import encode_docs, read_batches
from olmax.data.prepare.dedup_stages import apply_edits, edits_of, load_or_plan
from olmax.data.prepare.dedup_stages_beam import planner
from olmax.data.prepare.local_runner import (
    Journal,
    SourceResult,
    Target,
    discard_unstarted,
    duplicate_ids,
    finish_prepare,
    no_documents,
    prepare_into,
    settings_of,
    shard_entry,
    tokenizer_id,
)
from olmax.data.prepare.mixspec import planned_tokens
from olmax.data.prepare.prepare_config import PrepareConfig
from olmax.data.shards import ShardInfo, ShardWriter, sidecar_path
from olmax.data.tokenfile import read_tokens, write_tokens
from olmax.data.tokenize import Tokenizer
from olmax.errors import OlmaxError

TMP_DIR = ".olmax-beam"
DOCS_FILES = (
    "docs.npz",
    "docs.json",
)  # a tokenized file's per-document arrays and the rest (olmax.wire.stage)


@dataclass(frozen=True)
class FileTask:
    source: int  # index of the source in cfg.sources
    file: int  # index of the file in its source's sorted input list
    path: str
    text_field: str


@dataclass(frozen=True)
class ShardJob:
    source: int
    label: str
    shard: int
    segments: tuple[tuple[int, int, int], ...]  # (file, first doc, end doc)
    last: bool  # the source's last shard


def _file_dir(tmp: str, task_source: int, task_file: int) -> str:
    return storage.join(tmp, "files", f"{task_source:04d}", f"{task_file:08d}")


def tokenize_file(
    cfg: PrepareConfig, task: FileTask, tok: Tokenizer, tmp: str, edits: dict | None = None
) -> dict:
    """Map: one input file → its temporaries (tokens.bin, docs.npz, docs.json) and a summary. `edits`: the
    dedup decisions of its source ((file, line) → spans to cut, or None: dropped), as the local runner
    applies them."""
    stats = readers.ReadStats()
    parts, lengths, nbytes, ids, locs, empty_before, bad_before = [], [], [], [], [], [], []
    empties = 0
    batches = read_batches(
        [task.path],
        cfg,
        task.text_field,
        (0, 0),
        stats,
        first_file=task.file,
        utf8=(tok.eos_text or "") if edits is None else None,
    )
    if edits is not None:
        batches = apply_edits(batches, edits)
    for batch in batches:
        enc = encode_docs(tok, batch, cfg.dolma_compat)
        parts.append(enc.tokens)
        lengths.extend(enc.lengths)
        nbytes.extend(enc.nbytes)
        ids.extend(d.id for _, d, _ in enc.kept)
        locs.extend(d.loc for _, d, _ in enc.kept)
        bad_before.extend(bad for _, _, bad in enc.kept)
        empty_before.extend(empties + enc.empties_before(j) for j in range(len(enc.kept)))
        empties += len(enc.empty_at)
    tokens = np.concatenate(parts) if parts else np.zeros(0, np.uint32)
    # per document: what this file skipped before it (the journal's counts at a shard's last document)
    meta = {
        "lengths": np.asarray(lengths, np.int64),
        "nbytes": np.asarray(nbytes, np.int64),
        "ids": ids,
        "locs": np.asarray(locs, np.int64),
        "src": task.path,
        "empty_before": np.asarray(empty_before, np.int64),
        "bad_before": np.asarray(bad_before, np.int64),
    }
    dest = _file_dir(tmp, task.source, task.file)
    local_dest = storage.local_path(dest)
    scratch = local_dest or tempfile.mkdtemp(prefix="olmax-beam-")
    try:
        os.makedirs(scratch, exist_ok=True)
        write_tokens(os.path.join(scratch, "tokens.bin"), tokens)
        wire.stage(meta, os.path.join(scratch, "docs"))
        if local_dest is None:
            for name in ("tokens.bin", *DOCS_FILES):
                storage.upload(os.path.join(scratch, name), storage.join(dest, name))
    finally:
        if local_dest is None:
            shutil.rmtree(scratch, ignore_errors=True)
    return {
        "source": task.source,
        "file": task.file,
        "docs": len(lengths),
        "tokens": int(tokens.size),
        "empty": empties,
        "bad_lines": stats.bad_lines,
        "bad_line_examples": stats.bad_line_examples,
    }


def plan_shards(lengths: list[np.ndarray], limit: int) -> list[list[tuple[int, int, int]]]:
    """A source's shards as (file, first doc, end doc) segments, from each file's document token counts in
    input order: a shard closes at the first document whose end reaches `limit` tokens (the local runner's
    `ShardWriter` rule), the last one holds what is left."""
    shards, current, filled = [], [], 0
    for fi, lens in enumerate(lengths):
        ends = np.cumsum(lens)
        i = 0
        while i < lens.size:
            base = int(ends[i - 1]) if i else 0
            j = int(np.searchsorted(ends[i:], base + (limit - filled), side="left")) + i
            stop = min(j + 1, int(lens.size))
            current.append((fi, i, stop))
            filled += int(ends[stop - 1]) - base
            if filled >= limit:
                shards.append(current)
                current, filled = [], 0
            i = stop
    if current and filled:
        shards.append(current)
    return shards


def _load_file(
    tmp: str, source: int, file: int, scratch: str, tokens: bool = True
) -> tuple[np.ndarray | None, dict]:
    """(tokens, document metadata) of one tokenized file under `tmp` (copied into `scratch` when `tmp` is
    a URL); the metadata alone with tokens=False."""
    d = _file_dir(tmp, source, file)
    local = storage.local_path(d)
    if local is None:
        local = os.path.join(scratch, f"{source}-{file}")
        os.makedirs(local, exist_ok=True)
        for name in ("tokens.bin", *DOCS_FILES) if tokens else DOCS_FILES:
            Path(local, name).write_bytes(storage.read_bytes(storage.join(d, name)))
    meta = wire.load_staged(os.path.join(local, "docs"))
    return (read_tokens(os.path.join(local, "tokens.bin")) if tokens else None), meta


def write_shard(cfg: PrepareConfig, job: ShardJob, tid: str, tmp: str, out: str) -> tuple:
    """Map: one planned shard → its .npy, .csv.gz sidecar (and .arrayrecord) under `out`; returns
    (source, shard, ShardInfo as JSON, its last document as (file, loc, empties and bad lines of that file
    before it), or None for a source's last shard that stays under the target size: what the local runner
    journals, which closes such a shard at the end of the input instead)."""
    rel = Path(tid) / job.label / f"{job.label}-{job.shard:05d}.npy"
    local_out = storage.local_path(out)
    scratch = tempfile.mkdtemp(prefix="olmax-beam-shard-")
    root = Path(local_out) if local_out is not None else Path(scratch, "out")
    writer = ShardWriter(root / rel, root)
    records = None
    if cfg.arrayrecord:
        from olmax.data.arrayrecord import DocRecordWriter

        records = DocRecordWriter((root / rel).with_suffix(".arrayrecord"))
    try:
        for fi, a, b in job.segments:
            tokens, meta = _load_file(tmp, job.source, fi, scratch)
            lens = meta["lengths"]
            offsets = np.concatenate([[0], np.cumsum(lens)])
            docs = [readers.Doc(meta["ids"][x], "", meta["src"], int(meta["locs"][x])) for x in range(a, b)]
            chunk = np.asarray(tokens[int(offsets[a]) : int(offsets[b])])
            writer.add_batch(chunk, lens[a:b].tolist(), docs, int(meta["nbytes"][a:b].sum()))
            if records is not None:
                records.add_docs(chunk, lens[a:b].tolist(), docs)
        info = writer.close()
        if records is not None:
            records.close()
        if local_out is None:
            for f in sorted(p for p in (root / rel).parent.iterdir() if p.is_file()):
                storage.upload(str(f), storage.join(out, str(f.relative_to(root))))
        fi, _, b = job.segments[-1]
        last = None
        if not job.last or info.tokens >= max(1, cfg.shard_bytes // 4):
            last = (
                fi,
                int(meta["locs"][b - 1]),
                int(meta["empty_before"][b - 1]),
                int(meta["bad_before"][b - 1]),
            )
        return job.source, job.shard, info.to_json(), last
    except BaseException:
        writer.abort()
        if records is not None:
            records.abort()
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class _Tokenize:
    """DoFn state: the tokenizer is loaded once per worker from its bytes (workers may not see the
    driver's files)."""

    def __init__(self, cfg: PrepareConfig, tok_json: bytes, tmp: str, edits: dict | None = None):
        self.cfg, self.tok_json, self.tmp = cfg, tok_json, tmp
        self.edits = edits  # source → its dedup edits (dedup_stages.edits_of), or None without --dedup
        self.tok = None

    def __call__(self, task: FileTask):
        if self.tok is None:
            from olmax.data.tokenize import load_tokenizer

            d = tempfile.mkdtemp(prefix="olmax-tok-")
            Path(d, "tokenizer.json").write_bytes(self.tok_json)
            self.tok = load_tokenizer(os.path.join(d, "tokenizer.json"), self.cfg.engine)
        edits = None if self.edits is None else self.edits[task.source]
        return tokenize_file(self.cfg, task, self.tok, self.tmp, edits)


def _plan(cfg: PrepareConfig, tmp: str, n_files: list[int]) -> list[ShardJob]:
    """Every shard job, on the driver, once every file is tokenized: each source's documents cut into
    shards from the files' document lengths (their metadata only)."""
    limit = max(1, cfg.shard_bytes // 4)
    scratch = tempfile.mkdtemp(prefix="olmax-beam-plan-")
    jobs = []
    try:
        for si, spec in enumerate(cfg.sources):
            lengths = [
                _load_file(tmp, si, fi, scratch, tokens=False)[1]["lengths"] for fi in range(n_files[si])
            ]
            shards = plan_shards(lengths, limit)
            jobs += [
                ShardJob(si, spec.label, k, tuple(seg), k == len(shards) - 1) for k, seg in enumerate(shards)
            ]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return jobs


def prepare_beam(
    cfg: PrepareConfig,
    out: Path,
    remote: str | None,
    tok: Tokenizer,
    tok_path: Path,
    files: dict[str, list[str]],
    options_text: str,
) -> dict:
    """Prepare with Apache Beam. `out` is the local folder the driver writes (the output itself, or the
    staging folder of a `remote` URL output that the workers write shards to directly)."""

    beam.require_beam()
    options = beam.pipeline_options(options_text)
    created = not out.exists()
    journal = Journal(out, settings_of(cfg, tok, files))
    journal.load_or_init(cfg.overwrite)
    if journal.labels:
        if all(e.get("done") for e in journal.labels.values()) and set(journal.labels) == set(files):
            return prepare_into(cfg, out, tok, tok_path, files)  # finished before: nothing to tokenize
        raise OlmaxError(
            f"{out} holds an unfinished `olmax data prepare` run; resume it with --runner local, "
            "or pass --overwrite to start over with --runner beam"
        )
    for f in (out / "mix.txt", out / "manifest.json"):
        f.unlink(missing_ok=True)
    target = remote if remote is not None else str(out)
    tmp = storage.join(target, TMP_DIR)
    storage.remove_tree(tmp)
    log_dir = tempfile.mkdtemp(prefix="olmax-beam-log-")  # kept when the run fails: the error names it
    tasks = [
        FileTask(si, fi, path, spec.text_field or cfg.text_field)
        for si, spec in enumerate(cfg.sources)
        for fi, path in enumerate(files[spec.label])
    ]
    n_files = [len(files[s.label]) for s in cfg.sources]
    tid = tokenizer_id(tok)
    tok_json = Path(tok_path).read_bytes()
    collected_dir = storage.join(tmp, "results")
    edits = None

    # Two pipelines, the shards planned on the driver between them: a fan-in to one element inside a
    # pipeline (Beam's ToList) is not reliable on every runner (the DaskRunner lost elements of it)
    def tokenize(p):
        tokenized = _Tokenize(cfg, tok_json, tmp, edits)
        summaries = beam.map_tasks(p, "Tokenize", tasks, tokenized, lambda t: (t.source, t.file))
        beam.collect(summaries, collected_dir, "files")

    def write(jobs: list[ShardJob]):
        def build(p):
            written = beam.map_tasks(
                p,
                "Write shards",
                jobs,
                lambda job: write_shard(cfg, job, tid, tmp, target),
                lambda job: (job.source, job.shard),
            )
            beam.collect(written, collected_dir, "shards")

        return build

    t0 = time.monotonic()
    decisions = None
    try:
        if cfg.dedup is not None:  # the decisions first, as the local runner makes them (dedup_stages.py)
            decisions = load_or_plan(cfg, out, files, planner(options, tmp, log_dir))
            edits = {si: edits_of(decisions, si) for si in range(len(cfg.sources))}
        beam.run(tokenize, options, log_dir, "olmax data prepare (tokenize)")
        summaries = beam.collected(collected_dir, "files")
        beam.raise_first_failure(summaries)
        if sorted((s["source"], s["file"]) for s in summaries) != [(t.source, t.file) for t in tasks]:
            raise OlmaxError(
                f"olmax data prepare on Apache Beam: the pipeline returned {len(summaries)} file results for "
                f"{len(tasks)} files (lost or repeated by the runner); see {log_dir}/beam.log, and rerun"
            )
        jobs = _plan(cfg, tmp, n_files)
        if jobs:
            beam.run(write(jobs), options, log_dir, "olmax data prepare (write shards)")
        written = beam.collected(collected_dir, "shards")
        beam.raise_first_failure(written)
        results = _results(cfg, files, summaries, written, journal)
        scratch = tempfile.mkdtemp(prefix="olmax-beam-ids-")
        try:
            for si, r in enumerate(results):

                def ids(si=si):
                    for fi in range(n_files[si]):
                        yield from _load_file(tmp, si, fi, scratch)[1]["ids"]

                r.duplicate_ids = duplicate_ids(ids)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    except OlmaxError:
        storage.remove_tree(tmp)
        discard_unstarted(out, journal, created)
        raise
    storage.remove_tree(tmp)
    shutil.rmtree(log_dir, ignore_errors=True)
    if remote is None:
        return finish_prepare(Target(cfg, out, tok, tok_path, journal), results, t0, decisions)
    # the mix plan may split one shard of a source it repeats partially: that source's shards are fetched into
    # the staging folder (the split happens there, and is uploaded with it); the split original is removed
    before = {s.path for r in results for s in r.shards}
    for r in results:
        if not _whole(planned_tokens(cfg, results)[r.label], r.tokens):
            for s in r.shards:
                for rel in (s.path, str(sidecar_path(s.path)), str(Path(s.path).with_suffix(".arrayrecord"))):
                    if storage.exists(storage.join(remote, rel)):
                        Path(out, rel).parent.mkdir(parents=True, exist_ok=True)
                        Path(out, rel).write_bytes(storage.read_bytes(storage.join(remote, rel)))
    manifest = finish_prepare(Target(cfg, out, tok, tok_path, journal), results, t0, decisions)
    for gone in before - {s.path for r in results for s in r.shards}:
        for rel in (gone, str(sidecar_path(gone)), str(Path(gone).with_suffix(".arrayrecord"))):
            if storage.exists(storage.join(remote, rel)):
                storage.remove_tree(storage.join(remote, rel))
    return manifest


def _whole(target: float, tokens: int) -> bool:
    """Whether a source planned at `target` tokens is used a whole number of times (no shard is split)."""
    rep = target / max(1, tokens)
    return abs(rep - round(rep)) < 1e-9


def _results(
    cfg: PrepareConfig,
    files: dict[str, list[str]],
    summaries: list[dict],
    written: list[tuple],
    journal: Journal,
) -> list[SourceResult]:
    """Each source's SourceResult (shards in order, skip counts) and its journal entry, marked done."""
    results = []
    for si, spec in enumerate(cfg.sources):
        mine = sorted((s for s in summaries if s["source"] == si), key=lambda s: s["file"])
        shards = sorted((w for w in written if w[0] == si), key=lambda w: w[1])
        r = SourceResult(spec.label, files[spec.label])
        r.shards = [ShardInfo(**w[2]) for w in shards]
        r.skipped_empty = sum(s["empty"] for s in mine)
        r.bad_lines = sum(s["bad_lines"] for s in mine)
        r.bad_line_examples = [e for s in mine for e in s["bad_line_examples"]][:5]
        if not r.docs:
            raise no_documents(spec.label, files[spec.label], r.skipped_empty, r.bad_lines)
        empty_upto = np.cumsum([0] + [s["empty"] for s in mine])  # skipped in the files before each file
        bad_upto = np.cumsum([0] + [s["bad_lines"] for s in mine])
        examples = [e for s in mine for e in s["bad_line_examples"]]
        entries = []
        for _, _, info, last in shards:
            if last is None:
                entries.append(
                    shard_entry(
                        ShardInfo(**info), (len(files[spec.label]), 0), r.skipped_empty, r.bad_lines, examples
                    )
                )
            else:
                fi, loc, empty, bad = last
                entries.append(
                    shard_entry(
                        ShardInfo(**info),
                        (fi, loc),
                        int(empty_upto[fi]) + empty,
                        int(bad_upto[fi]) + bad,
                        examples,
                    )
                )
        journal.labels[spec.label] = {
            "shards": entries,
            "done": True,
            "bad_line_examples": r.bad_line_examples,
            "bad_lines": r.bad_lines,
            "empty": r.skipped_empty,
        }
        results.append(r)
    journal.save()
    return results
