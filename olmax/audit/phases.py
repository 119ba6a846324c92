"""Wall time and memory high-water mark of each phase of a long command (the loader audit, the benchmarks).

Memory is read from /proc/self/status by a sampling thread (every `interval` s) and at each phase's ends:
`rss` is the resident set (VmRSS: anonymous plus file pages, e.g. a memory-mapped order file's page
cache), `anon` the anonymous part alone (RssAnon: what the process cannot give back without swapping).
A spike shorter than the interval can be missed by the sampler; the process-wide peak (VmHWM) cannot.
Off Linux (no /proc) the memory fields are None.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

_MIB = 1 << 20


def proc_status() -> dict[str, int]:
    """VmRSS, RssAnon, RssFile and VmHWM of this process, in bytes ({} without /proc)."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                    out[key] = int(rest.split()[0]) * 1024
    except OSError:
        return {}
    return out


class Phases:
    """Records one entry per `phase(name)` block: seconds, peak rss and peak anonymous memory (MiB)."""

    def __init__(self, interval: float = 0.05):
        self.interval = interval
        self.records: list[dict] = []
        self._peak = {"VmRSS": 0, "RssAnon": 0}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        s = proc_status()
        with self._lock:
            for key in self._peak:
                self._peak[key] = max(self._peak[key], s.get(key, 0))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> Phases:
        self._thread = threading.Thread(target=self._run, daemon=True, name="olmax-phases")
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.end()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def begin(self, name: str) -> dict:
        """End the current phase (if any) and start `name`; returns its record (extra fields may be added)."""
        self.end()
        with self._lock:
            self._peak = {"VmRSS": 0, "RssAnon": 0}
        self._sample()
        self._current = {"phase": name}
        self._t0 = time.perf_counter()
        return self._current

    def end(self) -> None:
        """End the current phase: its seconds and peaks go into `records`."""
        record = getattr(self, "_current", None)
        if record is None:
            return
        self._sample()
        with self._lock:
            peak = dict(self._peak)
        have = bool(proc_status())
        record["seconds"] = round(time.perf_counter() - self._t0, 3)
        record["peak_rss_mib"] = round(peak["VmRSS"] / _MIB, 1) if have else None
        record["peak_anon_mib"] = round(peak["RssAnon"] / _MIB, 1) if have else None
        self.records.append(record)
        self._current = None

    @contextmanager
    def phase(self, name: str) -> Iterator[dict]:
        """`begin(name)` for the block, `end()` after it (even when it raises)."""
        record = self.begin(name)
        try:
            yield record
        finally:
            self.end()

    def summary(self) -> dict:
        """The phases, their total time, and the high-water marks over all of them (and the process's VmHWM)."""
        anon = [r["peak_anon_mib"] for r in self.records if r["peak_anon_mib"] is not None]
        rss = [r["peak_rss_mib"] for r in self.records if r["peak_rss_mib"] is not None]
        hwm = proc_status().get("VmHWM")
        return {
            "phases": self.records,
            "seconds": round(sum(r["seconds"] for r in self.records), 3),
            "peak_anon_mib": max(anon) if anon else None,
            "peak_rss_mib": max(rss) if rss else None,
            "process_vmhwm_mib": round(hwm / _MIB, 1) if hwm else None,
        }


class Progress:
    """A progress bar for one phase (tqdm, shown on a terminal only, so logs and tests stay clean): items
    done of `total` with their rate and an ETA, and with `tokens_per` items the tokens done beside them.

    `update(n, tokens=None)`: n more items (and their tokens, else n * tokens_per)."""

    def __init__(
        self, enabled: bool, total: int | None, desc: str, unit: str, *, tokens_per: int | None = None
    ):
        from tqdm import tqdm

        self.tokens, self.tokens_per = 0, tokens_per
        self._bar = tqdm(
            total=total,
            desc=desc,
            unit=unit,
            unit_scale=unit == "row",
            disable=None if enabled else True,
            leave=False,
        )

    def update(self, n: int, tokens: int | None = None) -> None:
        self._bar.update(n)
        if tokens is not None or self.tokens_per is not None:
            self.tokens += tokens if tokens is not None else n * self.tokens_per
            if not self._bar.disable:
                self._bar.set_postfix_str(f"{_si(self.tokens)} tokens", refresh=False)

    def close(self) -> None:
        self._bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _si(x: float) -> str:
    for unit in ("", "k", "M", "G", "T", "P"):
        if abs(x) < 1000:
            return f"{x:.3g}{unit}"
        x /= 1000
    return f"{x:.3g}E"
