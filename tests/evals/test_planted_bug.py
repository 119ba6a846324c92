"""End to end with the real trainer: a tiny run on a mix where one small source's shard is present under 60
names (a planted mistake: byte-identical copies the plan counts once each) is flagged by `olmax eval
memorization --run DIR`; the same run on a mix that lists the shard 60 times on purpose (a planned repeat:
the same path) and the clean mix are not. Tokens come from a sparse Markov chain over 200 of 1,000 ids (learnable, entropy ln 4 = 1.39 nats), so a
small model learns the chain on clean data and can only go below it by memorizing."""

import json

import numpy as np
import pytest

from olmax.cli import main

V, L, G, ACTIVE, STEPS = 1000, 64, 4, 200, 200
OVERRIDES = [
    f"model.vocab_size={V}",
    "model.eos_token_id=999",
    "model.pad_token_id=998",
    f"data.seq_len={L}",
    f"data.global_batch_size={G}",
    "optim.warmup_steps=10",
    "optim.lr=1e-2",
    "train.eval_every=0",  # the tiny recipe's in-loop evals read dolma2 text, beyond this 1,000-id vocabulary
]


def markov_tokens(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    succ = rng.integers(0, ACTIVE, (ACTIVE, 4))  # each of the first 200 ids has 4 successors, in every source
    walk = np.random.default_rng(seed)
    choice = walk.integers(0, 4, n)
    out = np.empty(n, np.uint32)
    t = int(walk.integers(0, ACTIVE))
    for i in range(n):
        out[i] = t
        t = int(succ[t, choice[i]])
    return out


@pytest.fixture(scope="module")
def mixes(tmp_path_factory):
    d = tmp_path_factory.mktemp("mix")
    (d / "web.npy").write_bytes(markov_tokens(1500 * L, seed=1).tobytes())
    (d / "small.npy").write_bytes(markov_tokens(4 * L, seed=2).tobytes())
    (d / "clean.txt").write_text(f"web,{d / 'web.npy'}\nsmall,{d / 'small.npy'}\n")
    small = (d / "small.npy").read_bytes()
    copies = []
    for k in range(60):
        (d / f"small-copy-{k}.npy").write_bytes(small)
        copies.append(f"small,{d / f'small-copy-{k}.npy'}\n")
    (d / "planted.txt").write_text(f"web,{d / 'web.npy'}\n" + "".join(copies))
    (d / "planned.txt").write_text(f"web,{d / 'web.npy'}\n" + f"small,{d / 'small.npy'}\n" * 60)
    return d


def train_and_check(mixes, kind, tmp_path, *extra):
    run = tmp_path / kind
    assert (
        main(
            [
                "train",
                "--config",
                "tiny",
                "--run-dir",
                str(run),
                "--steps",
                str(STEPS),
                "--mix",
                str(mixes / f"{kind}.txt"),
                "--no-progress",
                f"checkpoint.every={STEPS}",
                *OVERRIDES,
                # the trainer's replay monitor would stop the planted run at its first copied row: off, as
                # for a loader it does not watch, so the run trains on the copies for the check to find
                *(["train.monitor=false"] if kind == "planted" else []),
            ]
        )
        == 0
    )
    out = tmp_path / f"{kind}.json"
    rc = main(["eval", "memorization", "--run", str(run), "--per-stratum", "32", *extra, "--out", str(out)])
    return rc, json.loads(out.read_text())


@pytest.mark.slow
def test_planted_bug_is_flagged_and_clean_run_is_not(mixes, tmp_path, tokenizer_file):
    rc, planted = train_and_check(mixes, "planted", tmp_path)
    assert rc == 1 and planted["flagged"], json.dumps(planted["checks"], indent=1)[:3000]
    assert planted["checks"]["exposure"]["flagged_sources"] == ["small"]
    # held-out loss straight from the run's Orbax checkpoint (a run folder or one checkpoints/<step>)
    text = tmp_path / "held.jsonl"
    text.write_text(json.dumps({"text": "The quick brown fox jumps over the lazy dog."}) + "\n")
    for ck in (tmp_path / "planted", tmp_path / "planted" / "checkpoints" / str(STEPS)):
        out = tmp_path / "held.json"
        assert (
            main(
                [
                    "eval",
                    "heldout",
                    "--checkpoint",
                    str(ck),
                    "--tokenizer",
                    str(tokenizer_file),
                    "--eval",
                    f"held={text}",
                    "--out",
                    str(out),
                ]
            )
            == 0
        )
        assert json.loads(out.read_text())["results"][0]["tokens"] > 0
    rc, clean = train_and_check(mixes, "clean", tmp_path, "--power")
    assert rc == 0 and not clean["flagged"], json.dumps(clean["checks"], indent=1)[:3000]
    assert clean["checks"]["train_vs_unseen"]["status"] == "ok"
    # nothing was served beyond the plan: the verdict rests on the counts, and --power says per check what
    # dose a comparison of 32 web windows against 32 as planned could have seen
    web = clean["power_section"]["sources"]["web"]
    assert set(web["checks"]) == {"exposure", "zlib"}  # one checkpoint kept and no reference: no 9 or 10
    for f in web["checks"].values():
        assert (f["over_served"], f["as_planned"]) == (32, 32) and f["sd"] > 0
        assert f["smallest_dose"] is None or f["smallest_dose"] > 1.0
    assert "reason" in clean["power_section"]["sources"]["small"]  # 4 windows: too few to compare
    # the same 60 servings, planned: the plan is the null, so the run is clean, and the report says why
    rc, planned = train_and_check(mixes, "planned", tmp_path)
    assert rc == 0 and planned["verdict"] == "clean", json.dumps(planned["checks"], indent=1)[:3000]
    small = planned["repetition"]["small"]
    assert small["mix_repetition"] == 60.0 and small["over_served"] == 0
    assert small["planned_repetition"] == small["served_repetition"] > 10
