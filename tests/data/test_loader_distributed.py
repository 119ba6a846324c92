"""Two JAX processes on 127.0.0.1 (jax.distributed, gloo): each loads its own rows, saves and resumes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import numpy as np

from olmax.data.index import build_index
from olmax.data.loader import Loader
from olmax.data.mixfile import read_mix
from olmax.data.stream import StreamSpec
from tests.data.loader_testdata import write_position_files

L, G, SEED, STEPS = 16, 8, 21, 3

WORKER = textwrap.dedent("""
    import sys
    import jax
    import numpy as np
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_numpy_rank_promotion", "raise")
    port, pid, mix, work, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid)
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    from olmax.data.index import build_index
    from olmax.data.loader import Loader
    from olmax.data.stream import StreamSpec
    from olmax.data.mixfile import read_mix
    loader = Loader(build_index(read_mix(mix), %(L)d),
                    StreamSpec(seq_len=%(L)d, global_batch_size=%(G)d, seed=%(SEED)d, work_dir=work))
    mesh = Mesh(np.array(jax.devices()), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    it = loader.iterate()
    local, gathered = [], []
    for _ in range(%(STEPS)d):
        batch = next(it)
        local.append(batch["instance_ids"])
        ids = jax.make_array_from_process_local_data(sharding, batch["input_ids"])
        gathered.append(np.asarray(multihost_utils.process_allgather(ids, tiled=True)))
    # Both processes take part in one Orbax save; only the primary writes the (shared) loader state.
    import orbax.checkpoint as ocp
    from olmax.data.loader_checkpoint import LoaderRestore, LoaderSave
    with ocp.CheckpointManager(work + "/ckpt") as mngr:
        mngr.save(%(STEPS)d, args=ocp.args.Composite(data=LoaderSave(it.state)))
        mngr.wait_until_finished()
    with ocp.CheckpointManager(work + "/ckpt") as mngr:
        state = mngr.restore(%(STEPS)d, args=ocp.args.Composite(data=LoaderRestore())).data
    resumed = loader.iterate(state)
    after = [next(resumed)["instance_ids"] for _ in range(2)]
    np.savez(out, local=np.stack(local), gathered=np.stack(gathered), after=np.stack(after),
             count=jax.process_count(), index=jax.process_index(), devices=jax.device_count())
""") % {"L": L, "G": G, "SEED": SEED, "STEPS": STEPS}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_jax_processes_each_get_their_rows(tmp_path):
    mix = write_position_files(str(tmp_path / "data"))
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    port = _free_port()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(script),
                str(port),
                str(i),
                mix,
                str(tmp_path / "w"),
                str(tmp_path / f"out{i}.npz"),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    logs = [p.communicate(timeout=240)[0] for p in procs]
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-3000:]
    outs = [np.load(tmp_path / f"out{i}.npz") for i in range(2)]
    assert [int(o["index"]) for o in outs] == [0, 1]
    assert all(int(o["count"]) == 2 and int(o["devices"]) == 4 for o in outs)

    full = Loader(
        build_index(read_mix(mix), L),
        StreamSpec(seq_len=L, global_batch_size=G, seed=SEED, work_dir=str(tmp_path / "w")),
        process_index=0,
        process_count=1,
    )
    for step in range(STEPS + 2):
        batch = full.batch(1, step)
        if step >= STEPS:  # after the Orbax save/restore
            for i, o in enumerate(outs):
                np.testing.assert_array_equal(o["after"][step - STEPS], batch["instance_ids"][i::2])
            continue
        for i, o in enumerate(outs):
            np.testing.assert_array_equal(o["local"][step], batch["instance_ids"][i::2])
        # The global array is process 0's rows then process 1's: every row of the global batch once.
        want = np.concatenate([batch["input_ids"][0::2], batch["input_ids"][1::2]])
        for o in outs:
            np.testing.assert_array_equal(o["gathered"][step], want)
