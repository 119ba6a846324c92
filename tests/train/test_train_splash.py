"""`olmax train` with the splash kernel (Pallas interpret mode on the CPU): the run prints the kernel and
remat it resolved, and on a 4-device mesh, where the kernel runs per device in shard_map, its losses equal
the XLA path's on the same devices."""

import json

import pytest

from tests.train.train_testdata import losses, run_train, write_config, write_mix

SEQ = 128  # one 128-wide tile: the shortest sequence the kernel takes


@pytest.mark.slow
def test_splash_on_four_devices_trains_as_the_xla_path(tmp_path):
    mix = write_mix(tmp_path / "data", sizes=(1400, 1000, 700, 1000))
    runs = {}
    for impl in ("splash", "xla"):
        config = write_config(
            tmp_path / f"{impl}.yaml",
            mix,
            steps=3,
            every=3,
            model={"attention_impl": impl, "max_position_embeddings": SEQ, "remat": "matmuls"},
            data={"seq_len": SEQ},
        )
        out = run_train(config, tmp_path / impl, devices=4, timeout=600)
        runs[impl] = losses(tmp_path / impl)
        if impl == "splash":
            assert "attention splash (128x128 tiles, fused backward)" in out, out[-2000:]
            assert "remat matmuls (keeps q, k, v, context, o, gate, up, down" in out, out[-2000:]
            start = [
                json.loads(line) for line in (tmp_path / impl / "history.jsonl").read_text().splitlines()
            ][0]
            assert start["compute"]["attention"].startswith("splash"), start
    assert runs["splash"].keys() == runs["xla"].keys() == {1, 2, 3}
    for step, want in runs["xla"].items():
        assert abs(runs["splash"][step] - want) <= 1e-5 * abs(want), (step, runs["splash"][step], want)
