"""The whole pre-launch audit on a generated mix of >= 2 B tokens with planted copies and planted eval items:
`audit loader` (plan and content) and `audit leaks` (every bundled held-out set), time, memory high-water
mark, every plant found, locally and on Beam's DaskRunner with 1 and 2 workers.

The mix: real-shaped text, the Python standard library and pydoc topics tokenized with dolma2, cut into
documents of at most 4,000 tokens, drawn at random into --files shards (4 source labels) until --tokens;
each drawn copy is made unique by its first two tokens (the copy's ordinal), so every document and every
8,192-token window is unique unless planted. The plants, at known places:
- a copied shard: shard 3 again under another name and label (identical file; its windows and documents);
- duplicate documents: 100 documents of shard 5 appended to shard 6;
- repeated windows: 4 aligned windows of shard 7 written over 4 aligned windows of shard 8 (and the whole
  documents inside them, which are then duplicate documents too);
- leaked eval items: one more shard (label `leaks`) of --leaks documents, each a base document with one
  bundled held-out item of >= 25 words pasted in on a line of its own (items drawn at random from every
  set, each once); `audit leaks` must report every one of them contaminated, and any other item it flags
  must lie in a planted document (one that shares a passage with a planted item: BoolQ, MMLU).
Expected counts follow from the construction; the bench checks the report's equal them (`plants_found`)
and exits 1 when a plant is missed or a DaskRunner report differs from the local one.

Each audit runs in a fresh process (`--child`) and reports its phases (olmax/audit/phases.py: the driver's
memory; the Dask workers' own memory is not in it). The DaskRunner runs are on a loopback cluster
(olmax/testing/dask_cluster.py) of single-threaded workers; their reports must equal the local one but for timing.
The leak audit's runs are named `leaks`, `leaks-dask1` and `leaks-dask2`, the same way.

    .venv/bin/python -m bench.peers.audit_mix --out /tmp/audit-mix [--tokens 2e9] [--runs local,dask1,leaks,...]
    .venv/bin/python -m bench.peers.audit_mix --smoke          # 20 M tokens, 2-worker runs only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from bench import harness
from bench.record import add_arguments

L, G, SEED, EOS, MAX_DOC = 8192, 512, 17, 100257, 4000
LABELS = ("web", "code", "books", "papers")
COPIED, DOCS_FROM, DOCS_TO, WIN_FROM, WIN_TO, PLANTED_DOCS, PLANTED_WINDOWS = 3, 5, 6, 7, 8, 100, 4
LEAK_MIN_WORDS = 25
RUNS = "local,dask1,dask2,leaks,leaks-dask1,leaks-dask2"
SMOKE_RUNS = (
    "local,dask2,leaks,leaks-dask2"  # --smoke: each audit on each runner, without the 1-worker scaling
)


def base_documents(cache: Path) -> list[np.ndarray]:
    """Real text as dolma2 tokens, cut into documents of 40..MAX_DOC tokens, each ending with EOS."""
    if cache.exists():
        flat = np.load(cache)
        ends = np.flatnonzero(flat == EOS) + 1
        return np.split(flat, ends[:-1])
    from olmax.assets import tokenizer_path
    from olmax.data.tokenize import load_tokenizer
    from olmax.testing.prepare_testdata import pydoc_texts, stdlib_texts

    tok = load_tokenizer(str(tokenizer_path("dolma2", quiet=True)))
    texts = [t for _, t in stdlib_texts(10_000)] + [t for _, t in pydoc_texts()]
    docs = []
    for ids in tok.encode_batch(texts, num_threads=2):
        ids = [t for t in ids if t != EOS]
        for a in range(0, len(ids), MAX_DOC - 1):
            part = ids[a : a + MAX_DOC - 1]
            if len(part) >= 40:
                docs.append(np.asarray(part + [EOS], dtype=np.uint32))
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, np.concatenate(docs))
    return docs


def leak_items(n: int, seed: int) -> list[tuple[str, str, str]]:
    """(set, report id, text) of `n` bundled held-out items of >= LEAK_MIN_WORDS words, drawn at random from
    all the sets, each item once."""
    from olmax.assets import EVAL_SETS
    from olmax.evalsets.read import load_eval

    pool = [
        (name, str(it.report_id), it.text)
        for name in sorted(EVAL_SETS)
        for it in load_eval(name)[1]
        if len(it.text.split()) >= LEAK_MIN_WORDS
    ]
    rng = np.random.default_rng(seed)
    return [pool[i] for i in sorted(rng.choice(len(pool), size=min(n, len(pool)), replace=False).tolist())]


def leak_shard(base: list[np.ndarray], n: int, ordinal: int) -> tuple[np.ndarray, list[list[str]]]:
    """The `leaks` shard: `n` base documents (made unique by their ordinal as the others are), each with one
    held-out item pasted in at a token boundary inside it, on a line of its own; and the planted (set, id)."""
    from olmax.assets import tokenizer_path
    from olmax.data.tokenize import load_tokenizer

    items = leak_items(n, SEED)
    tok = load_tokenizer(str(tokenizer_path("dolma2", quiet=True)))
    pasted = tok.encode_batch([f"\n{text}\n" for _, _, text in items])
    rng = np.random.default_rng(SEED + 1)
    docs = []
    for k, ids in enumerate(pasted):
        host = base[int(rng.integers(len(base)))].copy()
        host[0], host[1] = 10 + (ordinal + k) // 90_000, 10 + (ordinal + k) % 90_000
        at = int(rng.integers(2, host.size - 1))  # after the ordinal, before the EOS
        docs.append(np.concatenate([host[:at], np.asarray(ids, dtype=np.uint32), host[at:]]))
    return np.concatenate(docs), sorted([name, item_id] for name, item_id, _ in items)


def generate(folder: Path, tokens: int, files: int, leaks: int = 0) -> tuple[str, dict]:
    """Write the mix (module docstring) shard by shard; returns its mix file and the plants' expected counts."""
    folder.mkdir(parents=True, exist_ok=True)
    base = base_documents(folder / "base-docs.npy")
    lengths = np.asarray([d.size for d in base])
    rng = np.random.default_rng(SEED)
    per_file, ordinal, lines = tokens // files, 0, []
    expected = {"duplicate_instances": PLANTED_WINDOWS, "duplicate_documents": PLANTED_DOCS}
    planted_docs, span = [], None
    w_from, w_to = 5, 9  # window indices: tokens [w*L, (w + 4)*L)
    for f in range(files):
        picks, total = [], 0
        while total < per_file:
            more = rng.integers(0, len(base), 4096)
            picks.append(more)
            total += int(lengths[more].sum())
        pick = np.concatenate(picks)
        pick = pick[: int(np.searchsorted(np.cumsum(lengths[pick]), per_file)) + 1]
        buf = np.concatenate([base[i] for i in pick.tolist()])
        starts = np.concatenate([[0], np.cumsum(lengths[pick])[:-1]])
        # the copy's ordinal in its first two tokens (ids 10..90,009, never EOS): every copy unique
        n = np.arange(ordinal, ordinal + starts.size)
        buf[starts], buf[starts + 1] = 10 + n // 90_000, 10 + n % 90_000
        ordinal += starts.size
        if f == COPIED:  # all its windows and documents come back in the copy
            expected["duplicate_instances"] += int(buf.size // L)
            expected["duplicate_documents"] += int((_docs(buf) >= 32).sum())
        if f == DOCS_FROM:
            ends = np.r_[starts[1:], buf.size]
            planted_docs = [buf[a:b].copy() for a, b in zip(starts[:PLANTED_DOCS], ends[:PLANTED_DOCS])]
        if f == DOCS_TO:
            buf = np.concatenate([buf, *planted_docs])
        if f == WIN_FROM:
            span = buf[w_from * L : (w_from + PLANTED_WINDOWS) * L].copy()
            eos = np.flatnonzero(span == EOS)  # whole documents inside the span: after its first EOS
            expected["duplicate_documents"] += int((np.diff(eos) >= 32).sum())
        if f == WIN_TO:
            buf[w_to * L : (w_to + PLANTED_WINDOWS) * L] = span
        path = folder / f"shard-{f:04d}.npy"
        buf.tofile(path)
        lines.append(f"{LABELS[f % len(LABELS)]},{path.name}\n")
    copy = folder / f"copy-of-shard-{COPIED:04d}.npy"
    shutil.copy(folder / f"shard-{COPIED:04d}.npy", copy)
    lines.append(f"plant,{copy.name}\n")
    if leaks:
        buf, expected["leaks"] = leak_shard(base, leaks, ordinal)
        buf.tofile(folder / "leaks.npy")
        lines.append("leaks,leaks.npy\n")
    mix = folder / "mix.txt"
    mix.write_text("".join(lines))
    return str(mix), {**expected, "identical_files": [[str(copy), str(folder / f"shard-{COPIED:04d}.npy")]]}


def _docs(buf: np.ndarray) -> np.ndarray:
    """Token lengths of the EOS-delimited documents of a shard."""
    ends = np.flatnonzero(buf == EOS) + 1
    if not ends.size or ends[-1] != buf.size:
        ends = np.r_[ends, buf.size]
    return np.diff(np.r_[0, ends])


def child(mix: str, work: str, runner: str) -> dict:
    from olmax.audit.loader_audit import LoaderAuditConfig, audit_loader
    from olmax.data.stream import StreamSpec

    spec = StreamSpec(mix=mix, seq_len=L, global_batch_size=G, seed=SEED, work_dir=work)
    if runner.startswith("leaks"):
        return leaks_child(spec, runner.removeprefix("leaks").removeprefix("-") or "local")
    config = LoaderAuditConfig(stream=spec, epochs=1, threads=2)
    if runner == "local":
        return audit_loader(config, progress=True)
    from olmax.testing.dask_cluster import dask_cluster, dask_options

    with dask_cluster(workers=int(runner.removeprefix("dask"))) as address:
        return audit_loader(
            config, progress=True, beam_options=dask_options(address, f"--temp_location={work}")
        )


def leaks_child(spec, runner: str) -> dict:
    """`audit leaks` against every bundled set, default rule, with the driver's time and memory (Phases)."""
    from olmax.assets import EVAL_SETS
    from olmax.audit.audit_config import LeakConfig
    from olmax.audit.leaks.run import audit_leaks
    from olmax.audit.phases import Phases

    cfg = LeakConfig(stream=spec, evals=tuple(sorted(EVAL_SETS)), threads=2)
    with Phases() as phases:
        with phases.phase("audit leaks"):
            if runner == "local":
                report = audit_leaks(cfg)
            else:
                from olmax.testing.dask_cluster import dask_cluster, dask_options

                with dask_cluster(workers=int(runner.removeprefix("dask"))) as address:
                    report = audit_leaks(
                        cfg, beam_options=dask_options(address, f"--temp_location={spec.work_dir}")
                    )
    report["performance"] = phases.summary()
    return report


def comparable(report: dict) -> str:
    """The report but where and how fast it ran (as tests/audit/test_loader_beam.py compares them)."""
    out = {k: v for k, v in report.items() if k not in ("timing", "performance", "checks_ran")}
    out.get("settings", {}).pop("stream", None)  # the leak report names its work dir
    lines = report["summary"]
    out["summary"] = lines[
        : next((i for i, x in enumerate(lines) if x.startswith("checks ran:")), len(lines))
    ]
    return json.dumps(out, sort_keys=True)


def found(report: dict, expected: dict) -> dict:
    if report.get("command") == "audit leaks":
        flagged = {(c["eval"], str(c["id"])): c for c in report["contaminated"]}
        planted = {tuple(x) for x in expected["leaks"]}
        others = [c for k, c in flagged.items() if k not in planted]
        # an item not planted is flagged rightly when a planted document holds its words: it shares the
        # planted item's passage (BoolQ and MMLU ask several questions of one passage) or its text
        in_planted = [c for c in others if all(d["source"] == "leaks" for d in c["documents"])]
        return {
            "leaks": planted <= set(flagged) and len(in_planted) == len(others),
            "leaks_found": len(planted & set(flagged)),
            "leaks_planted": len(planted),
            "also_flagged_in_planted_documents": len(in_planted),
            "flagged_elsewhere": len(others) - len(in_planted),
        }
    c = report["content"]
    return {
        "identical_files": [[d["file"], d["same_as_file"]] for d in c["identical_files"]]
        == expected["identical_files"],
        "duplicate_instances": c["duplicate_instances"] == expected["duplicate_instances"],
        "duplicate_documents": c["duplicate_documents"] == expected["duplicate_documents"],
        "unplanned_repeat_rows": c["unplanned_repeat_rows"] > 0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    ap.add_argument("--out", default="bench/out/audit-mix")
    ap.add_argument("--tokens", type=float, default=None, help="default 2e9 (--smoke: 20e6)")
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--runs", default=None, help=f"default {RUNS} (--smoke: {SMOKE_RUNS})")
    ap.add_argument("--leaks", type=int, default=None, help="eval items planted (default 200; --smoke: 40)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--mix", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        harness.report(**child(args.mix, os.path.join(args.out, "work"), args.child))
        return 0

    from bench.harness import PROCESS_WALL
    from bench.record import Record, package_version

    rec = Record("audit_mix", argv=sys.argv, smoke=args.smoke, results=args.results)
    tokens = int(args.tokens if args.tokens is not None else 20e6 if args.smoke else 2e9)
    t = time.perf_counter()
    leaks = args.leaks if args.leaks is not None else 40 if args.smoke else 200
    folder = Path(args.out, f"mix-{tokens}-{args.files}-{leaks}").resolve()
    mix, expected = generate(folder, tokens, args.files, leaks)
    print(
        f"mix: {tokens:,} tokens in {args.files} shards + 1 copy + {leaks} leaked items "
        f"({time.perf_counter() - t:.1f} s); expected { ({k: v for k, v in expected.items() if k != 'leaks'}) }"
    )
    rec.side(
        "olmax",
        version=package_version("olmax"),
        setting="audit loader --epochs 1 (plan and content) and audit leaks (every bundled set, default rule), "
        "--threads 2 locally; --runner beam on a loopback DaskRunner of 1 and 2 single-threaded workers",
    )
    reports, failed = {}, []
    for run in (args.runs or (SMOKE_RUNS if args.smoke else RUNS)).split(","):
        shutil.rmtree(os.path.join(args.out, "work"), ignore_errors=True)
        cmd = harness.module_command("bench.peers.audit_mix", "--child", run, "--mix", mix, "--out", args.out)
        ran = harness.run_child(cmd, check=True)
        wall, rep = ran.wall_s, ran.result
        reports[run] = rep
        perf = rep["performance"]
        ok = found(rep, expected)
        if not all(v for v in ok.values() if isinstance(v, bool)):
            failed.append(f"{run}: plants not found {ok}")
        print(
            f"\n{run}: {wall:.1f} s whole process, peak anonymous {perf['peak_anon_mib']} MiB; plants found {ok}"
        )
        for p in perf["phases"]:
            print(f"  {p['phase']}: {p['seconds']:.1f} s, anon {p['peak_anon_mib']} MiB")
        key = run.replace("-", "_")
        rec.timings(f"{run}.process", "olmax", [wall], "s", PROCESS_WALL)
        rec.figure(f"{key}_seconds", [wall], "s", about="whole process, start to report")
        rec.figure(
            f"{key}_peak_anon", [perf["peak_anon_mib"] / 1024], "GiB", about="the driver's high-water mark"
        )
        rec.note(f"{run}.phases", perf["phases"])
        rec.note(f"{run}.plants_found", ok)
        if run.startswith("leaks"):
            scan_s = rep["timing"]["probe_s"] + rep["timing"]["verify_s"]
            rec.figure(f"{key}_scan_seconds", [scan_s], "s", about="probe and verify (the report's timing)")
            rec.figure(f"{key}_rate", [rep["training"]["tokens"] / scan_s / 1e6], "M tokens/s")
            rec.note(f"{run}.training", rep["training"])
            rec.note(f"{run}.candidates", rep["candidates"])
            continue
        content_s = rep["timing"]["content_seconds"]
        rec.figure(f"{key}_content_seconds", [content_s], "s", about="content map, reduce and window checks")
        rec.figure(f"{key}_content_rate", [tokens / content_s / 1e6], "M tokens/s")
        rec.note(f"{run}.content", {k: v for k, v in rep["content"].items() if not k.endswith("examples")})
    for run, rep in reports.items():
        base = reports.get("leaks" if run.startswith("leaks") else "local")
        if run not in ("local", "leaks") and base is not None:
            same = comparable(rep) == comparable(base)
            rec.note(f"{run}.report_equals_local", same)
            if not same:
                failed.append(f"{run}: the report differs from the local one")
            print(f"{run}: report equals the local one: {same}")
    if "dask1" in reports and "dask2" in reports:
        speedup = (
            reports["dask1"]["timing"]["content_seconds"] / reports["dask2"]["timing"]["content_seconds"]
        )
        rec.figure(
            "dask_content_speedup_2_workers", [speedup], "x", about="content seconds, 1 worker / 2 workers"
        )
        print(f"DaskRunner content phase, 1 worker / 2 workers: {speedup:.2f}x")
    if "leaks-dask1" in reports and "leaks-dask2" in reports:
        one, two = (reports[r]["timing"] for r in ("leaks-dask1", "leaks-dask2"))
        speedup = (one["probe_s"] + one["verify_s"]) / (two["probe_s"] + two["verify_s"])
        rec.figure(
            "leaks_dask_speedup_2_workers",
            [speedup],
            "x",
            about="probe and verify seconds, 1 worker / 2 workers",
        )
        print(f"DaskRunner leak scan, 1 worker / 2 workers: {speedup:.2f}x")
    rec.note(
        "shape",
        {
            "tokens": tokens,
            "files": args.files,
            "leaks": leaks,
            "seq_len": L,
            "global_batch_size": G,
            "seed": SEED,
        },
    )
    rec.note("expected", expected)
    return rec.finish(failed)


if __name__ == "__main__":
    sys.exit(main())
