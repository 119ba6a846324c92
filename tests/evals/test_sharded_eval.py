"""Sharded evaluation on 8 CPU devices (`XLA_FLAGS=--xla_force_host_platform_device_count=8` in child
processes): checkpoints of tiny runs written on 1, 4 and 8 devices, each evaluated on meshes of 1, 2 and 8
devices (parameters replicated, sharded, both), give the per-item CE of the 1-device eval within 1e-6
relative in fp32 (8 -> 1, 1 -> 8, 4 -> 2 among them); the parameters really are split as the mesh says;
`olmax eval heldout --mesh` and `olmax eval watch --mesh` on 8 devices give the records of the 1-device
eval and of the trainer's in-loop eval on 4, and the watcher keeps what each step cost. A run in a bucket
is evaluated from its URL (slow: the loopback object stores)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from olmax.cli import main
from tests.evals.test_watch import HELD as WATCH_HELD
from tests.evals.test_watch import OTHER, write_set
from tests.train.train_testdata import run_train, train_env, write_config, write_mix

WRITERS = (1, 4, 8)  # device counts the runs are trained on
MESHES = ("1x1", "8x1", "1x8", "2x4", "1x2")  # what each checkpoint is evaluated on
REL = 1e-6
HELD = [*WATCH_HELD, OTHER[0]]

# Scores 12 rows of fixed random tokens with the checkpoint on each mesh given, in one process that sees 8
# devices; per mesh: each row's CE, greedy flags, the mesh, and one sharded parameter's shard shape.
CHILD = r"""
import json, sys
from olmax.testing.sharded_scores import scores_on_meshes

