"""The processes of one run while it trains: agreeing on a step to stop at, exchanging small records, and
ending cleanly when one of them is lost.

A pod run is one process per host, joined by JAX's distributed system (olmax.train.launch). Three things
that a run of several processes needs and a run of one does not fail at:

- **A stop notice.** A TPU VM gets SIGTERM before maintenance or a spot preemption, and is killed soon
  after. With several processes JAX's preemption notifier takes the signal, and
  `multihost_utils.reached_preemption_sync_point(step)` turns true at the same step on every process (the
  first step all of them reach after any got the signal); with one process a Python handler notes it.
  `StopNotice.reached(step)` asks either, once per step, so the trainer saves that step and exits.
- **Small records between processes.** A checkpoint written by every host into one bucket needs each
  host's list of files before the step is sealed; `Hosts.allgather` exchanges JSON through the
  coordination service's key-value store, `Hosts.barrier` waits for all.
- **A lost process.** A process that dies (SIGKILL, a VM gone) leaves the others blocked in a collective
  until JAX's heartbeat timeout aborts them with a stack trace. `Watchdog` beats a counter in the
  key-value store for this process and watches the others': when one stops for `timeout` seconds (or the
  coordinator, process 0, stops answering) it prints one line naming the lost process and ends this one
  with `LOST_PROCESS`, so the scheduler restarts the job; a step not yet sealed is never read as complete.

The key-value store is reached through `jax._src.distributed.global_state.client` (as Orbax reaches it):
JAX has no public name for it yet; every use is in this module.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from olmax.errors import OlmaxError

PREEMPTED = 75  # exit code: stopped by a preemption notice with its step saved (EX_TEMPFAIL: run it again)
LOST_PROCESS = 69  # exit code: another process of the run was lost (EX_UNAVAILABLE)
LOST_TIMEOUT_ENV = "OLMAX_LOST_PROCESS_TIMEOUT"  # seconds without a beat before a process counts as lost
LOST_TIMEOUT = 60.0  # below JAX's own heartbeat timeout (100 s), which aborts with a stack trace instead
WAIT_MS = 60 * 60 * 1000  # a barrier or a record waits an hour at most (uploads of a large step included)


def _client():
    from jax._src import distributed

    return distributed.global_state.client


@dataclass
class Hosts:
    """This process's place in the run (`index` of `count`) and the exchanges between processes."""

    index: int
    count: int
    _rounds: dict[str, int] = field(default_factory=dict)

    @classmethod
    def current(cls) -> Hosts:
        import jax

        return cls(jax.process_index(), jax.process_count())

    @property
    def several(self) -> bool:
        return self.count > 1

    def _key(self, name: str) -> str:
        # a name used twice in one job (a step published again after a resume in-process) gets a new round
        n = self._rounds[name] = self._rounds.get(name, -1) + 1
        return f"olmax/{name}/{n}"

    def allgather(self, name: str, value: Any) -> list[Any]:
        """Every process's `value` (JSON), in process order; every process calls it with the same `name`."""
        if not self.several:
            return [value]
        key = self._key(name)
        client = _client()
        client.key_value_set(f"{key}/{self.index}", json.dumps(value))
        return [json.loads(client.blocking_key_value_get(f"{key}/{i}", WAIT_MS)) for i in range(self.count)]

    def barrier(self, name: str) -> None:
        """Return once every process has reached the barrier `name`."""
        if self.several:
            _client().wait_at_barrier(self._key(name).replace("/", "-"), WAIT_MS)


