"""The OLMo 3 stage-1 plan on one machine: memory and time of each olmax command at the real shape, beside
OLMo-core's own order build.

Input: sparse token files of the real stage-1 shape (5.93 T uint32 tokens over --files files, uneven
sizes; `truncate` to size, so no disk blocks: an FSL index needs only file sizes), L = 8192 (723.9 M
instances), G = 512, seed 34521. Each command runs in a fresh process (`--child`) and reports its own
phases (olmax/audit/phases.py: wall time, peak resident and peak anonymous memory, sampled every 50 ms):

- audit: `olmax audit loader --epochs 1 --no-content` (audit_loader), from an empty work dir, so its
  phases include the epoch's order build;
- plan: `olmax data plan` (the index and the epoch's numbers);
- where: `olmax data where`'s first query (builds the epoch's inverse order beside the order file);
- exposure: `olmax audit exposure` over the whole epoch (a leak report of --exposure-items documents
  spread over the mix, joined through the inverse order);
- which: `olmax data which --step S` (synthetic `.csv.gz` sidecars for the files step S touches, as in
  bench/trace.py; the first query builds their document index);
- loader: the trainer's loader start (open_loader, iterate from step 0, first batch read);
- olmo-core: OLMo-core's NumpyFSLDataset + NumpyFSLDataLoader `reshuffle(epoch=1)` (builds and saves
  its global indices) at the same size, measured (not extrapolated), from an empty work dir.

    .venv/bin/python bench/stage1_plan.py [--out bench/out/stage1] [--files 2000] [--only audit,olmo-core]
    .venv/bin/python bench/stage1_plan.py --tokens 200e9   # a smaller shape, same code paths
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from record import add_arguments, shrink

L, G, SEED, STAGE1_TOKENS = 8192, 512, 34521, 5_930_000_000_000
CHILDREN = ("audit", "plan", "where", "exposure", "which", "loader", "olmo-core")


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

        report = audit_loader(LoaderAuditConfig(stream=stream, epochs=1, content=False), progress=True)
        checks = {k: v["value"] for k, v in report["checks"].items()}
        return {
            **report["performance"],
            "ok": report["ok"],
            "rows": report["replay"]["rows"],
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
                import importlib.util

                bench_trace = Path(__file__).resolve().parent / "trace.py"  # bench/trace.py, not the stdlib's
                sys.path.insert(0, str(bench_trace.parent))
                spec = importlib.util.spec_from_file_location("bench_trace", bench_trace)
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
                synthetic_sidecar = mod.synthetic_sidecar

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


def run_child(name: str, mix: str, work: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", name, "--mix", mix, "--work", work, "--step", str(args.step)]
    cmd += ["--exposure-items", str(args.exposure_items)]
    t = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_seconds"] = round(time.perf_counter() - t, 1)
    return result


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/out/stage1")
    ap.add_argument("--tokens", type=float, default=STAGE1_TOKENS)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--step", type=int, default=1_000_000, help="the step `where`/`which` ask about")
    ap.add_argument("--exposure-items", type=int, default=1000)
    ap.add_argument(
        "--only", default=",".join(CHILDREN), help="comma-separated subset of " + ",".join(CHILDREN)
    )
    ap.add_argument("--keep-work", action="store_true", help="keep the order files at the end")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--mix", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    add_arguments(ap)
    args = shrink(
        ap.parse_args(), out="bench/out/stage1-smoke", tokens=2e9, files=20, step=100, exposure_items=20
    )
    if args.child:
        print(json.dumps(child(args.child, args.mix, args.work, args)))
        return

    tokens = int(args.tokens)
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
        r = run_child(name, mix, oc_work if name == "olmo-core" else work, args)
        results[name] = r
        print(
            f"\n{name}: {r['seconds']:.1f} s in its phases ({r['process_seconds']:.1f} s with imports), "
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
    if "audit" in results and "olmo-core" in results:
        a, o = results["audit"], results["olmo-core"]
        a_order = sum(p["seconds"] for p in a["phases"] if p["phase"].startswith("order"))
        o_order = sum(p["seconds"] for p in o["phases"] if p["phase"].startswith("reshuffle"))
        print(
            f"\norder build: olmax {a_order:.1f} s (peak anon "
            f"{max(p['peak_anon_mib'] for p in a['phases'] if p['phase'].startswith('order'))} MiB) vs "
            f"OLMo-core {o_order:.1f} s (peak anon "
            f"{max(p['peak_anon_mib'] for p in o['phases'] if p['phase'].startswith('reshuffle'))} MiB), "
            f"measured at the same size; ratio {o_order / max(a_order, 1e-9):.2f}x time"
        )
    same = orders_equal(work, oc_work)
    if same is not None:
        print(f"olmax's order file == OLMo-core's global indices file, byte for byte: {same}")
        results["orders_equal"] = same
    Path(args.out, "stage1_plan.json").write_text(json.dumps(results, indent=1))
    if not args.keep_work:
        for w in (work, oc_work):
            shutil.rmtree(w, ignore_errors=True)


if __name__ == "__main__":
    main()
