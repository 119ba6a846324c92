"""A trained run leaves as an HF checkpoint: `olmax model convert --to hf RUN OUT` loads offline in
transformers (model and tokenizer), its logits equal olmax's on the run, lm-eval's own `hf` backend
scores it per request as the `olmax` adapter scores the run, and `--to olmax` gives a folder that
`train.init_from` starts a new run from."""

import json
import struct
from pathlib import Path

import jax
import numpy as np
import pytest

from olmax.cli import main
from olmax.data.loader import open_loader
from olmax.errors import OlmaxError
from olmax.train.config import load_config
from olmax.train.loop import train
from tests.train.train_testdata import write_config, write_mix

jax.config.update("jax_numpy_rank_promotion", "raise")

# the tiny model with dolma2's vocabulary, so the run's tokenizer is found without being named
DOLMA2 = {
    "vocab_size": 100_278,
    "eos_token_id": 100_257,
    "pad_token_id": 100_277,
    "max_position_embeddings": 128,
}
STEPS = 4


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    config = write_config(
        root / "run.yaml",
        write_mix(root / "data"),
        steps=STEPS,
        every=2,
        model=DOLMA2,
        checkpoint={"every": 2, "keep": 5},
    )
    train(load_config(config), root / "run")
    return root / "run"


@pytest.fixture(scope="module")
def exported(run, tmp_path_factory):
    out = tmp_path_factory.mktemp("hf") / "out"
    assert main(["model", "convert", "--to", "hf", str(run), str(out)]) == 0
    return out


@pytest.fixture
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))


def safetensors_metadata(path: Path) -> dict:
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))["__metadata__"]


def test_export_records_where_it_came_from(run, exported):
    names = {p.name for p in exported.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "olmax_export.json",
    } <= names
    info = json.loads((exported / "olmax_export.json").read_text())
    cfg = load_config(str(run / "config.yaml"))
    assert info["step"] == STEPS and info["source_run"] == str(run.resolve()) and info["dtype"] == "float32"
    assert info["data_seed"] == 7 and info["tokens_seen"] == STEPS * 8 * 32
    assert (
        info["data_fingerprint"] == open_loader(cfg.data, process_index=0, process_count=1).index.fingerprint
    )
    meta = safetensors_metadata(exported / "model.safetensors")
    assert meta["olmax_step"] == str(STEPS) and meta["olmax_data_fingerprint"] == info["data_fingerprint"]
    assert meta["format"] == "pt"
    hf_cfg = json.loads((exported / "config.json").read_text())
    assert hf_cfg["architectures"] == ["Olmo3ForCausalLM"] and hf_cfg["vocab_size"] == 100_278


def test_transformers_loads_it_offline_and_agrees_with_the_run(run, exported, offline):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from olmax.assets import tokenizer_path
    from olmax.data.tokenize import load_tokenizer
    from olmax.evals.scoring import load_model

    hf_tok = AutoTokenizer.from_pretrained(str(exported))
    ours = load_tokenizer(str(tokenizer_path("dolma2")))
    text = "def add(a, b):\n    return a + b  # naïve café, 数字 <|endoftext|>"
    assert hf_tok.encode(text) == ours.encode_batch([text])[0]
    assert hf_tok.eos_token_id == 100_257 and hf_tok.pad_token_id == 100_277
    hf = AutoModelForCausalLM.from_pretrained(str(exported), dtype=torch.float32).eval()
    assert type(hf).__name__ == "Olmo3ForCausalLM"
    ids = np.random.default_rng(0).integers(0, 998, (2, 96)).astype(np.int32)
    with torch.no_grad():
        theirs = hf(torch.tensor(ids, dtype=torch.long)).logits.numpy()
    mine = np.asarray(load_model(run)(jax.numpy.asarray(ids)))[..., :100_278]
    assert np.abs(theirs - mine).max() < 1e-4


def test_model_parity_passes_on_the_export(exported, offline):
    from olmax.model.parity import run_parity

    report = run_parity(str(exported), 96, "float32", None, "float32")
    assert report["passed"], report


