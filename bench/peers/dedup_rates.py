"""The per-byte rates `olmax data prepare --dedup ... --dry-run` estimates from
(olmax/data/prepare/dedup_stages_estimate.py's RATES): peak RSS and CPU seconds of the decision pass
per stage, and of the shard pass, each a fresh `olmax data prepare` process on the calibration corpus
(the stdlib sources and pydoc topics, with an edited copy of every tenth document: bench/peers/dedup_stages.py's)
and on a one-document input (the fixed costs).

    python -m bench.peers.dedup_rates [--reps 3] [--smoke]      # --smoke: 40 documents, one repetition

The decision pass is measured alone: the child stops right after the decisions are made (its peak RSS and
CPU then are the pass's, with the tokenizer loaded as in a real run). Record: bench/results/dedup_rates.json.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

from bench.harness import PROCESS_CPU, RESULT, run_child
from bench.peers.dedup_stages import corpus
from bench.record import Record, add_arguments, package_version, shrink
from olmax.testing.prepare_testdata import write_jsonl

# The child: `olmax data prepare ARGV`, stopped after the dedup decisions when STOP is set; reports its
# peak RSS (bytes) and CPU seconds (user + system) as its result line (bench/harness.py) at the end. Code
# given to `python -c`, so the measured process imports nothing but olmax.
CHILD = (
    """
import json, resource, sys
from olmax.data.prepare import dedup_stages
stop = sys.argv[1] == "stop"
orig = dedup_stages.load_or_plan
def measured(*a, **k):
    out = orig(*a, **k)
    if stop:
        raise SystemExit(0)
    return out
dedup_stages.load_or_plan = measured  # the local runner calls it through the module
from olmax.cli import main
try:
    rc = main(sys.argv[2:])
except SystemExit as e:
    rc = e.code or 0
u = resource.getrusage(resource.RUSAGE_SELF)
# VmHWM: this address space's peak (ru_maxrss would carry over the size of the process that forked it)
hwm = next(ln for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
result = {"rc": rc, "rss": int(hwm.split()[1]) * 1024, "cpu": u.ru_utime + u.ru_stime}
"""
    + f"print({RESULT!r} + json.dumps(result))\n"
)


DECISIONS_CPU = "CPU seconds of the dedup decision pass, as `olmax data prepare` prints them"


def child(argv: list[str], stop: bool) -> dict:
    run = run_child([sys.executable, "-c", CHILD, "stop" if stop else "go", *argv], echo=None)
    got = run.result
    if not got:
        raise SystemExit(f"{argv}: the child reported nothing (exit {run.rc})\n{run.text[-3000:]}")
    if got["rc"] != 0:
        raise SystemExit(f"{argv}: exit {got['rc']}\n{run.text}")
    decided = DECIDED.search(run.text)  # the decision pass's own CPU, as prepare prints it
    got["decisions_cpu"] = float(decided.group(1)) if decided else 0.0
    return got


DECIDED = re.compile(r"dedup decisions for .* \(([0-9.]+)s CPU\)")


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    ap.add_argument("--reps", type=int, default=3)
    args = shrink(ap.parse_args(), reps=1)
    rec = Record("dedup_rates", argv=sys.argv, smoke=args.smoke, results=args.results)
    rec.side("olmax", version=package_version("olmax"), setting="local runner, --workers 1, dolma2")
    tmp = Path(tempfile.mkdtemp(prefix="olmax-dedup-rates-"))
    docs = corpus(1)
    if args.smoke:
        docs = docs[:40]
    big = write_jsonl(tmp / "big.jsonl", docs)
    tiny = write_jsonl(tmp / "tiny.jsonl", docs[:1])
    b = big.stat().st_size
    rec.figure("input_bytes", [b], "bytes")
    out = tmp / "out"

    def prep(src: Path, *extra: str) -> list[str]:
        return [
            "data",
            "prepare",
            "--no-progress",
            "--tokenizer",
            "dolma2",
            "--workers",
            "1",
            "--overwrite",
        ] + [
            "--out",
            str(out),
            *extra,
            f"t={src}",
        ]

    configs = {
        "exact": "exact",
        "minhash": "exact,minhash",
        "substring": "substring",
        "all": "exact,minhash,substring",
    }
    runs = {}
    for name, stages in configs.items():
        for size, src in (("tiny", tiny), ("big", big)):
            runs[f"{name}_{size}"] = lambda src=src, stages=stages: child(prep(src, "--dedup", stages), True)
    runs["plain_tiny"] = lambda: child(prep(tiny), stop=False)
    runs["plain_big"] = lambda: child(prep(big), stop=False)
    got: dict[str, list[dict]] = {k: [] for k in runs}
    for _ in range(args.reps):  # the runs interleaved: each repetition sees the same background load
        for name, run in runs.items():
            got[name].append(run())
    for name, ms in got.items():
        rec.timings(f"{name}_cpu", "olmax", [m["cpu"] for m in ms], "s", PROCESS_CPU)
        rec.timings(f"{name}_decisions_cpu", "olmax", [m["decisions_cpu"] for m in ms], "s", DECISIONS_CPU)
        rec.figure(f"{name}_rss_bytes", [m["rss"] for m in ms], "bytes")
    shard_disk = folder_bytes(out) / b  # the last run: the plain prepare of the corpus
    child(prep(big, "--dedup", configs["all"]), stop=False)
    decisions = (out / ".olmax-dedup.json").stat().st_size / b

    def per_byte(name: str, key: str, less: str | None = None) -> list[float]:
        """(big - tiny) / B of a config, less another config's (big - tiny) / B."""
        x = [(p[key] - q[key]) / b for p, q in zip(got[f"{name}_big"], got[f"{name}_tiny"])]
        if less is None:
            return x
        return [v - w for v, w in zip(x, per_byte(less, key))]

    rec.figure("base_rss_bytes", [m["rss"] for m in got["all_tiny"]], "bytes")
    rec.figure("plain_rss_bytes", [m["rss"] for m in got["plain_big"]], "bytes")
    rec.figure("rss_minhash_per_byte", per_byte("minhash", "rss"), "bytes/byte")
    rec.figure("rss_substring_per_byte", per_byte("substring", "rss"), "bytes/byte")
    rec.figure("cpu_fixed_s", [m["decisions_cpu"] for m in got["all_tiny"]], "s")
    rec.figure("cpu_read_s_per_byte", per_byte("exact", "decisions_cpu"), "s/byte")
    rec.figure("cpu_minhash_s_per_byte", per_byte("minhash", "decisions_cpu", "exact"), "s/byte")
    rec.figure("cpu_substring_s_per_byte", per_byte("substring", "decisions_cpu", "exact"), "s/byte")
    rec.figure("shard_cpu_s_per_byte", per_byte("plain", "cpu"), "s/byte")
    rec.figure("shard_disk_per_byte", [shard_disk], "bytes/byte")
    rec.figure("decisions_disk_per_byte", [decisions], "bytes/byte")
    path = rec.write()
    figs = json.loads(Path(path).read_text())["figures"]
    for k, v in sorted(figs.items()):
        print(f"{k}: {v['median']:.6g} {v['unit']} ({v['min']:.6g}-{v['max']:.6g})")
    print(f"record: {path}")


if __name__ == "__main__":
    main()
