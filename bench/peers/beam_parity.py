"""Beam parity, end to end: `--runner beam` must give the local runner's results on real text, through the CLI.

    .venv/bin/python -m bench.peers.beam_parity [--keep DIR] [--code-files 400] [--shard-size 200KB] [--dask-workers 1,2]

What it does, in a temporary folder (or `--keep DIR`, left in place):
  1. corpus  the first --code-files *.py files of the standard library (sorted; source `code`) and the pydoc
             topics cut into <= 6000-character documents (source `prose`) as Dolma jsonl ({"id", "text"}),
             each source dealt round-robin over its own files, .jsonl and .jsonl.gz alternating (8 files).
             Planted: bundled held-out items of >= 25 words (ARC-Easy, SciQ, OpenBookQA, BoolQ; sharing no
             8-word run with each other), transformed by olmax/testing/leak_plants.py (standard library only, no
             code shared with the detector): verbatim in one document, verbatim in 3-6 documents,
             substitute, drop and markup, each in one document. For dedup: exact copies of a few
             documents (within and across sources, under new ids) and two repeated spans of 60+ tokens (a
             notice paragraph pasted into several documents, a block of one stdlib file pasted into others).
  2. runners every command below with `--runner local` first, then with `--runner beam` on Beam's
             DirectRunner (2 worker processes) and on the DaskRunner over a dask.distributed cluster on
             127.0.0.1 (a `dask scheduler` and --dask-workers single-threaded `dask worker` processes:
             1, then 2, each cluster started fresh, olmax/testing/dask_cluster.py); Beam's flags after `--`.
  3. prepare `olmax data prepare --tokenizer dolma2 --shard-size 200KB`, the Beam runs on the same inputs
             given as `file://` URLs; every file of each output folder, hidden ones included (the journal
             `.olmax-prepare.json`), compared byte for byte with the local one.
  4. leaks   `olmax audit leaks` over the local output's mix.txt with the four eval sets (the Beam runs
             name the mix by its `file://` URL); reports compared without "timing". Exit code 1 (items
             contaminated) is expected.
  5. dedup   `olmax audit dedup` over the same mix; reports compared without "timing".
  6. loader  `olmax audit loader --seq-len 512 --global-batch-size 8 --span-tokens 50` over the same mix:
             the content checks' hashing on the Beam workers; reports compared without "timing".

The Beam runs name the mix by its `file://` URL, so the reports echo that spelling (settings, summary,
file names); before comparing, the Beam report's strings have `file://` removed in front of the work
folder, and the fields where that happened are printed. Any other difference is a mismatch.

Prints a table (command, wall seconds per runner, identical, counts) and as its last line
`beam parity (direct, dask1, dask2 vs local): prepare identical, leaks identical (N contaminated), ...`,
or what differs; exits 1 on any difference or failed command.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import random
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from bench.harness import ROOT
from bench.record import add_arguments, shrink
from olmax.testing import leak_plants as lp
from olmax.testing.dask_cluster import dask_cluster

SEED = 20260301
SETS = ("arc_easy", "sciq", "openbookqa", "boolq")
PLANT_KINDS = ("verbatim_one", "verbatim_many", "substitute", "drop", "markup")
PER_KIND = 6  # 30 planted items
MIN_WORDS = 25
DOC_CHARS = 6000
FILES = {"code": 5, "prose": 3}
PIPELINE = "--runner=DirectRunner --direct_num_workers=2 --direct_running_mode=multi_processing"
NOTICE = (
    "This module is distributed as part of a benchmark corpus. Redistribution and use in source and binary "
    "forms, with or without modification, are permitted provided that the following conditions are met: "
    "the notice above and this paragraph are kept in every copy, the names of the contributors are not "
    "used to endorse derived products without their written permission, and every change is recorded in "
    "the accompanying history file together with the date on which it was made."
)


# ---------------------------------------------------------------------------------------------- corpus
def _cut(text: str, limit: int = DOC_CHARS) -> str:
    """`text` cut at the last line end within `limit` characters (at `limit` when there is none)."""
    if len(text) <= limit:
        return text
    end = text.rfind("\n", 0, limit)
    return text[: end + 1] if end > 0 else text[:limit]


def _chunks(text: str) -> list[str]:
    out = []
    while text:
        piece = _cut(text)
        out.append(piece)
        text = text[len(piece) :]
    return [p for p in out if p.strip()]


def real_documents(code_files: int) -> list[dict]:
    """[{source, id, text}]: the first `code_files` stdlib *.py files (sorted, UTF-8 ones; an empty
    __init__.py stays in: prepare counts it as an empty document) and the pydoc topics in chunks."""
    from pydoc_data.topics import topics

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    docs = []
    for p in sorted(stdlib.rglob("*.py")):
        if len(docs) >= code_files:
            break
        if "site-packages" in p.parts or "__pycache__" in p.parts:
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        docs.append({"source": "code", "id": f"stdlib/{p.relative_to(stdlib).as_posix()}", "text": text})
    for name, body in sorted(topics.items()):
        for j, piece in enumerate(_chunks(body)):
            docs.append({"source": "prose", "id": f"pydoc/{name}#{j}", "text": piece})
    return docs


def eval_items(rng: random.Random) -> list[tuple[str, object]]:
    """(set, EvalItem) of >= MIN_WORDS words, shuffled, independent of each other, round-robin over SETS."""
    from olmax.evalsets.read import load_eval

    pool = [(name, it) for name in SETS for it in load_eval(name)[1] if len(it.text.split()) >= MIN_WORDS]
    rng.shuffle(pool)
    pool = [pool[i] for i in lp.independent([it.text for _, it in pool])]
    return lp.round_robin(pool, SETS)


def plant(docs: list[dict], rng: random.Random) -> tuple[list[dict], list[dict], int]:
    """Eval items and repeated spans planted into `docs` (changed in place), and exact copies of a few
    documents made: (planted items [{kind, eval, id, hosts}], the copies, documents holding a span)."""
    texts = [d["text"] for d in docs]
    hostable = {i for i, t in enumerate(texts) if t.strip()}
    used = set(range(len(texts))) - hostable  # empty documents are never hosts
    items = eval_items(rng)
    if len(items) < PER_KIND * len(PLANT_KINDS):
        raise SystemExit(f"{PER_KIND * len(PLANT_KINDS)} eval items wanted, {len(items)} available")
    planted = []
    for k, kind in enumerate(PLANT_KINDS):
        for name, item in items[k * PER_KIND : (k + 1) * PER_KIND]:
            base = kind.removesuffix("_one").removesuffix("_many")
            text = lp.TRANSFORMS[base](item.text, rng)
            pasted = lp.paste(text, texts, kind.endswith("_many"), rng, used)
            for h, t in pasted.items():
                texts[h] = t
            planted.append(
                {
                    "kind": kind,
                    "eval": name,
                    "id": str(item.id),
                    "hosts": sorted(docs[h]["id"] for h in pasted),
                }
            )
    # repeated spans: a notice paragraph in 5 documents, a 1200-character block of one stdlib file in 3 more
    for h, t in lp.on_many(NOTICE, texts, rng, used, count=5).items():
        texts[h] = t
    code = [i for i in sorted(hostable - used) if docs[i]["source"] == "code" and len(texts[i]) > 4000]
    donor = rng.choice(code)
    used.add(donor)
    start = texts[donor].find("\n", len(texts[donor]) // 3) + 1
    block = texts[donor][start : texts[donor].rfind("\n", start, start + 1200)]
    for h, t in lp.on_many(block, texts, rng, used, count=3).items():
        texts[h] = t
    for d, t in zip(docs, texts):
        d["text"] = t
    # exact duplicates under new ids: two within their source, two copied into the other source
    copies = []
    for j, i in enumerate(lp.pick_hosts(len(docs), 4, rng, used)):
        src = docs[i]["source"] if j < 2 else ("prose" if docs[i]["source"] == "code" else "code")
        copies.append({"source": src, "id": f"copy-{j}/{docs[i]['id']}", "text": docs[i]["text"]})
    return planted, copies, 5 + 3


def write_corpus(root: Path, docs: list[dict]) -> dict[str, int]:
    """Each source's documents dealt round-robin over FILES[source] files under root/SOURCE/, .jsonl and
    .jsonl.gz alternating (gzip with no name or time in its header: the same bytes every run)."""
    counts = {}
    for src, n in FILES.items():
        mine = [d for d in docs if d["source"] == src]
        counts[src] = len(mine)
        (root / src).mkdir(parents=True, exist_ok=True)
        for f in range(n):
            lines = "".join(
                json.dumps({"id": d["id"], "text": d["text"]}, ensure_ascii=False) + "\n" for d in mine[f::n]
            ).encode()
            if f % 2:
                with (
                    open(root / src / f"part-{f:02d}.jsonl.gz", "wb") as raw,
                    gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz,
                ):
                    gz.write(lines)
            else:
                (root / src / f"part-{f:02d}.jsonl").write_bytes(lines)
    return counts


# ------------------------------------------------------------------------------------------ commands
def olmax(args: list[str], log: Path, ok: tuple[int, ...] = (0,)) -> float:
    """Run `olmax ARGS` (output to `log`); its wall seconds. Exits when its code is not in `ok`."""
    cmd = [sys.executable, "-m", "olmax.cli", *args]
    t0 = time.perf_counter()
    with open(log, "wb") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    wall = time.perf_counter() - t0
    print(f"  {wall:6.1f}s  rc {rc}  olmax {' '.join(args)}", flush=True)
    if rc not in ok:
        tail = log.read_text(errors="replace")[-3000:]
        sys.exit(f"olmax {' '.join(args[:2])} failed with exit code {rc}; last lines of {log}:\n{tail}")
    return wall


def tree_diff(a: Path, b: Path) -> tuple[int, list[str]]:
    """(files compared, relative paths that differ or exist on one side only), hidden files included."""

    def files(root: Path) -> dict[str, Path]:
        return {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}

    fa, fb = files(a), files(b)
    only = [
        f"{k} (only {side})"
        for keys, side in ((set(fa) - set(fb), "local"), (set(fb) - set(fa), "beam"))
        for k in sorted(keys)
    ]
    differ = []
    for k in sorted(set(fa) & set(fb)):
        if fa[k].read_bytes() != fb[k].read_bytes():
            fields = (
                json_diff(json.loads(fa[k].read_text()), json.loads(fb[k].read_text()))
                if k.endswith(".json")
                else []
            )
            more = f"; ... {len(fields) - 4} more fields" if len(fields) > 4 else ""
            differ.append(f"{k} (bytes differ{': ' + '; '.join(fields[:4]) + more if fields else ''})")
    return len(set(fa) | set(fb)), only + differ


def unspell(value, url: str, plain: str, where: str, rewritten: set[str]):
    """`value` (JSON) with `url` replaced by `plain` in every string; `rewritten` gets the top-level fields
    where that happened."""
    if isinstance(value, dict):
        return {
            k: unspell(v, url, plain, f"{where}.{k}" if where else k, rewritten) for k, v in value.items()
        }
    if isinstance(value, list):
        return [unspell(v, url, plain, where, rewritten) for v in value]
    if isinstance(value, str) and url in value:
        rewritten.add(where.split(".")[0] if "." in where else where)
        return value.replace(url, plain)
    return value


def json_diff(a, b, where: str = "", out: list[str] | None = None) -> list[str]:
    """Paths (`key.sub[3]`) where two JSON values differ."""
    out = [] if out is None else out
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            p = f"{where}.{k}" if where else k
            if k not in a or k not in b:
                out.append(f"{p} (only {'beam' if k not in a else 'local'})")
            else:
                json_diff(a[k], b[k], p, out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            json_diff(x, y, f"{where}[{i}]", out)
    elif a != b:
        out.append(f"{where}: {json.dumps(a)[:120]} vs {json.dumps(b)[:120]}")
    return out


def compare_reports(local: Path, beam: Path, root: Path) -> tuple[dict, dict, list[str], set[str]]:
    """Both reports without what says how the run went rather than what it found ("timing", "performance",
    "checks_ran": where each check ran, and "summary": the printed lines, which carry each phase's seconds
    and memory), the Beam one with the `file://` spelling of `root` undone: (local, beam, differing paths,
    fields where the spelling was undone)."""
    a = json.loads(local.read_text())
    b = json.loads(beam.read_text())
    for k in ("timing", "performance", "checks_ran", "summary"):
        a.pop(k, None)
        b.pop(k, None)
    rewritten: set[str] = set()
    b = unspell(b, f"file://{root}", str(root), "", rewritten)
    return a, b, json_diff(a, b), rewritten


# ---------------------------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", help="work in this folder and leave everything there (default: a temp folder)")
    ap.add_argument("--code-files", type=int, default=400, help="stdlib *.py files in the corpus")
    ap.add_argument(
        "--shard-size", default="200KB", help="prepare's --shard-size (several shards per source)"
    )
    ap.add_argument(
        "--dask-workers",
        default="1,2",
        help="worker counts of the loopback Dask clusters the DaskRunner runs on ('' for none)",
    )
    add_arguments(ap)
    args = shrink(ap.parse_args(), code_files=20, dask_workers="")
    workers = [int(w) for w in args.dask_workers.split(",") if w.strip()]

    t_start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if args.keep:
            root = Path(args.keep).resolve()
            if root.exists() and any(root.iterdir()):
                sys.exit(f"--keep {root} is not empty")
            root.mkdir(parents=True, exist_ok=True)
        else:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="beam-parity-"))).resolve()
        rows, problems, counts, runners = run_all(root, args, workers)
    print()
    print("runners: " + "; ".join(f"{name}: {what}" for name, what in runners.items()))
    names = list(runners)
    print(f"{'command':<14} " + " ".join(f"{n + ' s':>9}" for n in names) + f"  {'identical':<9}  counts")
    for name, times, same, what in rows:
        cells = " ".join(f"{times[n]:>9.1f}" for n in names)
        print(f"{name:<14} {cells}  {'yes' if same else 'NO':<9}  {what}")
    print(f"total {time.perf_counter() - t_start:.0f}s")
    if problems:
        print("differences:")
        for p in problems:
            print(f"  {p}")
    verdicts = [
        f"{name.split()[-1]} {'identical' if same else 'DIFFERS'}"
        + (f" ({counts['contaminated']} contaminated)" if name == "audit leaks" else "")
        for name, _, same, _ in rows
    ]
    print(f"beam parity ({', '.join(n for n in names if n != 'local')} vs local): " + ", ".join(verdicts))
    sys.exit(1 if problems else 0)


def run_all(root: Path, args, workers: list[int]) -> tuple[list, list[str], dict, dict]:
    rng = random.Random(SEED)
    docs = real_documents(args.code_files)
    planted, copies, span_hosts = plant(docs, rng)
    inputs = root / "input"
    per_source = write_corpus(inputs, docs + copies)
    (root / "planted.json").write_text(json.dumps(planted, indent=1) + "\n")
    print(
        f"corpus: {per_source} documents in {sum(FILES.values())} files under {inputs}; {len(planted)} eval "
        f"items planted ({', '.join(f'{k} {PER_KIND}' for k in PLANT_KINDS)}), {len(copies)} duplicate "
        f"documents, 2 repeated spans in {span_hosts} documents",
        flush=True,
    )
    logs = root / "logs"
    logs.mkdir()
    runners = {"local": "threads on this machine", "direct": f"Beam {PIPELINE}"}
    for n in workers:
        runners[f"dask{n}"] = f"Beam DaskRunner on a loopback dask.distributed cluster of {n} worker(s)"
    times: dict[str, dict[str, float]] = {c: {} for c in COMMANDS}
    problems: list[str] = []
    results: dict[str, dict] = {}

    def each(variant: str, flags: list[str] | None) -> None:
        for command in COMMANDS:
            print(f"{command} ({variant}):", flush=True)
            times[command][variant], problem, result = run_command(
                command, variant, flags, root, inputs, logs, args.shard_size
            )
            problems.extend(problem)
            results.setdefault(command, {})[variant] = result

    each("local", None)
    each("direct", ["--", *PIPELINE.split()])
    for n in workers:
        with dask_cluster(workers=n) as address:
            each(
                f"dask{n}",
                [
                    "--",
                    "--runner=DaskRunner",
                    f"--dask_client_address={address}",
                    f"--temp_location={root / 'dask-temp'}",
                ],
            )
    rows = []
    for command in COMMANDS:
        same = not any(p.startswith(f"{command}:") for p in problems)
        rows.append((command, times[command], same, results[command]["local"]["what"]))
    flagged = {
        (e["eval"], str(e["id"])) for e in results["audit leaks"]["local"]["report"].get("contaminated", [])
    }
    found = sum((p["eval"], p["id"]) in flagged for p in planted)
    print(f"planted items flagged by the local leak audit: {found}/{len(planted)}")
    return rows, problems, {"contaminated": len(flagged)}, runners


COMMANDS = ("data prepare", "audit leaks", "audit dedup", "audit loader")


def run_command(
    command: str, variant: str, flags: list[str] | None, root: Path, inputs: Path, logs: Path, shard_size: str
) -> tuple[float, list[str], dict]:
    """Run one command on one runner (`flags`: --runner beam's flags, None: the local runner) and compare
    its output with the local runner's (run first): (wall seconds, differences, {report, what})."""
    beam = [] if flags is None else ["--runner", "beam", *flags]
    # the Beam runs name their inputs by file:// URL (the local ones by path): the same result either way
    url = "" if flags is None else "file://"
    mix = root / "prepared-local" / "mix.txt"
    log = logs / f"{command.split()[-1]}-{variant}.log"
    if command == "data prepare":
        out = root / f"prepared-{variant}"
        common = ["data", "prepare", "--tokenizer", "dolma2", "--shard-size", shard_size, "--no-progress"]
        wall = olmax(
            [*common, "--workers", "2", "--out", str(out), *(f"{s}={url}{inputs / s}" for s in FILES), *beam],
            log,
        )
        manifest = json.loads((out / "manifest.json").read_text())
        shards = {k: len(v["shards"]) for k, v in manifest["sources"].items()}
        tokens = sum(v["tokens"] for v in manifest["sources"].values())
        if flags is None:
            return wall, [], {"report": manifest, "what": f"shards {shards}, {tokens:,} tokens"}
        n_files, diff = tree_diff(root / "prepared-local", out)
        return (
            wall,
            [f"{command}: {variant}: {d}" for d in diff],
            {"report": manifest, "what": f"{n_files} files"},
        )
    rep = root / f"{command.split()[-1]}-{variant}.json"
    if command == "audit leaks":
        args = ["audit", "leaks", "--mix", f"{url}{mix}", *(a for s in SETS for a in ("--eval", s))]
    elif command == "audit dedup":
        args = ["audit", "dedup", "--mix", f"{url}{mix}", "--work-dir", str(root / "work")]
    else:  # the loader audit's content pass reads the mix's files by path on every runner
        args = ["audit", "loader", "--mix", str(mix), "--seq-len", "512", "--global-batch-size", "8"]
        args += ["--span-tokens", "50", "--work-dir", str(root / "work")]
    wall = olmax([*args, "--out", str(rep), *beam], log, ok=(0, 1))
    report = json.loads(rep.read_text())
    what = {
        "audit leaks": lambda r: (
            f"{len(r.get('contaminated', []))} contaminated, {r['candidates'].get('pairs')} candidate pairs"
        ),
        "audit dedup": lambda r: (
            f"{r['duplicate_documents']} duplicate docs, {r['repeated_span_tokens']:,} repeated-span tokens"
        ),
        "audit loader": lambda r: (
            f"{r['content']['duplicate_instances']} duplicate instances, "
            f"{r['content']['duplicate_documents']} duplicate docs, "
            f"{r['content']['repeated_spans']['repeated_tokens']:,} repeated-span tokens"
        ),
    }[command](report)
    if flags is None:
        return wall, [], {"report": report, "what": what}
    a, b, diff, rewritten = compare_reports(root / f"{command.split()[-1]}-local.json", rep, root)
    if rewritten:
        print(f"  file:// spelling undone in: {', '.join(sorted(rewritten))}")
    return wall, [f"{command}: {variant}: {d}" for d in diff], {"report": report, "what": what}


if __name__ == "__main__":
    main()