def test_lm_eval_hf_backend_scores_the_export_as_the_adapter_scores_the_run(run, exported, offline, tmp_path):
    from lm_eval.models.huggingface import HFLM

    from olmax.evals.lm_eval_adapter import TaskRun, evaluate

    out = tmp_path / "olmax.json"
    assert (
        main(
            [
                "eval",
                "lm-eval",
                "--checkpoint",
                str(run),
                "--tasks",
                "olmax_arc_easy",
                "--limit",
                "24",
                "--log-samples",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    ours = json.loads(out.read_text())
    hf = evaluate(
        HFLM(pretrained=str(exported), dtype="float32", device="cpu", batch_size=8),
        ["olmax_arc_easy"],
        TaskRun(limit=24, log_samples=True),
    )
    a, b = ours["samples"]["olmax_arc_easy"], hf["samples"]["olmax_arc_easy"]
    assert [x["doc_id"] for x in a] == [x["doc_id"] for x in b] and len(a) == 24
    diffs = [
        abs(r[0] - s[0]) for x, y in zip(a, b) for r, s in zip(x["responses"], y["responses"], strict=True)
    ]
    assert len(diffs) >= 4 * 24 - 8 and max(diffs) <= 1e-4, max(diffs)
    for metric in ("acc,none", "acc_norm,none"):
        assert ours["results"]["olmax_arc_easy"][metric] == hf["results"]["olmax_arc_easy"][metric]


def test_a_step_folder_exports_that_step_in_bfloat16(run, tmp_path):
    out = tmp_path / "bf16"
    assert (
        main(
            [
                "model",
                "convert",
                "--to",
                "hf",
                str(run / "checkpoints" / "2"),
                str(out),
                "--dtype",
                "bfloat16",
            ]
        )
        == 0
    )
    assert json.loads((out / "olmax_export.json").read_text())["step"] == 2
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    with open(out / "model.safetensors", "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    assert header["lm_head.weight"]["dtype"] == "BF16"


def test_bad_sources_are_one_clear_error(run, exported, tmp_path, capsys):
    assert main(["model", "convert", "--to", "hf", str(tmp_path), str(tmp_path / "x")]) == 2
    assert "not a training run folder" in capsys.readouterr().err
    assert main(["model", "convert", "--to", "hf", str(run), str(exported)]) == 2  # never over an export
    assert "already exists" in capsys.readouterr().err
    assert main(["model", "convert", "--to", "hf", str(run / "checkpoints" / "3"), str(tmp_path / "y")]) == 2
    assert "no such checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    from olmax.train.export import run_tokenizer

    cfg = load_config(
        str(run / "config.yaml"),
        ["model.vocab_size=1000", "model.eos_token_id=999", "model.pad_token_id=998"],
    )
    with pytest.raises(OlmaxError, match="pass --tokenizer"):
        run_tokenizer(cfg)


def test_init_from_a_converted_model_starts_a_new_run(run, tmp_path):
    folder = tmp_path / "olmax"
    assert main(["model", "convert", "--to", "olmax", str(run), str(folder)]) == 0
    config = str(run / "config.yaml")
    fresh = train(load_config(config, ["train.steps=1"]), tmp_path / "fresh")
    warm = train(load_config(config, ["train.steps=1", f"train.init_from={folder}"]), tmp_path / "warm")
    assert "fresh optimizer" in warm["note"] and "scratch" in fresh["note"]
    first = {
        p: json.loads((tmp_path / p / "metrics.jsonl").read_text().splitlines()[0])["loss"]
        for p in ("fresh", "warm")
    }
    assert first["warm"] < first["fresh"] - 0.05  # the run's trained weights, not a fresh init
    with pytest.raises(OlmaxError, match="rope_theta"):
        train(
            load_config(config, ["train.steps=1", f"train.init_from={folder}", "model.rope_theta=10000"]),
            tmp_path / "other",
        )


def test_reading_a_run_never_touches_a_save_in_flight(run):
    """Evals and export read a step read-only: a trainer's in-flight save (Orbax's temporary folder) in the
    same checkpoints folder survives, where opening a CheckpointManager would have deleted it."""
    from olmax.evals.scoring import load_model

    inflight = run / "checkpoints" / "6.orbax-checkpoint-tmp-1234"
    (inflight / "state").mkdir(parents=True)
    try:
        load_model(run)
        load_model(run / "checkpoints" / "2")
        assert (inflight / "state").is_dir()
    finally:
        import shutil

        shutil.rmtree(inflight)
