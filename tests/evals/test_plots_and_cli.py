"""Loss-curve PNGs; `olmax eval lm-eval` and `eval heldout` on a bundled set through the CLI."""

import json

import pytest

from olmax.cli import main
from olmax.evals.curves import read_run
from olmax.evals.plots import plot_run
from tests.evals.evals_synthetic import write_reference_csv, write_run


def test_plot_writes_a_png(tmp_path):
    run = write_run(tmp_path / "run", memorize=True)
    out = tmp_path / "plots" / "loss.png"
    assert (
        main(
            [
                "eval",
                "plot",
                "--run",
                str(run),
                "--reference",
                str(write_reference_csv(tmp_path / "r.csv")),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert not list(out.parent.glob(".*"))  # no temporary left behind


def test_downstream_curves_are_read_and_get_their_own_panel(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    acc = "eval/downstream/arc_easy_test_rc_5shot (length-normalized accuracy v2)"
    records = [{"step": s, "loss": 5.0 - s / 100} for s in range(1, 101)]
    for r in records:
        if r["step"] % 50 == 0:  # in-loop evals: held-out CE and downstream metrics in the step's record
            r.update({"eval/sciq/ce": 6.0, acc: r["step"] / 400, acc.replace(" v2)", ")"): 0.9})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    curves = read_run(run)
    steps, values = curves.downstream["arc_easy_test_rc_5shot"]
    assert steps.tolist() == [50, 100] and values.tolist() == [0.125, 0.25]
    assert list(curves.downstream) == ["arc_easy_test_rc_5shot"] and list(curves.heldout) == ["sciq"]
    one, two = tmp_path / "one.png", tmp_path / "two.png"
    plot_run(write_run(tmp_path / "plain", memorize=False), one)
    plot_run(run, two)
    width = lambda p: int.from_bytes(p.read_bytes()[16:20], "big")  # noqa: E731 - the PNG header's width
    assert width(two) > 1.4 * width(one)  # the downstream panel beside the loss panel


def test_plot_of_an_empty_run_is_an_error(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").write_text("")
    assert main(["eval", "plot", "--run", str(tmp_path), "--out", str(tmp_path / "x.png")]) == 2
    assert "no train or held-out records" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


@pytest.fixture(scope="module")
def hf_model(hf_checkpoint):
    import torch
    from transformers import Olmo3ForCausalLM

    m = Olmo3ForCausalLM.from_pretrained(str(hf_checkpoint), torch_dtype=torch.float32).eval()
    m.config._attn_implementation = "eager"
    return m


def test_lm_eval_cli(hf_checkpoint, hf_model, tokenizer, tmp_path, monkeypatch):
    import datasets

    from tests.evals.test_lm_eval_adapter import QUESTIONS, TASKS, transformers_mc_accuracy

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    datasets.Dataset.from_list(QUESTIONS).save_to_disk(str(tmp_path / "ds"))
    arrow = next((tmp_path / "ds").glob("*.arrow"))
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "mc.yaml").write_text(TASKS["olmax_toy_mc"].format(arrow=arrow))
    out = tmp_path / "lm.json"
    assert (
        main(
            [
                "eval",
                "lm-eval",
                "--checkpoint",
                str(hf_checkpoint),
                "--tasks",
                "olmax_toy_mc",
                "--include-path",
                str(tmp_path / "tasks"),
                "--max-length",
                "64",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())
    docs = [(q["question"], q["choices"], q["label"]) for q in QUESTIONS]
    want = transformers_mc_accuracy(hf_model, tokenizer, docs, max_length=64)
    assert report["results"]["olmax_toy_mc"]["acc,none"] == pytest.approx(want)
    assert report["n-samples"]["olmax_toy_mc"]["effective"] == len(QUESTIONS)


def test_heldout_on_a_bundled_set(hf_checkpoint, tmp_path):
    """The bundled SciQ set (the olmax cache, fetched on first use), read through its template."""
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "eval",
                "heldout",
                "--checkpoint",
                str(hf_checkpoint),
                "--eval",
                "sciq",
                "--eval",
                "arc_easy",
                "--limit",
                "6",
                "--seq-len",
                "64",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    sciq, arc = json.loads(out.read_text())["results"]
    assert sciq["eval"] == "sciq" and sciq["documents"] == 6 and sciq["tokens"] > 0
    assert arc["eval"] == "arc_easy" and len(arc["fingerprint"]) == 64


def test_bundled_lm_eval_tasks_run_offline(hf_checkpoint, hf_model, tokenizer, tmp_path, monkeypatch):
    """The generated olmax_* task YAMLs load the bundled arrow files and score (a few rows each); each
    accuracy equals transformers' on the same first rows of the set."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    from lm_eval.tasks import TaskManager, get_task_dict

    from olmax.evals.lm_eval_adapter import OlmaxLM, TaskRun, evaluate
    from olmax.evals.lm_eval_tasks import bundled_task_dir
    from tests.evals.test_lm_eval_adapter import transformers_mc_accuracy

    lm = OlmaxLM(checkpoint=str(hf_checkpoint), max_length=256, batch_size=8)
    tasks = ["olmax_arc_easy", "olmax_boolq", "olmax_sciq", "olmax_piqa"]
    res = evaluate(lm, tasks, TaskRun(limit=3))
    defs = get_task_dict(
        tasks, TaskManager(include_path=str(bundled_task_dir(tasks)), include_defaults=False)
    )
    for t in tasks:
        assert res["n-samples"][t]["effective"] == 3
        task = defs[t]
        docs = [
            (task.doc_to_text(d), task.doc_to_choice(d), task.doc_to_target(d))
            for d in list(task.validation_docs())[:3]
        ]
        want = transformers_mc_accuracy(hf_model, tokenizer, docs, max_length=256)
        assert res["results"][t]["acc,none"] == pytest.approx(want), t


def test_bundled_task_targets(monkeypatch, tmp_path):
    """Targets and choices of the generated tasks point at the right answers (BoolQ's bool -> 0/1)."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    from lm_eval.tasks import TaskManager, get_task_dict

    from olmax.evals.lm_eval_tasks import bundled_task_dir

    tm = TaskManager(
        include_path=str(bundled_task_dir(["olmax_boolq", "olmax_arc_easy", "olmax_sciq"])),
        include_defaults=False,
    )
    tasks = get_task_dict(["olmax_boolq", "olmax_arc_easy", "olmax_sciq"], tm)
    boolq = list(tasks["olmax_boolq"].validation_docs())[:20]
    assert [tasks["olmax_boolq"].doc_to_target(d) for d in boolq] == [int(d["answer"]) for d in boolq]
    assert {int(d["answer"]) for d in boolq} == {0, 1}
    arc = tasks["olmax_arc_easy"]
    for d in list(arc.validation_docs())[:20]:
        assert (
            arc.doc_to_choice(d)[arc.doc_to_target(d)]
            == d["choices"]["text"][d["choices"]["label"].index(d["answerKey"])]
        )
    sciq = tasks["olmax_sciq"]
    d = next(iter(sciq.validation_docs()))
    assert sciq.doc_to_choice(d)[sciq.doc_to_target(d)] == d["correct_answer"]
