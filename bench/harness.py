"""What every benchmark repeats, written once: child processes with a JSON result, timing, machine and chip facts.

Child processes. A benchmark that measures something in a fresh process (a command's memory high-water
mark, a program that holds the chip) runs it with `start`/`run_child`, usually as `python -m MODULE ARGS`
(`module_command`) from the project's root. The child hands its result back with `report(**fields)`: one
line on stdout, `@@result ` and a JSON object. It may report more than once (what it has finished so far,
so a crash keeps it); the parent merges the objects in order (`results`). Everything else the child prints
is kept in `ChildRun.lines`, written to a log when one is given and echoed with a prefix when asked.

Timing. Both sides of a ratio are timed the same way, and each timing list in a record says how (`how`):
`PROCESS_CPU` (whole-process CPU seconds, children included, start to output: `process_cpu`, or a child's
`cpu_s`), `PROCESS_WALL`, or `WARM_WALL` / `WARM_CPU` (in-process, after an untimed warm-up call).
`interleaved` runs the sides A B A B ... so both see the same background load. `TreeUsage` samples a
process tree from /proc for the CPU seconds and memory of workers the kernel's rusage cannot see.

Facts. `machine()` (cores, CPU model, memory, load) and `git_state()` go into every record (bench/record.py);
`chip_facts()` names the accelerator a chip benchmark ran on, and `datasheet_peak` its peak FLOP/s, read
from olmax's own table (olmax.train.mfu.PEAK_FLOPS), never repeated here.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent

# How a timing was taken (a timing list's `how`); both sides of a ratio must use the same one.
PROCESS_CPU = "whole-process CPU seconds (user + system, children included), start to output"
PROCESS_WALL = "whole-process wall seconds, start to output"
WARM_WALL = "warm in-process wall seconds (after an untimed warm-up call)"
WARM_CPU = "warm in-process CPU seconds (after an untimed warm-up call)"

RESULT = "@@result "  # a child's result line: this prefix, then one JSON object


# ------------------------------------------------------------------------------------------ child processes
def report(**fields: Any) -> None:
    """In a child: hand `fields` to the parent as one result line (merged with any earlier ones)."""
    print(RESULT + json.dumps(fields, default=str), flush=True)


def results(lines: Sequence[str]) -> dict[str, Any]:
    """The fields of every result line in `lines`, merged in order (a later line's field wins)."""
    out: dict[str, Any] = {}
    for line in lines:
        if line.startswith(RESULT):
            out.update(json.loads(line[len(RESULT) :]))
    return out


def module_command(module: str, *args: str, python: str | None = None) -> list[str]:
    """`python -m MODULE ARGS` with this interpreter (or `python`): how a bench script runs another."""
    return [python or sys.executable, "-m", module, *[str(a) for a in args]]


@dataclass
class ChildRun:
    """A finished child: exit status, wall seconds, CPU seconds (its own and those of the processes it
    waited for), its output lines (stdout and stderr merged), its merged result and whether `timeout_s`
    ended it."""

    rc: int
    wall_s: float
    cpu_s: float
    lines: list[str] = field(repr=False)
    result: dict[str, Any]
    timed_out: bool = False

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


class Child:
    """A running child process in its own process group, its output read line by line as it comes.

    `log`: every line also goes there (appended); `echo`: each line not a result line is printed on this
    process's stdout after this prefix (None: not printed); `timeout_s`: the whole group is killed then.
    """

    def __init__(
        self,
        cmd: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | os.PathLike = ROOT,
        log: Path | None = None,
        echo: str | None = "",
        timeout_s: float | None = None,
    ):
        self.cmd, self.log, self.echo = [str(c) for c in cmd], log, echo
        self.lines: list[str] = []
        self.timed_out = False
        self.start = time.perf_counter()
        self.proc = subprocess.Popen(
            self.cmd,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=True,  # its own group: a timeout or a kill ends it and what it started
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._timer = threading.Timer(timeout_s, self._time_out) if timeout_s else None
        if self._timer is not None:
            self._timer.start()

    def _read(self) -> None:
        sink = open(self.log, "a") if self.log else None  # noqa: SIM115 - closed below
        try:
            for line in self.proc.stdout:
                line = line.rstrip("\n")
                self.lines.append(line)
                if sink:
                    sink.write(line + "\n")
                    sink.flush()
                if self.echo is not None and not line.startswith(RESULT):
                    print(f"{self.echo}{line}", flush=True)
        finally:
            if sink:
                sink.close()

    def _time_out(self) -> None:
        self.timed_out = True
        self.kill()

    def running(self) -> bool:
        """Whether the child is still running (asked without reaping it, so `wait` still measures it)."""
        return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None

    def kill(self) -> None:
        """SIGKILL the child's whole process group."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def wait(self) -> ChildRun:
        """Wait for the child to end; its run."""
        _, status, usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - self.start
        if self._timer is not None:
            self._timer.cancel()
        self._reader.join()
        return ChildRun(
            rc=self.proc.returncode,
            wall_s=wall,
            cpu_s=usage.ru_utime + usage.ru_stime,
            lines=self.lines,
            result=results(self.lines),
            timed_out=self.timed_out,
        )


def run_child(cmd: Sequence[str], *, check: bool = False, **kw: Any) -> ChildRun:
    """Run `cmd` to its end as a `Child` (keyword arguments: `Child`'s); with `check`, a failure exits with
    the child's last lines."""
    run = Child(cmd, **kw).wait()
    if check and run.rc != 0:
        tail = "\n".join(run.lines[-40:])
        sys.exit(f"{' '.join(map(str, cmd))} exited {run.rc}:\n{tail}")
    return run


# -------------------------------------------------------------------------------------------------- timing
def interleaved(fns: dict[str, Callable[[], float | None]], reps: int = 3) -> dict[str, list[float]]:
    """Call each fn once per repetition in the dict's order (A B A B ...); each side's list of results.

    A fn returns its own measurement (seconds, a rate, a `process_cpu` figure); one that returns None
    is timed here, in wall seconds around the call (perf_counter).
    """
    if reps < 1:
        raise ValueError("reps must be at least 1")
    out: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start = time.perf_counter()
            value = fn()
            out[name].append(time.perf_counter() - start if value is None else float(value))
    return out


class ProcessRun(NamedTuple):
    """One command's cost: CPU seconds of it and its children, wall seconds, exit status and output."""

    cpu_s: float
    wall_s: float
    rc: int
    stdout: str | bytes | None
    stderr: str | bytes | None


def children_cpu() -> float:
    """User + system CPU seconds of this process's children that have ended and been waited for."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def process_cpu(cmd: Sequence[str], **run_kw: Any) -> ProcessRun:
    """Run `cmd` to its end (subprocess.run with `run_kw`) and measure it as PROCESS_CPU.

    CPU is user + system seconds of the process and every descendant it waited for (the kernel adds a
    reaped child's time to its parent's), read as the growth of this process's RUSAGE_CHILDREN. Run one
    command at a time: a child of this process reaped concurrently would count too.
    """
    before, start = children_cpu(), time.perf_counter()
    proc = subprocess.run(list(cmd), **run_kw)
    wall = time.perf_counter() - start
    return ProcessRun(children_cpu() - before, wall, proc.returncode, proc.stdout, proc.stderr)


class TreeUsage:
    """Peak resident memory (summed) and CPU seconds of a process and all its descendants, sampled from
    /proc while they run: pool workers that are not children their parent waits for (datatrove's, dolma's)
    are missed by the kernel's rusage (a process living under one period is missed here instead)."""

    def __init__(self, root: int, period_s: float = 0.05):
        self.root, self.period_s, self.peak = root, period_s, 0
        self.ticks: dict[int, int] = {}
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        children: dict[int, list[int]] = {}
        rss, ticks = {}, {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()  # state, ppid, ..., utime (11), stime (12)
                with open(f"/proc/{entry.name}/statm", "rb") as f:
                    pages = int(f.read().split()[1])
            except (OSError, IndexError, ValueError):
                continue  # it ended while we looked
            pid = int(entry.name)
            children.setdefault(int(fields[1]), []).append(pid)
            rss[pid], ticks[pid] = pages, int(fields[11]) + int(fields[12])
        tree, frontier = {self.root}, [self.root]
        while frontier:
            for child in children.get(frontier.pop(), []):
                if child not in tree:
                    tree.add(child)
                    frontier.append(child)
        self.peak = max(self.peak, sum(rss.get(p, 0) for p in tree) * self._page)
        for p in tree & ticks.keys():
            self.ticks[p] = max(self.ticks.get(p, 0), ticks[p])

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self._sample()

    def stop(self) -> tuple[int, float]:
        """(peak resident bytes, CPU seconds seen)."""
        self._stop.set()
        self._thread.join()
        return self.peak, sum(self.ticks.values()) / os.sysconf("SC_CLK_TCK")


class TreeRun(NamedTuple):
    """A command's process tree: wall seconds, CPU seconds (the larger of the kernel's count of the command
    and what it waited for, and the /proc samples: each can only miss time), peak resident bytes, status."""

    wall_s: float
    cpu_s: float
    peak_bytes: int
    rc: int


def run_tree(
    cmd: Sequence[str], log: Path, env: dict[str, str] | None = None, period_s: float = 0.05
) -> TreeRun:
    """Run `cmd` with its output in `log`, sampling its process tree (`TreeUsage`) while it runs."""
    t0 = time.perf_counter()
    with open(log, "wb") as f:
        proc = subprocess.Popen(list(cmd), stdout=f, stderr=subprocess.STDOUT, env=env)
        tree = TreeUsage(proc.pid, period_s)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    peak, sampled = tree.stop()
    return TreeRun(wall, max(usage.ru_utime + usage.ru_stime, sampled), peak, proc.returncode)


# --------------------------------------------------------------------------------------------------- facts
def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux, platform.processor() elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> float | None:
    """Total memory in GiB (from /proc/meminfo), None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    """The machine a record was taken on; `load_average` is the 1/5/15-minute load when the record opened."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cores": os.cpu_count(),
        "cores_usable": usable,
        "cpu_model": cpu_model(),
        "memory_gib": memory_gib(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average": load_average(),
    }


def git_state(root: Path = ROOT) -> dict[str, Any]:
    """The commit checked out at `root` and whether the tree differs from it outside bench/results/."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout

    try:
        commit = git("rev-parse", "HEAD").strip()
        changed = [
            line for line in git("status", "--porcelain").splitlines() if "bench/results/" not in line[3:]
        ]
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": bool(changed)}


def chip_facts() -> dict[str, Any]:
    """The first JAX device: platform, kind, JAX's version, its memory limit and the TPU compiler flags."""
    import jax

    dev = jax.devices()[0]
    stats = dev.memory_stats() or {}
    return {
        "platform": dev.platform,
        "device_kind": dev.device_kind,
        "jax": jax.__version__,
        "bytes_limit": stats.get("bytes_limit"),
        "libtpu_init_args": os.environ.get("LIBTPU_INIT_ARGS", ""),
    }


def datasheet_peak(device_kind: str) -> float:
    """The bf16 dense datasheet peak FLOP/s of one device of `device_kind` (olmax.train.mfu's table)."""
    from olmax.train.mfu import PEAK_FLOPS, device_peak

    peak = device_peak(device_kind)
    if peak is None:
        raise ValueError(
            f"no datasheet peak for {device_kind!r}; olmax.train.mfu.PEAK_FLOPS has {list(PEAK_FLOPS)}"
        )
    return peak
