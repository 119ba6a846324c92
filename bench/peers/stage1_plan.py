"""The OLMo 3 stage-1 plan on one machine: memory and time of each olmax command at the real shape, beside
OLMo-core's own order build.

Input: sparse token files of the real stage-1 shape (5.93 T uint32 tokens over --files files, uneven
sizes; `truncate` to size, so no disk blocks: an FSL index needs only file sizes), L = 8192 (723.9 M
instances), G = 512, seed 34521. Each command runs in a fresh process (`--child`) and reports its own
phases (olmax/audit/phases.py: wall time, peak resident and peak anonymous memory, sampled every 50 ms):

- audit: `olmax audit loader --epochs 1 --no-content --process-count P` (audit_loader) for each P of
  --process-counts (8 and 512): every rank's loader asked for every step; the first from an empty work
  dir, so its phases include the epoch's order build, the later ones find the order file;
- plan: `olmax data plan` (the index and the epoch's numbers);
- where: `olmax data where`'s first query (builds the epoch's inverse order beside the order file);
- exposure: `olmax audit exposure` over the whole epoch (a leak report of --exposure-items documents
  spread over the mix, joined through the inverse order);
- which: `olmax data which --step S` (synthetic `.csv.gz` sidecars for the files step S touches, as in
  bench/peers/trace.py; the first query builds their document index);
- window: the audit's window content tally over the epoch's rows (every rank asked, at the first of
  --process-counts) against a content report without duplicates: its spill to scratch and its reduce;
- loader: the trainer's loader start (open_loader, iterate from step 0, first batch read);
- olmo-core: OLMo-core's NumpyFSLDataset + NumpyFSLDataLoader `reshuffle(epoch=1)` (builds and saves
  its global indices) at the same size, measured (not extrapolated), from an empty work dir.

    .venv/bin/python -m bench.peers.stage1_plan [--out bench/out/stage1] [--files 2000] [--only audit,olmo-core]
    .venv/bin/python -m bench.peers.stage1_plan --tokens 200e9   # a smaller shape, same code paths
    .venv/bin/python -m bench.peers.stage1_plan --smoke          # seconds; its record goes to bench/out/results

The record (bench/record.py) goes to bench/results/stage1.json: every child's phases, its whole-process
wall seconds (start to output, imports included, the same for olmax and OLMo-core) and the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from bench import harness
from bench.harness import module_command
from bench.record import add_arguments

L, G, SEED, STAGE1_TOKENS = 8192, 512, 34521, 5_930_000_000_000
CHILDREN = ("audit", "window", "plan", "where", "exposure", "which", "loader", "olmo-core")


def make_sparse_mix(folder: str, tokens: int, files: int, sources: int = 7) -> str:
    """Sparse uint32 token files totalling `tokens` (uneven sizes, like real shards); returns the mix path."""
    os.makedirs(folder, exist_ok=True)
    per_file = tokens // files
    lines = []
    for i in range(files):
        path = os.path.join(folder, f"{i:06d}.npy")
        size = 4 * (per_file - 3_000 * files // 2 + 3_000 * i)  # uneven sizes, same total
        if not os.path.exists(path) or os.path.getsize(path) != size:
            with open(path, "wb") as f:
                f.truncate(size)
        lines.append(f"source{i % sources},{os.path.basename(path)}\n")
    mix = os.path.join(folder, "mix.txt")
    Path(mix).write_text("".join(lines))
    return mix


def _stream(mix: str, work: str):
    from olmax.data.stream import StreamSpec

    return StreamSpec(mix=mix, seq_len=L, global_batch_size=G, seed=SEED, work_dir=work)


def child(name: str, mix: str, work: str, args: argparse.Namespace) -> dict:
    """Run one command in this process; returns its phases and a few of its answers."""
    from olmax.audit.phases import Phases
    from olmax.data.loader import open_loader, stream_index

    stream = _stream(mix, work)
    if name == "audit":
        from olmax.audit.loader_audit import LoaderAuditConfig, audit_loader

        config = LoaderAuditConfig(stream=stream, epochs=1, content=False, process_count=args.process_count)
        report = audit_loader(config, progress=True)
        checks = {k: v["value"] for k, v in report["checks"].items()}
        return {
            **report["performance"],
            "ok": report["ok"],
            "process_count": args.process_count,
            "rows": report["replay"]["rows"],
            "rank_checked_steps": report["replay"]["rank_checked_steps"],
            "batches_per_epoch": report["index"]["batches_per_epoch"],
            "full_epochs": report["replay"]["full_epochs"],
            "checks": checks,
            "checks_ran": report["checks_ran"],
        }
    with Phases() as phases:
        out: dict = {}
        if name == "plan":
            from olmax.data.loader_cli import plan

            with phases.phase("index + plan"):
                result = plan(stream_index(stream), G)
            out = {"instances": result["instances"], "steps_per_epoch": result["steps_per_epoch"]}
        elif name in ("where", "exposure", "which", "loader"):
            with phases.phase("index + loader"):
                loader = open_loader(stream, process_index=0, process_count=1)
                index = loader.index
            if name == "where":
                from olmax.data.trace import Span, where

                step = args.step
                b = (step - 1) % loader.batches_per_epoch
                inst = int(loader.epoch_order(1).take(b * G, b * G + 1)[0])
                f, offset = (int(x[0]) for x in index.locate([inst]))
                with phases.phase("where (first: builds the inverse order)"):
                    hits = where(loader, [Span(index.paths[f], offset, offset + 1)], epochs=1)
                out = {"steps": sorted({h["step"] for h in hits}), "asked_step": step}
            elif name == "exposure":
                import numpy as np

                from olmax.audit.item_exposure import audit_exposure

                rng = np.random.default_rng(0)
                items = []
                for i in range(args.exposure_items):
                    f = int(rng.integers(len(index.paths)))
                    a = int(rng.integers(index.sizes[f] // 4 - 4096))
                    doc = {"file": index.paths[f], "token_start": a, "token_end": a + 4096, "doc_id": f"d{i}"}
                    items.append({"eval": "bench", "id": str(i), "score": 1.0, "documents": [doc]})
                with phases.phase("exposure (whole epoch)"):
                    rep = audit_exposure({"contaminated": items}, loader, epochs=1)
                out = {"items": len(rep["items"]), "exposures": sum(i["exposures"] for i in rep["items"])}
            elif name == "which":
                from bench.peers.trace import synthetic_sidecar
                from olmax.data.documents import DocumentCache
                from olmax.data.trace import step_position, which

                _, b = step_position(args.step, loader.batches_per_epoch)
                ids = loader.epoch_order(1).take(b * G, (b + 1) * G).astype("int64")
                with phases.phase("synthetic sidecars (bench setup)"):
                    for f in sorted(set(index.locate(ids)[0].tolist())):
                        synthetic_sidecar(index.paths[f], index.sizes[f] // 4, seed=f)
                with phases.phase("which (first: builds the touched files' document index)"):
                    r = which(loader, args.step, DocumentCache(work))
                out = {"rows": len(r["rows"])}
            else:
                with phases.phase("iterate + first batch"):
                    it = loader.iterate(loader.state_at(1, 0))
                    batch = next(it)
                    it.close()
                out = {"batch_shape": list(batch["input_ids"].shape)}
        elif name == "window":
            from olmax.audit.content import content_layout
            from olmax.audit.loader_audit import ContentScan, LoaderAuditConfig
            from olmax.audit.plan_replay import PlanReplay
            from olmax.audit.window_content import ContentTally

            with phases.phase("index + plan"):
                index = stream_index(stream)
                config = LoaderAuditConfig(stream=stream, epochs=1, process_count=args.process_count)
                plan = PlanReplay(index, config)
                # the content map's result for a mix without duplicates (the map itself: bench/peers/audit_mix.py)
                scan = ContentScan(content_layout(index), index, index=index)
                tally = ContentTally(index, scan.locate, plan.total * G, work)
            with phases.phase("replay + window content tally (spill)"):
                for block in plan.blocks():
                    tally.add(block.ids)
            with phases.phase("window content reduce"):
                unplanned, exposure = tally.finish(progress=True)
            out = {"rows": tally.rows, "unplanned": unplanned, "exposure": exposure}
        elif name == "olmo-core":
            from olmo_core.data import DataCollator, NumpyDataLoaderBase, NumpyFSLDataset

            from olmax.data.mixfile import read_mix

            paths = read_mix(mix).paths
            with phases.phase("NumpyFSLDataset + loader"):
                dataset = NumpyFSLDataset(
                    *paths,
                    sequence_length=L,
                    pad_token_id=100277,
                    eos_token_id=100257,
                    vocab_size=100278,
                    dtype=__import__("numpy").uint32,
                )
                dataset.work_dir = work
                loader = NumpyDataLoaderBase.wrap_numpy_dataset(
                    dataset,
                    global_batch_size=G * L,
                    collator=DataCollator(pad_token_id=100277),
                    work_dir=work,
                    seed=SEED,
                )
                n = len(dataset)
            with phases.phase("reshuffle(epoch=1): global indices build + save"):
                loader.reshuffle(epoch=1)
            out = {"instances": n}
    return {**phases.summary(), **out}


def run_child(name: str, mix: str, work: str, args: argparse.Namespace, process_count: int = 1) -> dict:
    """One command of the plan in a fresh process: its phases and figures, and its whole-process seconds."""
    cmd = module_command("bench.peers.stage1_plan", "--child", name, "--mix", mix, "--work", work)
    cmd += ["--step", str(args.step), "--exposure-items", str(args.exposure_items)]
    cmd += ["--process-count", str(process_count)]
    run = harness.run_child(cmd, check=True)
    return {**run.result, "process_seconds": round(run.wall_s, 1)}


def orders_equal(work: str, oc_work: str) -> bool | None:
    """Compare olmax's epoch-1 order file with OLMo-core's global indices, block by block (None: one missing)."""
    import numpy as np

    ours = sorted(Path(work).glob("order-olmo-core-*-epoch1.u32")) if os.path.isdir(work) else []
    theirs = sorted(Path(oc_work).rglob("global_indices*.npy")) if os.path.isdir(oc_work) else []
    if not ours or not theirs:
        return None
    a = np.memmap(ours[0], dtype=np.uint32, mode="r")
    b = np.memmap(theirs[0], dtype=np.uint32, mode="r")
    if a.shape != b.shape:
        return False
    step = 1 << 24
    return all(np.array_equal(a[i : i + step], b[i : i + step]) for i in range(0, a.size, step))


def _print_child(label: str, r: dict) -> None:
    print(
        f"\n{label}: {r['seconds']:.1f} s in its phases ({r['process_seconds']:.1f} s with imports), "
        f"peak anonymous {r['peak_anon_mib']} MiB, peak resident {r['peak_rss_mib']} MiB, "
        f"VmHWM {r['process_vmhwm_mib']} MiB"
    )
    for p in r["phases"]:
        print(
            f"  {p['phase']}: {p['seconds']:.1f} s, anon {p['peak_anon_mib']} MiB, rss {p['peak_rss_mib']} MiB"
        )
    extra = {
        k: v for k, v in r.items() if k not in ("phases", "seconds", "process_seconds") and "mib" not in k
    }
    print(f"  {json.dumps(extra)}")


def _phase_seconds(r: dict, prefix: str) -> float:
    return sum(p["seconds"] for p in r["phases"] if p["phase"].startswith(prefix))


def _phase_anon(r: dict, prefix: str) -> float:
    return max((p["peak_anon_mib"] for p in r["phases"] if p["phase"].startswith(prefix)), default=0.0)


def write_record(rec, results: dict, args: argparse.Namespace, tokens: int) -> Path:
    """bench/results/stage1.json (or the smoke folder): each child's whole-process wall seconds and phases,
    the audit's figures per process count and the order build beside OLMo-core's. `rec` was opened when
    the run began (its commit, tree state and load average are the run's)."""
    from bench.harness import PROCESS_WALL
    from bench.record import package_version

    audits = {n: r for n, r in results.items() if n.startswith("audit-p")}
    rec.side(
        "olmax",
        version=package_version("olmax"),
        setting="audit loader --epochs 1 --no-content --process-count "
        + "/".join(str(r["process_count"]) for r in audits.values())
        + " (every rank's loader asked for every step); data plan/where/which; exposure; loader start",
    )
    rec.side(
        "olmo-core",
        version=package_version("ai2-olmo-core"),
        setting="NumpyFSLDataset + NumpyFSLDataLoader.reshuffle(epoch=1), same files, L, G and seed",
    )
    for name, r in results.items():
        if name == "orders_equal":
            continue
        side = "olmo-core" if name == "olmo-core" else "olmax"
        rec.timings(f"{name}.process", side, [r["process_seconds"]], "s", PROCESS_WALL)
        rec.note(f"{name}.phases", r["phases"])
    for name, r in audits.items():
        tag = name.replace("-", "_")
        rec.figure(f"{tag}_seconds", [r["seconds"]], "s", about="audit loader phases, wall")
        rec.figure(
            f"{tag}_process_seconds", [r["process_seconds"]], "s", about="whole process, imports included"
        )
        rec.figure(f"{tag}_peak_anon", [r["peak_anon_mib"] / 1024], "GiB", about="anonymous high-water mark")
        rec.figure(f"{tag}_order_build_seconds", [_phase_seconds(r, "order")], "s")
        replay = _phase_seconds(r, "replay")
        rec.figure(f"{tag}_replay_seconds", [replay], "s")
        rec.figure(f"{tag}_replay_rate", [r["rows"] / max(replay, 1e-9) / 1e6], "M rows/s")
        rec.figure(f"{tag}_replay_peak_anon", [_phase_anon(r, "replay") / 1024], "GiB")
        rec.note(
            f"{name}.answers",
            {
                k: r[k]
                for k in ("ok", "process_count", "rows", "rank_checked_steps", "batches_per_epoch", "checks")
            },
        )
    if "window" in results:
        w = results["window"]
        spill, reduce = _phase_seconds(w, "replay + window"), _phase_seconds(w, "window content reduce")
        rec.figure("window_spill_seconds", [spill], "s", about="replay, every rank, and the rows' spill")
        rec.figure("window_reduce_seconds", [reduce], "s")
        rec.figure("window_reduce_rate", [w["rows"] / max(reduce, 1e-9) / 1e6], "M rows/s")
        rec.figure("window_peak_anon", [w["peak_anon_mib"] / 1024], "GiB")
        rec.note("window.answers", {k: w[k] for k in ("rows", "unplanned")})
    first = next(iter(audits.values()), None)
    if first is not None and "olmo-core" in results:
        ours, theirs = _phase_seconds(first, "order"), _phase_seconds(results["olmo-core"], "reshuffle")
        rec.figure("olmo_core_order_build_seconds", [theirs], "s")
        rec.figure(
            "order_build_ratio", [theirs / max(ours, 1e-9)], "x", about="OLMo-core seconds / olmax seconds"
        )
    rec.note(
        "shape", {"tokens": tokens, "files": args.files, "seq_len": L, "global_batch_size": G, "seed": SEED}
    )
    rec.note("orders_equal", results.get("orders_equal"))
    return rec.write()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    ap.add_argument("--out", default="bench/out/stage1")
    ap.add_argument("--tokens", type=float, default=None, help="default: stage 1's 5.93e12 (--smoke: 2e9)")
    ap.add_argument("--files", type=int, default=None, help="default 2000 (--smoke: 20)")
    ap.add_argument("--step", type=int, default=None, help="the step `where`/`which` ask about")
    ap.add_argument("--exposure-items", type=int, default=1000)
    ap.add_argument("--process-counts", default="8,512", help="the audit's process counts, comma-separated")
    ap.add_argument(
        "--only", default=",".join(CHILDREN), help="comma-separated subset of " + ",".join(CHILDREN)
    )
    ap.add_argument("--keep-work", action="store_true", help="keep the order files at the end")
    ap.add_argument("--record", default="stage1", help="the record's name: bench/results/NAME.json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--mix", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--process-count", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        harness.report(**child(args.child, args.mix, args.work, args))
        return

    from bench.record import Record

    rec = Record(args.record, argv=sys.argv, smoke=args.smoke, results=args.results)
    tokens = int(args.tokens if args.tokens is not None else 2e9 if args.smoke else STAGE1_TOKENS)
    args.files = args.files if args.files is not None else 20 if args.smoke else 2000
    if args.step is None:
        args.step = min(1_000_000, tokens // (L * G) - 1)
    mix = make_sparse_mix(os.path.join(args.out, f"mix-{tokens}-{args.files}"), tokens, args.files)
    work, oc_work = os.path.join(args.out, "work"), os.path.join(args.out, "work-olmo-core")
    for w in (work, oc_work):
        shutil.rmtree(w, ignore_errors=True)
    print(
        f"stage-1 shape: {tokens:,} tokens in {args.files} sparse files, L={L}, G={G}, seed {SEED} "
        f"({tokens // L:,} instances at most)"
    )
    results = {}
    for name in args.only.split(","):
        if name == "audit":
            for P in (int(x) for x in args.process_counts.split(",")):
                results[f"audit-p{P}"] = r = run_child(name, mix, work, args, process_count=P)
                _print_child(f"audit, {P} processes", r)
            continue
        P = int(args.process_counts.split(",")[0]) if name == "window" else 1
        results[name] = r = run_child(
            name, mix, oc_work if name == "olmo-core" else work, args, process_count=P
        )
        _print_child(name, r)
    audits = [r for n, r in results.items() if n.startswith("audit-p")]
    if audits and "olmo-core" in results:
        a, o = audits[0], results["olmo-core"]
        a_order, o_order = _phase_seconds(a, "order"), _phase_seconds(o, "reshuffle")
        print(
            f"\norder build: olmax {a_order:.1f} s (peak anon {_phase_anon(a, 'order')} MiB) vs "
            f"OLMo-core {o_order:.1f} s (peak anon {_phase_anon(o, 'reshuffle')} MiB), "
            f"measured at the same size; ratio {o_order / max(a_order, 1e-9):.2f}x time"
        )
    same = orders_equal(work, oc_work)
    if same is not None:
        print(f"olmax's order file == OLMo-core's global indices file, byte for byte: {same}")
        results["orders_equal"] = same
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "stage1_plan.json").write_text(json.dumps(results, indent=1))
    print(f"record: {write_record(rec, results, args, tokens)}")
    if not args.keep_work:
        for w in (work, oc_work):
            shutil.rmtree(w, ignore_errors=True)


if __name__ == "__main__":
    main()
