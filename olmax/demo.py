"""`olmax demo --out DIR`: the main job on an embedded default, end to end, with a report.

Real text only, no hub: the Python standard library's sources become a `code` source and its pydoc
topics a `prose` source; a YAML mix spec plans their shares (prose is upsampled, a planned repeat). Each
step runs through the same CLI a user would type, and the report lists that command so every step can
be rerun alone. Steps whose subsystem has not landed yet are listed as such in the report, never faked.
"""

from __future__ import annotations

import argparse
import gzip
import html
import importlib.util
import json
import shlex
import sys
import sysconfig
import time
from pathlib import Path

SEQ_LEN = 512
GLOBAL_BATCH = 16  # sequences: 16 x 512 = 8,192 tokens per step for the tiny demo model
SEED = 34521  # OLMo 3 stage 1 data seed


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the whole pipeline on an embedded default and write a report",
                       description="Fetch the offline assets, prepare a real code+prose mix from the Python "
                       "standard library, plan and dump loader batches, and write DIR/report.md (+ .html). "
                       "Prints the report's path as its last line.")
    p.add_argument("--out", default="demo-out", help="output folder (reused: finished steps resume)")
    p.add_argument("--code-files", type=int, default=400, help="standard-library modules in the code source")
    p.set_defaults(func=run)


def _stdlib_docs(limit: int) -> list[dict]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "test" not in p.parts and "site-packages" not in p.parts)
    docs = []
    for p in files[:limit]:
        text = p.read_text(encoding="utf-8", errors="replace")
        if text.strip():
            docs.append({"id": str(p.relative_to(root)), "text": text, "source": "python-stdlib"})
    return docs


def _write_raw(out: Path, code_files: int) -> tuple[Path, Path]:
    from pydoc_data.topics import topics

    raw = out / "raw"
    code, prose = raw / "code.jsonl.gz", raw / "prose.jsonl"
    if not code.exists():
        raw.mkdir(parents=True, exist_ok=True)
        tmp = code.with_name(code.name + ".tmp")
        lines = "".join(json.dumps(d) + "\n" for d in _stdlib_docs(code_files))
        tmp.write_bytes(gzip.compress(lines.encode("utf-8"), mtime=0))
        tmp.replace(code)
    if not prose.exists():
        tmp = prose.with_name(prose.name + ".tmp")
        tmp.write_text("".join(json.dumps({"id": k, "text": v, "source": "pydoc-topics"}) + "\n"
                               for k, v in sorted(topics.items())))
        tmp.replace(prose)
    return code, prose


class _Report:
    def __init__(self) -> None:
        self.sections: list[tuple[str, str]] = []

    def add(self, title: str, body: str) -> None:
        self.sections.append((title, body.strip() + "\n"))

    def markdown(self) -> str:
        return "# olmax demo report\n\n" + "\n".join(f"## {t}\n\n{b}" for t, b in self.sections)

    def html(self) -> str:
        parts = ["<!doctype html><meta charset=utf-8><title>olmax demo report</title>",
                 "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}pre{background:#f4f4f4;"
                 "padding:.5em;overflow:auto}</style><h1>olmax demo report</h1>"]
        for title, body in self.sections:
            parts.append(f"<h2>{html.escape(title)}</h2><pre>{html.escape(body)}</pre>")
        return "\n".join(parts)


