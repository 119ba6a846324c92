"""olmax.model.sharding: the FSDP layout by shape and name, and (in a process with 8 CPU devices,
tests/model/mesh_checks.py) the platform a step is traced for and the vocabulary-sharded lookup against
the plain computation."""

import os
import subprocess
import sys
from pathlib import Path

from jax.sharding import PartitionSpec

from olmax.model import sharding


def test_shard_spec_keeps_the_vocabulary_whole_and_the_layer_axis_unsharded():
    P = PartitionSpec
    assert sharding.shard_spec((100352, 4096), 256, "embed") == P(None, "fsdp")
    assert sharding.shard_spec((4096, 100352), 256, "lm_head") == P("fsdp", None)
    assert sharding.shard_spec((4096, 100352), 256) == P(None, "fsdp")  # by shape alone: the largest dim
    assert sharding.shard_spec((32, 4096, 11008), 256, "up_proj") == P(None, None, "fsdp")
    assert sharding.shard_spec((32, 4096), 8, "weight") == P(None, "fsdp")
    assert sharding.shard_spec((32, 4096), 8192) == P()  # no dim divides: replicated
    assert sharding.shard_spec((100, 60), 16, "embed") == P()  # neither d_model nor another dim divides
    assert sharding.shard_spec((4096,), 8) == P() and sharding.shard_spec((4096, 4096), 1) == P()


def test_on_eight_devices():
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
    checks = Path(__file__).with_name("mesh_checks.py")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(checks)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
