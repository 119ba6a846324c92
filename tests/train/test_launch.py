"""olmax.train.launch: when a run starts JAX's distributed system and how (the two-process run itself is
tests/train/test_distributed.py)."""

import pytest

from olmax.errors import OlmaxError
from olmax.train import launch


def test_cloud_tpu_hosts_come_from_the_workers_environment():
    assert launch.cloud_tpu_hosts({}) == 1
    assert launch.cloud_tpu_hosts({"TPU_WORKER_HOSTNAMES": "localhost"}) == 1
    assert launch.cloud_tpu_hosts({"TPU_WORKER_HOSTNAMES": "10.0.0.2,10.0.0.3,10.0.0.4,10.0.0.5"}) == 4
    assert launch.cloud_tpu_hosts({"TPU_WORKER_HOSTNAMES": "a,b", "MEGASCALE_NUM_SLICES": "2"}) == 4


def test_one_host_starts_nothing_and_a_slice_starts_without_flags(monkeypatch):
    import jax

    calls = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda *a, **k: calls.append((a, k)))
    assert launch.start(None, None, -1, {"TPU_WORKER_HOSTNAMES": "localhost"}) == ""
    assert calls == []
    said = launch.start(None, None, -1, {"TPU_WORKER_HOSTNAMES": "w0,w1,w2,w3"})
    assert calls == [((), {"heartbeat_timeout_seconds": 120})] and "Cloud TPU slice, 4 hosts" in said
    calls.clear()
    said = launch.start("10.0.0.2:8476", 4, 1, {"JAX_PLATFORMS": "tpu", "OLMAX_LOST_PROCESS_TIMEOUT": "60"})
    want = {"coordinator_address": "10.0.0.2:8476", "num_processes": 4, "process_id": 1}
    assert calls == [((), {**want, "heartbeat_timeout_seconds": 120})]  # past the watchdog's 60 s
    assert said.startswith("process 1 of 4")


def test_a_coordinator_without_its_count_is_an_error():
    with pytest.raises(OlmaxError, match="--num-processes"):
        launch.start("127.0.0.1:1234", None, -1, {})
