"""The replay monitor in a real two-process `olmax train` (two JAX CPU processes on 127.0.0.1, gloo).

Every process checks the whole global batch (row hashes all-gathered), so both hold the same state,
the checkpointed state restores both, a resume that replays steps is caught on both at the step it
happens, and two hosts emitting the same rows in one step are caught at that step."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.train.train_testdata import GBS, metrics, train_env, write_config, write_mix

# Runs `olmax.train.loop.train` as one of two processes, with an optional injected loader fault, and
# writes what its monitor ended with (state, counters, the alert it raised, time spent in it).
WORKER = textwrap.dedent("""
    import json, sys, time
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    port, pid, config, run, out, fault = sys.argv[1:7]
    overrides = sys.argv[7:]
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                               process_id=int(pid))
    import olmax.train.loop as loop
    from olmax.audit.monitor import ReplayError, StreamMonitor
    from olmax.data.loader import Loader
    from olmax.train.config import load_config

    if fault == "replay":  # the seed's bug: on resume the loader restarts 3 steps too early
        real_iterate = Loader.iterate
        Loader.iterate = lambda self, state=None: real_iterate(
            self, self.state_at(1, 3) if state is not None else None)
    elif fault == "rank0":  # every process is told it is process 0: both emit the same rows
        real_init = Loader.__init__
        def init(self, index, config, **kw):
            real_init(self, index, config, **{**kw, "process_index": 0})
        Loader.__init__ = init
    monitors, seconds = [], []
    real_monitor, real_update = loop._monitor, StreamMonitor.update_all_hosts
    def capture(*a, **kw):
        monitors.append(real_monitor(*a, **kw))
        return monitors[-1]
    def timed(self, *a, **kw):
        t = time.perf_counter()
        try:
            return real_update(self, *a, **kw)
        finally:
            seconds.append(time.perf_counter() - t)
    loop._monitor, StreamMonitor.update_all_hosts = capture, timed
    result = {"process": jax.process_index()}
    try:
        result["last"] = loop.train(load_config(config, overrides), run)["last"]
    except ReplayError as e:
        result["error"] = str(e)
    m = monitors[0]
    result.update(state=m.state_json(), counters=m.counters(), update_seconds=seconds)
    with open(out, "w") as f:
        json.dump(result, f)
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_processes(tmp: Path, config: str, run: Path, fault: str, *overrides: str) -> list[dict]:
    script = tmp / "monitor_worker.py"
    script.write_text(WORKER)
    port = _free_port()
    outs = [tmp / f"{run.name}-{fault}-{i}.json" for i in range(2)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(script),
                str(port),
                str(i),
                config,
                str(run),
                str(outs[i]),
                fault,
                *overrides,
            ],
            env=train_env(2),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    try:
        logs = [p.communicate(timeout=400)[0] for p in procs]
    finally:  # a hung collective must not leave the workers running after the test
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for i, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"process {i} failed:\n{log[-4000:]}"
    return [json.loads(o.read_text()) for o in outs]


@pytest.mark.slow
def test_two_processes_share_one_monitor_state_and_catch_a_replayed_resume(tmp_path):
    config = write_config(tmp_path / "t.yaml", write_mix(tmp_path / "data"), steps=6, every=3)
    run = tmp_path / "run"
    clean = _two_processes(tmp_path, config, run, "none")
    # both processes checked all 8 rows of each of the 6 global batches and hold the same state
    assert [r["process"] for r in clean] == [0, 1]
    assert clean[0]["state"] == clean[1]["state"] and clean[0]["counters"] == clean[1]["counters"]
    assert clean[0]["counters"]["audit_rows"] == 6 * GBS and clean[0]["counters"]["audit_repeats"] == 0
    assert [r["audit_rows"] for r in metrics(run)] == [GBS * s for s in range(1, 7)]
    saved = json.loads((run / "checkpoints" / "6" / "meta" / "metadata").read_text())["monitor"]
    assert saved == clean[0]["state"]  # what process 0 saved is what both hold
    for r in clean:
        per_step = sorted(r["update_seconds"])[len(r["update_seconds"]) // 2]
        print(
            f"process {r['process']}: monitor update (hash + all-gather + check) median "
            f"{per_step * 1e3:.2f} ms per step"
        )

    # Resume at step 6 with a loader that restarts at stream step 3: both processes restore the saved
    # state and raise at step 7 (which holds step 4's rows), before training on it.
    replay = _two_processes(tmp_path, config, run, "replay", "train.steps=10")
    for r in replay:
        assert "data replay: step 7, host 0, row 0" in r["error"], r
        assert "first seen at step 4, host 0, row 0" in r["error"]
    assert replay[0]["state"] == replay[1]["state"]
    assert replay[0]["counters"]["audit_repeats"] == GBS  # all rows of step 7, both hosts
    assert replay[0]["counters"]["audit_rows"] == 7 * GBS
    assert max(r["step"] for r in metrics(run)) == 6  # nothing was trained on the replayed rows

    # Without the fault the same resume passes on the restored state.
    right = _two_processes(tmp_path, config, run, "none", "train.steps=8")
    assert all("error" not in r for r in right)
    # step 8 starts epoch 2 (7 steps per epoch): the seen-set restarts, the counters go on
    assert (
        right[0]["counters"]
        == right[1]["counters"]
        == {"audit_rows": 8 * GBS, "audit_repeats": 0, "audit_epoch": 2}
    )


@pytest.mark.slow
def test_two_hosts_emitting_the_same_rows_are_caught_in_the_first_step(tmp_path):
    config = write_config(tmp_path / "t.yaml", write_mix(tmp_path / "data"), steps=3, every=3)
    out = _two_processes(tmp_path, config, tmp_path / "run", "rank0")
    for r in out:  # process 1 emitted process 0's rows: its first row repeats process 0's first row
        assert "data replay: step 1, host 1, row 0" in r["error"], r
        assert "first seen at step 1, host 0, row 0" in r["error"]
    assert out[0]["state"] == out[1]["state"]
    assert out[0]["counters"]["audit_repeats"] == GBS // 2  # every row host 1 emitted
    assert not (tmp_path / "run" / "metrics.jsonl").exists() or not metrics(tmp_path / "run")


GATHER_WORKER = textwrap.dedent("""
    import json, sys
    import jax
    import numpy as np
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    port, pid, out = sys.argv[1:4]
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                               process_id=int(pid))
    from olmax.audit.monitor import gather_hashes
    from olmax.errors import OlmaxError

    rows = 4 - int(pid)  # process 0 feeds 4 rows, process 1 feeds 3
    try:
        gather_hashes(np.arange(rows, dtype=np.uint64), np.arange(rows))
        result = {"error": None}
    except OlmaxError as e:
        result = {"error": str(e)}
    with open(out, "w") as f:
        json.dump(result, f)
""")


@pytest.mark.slow
def test_processes_feeding_different_row_counts_get_a_clear_error(tmp_path):
    """A loader bug that gives hosts different row counts must not reach the hash all-gather (a
    mismatched collective): the first call agrees on the count and every process raises, naming it."""
    script = tmp_path / "gather_worker.py"
    script.write_text(GATHER_WORKER)
    port = _free_port()
    outs = [tmp_path / f"gather-{i}.json" for i in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(port), str(i), str(outs[i])],
            env=train_env(2),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    logs = [p.communicate(timeout=120)[0] for p in procs]  # a mismatched all-gather would hang
    for i, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"process {i} failed:\n{log[-4000:]}"
    for out in outs:
        error = json.loads(out.read_text())["error"]
        assert error and "process 0: 4, process 1: 3" in error