def _olmax(argv: list[str], log: list[str]) -> tuple[int, float]:
    from olmax.cli import main

    log.append("olmax " + shlex.join(argv))
    print(f"\n$ olmax {shlex.join(argv)}", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    rc = main(argv)
    return rc, time.monotonic() - t0


def run(args: argparse.Namespace) -> int:
    from olmax.errors import OlmaxError

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    report = _Report()
    commands: list[str] = []
    steps = [
        ("1. Assets (offline)", lambda: _olmax(["assets", "fetch"], commands)),
    ]
    for title, fn in steps:
        rc, secs = fn()
        if rc:
            raise OlmaxError(f"demo step {title!r} failed (exit {rc})", code=rc)
    report.add("1. Assets (offline)", f"```\n{commands[-1]}\n```\nThe dolma2 tokenizer and the bundled held-out "
               "sets were resolved from PyPI wheels (sha256-verified), never from a model hub.")

    code, prose = _write_raw(out, args.code_files)
    spec = out / "mix.yaml"
    spec.write_text(
        "# olmax demo mix: real code and prose; prose is upsampled 2x as Dolma 3 upsamples quality buckets\n"
        f"sources:\n  code:\n    paths: [{json.dumps(str(code))}]\n    ratio: 0.75\n"
        f"  prose:\n    paths: [{json.dumps(str(prose))}]\n    ratio: 0.25\n    max_repetition: 2\n")
    shards = out / "shards"
    argv = ["data", "prepare", "--tokenizer", "dolma2", "--out", str(shards), "--mix-spec", str(spec),
            "--workers", "2", "--shard-size", "2MB"]
    rc, secs = _olmax(argv, commands)
    if rc:
        raise OlmaxError(f"demo prepare failed (exit {rc})", code=rc)
    manifest = json.loads((shards / "manifest.json").read_text())
    rows = ["| source | docs | tokens | planned | repetition | share |", "|---|---:|---:|---:|---:|---:|"]
    for label, s in manifest["sources"].items():
        p = manifest["mix"]["plan"][label]
        rows.append(f"| {label} | {s['docs']:,} | {s['tokens']:,} | {p['planned_tokens']:,} | {p['repetition']}x "
                    f"| {p['share']:.3f} |")
    report.add("2. Prepare a real mix", f"```\n{commands[-1]}\n```\n" + "\n".join(rows) +
               f"\n\nTokenizer engine: {manifest['tokenizer']['engine']}; {secs:.1f}s. Mix file: `{shards}/mix.txt`; "
               f"fingerprint `{manifest['fingerprint']}`.")

    plan_json = out / "plan.json"
    rc, _ = _olmax(["data", "plan", "--mix", str(shards / "mix.txt"), "--seq-len", str(SEQ_LEN),
                    "--global-batch-size", str(GLOBAL_BATCH), "--out", str(plan_json)], commands)
    if rc:
        raise OlmaxError(f"demo plan failed (exit {rc})", code=rc)
    plan = json.loads(plan_json.read_text())
    batches = out / "batches.npy"
    rc, _ = _olmax(["data", "batches", "--mix", str(shards / "mix.txt"), "--seq-len", str(SEQ_LEN),
                    "--global-batch-size", str(GLOBAL_BATCH), "--seed", str(SEED), "--start-step", "0",
                    "--steps", "4", "--out", str(batches)], commands)
    if rc:
        raise OlmaxError(f"demo batches failed (exit {rc})", code=rc)
    report.add("3. Loader plan (OLMo-core order)",
               f"```\n{commands[-2]}\n{commands[-1]}\n```\n"
               f"{plan['instances']:,} instances of {SEQ_LEN} tokens; {plan['steps_per_epoch']:,} steps per epoch "
               f"at {GLOBAL_BATCH} sequences; source shares "
               + ", ".join(f"{k} {v['share']:.3f}" for k, v in plan["sources"].items())
               + f". The first 4 global batches are in `{batches}`.")

    pending = [(name, issue) for name, issue, module in (
        ("Pre-launch audit (loader gate, leakage vs held-out sets, contaminated variant)", 6, "olmax.audit.cli"),
        ("Training the tiny OLMo 3 with a kill and an exact resume", 5, "olmax.train.cli"),
        ("Held-out evals and the memorization check", 7, "olmax.evals.cli"),
    ) if importlib.util.find_spec(module) is None]
    if pending:
        report.add("Not built yet", "\n".join(f"- {name} (issue {issue})" for name, issue in pending))
    report.add("Commands", "```\n" + "\n".join(commands) + "\n```")

    md, page = out / "report.md", out / "report.html"
    for path, text in ((md, report.markdown()), (page, report.html())):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    print(md)
    return 0