class StopNotice:
    """Whether the run was asked to stop (SIGTERM), agreed at one step by every process."""

    def __init__(self, hosts: Hosts):
        self.hosts = hosts
        self.got: int | None = None  # the signal, for one process
        self._before: Any = None

    def __enter__(self) -> StopNotice:
        if not self.hosts.several and threading.current_thread() is threading.main_thread():
            self._before = signal.signal(signal.SIGTERM, self._note)
        return self

    def __exit__(self, *exc) -> None:
        if self._before is not None:
            signal.signal(signal.SIGTERM, self._before)
            self._before = None

    def _note(self, signum: int, frame: Any) -> None:
        self.got = signum  # the step in flight (or the save) finishes; the loop stops after it

    def reached(self, step: int) -> bool:
        """True at the step to stop after (the same step on every process); called once per step, in order."""
        if not self.hosts.several:
            return self.got is not None
        from jax.experimental import multihost_utils

        return bool(multihost_utils.reached_preemption_sync_point(step))


class Watchdog:
    """A daemon thread that ends this process when another process of the run is lost (module docstring).
    `describe()` gives the line's last part (what is complete, how to resume); `timeout` in seconds."""

    def __init__(self, hosts: Hosts, describe: Callable[[], str], timeout: float | None = None):
        self.hosts = hosts
        self.describe = describe
        self.timeout = (
            timeout if timeout is not None else float(os.environ.get(LOST_TIMEOUT_ENV, LOST_TIMEOUT))
        )
        self.every = min(5.0, self.timeout / 4)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Watchdog:
        if self.hosts.several:
            self._thread = threading.Thread(target=self._watch, name="olmax-watchdog", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is not None and self._thread is not None and not issubclass(exc_type, OlmaxError):
            # a collective that failed (gloo's "connection closed by peer") is how a lost process shows in
            # this one: the verdict, naming it, comes within the timeout (and ends the process); else the
            # error was this process's own and goes on as it is
            self._thread.join(2 * self.timeout + self.every)
        self._stop.set()

    def _watch(self) -> None:
        client = _client()
        me, n = self.hosts.index, self.hosts.count
        beats = 0
        seen: dict[int, tuple[str | None, float]] = {}  # process -> (its last beat, when it changed here)
        while not self._stop.is_set():
            beats += 1
            try:
                client.key_value_set(f"olmax/beat/{me}", str(beats), allow_overwrite=True)
                values = {i: _try_get(client, f"olmax/beat/{i}") for i in range(n) if i != me}
            except Exception as e:  # noqa: BLE001 - the coordination service itself is gone: process 0 is
                if self._stop.is_set():
                    return
                self._lost(0, f"the coordinator stopped answering ({str(e).splitlines()[0][:120]})")
                return
            now = time.monotonic()
            for i, v in values.items():
                last, since = seen.get(i, (None, now))
                seen[i] = (v, now) if v != last else (last, since)
                if now - seen[i][1] > self.timeout and not self._stop.is_set():
                    self._lost(i, f"no sign of life for {self.timeout:.0f} s")
                    return
            self._stop.wait(self.every)

    def _lost(self, process: int, why: str) -> None:
        try:
            tail = self.describe()
        except Exception as e:  # noqa: BLE001 - the line is printed whatever the run folder says
            tail = f"the run folder could not be read ({e})"
        print(
            f"olmax: error: process {process} of {self.hosts.count} is lost ({why}); process "
            f"{self.hosts.index} stops too (exit {LOST_PROCESS}): {tail}",
            file=sys.stderr,
            flush=True,
        )
        os._exit(LOST_PROCESS)  # the main thread may be blocked in a collective that never returns


def _try_get(client, key: str) -> str | None:
    """The key's value, or None when no process has set it yet."""
    try:
        return client.key_value_try_get(key)
    except Exception as e:  # noqa: BLE001 - the client raises a bare error for a missing key
        if "NOT_FOUND" in str(e) or "not found" in str(e).lower():
            return None
        raise


class Preempted(OlmaxError):
    """The run stopped at a preemption notice; `step` is saved where the run folder is."""

    def __init__(self, step: int, where: str):
        self.step = step
        super().__init__(
            f"preempted at step {step}: step {step} is saved in {where}; the same command resumes it"
        )
