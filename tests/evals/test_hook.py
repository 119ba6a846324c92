"""The trainer's eval hook: flat `<set>/<metric>` floats equal to run_heldout, and the curves reader takes
them back from metrics.jsonl as `eval/<set>/ce` keys."""

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from olmax.data.tokenize import load_tokenizer
from olmax.evals.curves import read_run
from olmax.evals.heldout import SetReading, prepare_eval_sets, run_heldout
from olmax.evals.hook import train_hook
from olmax.jsonio import append_jsonl


def test_hook_scores_and_metrics_round_trip(model, tokenizer_file, tmp_path):
    data = tmp_path / "held.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in ("one two three", "four five six seven")))
    cfg = SimpleNamespace(data=SimpleNamespace(seq_len=32), model=SimpleNamespace(vocab_size=1000))
    hook = train_hook(cfg, sets=[f"held={data}"], tokenizer=str(tokenizer_file), limit=0)
    first = hook(SimpleNamespace(step=10, model=model))
    assert set(first) == {"held/ce", "held/ppl", "held/bpb", "held/tokens"}
    assert first["held/ce"] > 0 and first["held/tokens"] > 0
    assert hook(SimpleNamespace(step=20, model=model)) == first  # same params: same numbers
    # the hook's numbers are run_heldout's on the same set, and both are the CE computed here from the logits
    (prepared,) = prepare_eval_sets(
        [f"held={data}"], load_tokenizer(str(tokenizer_file)), 32, SetReading(vocab_size=1000)
    )
    (rec,) = run_heldout(model, [prepared], step=10)
    assert {m: first[f"held/{m}"] for m in ("ce", "ppl", "bpb", "tokens")} == {
        m: rec[m] for m in ("ce", "ppl", "bpb", "tokens")
    }
    inst = prepared.instances
    logits = np.asarray(model(inst.inputs), dtype=np.float64)
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
    logp -= logits.max(-1, keepdims=True)
    nll = -np.take_along_axis(logp, inst.targets[..., None].astype(np.int64), axis=-1)[..., 0]
    tokens = int(inst.mask.sum())
    assert first["held/tokens"] == tokens > 0
    assert first["held/ce"] == pytest.approx(float((nll * inst.mask).sum()) / tokens, rel=1e-5)
    assert first["held/ppl"] == pytest.approx(math.exp(first["held/ce"]), rel=1e-6)
    append_jsonl(
        tmp_path / "metrics.jsonl",
        [
            {"step": 10, "loss": 5.0, **{f"eval/{k}": v for k, v in first.items()}},
            {"step": 20, "loss": 4.0, "eval/held/ce": first["held/ce"] - 0.5},
        ],
    )
    curves = read_run(tmp_path)
    steps, ce = curves.heldout["held"]
    assert steps.tolist() == [10, 20] and ce[0] == pytest.approx(first["held/ce"])
    assert curves.train_loss.tolist() == [5.0, 4.0]


def test_hook_sets_from_config_then_env(model, tokenizer_file, tmp_path, monkeypatch):
    data = tmp_path / "held.jsonl"
    data.write_text(json.dumps({"text": "one two three four"}) + "\n")

    def cfg(sets=(), limit=None):
        return SimpleNamespace(
            data=SimpleNamespace(seq_len=32),
            model=SimpleNamespace(vocab_size=1000),
            train=SimpleNamespace(eval_sets=sets, eval_limit=limit),
        )

    # the config's sets win over the environment (which names a set that does not exist)
    monkeypatch.setenv("OLMAX_EVAL_SETS", "no_such_set")
    hook = train_hook(cfg((f"from_cfg={data}",), 0), tokenizer=str(tokenizer_file))
    assert set(hook(SimpleNamespace(step=1, model=model))) == {
        f"from_cfg/{m}" for m in ("ce", "ppl", "bpb", "tokens")
    }
    # no sets in the config: the environment's
    monkeypatch.setenv("OLMAX_EVAL_SETS", f"from_env={data}")
    hook = train_hook(cfg((), 0), tokenizer=str(tokenizer_file))
    assert {k.split("/")[0] for k in hook(SimpleNamespace(step=1, model=model))} == {"from_env"}
