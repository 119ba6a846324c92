"""`olmax eval watch` on a tiny trained run (6 steps, checkpoints at 2, 4, 6, in-loop evals at the same
steps): one record per checkpoint and set, in step order, whose CE equals the trainer's in-loop record and
`olmax eval heldout` on that checkpoint; half-written checkpoints are not read, a checkpoint removed before
it was read is recorded as skipped, a second watcher refuses, a full disk keeps the previous file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from olmax.atomic import exclusive
from olmax.cli import main
from olmax.evals.watch import WatchSettings, follow
from tests.tb_events import tensorboard_scalars
from tests.train.train_testdata import run_train, write_config, write_mix

STEPS = (2, 4, 6)
HELD = [
    "The quick brown fox jumps over the lazy dog.",
    "Photosynthesis converts light energy into glucose.",
    "def add(a, b):\n    return a + b",
    "Question: Who proposed evolution?\nAnswer: Darwin",
    "naïve cafés — 数字 12345",
]
OTHER = ["Pack my box with five dozen liquor jugs.", "print(add(2, 3))", "The lazy dog sleeps."]


def write_set(path: Path, texts: list[str], prefix: str) -> Path:
    path.write_text(
        "".join(json.dumps({"id": f"{prefix}-{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tokenizer_file):
    """A finished 6-step run that checkpoints every 2 steps (all kept) and evaluates two sets in-loop."""
    root = tmp_path_factory.mktemp("watch")
    sets = [
        f"held={write_set(root / 'held.jsonl', HELD, 'h')}",
        f"other={write_set(root / 'other.jsonl', OTHER, 'o')}",
    ]
    config = write_config(
        root / "tiny.yaml",
        write_mix(root / "data"),
        steps=6,
        every=2,
        checkpoint={"every": 2, "keep": 10},
        train={"eval_every": 2, "eval_sets": sets, "eval_limit": 0},
    )
    os.environ["OLMAX_EVAL_TOKENIZER"] = str(tokenizer_file)  # the trainer's in-loop eval tokenizer
    try:
        run_train(config, root / "run")
    finally:
        del os.environ["OLMAX_EVAL_TOKENIZER"]
    return root, sets


@pytest.fixture
def run(tiny, tmp_path) -> Path:
    """A private copy of the finished run (tests damage or delete checkpoints)."""
    shutil.copytree(tiny[0] / "run", tmp_path / "run")
    return tmp_path / "run"


def watch(run: Path | str, tokenizer_file, *args: str) -> int:
    return main(
        [
            "eval",
            "watch",
            "--run",
            str(run),
            "--tokenizer",
            str(tokenizer_file),
            "--poll-seconds",
            "0.05",
            *args,
        ]
    )


def heldout(records: list[dict]) -> list[dict]:
    return [r for r in records if r["kind"] == "heldout"]


def read(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "evals" / "evals.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def full(tiny, tokenizer_file, tmp_path_factory) -> bytes:
    """evals.jsonl of an uninterrupted `--once` over the whole run."""
    run = tmp_path_factory.mktemp("full") / "run"
    shutil.copytree(tiny[0] / "run", run)
    assert watch(run, tokenizer_file, "--once") == 0
    return (run / "evals" / "evals.jsonl").read_bytes()


def test_one_record_per_checkpoint_and_set_equal_to_in_loop_and_eval_heldout(
    tiny, run, full, tokenizer_file, tmp_path, monkeypatch, capsys
):
    root, sets = tiny
    monkeypatch.setenv("OLMAX_EVAL_TOKENIZER", str(tokenizer_file))  # the in-loop default, no --tokenizer
    assert main(["eval", "watch", "--run", str(run), "--once"]) == 0
    recs = read(run)
    assert [(r["step"], r["eval"], r["subset"]) for r in recs] == [
        (s, n, "all") for s in STEPS for n in ("held", "other")
    ]
    assert (run / "evals" / "evals.jsonl").read_bytes() == full
    in_loop = {r["step"]: r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}
    for r in recs:
        assert r["ce"] == in_loop[r["step"]][f"eval/{r['eval']}/ce"], r  # bitwise: same sets, batch, dtype
        assert r["documents"] == (5 if r["eval"] == "held" else 3)
    for step in STEPS:
        out = tmp_path / f"h{step}.json"
        assert (
            main(
                [
                    "eval",
                    "heldout",
                    "--checkpoint",
                    str(run / "checkpoints" / str(step)),
                    *sum((["--eval", s] for s in sets), []),
                    "--tokenizer",
                    str(tokenizer_file),
                    "--seq-len",
                    "32",
                    "--out",
                    str(out),
                ]
            )
            == 0
        )
        want = json.loads(out.read_text())["results"]
        got = [r for r in recs if r["step"] == step]
        assert [(g["ce"], g["fingerprint"], g["tokens"]) for g in got] == [
            (w["ce"], w["fingerprint"], w["tokens"]) for w in want
        ]
    table = (run / "evals" / "summary.md").read_text()
    assert "| step | held CE | other CE |" in table and all(f"\n| {s} | " in table for s in STEPS)
    assert (run / "evals" / "curves.png").read_bytes()[:4] == b"\x89PNG"
    # a rerun finds every step done: nothing evaluated, the file unchanged
    capsys.readouterr()
    assert watch(run, tokenizer_file, "--once") == 0
    assert (run / "evals" / "evals.jsonl").read_bytes() == full
    assert "3 step(s) already in" in capsys.readouterr().err


def test_half_written_checkpoints_are_not_read_until_committed(run, full, tokenizer_file):
    ckpts = run / "checkpoints"
    (ckpts / "6" / "commit_success.txt").rename(run / "marker")  # renamed but not committed
    state_file = max((ckpts / "4" / "state").rglob("d/*"), key=lambda f: f.stat().st_size)
    whole = state_file.read_bytes()
    state_file.write_bytes(whole[:100])  # committed, then cut short: differs from its seal
    shutil.copytree(ckpts / "2", ckpts / "8.orbax-checkpoint-tmp-1234")  # the trainer's save in flight
    assert watch(run, tokenizer_file, "--once") == 0
    assert sorted({r["step"] for r in read(run)}) == [2]
    assert (ckpts / "8.orbax-checkpoint-tmp-1234").is_dir()  # the watcher never cleans the trainer's folder
    (run / "marker").rename(ckpts / "6" / "commit_success.txt")
    state_file.write_bytes(whole)
    assert watch(run, tokenizer_file, "--once") == 0
    assert (run / "evals" / "evals.jsonl").read_bytes() == full  # 4 and 6 appended in step order


def test_follows_new_checkpoints_until_the_final_step(run, full, tokenizer_file):
    """Without --once the watcher polls; a checkpoint committed later is evaluated, then it exits (final
    step 6 = train.steps)."""
    hidden = run / "hidden"
    hidden.mkdir()
    for s in (4, 6):
        (run / "checkpoints" / str(s)).rename(hidden / str(s))
    seen: list[str] = []

    def log(msg: str) -> None:  # the "trainer": commits the next step once the watcher has done one
        seen.append(msg)
        if msg.startswith("step ") and (hidden / "4").exists() or msg.startswith("step 4"):
            nxt = min(int(p.name) for p in hidden.iterdir())
            (hidden / str(nxt)).rename(run / "checkpoints" / str(nxt))

    job = follow(WatchSettings(run=str(run), tokenizer=str(tokenizer_file), poll_seconds=0.05), log=log)
    assert (job.out / "evals.jsonl").read_bytes() == full
    assert [m.split(":")[0] for m in seen if m.startswith("step ")] == ["step 2", "step 4", "step 6"]


def test_no_new_checkpoint_for_too_long_is_an_error(run, tokenizer_file, capsys):
    shutil.rmtree(run / "checkpoints" / "6")
    capsys.readouterr()
    assert watch(run, tokenizer_file, "--max-idle-seconds", "0.3") == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("olmax: error: ") and "no new checkpoint for 0.3 s (waiting for step 6)" in err
    assert sorted({r["step"] for r in read(run)}) == [2, 4]  # what was done is kept


def test_checkpoint_removed_before_evaluation_is_recorded_as_skipped(run, tokenizer_file):
    logs: list[str] = []

    def log(msg: str) -> None:  # retention deletes step 4 while the watcher evaluates step 2
        logs.append(msg)
        if msg.startswith("step 2:"):
            shutil.rmtree(run / "checkpoints" / "4")

    follow(WatchSettings(run=str(run), tokenizer=str(tokenizer_file), once=True), log=log)
    recs = read(run)
    assert [(r["step"], r["kind"]) for r in recs] == [
        (2, "heldout"),
        (2, "heldout"),
        (4, "skipped"),
        (6, "heldout"),
        (6, "heldout"),
    ]
    assert any(m.startswith("step 4: skipped, removed") for m in logs)
    assert "skipped: removed" in (run / "evals" / "summary.md").read_text()


def test_every_k_and_until_step(run, tokenizer_file):
    assert watch(run, tokenizer_file, "--every", "4", "--once", "--out", str(run / "e4")) == 0
    assert sorted({json.loads(x)["step"] for x in (run / "e4" / "evals.jsonl").read_text().splitlines()}) == [
        4,
        6,
    ]
    assert watch(run, tokenizer_file, "--until-step", "3", "--out", str(run / "u3")) == 0  # exits, no polling
    assert sorted({json.loads(x)["step"] for x in (run / "u3" / "evals.jsonl").read_text().splitlines()}) == [
        2
    ]


def test_second_watcher_refuses(run, tokenizer_file, capsys):
    with exclusive(run / "evals", "olmax eval watch"):
        capsys.readouterr()
        assert watch(run, tokenizer_file, "--once") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and err[0].startswith("olmax: error: ")
        and "another olmax process is writing it" in err[0]
    )
    assert not (run / "evals" / "evals.jsonl").exists()


def test_file_url_and_object_store_run_folders(run, full, tokenizer_file, capsys, tmp_path, monkeypatch):
    """A file:// URL is read in place; a run in an object store (fsspec's memory:// here; s3:// and gs:// in
    tests/train/test_train_bucket.py) through a local mirror, its records written back to the store."""
    import fsspec

    assert watch(f"file://{run.resolve()}", tokenizer_file, "--once") == 0
    assert (run / "evals" / "evals.jsonl").read_bytes() == full
    monkeypatch.setenv("OLMAX_RUN_STAGING", str(tmp_path / "staging"))
    fs = fsspec.filesystem("memory")
    url = f"memory://watch-{tmp_path.name}/run"
    for p in sorted(run.rglob("*")):
        if p.is_file() and "evals" not in p.relative_to(run).parts and not p.name.endswith(".lock"):
            fs.put_file(str(p), f"{url}/{p.relative_to(run).as_posix()}")
    try:
        capsys.readouterr()
        assert watch(url, tokenizer_file, "--once") == 0
        assert url in capsys.readouterr().err
        assert fs.cat_file(f"{url}/evals/evals.jsonl") == full
    finally:
        fs.rm(url.split("://", 1)[1].split("/", 1)[0], recursive=True)


def test_bad_eval_set_and_checkpoint_of_another_model_exit_2_in_one_line(run, tokenizer_file, capsys):
    capsys.readouterr()
    assert watch(run, tokenizer_file, "--once", "--eval", f"gone={run / 'no-such.jsonl'}") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("olmax: error: ") and "no-such.jsonl" in err[0]
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("vocab_size: 1000", "vocab_size: 1200"))
    assert watch(run, tokenizer_file, "--once") == 2
    err = [
        ln for ln in capsys.readouterr().err.splitlines() if not ln.startswith("olmax eval watch: ")
    ]  # progress
    assert (
        len(err) == 1 and "a checkpoint of another model" in err[0] and "checkpoint (1024, 64)" in err[0]
    ), err
    assert not (run / "evals" / "evals.jsonl").exists()


def test_leaks_give_clean_records_equal_to_eval_heldout(run, tiny, tokenizer_file, tmp_path):
    leaks = tmp_path / "leaks.json"
    # as `olmax audit leaks` writes it: every audited set under "sets", the contaminated items listed
    report = {"sets": {"held": {"contaminated": 1}, "other": {"contaminated": 0}}}
    leaks.write_text(json.dumps({**report, "contaminated": [{"eval": "held", "id": "h-1"}]}))
    assert watch(run, tokenizer_file, "--until-step", "2", "--leaks", str(leaks)) == 0
    got = read(run)
    assert [(r["eval"], r["subset"], r["documents"]) for r in got] == [
        ("held", "all", 5),
        ("held", "clean", 4),
        ("other", "all", 3),
        ("other", "clean", 3),
    ]
    out = tmp_path / "h.json"
    assert (
        main(
            [
                "eval",
                "heldout",
                "--checkpoint",
                str(run / "checkpoints" / "2"),
                "--eval",
                tiny[1][0],
                "--eval",
                tiny[1][1],
                "--tokenizer",
                str(tokenizer_file),
                "--seq-len",
                "32",
                "--leaks",
                str(leaks),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert [r["ce"] for r in got] == [r["ce"] for r in json.loads(out.read_text())["results"]]


def test_other_sets_under_a_reused_name_are_refused(run, tokenizer_file, tmp_path, capsys):
    assert watch(run, tokenizer_file, "--until-step", "2") == 0
    other = write_set(tmp_path / "x.jsonl", ["different text"], "x")
    capsys.readouterr()
    assert watch(run, tokenizer_file, "--once", "--eval", f"held={other}") == 2
    assert "other content or settings" in capsys.readouterr().err


def test_tensorboard_mirrors_the_records(run, tokenizer_file):
    assert watch(run, tokenizer_file, "--until-step", "2", "--tensorboard") == 0
    assert watch(run, tokenizer_file, "--once", "--tensorboard") == 0
    events = list((run / "evals" / "tb").glob("events.out.tfevents.*"))
    assert len(events) == 1  # rebuilt from evals.jsonl at start: no duplicate points after a restart
    ce = [(step, value) for tag, step, value in tensorboard_scalars(events[0]) if tag == "eval/held/ce"]
    want = [(r["step"], r["ce"]) for r in read(run) if r["eval"] == "held"]
    assert [s for s, _ in ce] == [s for s, _ in want]
    assert [v for _, v in ce] == pytest.approx([v for _, v in want], rel=1e-6)


def test_disk_full_keeps_the_previous_file_and_a_rerun_completes(run, full, tokenizer_file):
    assert watch(run, tokenizer_file, "--until-step", "4") == 0
    before = (run / "evals" / "evals.jsonl").read_bytes()
    limit = len(before) + 100  # the rewrite with step 6 cannot fit
    code = (
        "import resource, signal, sys\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
        "from olmax.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    )
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # no cache entries to write past the limit
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "eval",
            "watch",
            "--run",
            str(run),
            "--once",
            "--tokenizer",
            str(tokenizer_file),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 2, p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    err = [ln for ln in p.stderr.splitlines() if ln.startswith("olmax: error: ")]
    assert len(err) == 1 and "File too large while writing" in err[0], p.stderr[-3000:]
    assert (run / "evals" / "evals.jsonl").read_bytes() == before
    assert sorted(p.name for p in (run / "evals").iterdir()) == [
        "costs.jsonl",
        "curves.png",
        "evals.jsonl",
        "summary.md",
    ]
    assert watch(run, tokenizer_file, "--once") == 0
    assert (run / "evals" / "evals.jsonl").read_bytes() == full


@pytest.mark.slow
def test_lm_eval_and_memorization_records(run, tokenizer_file, tmp_path, monkeypatch):
    """Opt-in per-step extras: an lm-eval task through the olmax adapter (the numbers of `olmax eval lm-eval`
    on that checkpoint) and the memorization checks, one record each, in the table too."""
    for var, value in (
        ("HF_DATASETS_OFFLINE", "1"),
        ("HF_HUB_OFFLINE", "1"),
        ("HF_HOME", str(tmp_path / "hf")),
    ):
        monkeypatch.setenv(var, value)
    assert (
        watch(
            run,
            tokenizer_file,
            "--until-step",
            "2",
            "--lm-eval",
            "olmax_arc_easy",
            "--lm-eval-limit",
            "6",
            "--memorization",
        )
        == 0
    )
    recs = read(run)
    assert [r["kind"] for r in recs] == ["heldout", "heldout", "lm_eval", "memorization"]
    out = tmp_path / "lm.json"
    assert (
        main(
            [
                "eval",
                "lm-eval",
                "--checkpoint",
                str(run / "checkpoints" / "2"),
                "--tasks",
                "olmax_arc_easy",
                "--limit",
                "6",
                "--tokenizer",
                str(tokenizer_file),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    want = json.loads(out.read_text())["results"]["olmax_arc_easy"]
    assert recs[2]["samples"] == 6
    assert {k: recs[2]["metrics"][k] for k in ("acc,none", "acc_norm,none")} == {
        k: want[k] for k in ("acc,none", "acc_norm,none")
    }
    assert isinstance(recs[3]["flagged"], bool) and {"gap", "exposure", "extract", "train_vs_unseen"} <= set(
        recs[3]["checks"]
    )
    table = (run / "evals" / "summary.md").read_text()
    assert "olmax_arc_easy acc" in table and "memorization" in table


def test_olmo_core_token_set_in_watch_equals_eval_heldout_with_its_names(
    run, tokenizer, tokenizer_file, tmp_path
):
    import numpy as np

    docs = tokenizer.encode_batch(HELD + OTHER)
    tokens = tmp_path / "val.npy"
    np.asarray([t for d in docs for t in [*d, tokenizer.eos_token_id]], np.uint32).tofile(tokens)
    assert watch(run, tokenizer_file, "--eval", f"ppl={tokens}", "--until-step", "2", "--tensorboard") == 0
    [rec] = heldout(read(run))
    assert (
        rec["documents"] == len(docs) and rec["tokens"] - rec["targets"] == len(docs) and rec["bpb"] is None
    )
    out = tmp_path / "h.json"
    argv = ["eval", "heldout", "--checkpoint", str(run / "checkpoints" / "2"), "--eval", f"ppl={tokens}"]
    assert main([*argv, "--tokenizer", str(tokenizer_file), "--seq-len", "32", "--out", str(out)]) == 0
    [want] = json.loads(out.read_text())["results"]
    assert (rec["ce"], rec["tokens"], rec["fingerprint"]) == (want["ce"], want["tokens"], want["fingerprint"])
    [events] = (run / "evals" / "tb").glob("events.out.tfevents.*")
    tags = {tag: value for tag, _, value in tensorboard_scalars(events)}
    # OLMo-core's `CE loss`; TensorBoard tags hold no spaces, so tensorboardX writes `CE_loss`
    assert tags["eval/lm/ppl/CE_loss"] == pytest.approx(rec["ce"], rel=1e-6)
    assert tags["eval/lm/ppl/PPL"] == pytest.approx(rec["ppl"], rel=1e-6) and "eval/ppl/bpb" not in tags
