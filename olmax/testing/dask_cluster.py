"""A dask.distributed cluster on 127.0.0.1 for the DaskRunner (bench/peers/beam_parity.py and the tests):
`dask scheduler` and `dask worker` processes started as a user would (docs/cluster.md), each worker
single-threaded, all stopped (killed if they hang) however the block ends."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the folder that holds this olmax package


def _stop(procs: list[subprocess.Popen], grace: float = 10.0) -> None:
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=5)


@contextlib.contextmanager
def dask_cluster(workers: int = 2, timeout: float = 90.0) -> Iterator[str]:
    """Start a scheduler and `workers` single-threaded worker processes on loopback; yields the
    scheduler's address (tcp://127.0.0.1:PORT). Everything is stopped when the block ends, however."""
    from distributed import Client

    folder = tempfile.mkdtemp(prefix="olmax-dask-")
    sched_file = os.path.join(folder, "scheduler.json")
    env = dict(os.environ)
    # the workers unpickle olmax's functions by reference: they import this tree's olmax
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env["DASK_DISTRIBUTED__WORKER__DAEMON"] = "False"
    log = open(os.path.join(folder, "cluster.log"), "ab")
    procs: list[subprocess.Popen] = []

    def start(*args: str) -> None:
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "dask", *args],
                cwd=folder,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stopped with its children
            )
        )

    try:
        start(
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--no-dashboard",
            "--scheduler-file",
            sched_file,
        )
        deadline = time.monotonic() + timeout
        while not os.path.exists(sched_file):
            if procs[0].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dask scheduler did not start; see {folder}/cluster.log")
            time.sleep(0.1)
        for _ in range(workers):
            start(
                "worker",
                "--scheduler-file",
                sched_file,
                "--nthreads",
                "1",
                "--host",
                "127.0.0.1",
                "--no-dashboard",
                "--local-directory",
                folder,
            )
        with Client(scheduler_file=sched_file, timeout=timeout) as client:
            client.wait_for_workers(workers, timeout=max(1.0, deadline - time.monotonic()))
            address = client.scheduler.address
        yield address
    finally:
        _stop(procs)
        log.close()
        with contextlib.suppress(OSError):
            import shutil

            shutil.rmtree(folder)


def dask_options(address: str, *extra: str) -> str:
    """--pipeline-options text for the DaskRunner on the cluster at `address`."""
    return " ".join(
        [
            "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
            f"--dask_client_address={address}",
            *extra,
        ]
    )
