"""Held-out loss: equals transformers on the same converted weights (fp32, 1e-4 rel); bits-per-byte by hand;
instances pad and mask correctly; clean subsets; the CLI writes a report."""

import json
import math

import numpy as np
import pytest
import torch

from olmax.cli import main
from olmax.errors import OlmaxError
from olmax.evals.heldout import prepare_eval_set, prepare_eval_sets, run_heldout
from olmax.evals.instances import build_instances
from olmax.evalsets.sets import EvalSet

TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "Ünïcödé — naïve cafés and 数字.",
    "def add(a, b):\n    return a + b\n" * 6,  # long: truncated at seq_len 48
    "Photosynthesis converts light energy.",
)


def hf_row_nll(hf_model, ids):
    """Sum of -log p(ids[j+1] | ids[:j+1]) over the row, computed by transformers in fp32."""
    with torch.no_grad():
        logits = hf_model(torch.tensor([ids])).logits[0].double()
    logp = torch.log_softmax(logits, dim=-1)
    return -float(sum(logp[j, ids[j + 1]] for j in range(len(ids) - 1)))


@pytest.fixture(scope="module")
def hf_model(hf_checkpoint):
    from transformers import Olmo3ForCausalLM

    m = Olmo3ForCausalLM.from_pretrained(str(hf_checkpoint), torch_dtype=torch.float32).eval()
    m.config._attn_implementation = "eager"
    return m


def test_heldout_loss_matches_transformers(model, hf_model, tokenizer):
    es = EvalSet("toy", tuple(f"d{i}" for i in range(len(TEXTS))), TEXTS, "inline")
    ps = prepare_eval_set(es, tokenizer, seq_len=48, vocab_size=1000)
    [rec] = run_heldout(model, [ps], step=7, batch_size=3)  # 4 rows: the last batch is padded
    eos = tokenizer.eos_token_id
    total, tokens, n_bytes = 0.0, 0, 0
    for text in TEXTS:
        row = ([eos] + tokenizer.encode_batch([text])[0] + [eos])[:48]  # no padding: real tokens only
        total += hf_row_nll(hf_model, row)
        tokens += len(row) - 1
    assert rec["tokens"] == tokens and rec["truncated"] == 1 and rec["step"] == 7
    assert rec["ce"] == pytest.approx(total / tokens, rel=1e-4)
    assert rec["ppl"] == pytest.approx(math.exp(total / tokens), rel=1e-4)
    n_bytes = sum(len(t.encode()) for t in TEXTS[:2] + TEXTS[3:])
    long_row = ([eos] + tokenizer.encode_batch([TEXTS[2]])[0])[:48]
    n_bytes += len(tokenizer.decode(long_row[1:]).encode())
    assert rec["bytes"] == n_bytes
    assert rec["bpb"] == pytest.approx(total / (math.log(2) * n_bytes), rel=1e-4)
    assert rec["fingerprint"] == es.fingerprint and rec["documents"] == 4


def test_bits_per_byte_by_hand_on_a_known_string(tokenizer):
    """A uniform 'model' over V tokens: NLL = n_targets * ln V; bytes = UTF-8 bytes of the string."""
    text = "naïve café"  # 10 characters, 12 UTF-8 bytes
    assert len(text.encode()) == 12
    vocab = 1000

    def uniform(ids):
        import jax.numpy as jnp

        return jnp.zeros((*ids.shape, vocab), jnp.float32)

    ps = prepare_eval_set(EvalSet("s", ("a",), (text,), "inline"), tokenizer, seq_len=64)
    [rec] = run_heldout(uniform, [ps])
    n_targets = len(tokenizer.encode_batch([text])[0]) + 1  # every token of the text, then its EOS
    assert rec["tokens"] == n_targets and rec["bytes"] == 12
    assert rec["ce"] == pytest.approx(math.log(vocab), rel=1e-6)
    assert rec["bpb"] == pytest.approx(n_targets * math.log(vocab) / (math.log(2) * 12), rel=1e-6)


