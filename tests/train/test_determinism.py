"""Two identical training processes running at the same time give bitwise-identical losses.

Exact resume is only meaningful if a run is reproducible at all: on a busy CPU, multi-threaded kernels
whose reduction order follows the thread schedule would make two identical runs differ in the last ulp
(an earlier sequence-chunked CE path did). Running both at once is the harshest schedule on 2 cores."""

import subprocess

from tests.train.train_testdata import losses, metrics, train_cmd, train_env, write_config, write_mix


def test_concurrent_identical_runs_are_bitwise_equal(tmp_path):
    # the real dolma2 vocabulary: the LM head's large matmuls are what the CPU runtime splits over threads
    config = write_config(
        tmp_path / "t.yaml", write_mix(tmp_path / "data"), steps=6, every=100, model={"vocab_size": 100278}
    )
    runs = [tmp_path / "a", tmp_path / "b"]
    procs = [
        subprocess.Popen(
            train_cmd(config, r), env=train_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for r in runs
    ]
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out[-3000:]
    a, b = losses(runs[0]), losses(runs[1])
    assert list(a) == list(range(1, 7)) and a == b
    assert [r["grad_norm"] for r in metrics(runs[0])] == [r["grad_norm"] for r in metrics(runs[1])]
