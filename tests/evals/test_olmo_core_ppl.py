"""OLMo-core perplexity sets: olmax's per-label CE / PPL equal OLMo-core's own LM evaluator (its padded FSL
dataset, its label shift, its cross-entropy and its LMEvaluator metric) on the same model outputs, to
1e-5; the manifest suite resolves as OLMo-core resolves it; a missing file is an error and no report."""

import json
import math

import numpy as np
import pytest

from olmax.cli import main
from olmax.errors import OlmaxError
from olmax.evals.heldout import SetReading, prepare_eval_sets, run_heldout
from olmax.evalsets.spec import V3_SMALL_PPL, parse_eval_specs

SEQ_LEN = 24


def _documents(rng, eos, n_docs, vocab=1000):
    """Token documents (each ended by EOS): short ones, some longer than SEQ_LEN, one of EOS alone."""
    docs = [[eos]]
    for _ in range(n_docs - 1):
        n = int(rng.choice([3, 7, 15, 23, 24, 25, 40]))
        docs.append([int(t) for t in rng.integers(2, vocab, n - 1)] + [eos])
    return docs


def _write_tokens(path, docs, tail=()):
    path.parent.mkdir(parents=True, exist_ok=True)
    np.asarray([t for d in docs for t in d] + list(tail), np.uint32).tofile(path)
    return path


@pytest.fixture(scope="module")
def token_sets(tmp_path_factory, tokenizer):
    root = tmp_path_factory.mktemp("ppl")
    rng = np.random.default_rng(5)
    eos = tokenizer.eos_token_id
    a = _write_tokens(root / "a.npy", _documents(rng, eos, 11))
    b = _write_tokens(root / "b.npy", _documents(rng, eos, 6), tail=[5, 6, 7])  # a tail without EOS
    return {"a": a, "b": b}


def olmo_core_metrics(paths: dict, model, tokenizer, monkeypatch, batch_size=4) -> dict:
    """OLMo-core's LM evaluator over its NumpyPaddedFSLDataset of `paths`, with logits of `model`."""
    import concurrent.futures

    import jax.numpy as jnp
    import torch
    from olmo_core.data import NumpyPaddedFSLDataset
    from olmo_core.data.utils import get_labels
    from olmo_core.eval.lm_evaluator import LMEvaluator
    from olmo_core.nn.functional import cross_entropy_loss

    labels = list(paths)
    ds = NumpyPaddedFSLDataset(
        *[str(paths[k]) for k in labels],
        sequence_length=SEQ_LEN,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        vocab_size=1000,
        dtype=np.uint32,
        metadata=[{"label": k} for k in labels],
        include_instance_metadata=True,
    )
    ds.work_dir = paths[labels[0]].parent / "olmo-core-work"
    # its instance indices are written by worker processes; threads here (forking under JAX can hang)
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", concurrent.futures.ThreadPoolExecutor)
    ds.prepare()
    evaluator = LMEvaluator(name="lm", batches=[], labels=labels, device=torch.device("cpu"))
    items = [ds[i] for i in range(len(ds))]
    for start in range(0, len(items), batch_size):
        chunk = items[start : start + batch_size]
        batch = {
            "input_ids": torch.stack([it["input_ids"] for it in chunk]),
            "label_mask": torch.stack([it["label_mask"] for it in chunk]),
            "metadata": [it["metadata"] for it in chunk],
        }
        logits = torch.from_numpy(
            np.array(model(jnp.asarray(batch["input_ids"].numpy(), jnp.int32)), np.float32)
        )
        target = get_labels(batch)
        ce, _ = cross_entropy_loss(logits.view(-1, logits.shape[-1]), target.view(-1), reduction="none")
        evaluator.update_metrics(batch, ce.view(target.shape), logits)
    return {k: float(v) for k, v in evaluator.compute_metrics().items()}, len(ds)


def test_ce_equals_olmo_core_lm_evaluator(token_sets, model, tokenizer, hf_checkpoint, tmp_path, monkeypatch):
    theirs, n_instances = olmo_core_metrics(token_sets, model, tokenizer, monkeypatch)
    out = tmp_path / "r.json"
    argv = [
        "eval",
        "heldout",
        "--checkpoint",
        str(hf_checkpoint),
        "--seq-len",
        str(SEQ_LEN),
        "--batch-size",
        "3",
    ]
    argv += ["--eval", f"a={token_sets['a']}", "--eval", f"b={token_sets['b']}", "--out", str(out)]
    assert main(argv) == 0
    records = {r["eval"]: r for r in json.loads(out.read_text())["results"]}
    assert sum(r["documents"] for r in records.values()) == n_instances == 17
    for label in ("a", "b"):
        r = records[label]
        assert r["ce"] == pytest.approx(theirs[f"{label}/CE loss"], rel=1e-5, abs=1e-6)
        assert r["ppl"] == pytest.approx(theirs[f"{label}/PPL"], rel=1e-5)
        assert r["tokens"] - r["targets"] == r["documents"]  # n real tokens weigh n, n - 1 are scored
        assert "weighting" in r and r["bpb"] is None