checkpoint, out, *meshes = sys.argv[1:]
json.dump(scores_on_meshes(checkpoint, meshes), open(out, "w"))
"""


def eight_devices() -> dict:
    return train_env(devices=8)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tokenizer_file):
    """Tiny runs of 4 steps (checkpoints at 2 and 4) trained on 1, 4 and 8 devices; the one on 4 evaluates
    the held-out set in-loop at each checkpoint."""
    root = tmp_path_factory.mktemp("sharded")
    mix = write_mix(root / "data")
    held = write_set(root / "held.jsonl", HELD, "h")
    out = {}
    for n in WRITERS:
        train = {"eval_every": 2, "eval_sets": [f"held={held}"], "eval_limit": 0} if n == 4 else {}
        config = write_config(
            root / f"run{n}.yaml",
            mix,
            steps=4,
            every=2,
            checkpoint={"every": 2, "keep": 2},
            train=train,
        )
        os.environ["OLMAX_EVAL_TOKENIZER"] = str(tokenizer_file)
        try:
            run_train(config, root / f"run{n}", devices=n)
        finally:
            del os.environ["OLMAX_EVAL_TOKENIZER"]
        out[n] = root / f"run{n}"
    return out, held


def child_scores(checkpoint: Path, tmp_path: Path, meshes=MESHES, env: dict | None = None) -> dict:
    out = tmp_path / f"scores-{checkpoint.parent.parent.name}.json"
    p = subprocess.run(
        [sys.executable, "-c", CHILD, str(checkpoint), str(out), *meshes],
        env=env or eight_devices(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(out.read_text())


def max_rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.abs(b)))


@pytest.mark.parametrize("writer", WRITERS)
def test_per_item_ce_of_any_mesh_equals_one_device(runs, writer, tmp_path):
    """The checkpoint of a run written on `writer` devices, on each mesh of MESHES: every row's CE within
    1e-6 of the 1-device eval, the same greedy rows, and the head split as the mesh says (fsdp-way along
    d_model, the trainer's rule, replicated over data)."""
    got = child_scores(runs[0][writer] / "checkpoints" / "4", tmp_path)
    one = got["1x1"]
    assert one["mesh"].startswith("1x1 (1 x ") and one["head_devices"] == 1
    for spec in MESHES[1:]:
        data, fsdp = map(int, spec.split("x"))
        r = got[spec]
        assert r["mesh"].startswith(f"{spec} ({data * fsdp} x "), r["mesh"]
        assert r["head_devices"] == data * fsdp and r["head_shard"] == [64 // fsdp, 1024], (spec, r)
        assert max_rel(r["ce"], one["ce"]) <= REL, (spec, r["ce"], one["ce"])
        assert r["greedy"] == one["greedy"]


def test_heldout_and_watch_on_eight_devices_equal_one_device_and_the_in_loop_eval(
    runs, tokenizer_file, tmp_path
):
    """`olmax eval heldout --mesh 2x4` (8 devices) gives the CE of the 1-device eval in this process; `olmax
    eval watch --mesh 1x8` gives the CE the trainer logged in-loop on its 4 devices, says what each step
    cost and keeps it in costs.jsonl."""
    paths, held = runs
    run = tmp_path / "run4"
    shutil.copytree(paths[4], run)
    args = ["--eval", f"held={held}", "--tokenizer", str(tokenizer_file), "--dtype", "float32"]
    one = tmp_path / "one.json"
    ck = str(run / "checkpoints" / "4")
    assert main(["eval", "heldout", "--checkpoint", ck, *args, "--mesh", "1x1", "--out", str(one)]) == 0
    eight = tmp_path / "eight.json"
    cmd = [sys.executable, "-m", "olmax.cli", "eval", "heldout", "--checkpoint", ck, *args]
    p = subprocess.run(
        [*cmd, "--mesh", "2x4", "--out", str(eight)],
        env=eight_devices(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    a, b = json.loads(one.read_text()), json.loads(eight.read_text())
    assert a["mesh"].startswith("1x1 (1 x ") and b["mesh"].startswith("2x4 (8 x ")
    assert max_rel([b["results"][0]["ce"]], [a["results"][0]["ce"]]) <= REL

    watch = [sys.executable, "-m", "olmax.cli", "eval", "watch", "--run", str(run), "--once"]
    p = subprocess.run(
        [*watch, "--mesh", "1x8", "--tokenizer", str(tokenizer_file), "--dtype", "float32"],
        env=eight_devices(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    records = [json.loads(x) for x in (run / "evals" / "evals.jsonl").read_text().splitlines()]
    in_loop = {
        r["step"]: r["eval/held/ce"]
        for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
        if "eval/held/ce" in r
    }
    assert [r["step"] for r in records] == [2, 4] and sorted(in_loop) == [2, 4]
    for r in records:
        assert max_rel([r["ce"]], [in_loop[r["step"]]]) <= REL, (r, in_loop)
    costs = [json.loads(x) for x in (run / "evals" / "costs.jsonl").read_text().splitlines()]
    assert [c["step"] for c in costs] == [2, 4] and [c["first"] for c in costs] == [True, False]
    for c in costs:
        assert c["mesh"].startswith("1x8 (8 x ") and c["dtype"] == "float32" and c["download_s"] is None
        assert c["tokens"] == records[0]["tokens"] and c["tokens_per_s"] > 0 and c["restore_s"] > 0
    assert "on 1x8 (8 x " in p.stderr and "tokens/s" in p.stderr, p.stderr[-2000:]


@pytest.mark.slow
def test_a_run_in_a_bucket_is_evaluated_from_its_url_on_another_device_count(runs, store, tmp_path):
    """The run written on 4 devices, uploaded as the trainer uploads it, evaluated from `URL` (its newest
    step) and `URL/checkpoints/2` on 2 of 8 devices: the per-item CE of the local 1-device eval."""
    from olmax.train.run_mirror import RunMirror

    url = store.join("run4")
    shutil.copytree(runs[0][4], tmp_path / "run4")  # the push keeps its record in the folder it sends
    RunMirror(url, "train", local=tmp_path / "run4").push()
    env = {**eight_devices(), **store.server.env, "OLMAX_RUN_STAGING": str(tmp_path / "staging")}
    for step, remote in ((4, url), (2, f"{url}/checkpoints/2")):
        local = child_scores(runs[0][4] / "checkpoints" / str(step), tmp_path, ("1x1",))["1x1"]
        got = child_scores_url(remote, tmp_path, env)
        assert got["mesh"].startswith("1x2 (2 x ")
        assert max_rel(got["ce"], local["ce"]) <= REL


def child_scores_url(url: str, tmp_path: Path, env: dict) -> dict:
    """CHILD on what `local_checkpoint(url)` pulls (the step alone in a local mirror), on a 1x2 mesh."""
    code = f"from olmax.train.run_folder import local_checkpoint\nimport sys\nsys.argv[1] = local_checkpoint(sys.argv[1])\n{CHILD}"
    out = tmp_path / "url.json"
    p = subprocess.run(
        [sys.executable, "-c", code, url, str(out), "1x2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(out.read_text())["1x2"]
