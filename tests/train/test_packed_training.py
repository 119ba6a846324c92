"""Stage 3's stream in the step: packed rows train with OLMo-core's label mask (padding predicts nothing)
and intra-document attention, against OLMo-core's loss and transformers run on each document alone, and
a packed run resumes exactly."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from olmax.data.grain_source import document_masks
from olmax.train.config import load_config
from olmax.train.loop import train
from tests.train.train_testdata import losses, write_config

jax.config.update("jax_numpy_rank_promotion", "raise")

EOS, PAD = 999, 998  # the tiny test vocabulary's


def packed_row(rng, lengths, seq):
    """One packed row: documents (each ending in EOS) of `lengths`, then PAD; its label mask."""
    docs = [np.append(rng.integers(0, 990, n - 1), EOS) for n in lengths]
    row = np.concatenate(docs)
    mask = np.zeros(seq, bool)
    mask[: row.size] = True
    return np.concatenate([row, np.full(seq - row.size, PAD)]).astype(np.int32), mask, docs


@pytest.mark.parametrize("ce_chunk", [0, 8])
def test_padding_is_not_trained_on_as_olmo_core_masks_it(ce_chunk):
    from flax import nnx
    from olmo_core.nn.functional import cross_entropy_loss

    from olmax.model import init_model, tiny
    from olmax.train.config import OptimConfig
    from olmax.train.step import make_loss_fn

    rng = np.random.default_rng(0)
    rows = [packed_row(rng, lengths, 48) for lengths in ([10, 20, 5], [40], [16, 16, 16])]
    ids = np.stack([r[0] for r in rows])
    mask = np.stack([r[1] for r in rows])
    model_cfg, optim_cfg = tiny(), OptimConfig(z_loss=1e-3)
    model = init_model(model_cfg, seed=2)
    params = nnx.state(model).to_pure_dict()
    total, (ce, z) = make_loss_fn(model_cfg, optim_cfg, ce_chunk)(
        params, {"input_ids": jnp.asarray(ids), "label_mask": jnp.asarray(mask)}
    )
    logits = np.asarray(model.head(model.hidden(jnp.asarray(ids)), padded=True))
    labels = np.where(mask[:, 1:], ids[:, 1:], -100)  # OLMo-core: label_mask False -> ignore_index
    want_ce, want_z = cross_entropy_loss(
        torch.tensor(logits[:, :-1].reshape(-1, logits.shape[-1])),
        torch.tensor(labels.reshape(-1), dtype=torch.long),
        reduction="sum",
        compute_z_loss=True,
        z_loss_multiplier=1e-3,
    )
    assert float(ce) == pytest.approx(float(want_ce), rel=1e-5)
    assert float(z) == pytest.approx(float(want_z), rel=1e-5)


def test_document_masked_row_equals_each_document_alone_in_transformers():
    """Intra-document attention with RoPE positions running across the row (OLMo-core's): each
    document's logits in the packed row equal transformers' Olmo3 on that document alone."""
    from olmax.model.convert import from_hf
    from olmax.model.hf_reference import save_random_checkpoint

    path = save_random_checkpoint(Path(__import__("tempfile").mkdtemp()) / "hf", seed=4)
    from transformers import Olmo3ForCausalLM

    hf = Olmo3ForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    model = from_hf(path)
    rng = np.random.default_rng(1)
    row, _, docs = packed_row(rng, [9, 30, 17, 4], 64)
    seg, _ = document_masks(row[None], EOS)
    ours = np.asarray(model(jnp.asarray(row[None]), jnp.asarray(seg)))[0]
    start = 0
    for doc in docs:
        with torch.no_grad():
            alone = hf(torch.tensor(doc[None], dtype=torch.long)).logits[0].numpy()
        np.testing.assert_allclose(ours[start : start + doc.size], alone, atol=2e-4, rtol=0)
        start += doc.size
    assert start < 64  # the row ends in padding, which the comparison leaves out


@pytest.fixture(scope="module")
def packed_config(tmp_path_factory):
    from tests.data.test_packing import write_document_files

    root = tmp_path_factory.mktemp("packed")
    paths = write_document_files(str(root / "mix"), n_files=12, seed=3)
    for p in paths:  # into the tiny vocabulary: tokens < 990, EOS 999
        t = np.fromfile(p, np.uint32)
        np.where(t == 100257, EOS, t % 990).astype(np.uint32).tofile(p)
    (root / "mix" / "mix.txt").write_text("".join(f"web,{Path(p).name}\n" for p in paths))
    return root, write_config(
        root / "c.yaml",
        str(root / "mix" / "mix.txt"),
        steps=4,
        every=2,
        data={
            "seq_len": 64,
            "packed": True,
            "source_group_size": 4,
            "source_permutation_seed": 123,
            "document_masks": True,
        },
        model={"max_position_embeddings": 64},
    )


def test_a_packed_run_trains_and_resumes_exactly(packed_config):
    root, config = packed_config
    summary = train(load_config(config), root / "full")
    assert "packed" in load_config(config).data.describe() and summary["last"]["step"] == 4
    train(load_config(config, ["train.steps=2"]), root / "half")
    train(load_config(config), root / "half")
    assert losses(root / "half") == losses(root / "full") and all(
        np.isfinite(list(losses(root / "full").values()))
    )
