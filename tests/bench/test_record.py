"""bench/record.py: what a benchmark record holds and where it goes; bench/harness.py: how it times the sides."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time

import pytest

from bench import harness, record
from bench.harness import BENCH


def test_a_record_holds_command_commit_machine_sides_timings_and_figures(tmp_path):
    rec = record.Record("demo", argv=[str(BENCH / "demo.py"), "--reps", "3"], results=tmp_path)
    rec.side("olmax", version="0.1.0", setting="num_threads=2")
    rec.side("peer", version="3.0.0", setting="num_workers=2")
    rec.timings("epoch", "olmax", [1.0, 3.0, 2.0], "s", harness.WARM_WALL)
    rec.timings("epoch", "peer", [4.0, 5.0, 6.0], "s", harness.WARM_WALL)
    fig = rec.figure("speedup", record.pairwise_ratio([4.0, 5.0, 6.0], [1.0, 3.0, 2.0]), "x")
    rec.note("tokens", 1000)
    path = rec.write()

    assert path == tmp_path / "demo.json"
    text = path.read_text()
    data = json.loads(text)
    assert text == json.dumps(data, indent=1, sort_keys=True) + "\n"  # sorted keys: records diff cleanly
    assert data["schema"] == record.SCHEMA and data["name"] == "demo" and data["smoke"] is False
    assert data["command"] == "python -m bench.demo --reps 3"  # as it runs, from the project root
    assert len(data["commit"]) == 40 and isinstance(data["dirty"], bool)
    assert data["date"].endswith("Z")
    m = data["machine"]
    assert m["cores"] >= 1 and m["cpu_model"] and len(m["load_average"]) == 3
    assert len(m["load_average_after"]) == 3  # added by write()
    assert data["sides"]["peer"] == {"version": "3.0.0", "setting": "num_workers=2"}
    assert data["timings"]["olmax.epoch"]["values"] == [1.0, 3.0, 2.0]
    assert data["timings"]["olmax.epoch"]["how"] == harness.WARM_WALL
    assert data["figures"]["speedup"] == fig
    assert fig["median"] == 3.0 and fig["min"] == 5 / 3 and fig["max"] == 4.0 and fig["n"] == 3
    assert fig["values"] == [4.0, 5 / 3, 3.0] and fig["unit"] == "x"
    assert data["notes"] == {"tokens": 1000}
    assert record.read(path) == data


def test_timings_need_a_named_side_and_a_how(tmp_path):
    rec = record.Record("demo", results=tmp_path)
    with pytest.raises(ValueError, match="side"):
        rec.timings("epoch", "olmax", [1.0], "s", harness.WARM_WALL)
    rec.side("olmax", version="0.1.0", setting="default")
    with pytest.raises(ValueError, match="how"):
        rec.timings("epoch", "olmax", [1.0], "s", "")
    with pytest.raises(ValueError, match="figure name"):
        rec.figure("Tokens per s", [1.0], "x")
    with pytest.raises(ValueError, match="at least one"):
        rec.figure("empty", [], "x")


def test_smoke_runs_never_write_over_the_committed_records(tmp_path):
    with pytest.raises(ValueError, match="smoke"):
        record.Record("demo", smoke=True, results=record.RESULTS)
    assert record.Record("demo", smoke=True).path == record.SMOKE_RESULTS / "demo.json"
    assert record.Record("demo").path == record.RESULTS / "demo.json"
    smoke = record.Record("demo", smoke=True, results=tmp_path)
    assert json.loads(smoke.write().read_text())["smoke"] is True

    parser = argparse.ArgumentParser()
    record.add_arguments(parser)
    args = parser.parse_args(["--smoke", "--results", str(tmp_path)])
    assert args.smoke is True and args.results == tmp_path


def test_a_record_of_another_schema_is_refused(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"schema": record.SCHEMA + 1}))
    with pytest.raises(ValueError, match="schema"):
        record.read(path)


def test_interleaved_runs_a_b_a_b_and_times_a_fn_that_returns_none():
    order: list[str] = []

    def a():
        order.append("a")
        return 7.0

    def b():
        order.append("b")
        time.sleep(0.01)

    out = harness.interleaved({"a": a, "b": b}, reps=3)
    assert order == ["a", "b", "a", "b", "a", "b"]
    assert out["a"] == [7.0, 7.0, 7.0]
    assert len(out["b"]) == 3 and all(0.009 < t < 1.0 for t in out["b"])
    with pytest.raises(ValueError):
        harness.interleaved({"a": a}, reps=0)


def test_process_cpu_counts_the_children_s_cpu_and_not_their_sleep(tmp_path):
    # the child burns ~0.4 CPU s in a grandchild it waits for, then sleeps 0.3 s
    script = tmp_path / "burn.py"
    script.write_text(
        textwrap.dedent(
            """
            import subprocess, sys, time
            burn = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.4: pass"
            subprocess.run([sys.executable, "-c", burn], check=True)
            time.sleep(0.3)
            print("done")
            """
        )
    )
    run = harness.process_cpu([sys.executable, str(script)], capture_output=True, text=True)
    assert run.rc == 0 and run.stdout.strip() == "done"
    assert run.cpu_s >= 0.4  # the grandchild's CPU is in it
    assert run.wall_s >= run.cpu_s - 0.2 + 0.3 - 0.1  # the sleep is wall, not CPU
    assert run.cpu_s < run.wall_s
    failed = harness.process_cpu([sys.executable, "-c", "raise SystemExit(3)"])
    assert failed.rc == 3


def test_format_figure_writes_median_then_min_max():
    fig = {"median": 412.04, "min": 398.2, "max": 420.55, "n": 3, "unit": "M tokens/s"}
    assert record.format_figure(fig) == "412.0 M tokens/s (398.2–420.6)"
    assert record.format_figure({**fig, "n": 1}, digits=0) == "412 M tokens/s"
    assert record.format_figure({**fig, "unit": "x"}, digits=2) == "412.04x (398.20–420.55)"
    with pytest.raises(ValueError, match="same repetitions"):
        record.pairwise_ratio([1.0], [1.0, 2.0])
