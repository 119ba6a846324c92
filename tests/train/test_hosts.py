"""olmax.train.hosts on one process: the exchanges are the value itself, a SIGTERM is noted (not fatal) while
the stop notice is open and the default comes back after it; the preempted line says how to resume. The
several-process paths (the preemption sync point, the watchdog) run in tests/train/test_pod_run.py."""

from __future__ import annotations

import os
import signal

from olmax.train.hosts import Hosts, Preempted, StopNotice, Watchdog


def test_one_process_exchanges_its_own_value():
    hosts = Hosts(0, 1)
    assert hosts.allgather("files", {"a": 1}) == [{"a": 1}]
    hosts.barrier("done")  # returns at once


def test_sigterm_is_noted_while_the_notice_is_open():
    before = signal.getsignal(signal.SIGTERM)
    with StopNotice(Hosts(0, 1)) as stop:
        assert not stop.reached(1)
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.reached(2)
    assert signal.getsignal(signal.SIGTERM) == before


def test_one_process_starts_no_watchdog():
    with Watchdog(Hosts(0, 1), lambda: "", timeout=1) as dog:
        assert dog._thread is None


def test_the_preempted_line_names_the_step_and_the_resume():
    line = str(Preempted(12, "gs://b/run/checkpoints/12"))
    assert (
        line
        == "preempted at step 12: step 12 is saved in gs://b/run/checkpoints/12; the same command resumes it"
    )
