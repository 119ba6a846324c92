"""bench/harness.py: a child's result lines come back merged, its output is kept and logged, its CPU and a
timeout are measured on its whole process group; the chip's peak FLOP/s is olmax's own table."""

from __future__ import annotations

import os
import sys
import textwrap
import time

import pytest

from bench import harness


def child(tmp_path, code: str) -> list[str]:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(code))
    return [sys.executable, str(script)]


def test_result_lines_are_merged_in_order_and_the_rest_is_kept(tmp_path):
    cmd = child(
        tmp_path,
        """
        import sys
        from bench.harness import report
        print("starting")
        report(step=1, memory={"temp": 3})
        print("warning: on stderr", file=sys.stderr)
        report(step=2, facts={"kind": "cpu"})
        """,
    )
    log = tmp_path / "child.log"
    env = {**os.environ, "PYTHONPATH": str(harness.ROOT)}  # the script's own folder comes first on its path
    run = harness.run_child(cmd, log=log, echo=None, env=env)
    assert run.rc == 0 and not run.timed_out
    assert run.result == {"step": 2, "memory": {"temp": 3}, "facts": {"kind": "cpu"}}
    assert "starting" in run.lines and "warning: on stderr" in run.lines
    assert log.read_text().splitlines() == run.lines
    assert harness.results(["noise", harness.RESULT + '{"a": 1}']) == {"a": 1}


def test_a_child_that_reports_nothing_has_an_empty_result_and_its_status(tmp_path):
    run = harness.run_child(child(tmp_path, "raise SystemExit(3)"), echo=None)
    assert run.rc == 3 and run.result == {}
    with pytest.raises(SystemExit, match="exited 3"):
        harness.run_child(child(tmp_path, "raise SystemExit(3)"), echo=None, check=True)


def test_a_module_runs_from_the_project_root():
    cmd = harness.module_command("bench.harness")
    assert cmd[1:] == ["-m", "bench.harness"]
    assert harness.run_child([*cmd[:1], "-c", "import bench.record"], echo=None).rc == 0


def test_cpu_counts_what_the_child_waited_for_and_not_its_sleep(tmp_path):
    cmd = child(
        tmp_path,
        """
        import subprocess, sys, time
        burn = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.3: pass"
        subprocess.run([sys.executable, "-c", burn], check=True)
        time.sleep(0.3)
        """,
    )
    run = harness.run_child(cmd, echo=None)
    assert run.cpu_s >= 0.3 and run.wall_s >= run.cpu_s + 0.2


def test_a_timeout_kills_the_whole_group_and_says_so(tmp_path):
    cmd = child(
        tmp_path,
        """
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print("started", flush=True)
        time.sleep(60)
        """,
    )
    t = time.perf_counter()
    run = harness.run_child(cmd, echo=None, timeout_s=2)
    assert run.timed_out and run.rc == -9 and time.perf_counter() - t < 30
    assert run.lines == ["started"]


def test_a_running_child_is_watched_without_being_reaped_then_killed(tmp_path):
    proc = harness.Child(child(tmp_path, "import time; print('up', flush=True); time.sleep(60)"), echo=None)
    deadline = time.monotonic() + 30
    while "up" not in proc.lines and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.running()
    proc.kill()
    run = proc.wait()
    assert run.rc == -9 and not run.timed_out


def test_the_datasheet_peak_is_olmaxs_table():
    from olmax.train.mfu import PEAK_FLOPS

    assert harness.datasheet_peak("TPU v5 lite") == PEAK_FLOPS["TPU v5 lite"]
    with pytest.raises(ValueError, match="no datasheet peak"):
        harness.datasheet_peak("a kind nobody makes")


def test_machine_facts_name_the_cores_and_the_commit():
    m = harness.machine()
    assert m["cores"] >= 1 and m["cpu_model"] and len(m["load_average"]) == 3
    git = harness.git_state()
    assert git["commit"] is None or len(git["commit"]) == 40
