"""The trainer's eval hook: flat `<set>/<metric>` floats equal to run_heldout, and the curves reader takes
them back from metrics.jsonl as `eval/<set>/ce` keys."""

import json
from types import SimpleNamespace

import pytest

from olmax.evals.curves import read_run
from olmax.evals.hook import train_hook
from olmax.evals.reports import append_jsonl


def test_hook_scores_and_metrics_round_trip(model, tokenizer_file, tmp_path):
    data = tmp_path / "held.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in ("one two three", "four five six seven")))
    cfg = SimpleNamespace(data=SimpleNamespace(seq_len=32), model=SimpleNamespace(vocab_size=1000))
    hook = train_hook(cfg, sets=[f"held={data}"], tokenizer=str(tokenizer_file), limit=0)
    first = hook(SimpleNamespace(step=10, model=model))
    assert set(first) == {"held/ce", "held/ppl", "held/bpb", "held/tokens"}
    assert first["held/ce"] > 0 and first["held/tokens"] > 0
    assert hook(SimpleNamespace(step=20, model=model)) == first  # same params: same numbers
    append_jsonl(tmp_path / "metrics.jsonl", [
        {"step": 10, "loss": 5.0, **{f"eval/{k}": v for k, v in first.items()}},
        {"step": 20, "loss": 4.0, "eval/held/ce": first["held/ce"] - 0.5},
    ])
    curves = read_run(tmp_path)
    steps, ce = curves.heldout["held"]
    assert steps.tolist() == [10, 20] and ce[0] == pytest.approx(first["held/ce"])
    assert curves.train_loss.tolist() == [5.0, 4.0]