def test_instances_pad_and_mask():
    inst = build_instances(
        [[5, 6, 7], [8] * 10],
        ["abc", "x" * 10],
        seq_len=6,
        eos_id=0,
        pad_id=1,
        decode=lambda ids: "x" * len(ids),
    )
    np.testing.assert_array_equal(inst.inputs, [[0, 5, 6, 7, 0, 1], [0, 8, 8, 8, 8, 8]])
    np.testing.assert_array_equal(inst.targets, [[5, 6, 7, 0, 1, 1], [8, 8, 8, 8, 8, 1]])
    np.testing.assert_array_equal(inst.mask, [[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0]])
    np.testing.assert_array_equal(inst.n_bytes, [3, 5])  # the truncated row counts its 5 scored tokens
    np.testing.assert_array_equal(inst.truncated, [False, True])
    olmo_core = build_instances(
        [[5, 6, 7]],
        ["abc"],
        seq_len=6,
        eos_id=0,
        pad_id=1,
        decode=lambda ids: "y" * len(ids),
        prefix_eos=False,
    )
    np.testing.assert_array_equal(olmo_core.inputs, [[5, 6, 7, 0, 1, 1]])
    np.testing.assert_array_equal(olmo_core.mask, [[1, 1, 1, 0, 0, 0]])


def test_padding_does_not_change_the_loss(model, tokenizer):
    """The same documents at two pad lengths give the same loss: padding is masked, and causal."""
    es = EvalSet("p", ("a", "b"), TEXTS[:2], "inline")
    short = run_heldout(model, [prepare_eval_set(es, tokenizer, seq_len=40)])[0]
    long = run_heldout(model, [prepare_eval_set(es, tokenizer, seq_len=96)])[0]
    assert short["truncated"] == 0 and short["tokens"] == long["tokens"]
    assert short["ce"] == pytest.approx(long["ce"], rel=1e-5)


def test_clean_subset_and_cli(hf_checkpoint, tmp_path, capsys):
    data = tmp_path / "held.jsonl"
    data.write_text("".join(json.dumps({"id": f"doc{i}", "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    leaks = tmp_path / "leaks.json"
    leaks.write_text(json.dumps({"contaminated": [{"eval": "held", "id": "doc1"}]}))
    out = tmp_path / "r.json"
    rc = main(
        [
            "eval",
            "heldout",
            "--checkpoint",
            str(hf_checkpoint),
            "--eval",
            f"held={data}",
            "--seq-len",
            "48",
            "--leaks",
            str(leaks),
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    report = json.loads(out.read_text())
    full, clean = report["results"]
    assert (full["subset"], clean["subset"]) == ("all", "clean")
    assert full["documents"] == 4 and clean["documents"] == 3
    assert clean["tokens"] < full["tokens"]
    # the audit names items without an id field by their 0-based index: those ids drop the same rows
    bare = tmp_path / "bare.jsonl"
    bare.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    leaks.write_text(json.dumps({"contaminated": [{"eval": "bare", "id": 0}, {"eval": "bare", "id": 2}]}))
    assert (
        main(
            [
                "eval",
                "heldout",
                "--checkpoint",
                str(hf_checkpoint),
                "--eval",
                f"bare={bare}",
                "--seq-len",
                "48",
                "--leaks",
                str(leaks),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    full, clean = json.loads(out.read_text())["results"]
    assert full["documents"] == 4 and clean["documents"] == 2
    assert "held" in capsys.readouterr().out


def test_bad_inputs_raise_clear_errors(tokenizer, tmp_path):
    with pytest.raises(OlmaxError, match="vocabulary"):
        prepare_eval_set(EvalSet("s", ("a",), ("hi",), "x"), tokenizer, seq_len=8, vocab_size=10)
    with pytest.raises(OlmaxError, match="twice"):
        prepare_eval_sets(["a=x", "a=y"], tokenizer, 8)
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"body": "no text field"}\n')
    with pytest.raises(OlmaxError, match="text-field"):
        prepare_eval_sets([f"b={bad}"], tokenizer, 8)