def test_weights_by_hand_and_metric_names(token_sets, tokenizer):
    """A uniform model over V: every scored target costs ln V, so CE = ln V x sum(n - 1) / sum(n)."""
    import jax.numpy as jnp

    from olmax.evals.hook import flatten

    vocab = 1000
    [ps] = prepare_eval_sets([f"a={token_sets['a']}"], tokenizer, SEQ_LEN, SetReading(vocab_size=vocab))
    [rec] = run_heldout(lambda ids: jnp.zeros((*ids.shape, vocab), jnp.float32), [ps])
    docs = np.split(
        np.fromfile(token_sets["a"], np.uint32),
        np.flatnonzero(np.fromfile(token_sets["a"], np.uint32) == tokenizer.eos_token_id)[:-1] + 1,
    )
    n = np.minimum([d.size for d in docs], SEQ_LEN)
    assert (rec["tokens"], rec["targets"]) == (n.sum(), (n - 1).sum())
    assert rec["truncated"] == sum(d.size > SEQ_LEN for d in docs)
    assert rec["ce"] == pytest.approx(math.log(vocab) * (n - 1).sum() / n.sum(), rel=1e-6)
    flat = flatten([rec])
    assert flat["lm/a/CE loss"] == rec["ce"] and flat["lm/a/PPL"] == rec["ppl"] and "a/bpb" not in flat


def test_manifest_resolves_as_olmo_core(tmp_path, token_sets, tokenizer):
    from olmo_core.data import DataMix, TokenizerName

    paths, labels = DataMix.v3_small_ppl_validation.build(str(tmp_path), TokenizerName.dolma2)
    with pytest.raises(OlmaxError, match="c4_en-validation"):  # nothing there yet: the first file is named
        parse_eval_specs(["olmo-core:v3-small-ppl-validation"], base_dir=str(tmp_path))
    for p in paths:
        _write_tokens(tmp_path / p[len(str(tmp_path)) + 1 :], [[5, 6, tokenizer.eos_token_id]])
    specs = parse_eval_specs(["olmo-core:v3-small-ppl-validation"], base_dir=str(tmp_path))
    assert [s.name for s in specs] == labels and [s.source for s in specs] == paths
    assert all(s.tokens for s in specs) and len(specs) == len(V3_SMALL_PPL) == 11


def test_a_missing_suite_file_is_an_error_and_no_report(tmp_path, hf_checkpoint, tokenizer, capsys):
    from olmo_core.data import DataMix, TokenizerName

    paths, _ = DataMix.v3_small_ppl_validation.build(str(tmp_path), TokenizerName.dolma2)
    for p in paths[:-1]:
        _write_tokens(tmp_path / p[len(str(tmp_path)) + 1 :], [[5, 6, tokenizer.eos_token_id]])
    out = tmp_path / "r.json"
    argv = [
        "eval",
        "heldout",
        "--checkpoint",
        str(hf_checkpoint),
        "--eval",
        "olmo-core:v3-small-ppl-validation",
    ]
    assert main([*argv, "--base-dir", str(tmp_path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "wikitext_103" in err and paths[-1] in err and not out.exists()
    bad = tmp_path / "odd.npy"
    bad.write_bytes(b"\x01\x02\x03")
    with pytest.raises(OlmaxError, match="whole number"):
        prepare_eval_sets([f"odd={bad}"], tokenizer, SEQ_LEN)


def test_in_loop_hook_scores_a_token_set(token_sets, model, tokenizer_file):
    from types import SimpleNamespace

    from olmax.evals.hook import train_hook

    cfg = SimpleNamespace(
        data=SimpleNamespace(seq_len=SEQ_LEN),
        model=SimpleNamespace(vocab_size=1000),
        train=SimpleNamespace(eval_sets=(f"a={token_sets['a']}",), eval_limit=0, eval_base_dir=None),
    )
    got = train_hook(cfg, tokenizer=str(tokenizer_file))(SimpleNamespace(step=3, model=model))
    assert set(got) == {"a/ce", "a/ppl", "a/tokens", "lm/a/CE loss", "lm/a/PPL"}
    assert got["lm/a/CE loss"] == got["a/ce"] > 0
