"""Run one MinHash peer (datatrove, rensa or datasketch) on Dolma jsonl.gz files; bench/peers/dedup.py calls it.

It runs inside the peers' own venv (bench/setup/setup_dedup_peers.sh), never the project's, and imports
nothing from olmax or from the other bench modules. Output, in --out:
  removed.jsonl  one {"id", "kept"} object a line (+ "jaccard" where the tool verified the pair), as
                 `olmax data prepare --dedup minhash` writes its OUT/removed.jsonl
  stats.json     the tool's setting, documents, text bytes, and wall seconds per stage

rensa and datasketch are used as their READMEs show a new user: word n-grams shingled in Python
(lowercased \\w+ runs, the text-dedup recipe), one MinHash per document, an LSH index of bands x rows,
each candidate pair (a document and an earlier one) checked by the exact Jaccard of the two shingle
sets against --threshold, clusters the connected components of the checked pairs, the first document
in input order kept. datatrove runs its own four-stage pipeline with its defaults beyond the
n-gram/bands/rows settings: it checks no pair and keeps the copy its union-find picks.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import resource
import time
from collections.abc import Iterator
from pathlib import Path

_WORD = re.compile(r"\w+")


def cpu_s() -> float:
    """CPU seconds of this process and of its children that have ended (datatrove's workers)."""
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


class Stages:
    """Wall and CPU seconds per named stage, in the order run."""

    def __init__(self):
        self.times: dict[str, dict[str, float]] = {}
        self._t = (time.perf_counter(), cpu_s())

    def done(self, name: str, task_s: float | None = None) -> None:
        """End stage `name`; `task_s`: the seconds its tasks ran, summed (datatrove's own count, since
        its pool workers are not children whose CPU this process is told of)."""
        now = (time.perf_counter(), cpu_s())
        self.times[name] = {"wall_s": now[0] - self._t[0], "cpu_s": now[1] - self._t[1]}
        if task_s is not None:
            self.times[name]["task_s"] = task_s
        self._t = now


def read_docs(paths: list[str]) -> Iterator[tuple[str, str]]:
    for p in paths:
        opener = gzip.open if p.endswith(".gz") else open
        with opener(p, "rt", encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    d = json.loads(line)
                    yield str(d["id"]), d["text"]


def shingle(text: str, n: int) -> list[str]:
    ws = _WORD.findall(text.lower())
    if len(ws) < n:
        return [" ".join(ws)]
    return list({" ".join(ws[i : i + n]) for i in range(len(ws) - n + 1)})


class Clusters:
    """Union-find over document indices; a component's root is its smallest index (first in input order)."""

    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def lsh_dedup(tool: str, paths: list[str], args: argparse.Namespace) -> tuple[list[dict], dict, str]:
    """rensa or datasketch: shingle, sign, index + query, verify, cluster; (removals, stage seconds, setting)."""
    num_perm = args.bands * args.rows
    stages = Stages()
    ids, sets = [], []
    for doc_id, text in read_docs(paths):
        ids.append(doc_id)
        sets.append(shingle(text, args.ngram))
    stages.done("read+shingle")
    if tool == "rensa":
        from rensa import RMinHash, RMinHashLSH

        sigs = RMinHash.from_token_sets(sets, num_perm=num_perm, seed=42)
        stages.done("sign")
        lsh = RMinHashLSH(threshold=args.threshold, num_perm=num_perm, num_bands=args.bands)
        candidates = []
        for i, m in enumerate(sigs):
            candidates.append(lsh.query(m))  # earlier documents only: each pair is found once
            lsh.insert(i, m)
        setting = f"rensa RMinHash(num_perm={num_perm}, seed=42), RMinHashLSH(num_bands={args.bands})"
    else:
        from datasketch import MinHash, MinHashLSH

        sigs = []
        for s in sets:
            m = MinHash(num_perm=num_perm, seed=1)
            m.update_batch([x.encode() for x in s])
            sigs.append(m)
        stages.done("sign")
        lsh = MinHashLSH(threshold=args.threshold, num_perm=num_perm, params=(args.bands, args.rows))
        candidates = []
        for i, m in enumerate(sigs):
            candidates.append(lsh.query(m))
            lsh.insert(i, m)
        setting = (
            f"datasketch MinHash(num_perm={num_perm}, seed=1), MinHashLSH(params=({args.bands}, {args.rows}))"
        )
    stages.done("lsh")
    clusters, best = Clusters(len(ids)), {}
    frozen: dict[int, frozenset] = {}
    for i, cands in enumerate(candidates):
        for j in cands:
            if j == i:
                continue
            a = frozen.setdefault(i, frozenset(sets[i]))
            b = frozen.setdefault(j, frozenset(sets[j]))
            jac = len(a & b) / len(a | b)
            if args.no_check or jac >= args.threshold:
                clusters.union(i, j)
                best[i] = max(best.get(i, 0.0), jac)
                best[j] = max(best.get(j, 0.0), jac)
    removed = [
        {"id": ids[i], "kept": ids[clusters.find(i)], "jaccard": round(best.get(i, 0.0), 4)}
        for i in range(len(ids))
        if clusters.find(i) != i
    ]
    stages.done("verify+cluster")
    check = (
        "NO pair check (clusters of raw LSH candidates)"
        if args.no_check
        else f"pairs checked at exact J >= {args.threshold}"
    )
    return removed, stages.times, f"{setting}; shingles: word {args.ngram}-grams; {check}"


def datatrove_dedup(paths: list[str], args: argparse.Namespace, work: Path) -> tuple[list[dict], dict, str]:
    """datatrove's four MinHash stages, each a LocalPipelineExecutor; (removals, stage seconds, setting)."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    folder = str(Path(paths[0]).parent)
    names = sorted(Path(p).name for p in paths)
    pattern = names[0] if len(names) == 1 else "*" + "".join(sorted({Path(n).suffixes[-1] for n in names}))
    config = MinhashConfig(n_grams=args.ngram, num_buckets=args.bands, hashes_per_bucket=args.rows)
    tasks = args.workers

    def reader():
        return JsonlReader(folder, glob_pattern=pattern)

    stages = Stages()

    def run(name: str, pipeline: list, n_tasks: int) -> None:
        LocalPipelineExecutor(
            pipeline=pipeline,
            tasks=n_tasks,
            workers=min(args.workers, n_tasks),
            logging_dir=str(work / "logs" / name),
        ).run()
        steps = json.loads((work / "logs" / name / "stats.json").read_text())
        stages.done(name, sum(step["time_stats"]["total"] for step in steps))

    run("signatures", [reader(), MinhashDedupSignature(str(work / "sigs"), config=config)], tasks)
    run(
        "buckets",
        [MinhashDedupBuckets(str(work / "sigs"), str(work / "buckets"), config=config)],
        config.num_buckets,
    )
    run(
        "cluster",
        [
            MinhashDedupCluster(
                str(work / "buckets"), str(work / "remove"), config=config, save_cluster_id=True
            )
        ],
        1,
    )
    reject = JsonlWriter(str(work / "removed"))
    run(
        "filter",
        [
            reader(),
            MinhashDedupFilter(str(work / "remove"), exclusion_writer=reject, load_cluster_ids=True),
            JsonlWriter(str(work / "kept")),
        ],
        tasks,
    )
    keeper: dict[int, str] = {}
    for p in sorted((work / "kept").glob("*.jsonl.gz")):
        for line in gzip.open(p, "rt", encoding="utf-8"):
            d = json.loads(line)
            cid = d.get("metadata", {}).get("minhash_cluster_id", -1)
            if cid != -1:
                keeper[cid] = str(d["id"])
    removed = []
    for p in sorted((work / "removed").glob("*.jsonl.gz")):
        for line in gzip.open(p, "rt", encoding="utf-8"):
            d = json.loads(line)
            removed.append({"id": str(d["id"]), "kept": keeper.get(d["metadata"]["minhash_cluster_id"])})
    stages.done("report")
    setting = (
        f"datatrove MinhashConfig(n_grams={args.ngram}, num_buckets={args.bands}, hashes_per_bucket={args.rows}), "
        f"defaults otherwise (64-bit hashes, its text normalisation: digits to 0, punctuation out); "
        f"{tasks} tasks on {args.workers} workers (buckets stage: {config.num_buckets} tasks); no pair check"
    )
    return removed, stages.times, setting


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tool", choices=("datatrove", "rensa", "datasketch"))
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--ngram", type=int, default=5)
    ap.add_argument("--bands", type=int, default=26)
    ap.add_argument("--rows", type=int, default=11)
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument(
        "--no-check", action="store_true", help="rensa/datasketch: cluster LSH candidates unchecked"
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    if args.tool == "datatrove":
        removed, stages, setting = datatrove_dedup(args.files, args, args.out / "work")
    else:
        removed, stages, setting = lsh_dedup(args.tool, args.files, args)
    with open(args.out / "removed.jsonl", "w") as f:
        for r in removed:
            f.write(json.dumps(r) + "\n")
    stats = {
        "tool": args.tool,
        "setting": setting,
        "stages": stages,
        "wall_s": time.perf_counter() - t,
        "cpu_s": cpu_s(),
    }
    (args.out / "stats.json").write_text(json.dumps(stats, indent=1) + "\n")


if __name__ == "__main__":
    main()
