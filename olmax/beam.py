"""Apache Beam: how `data prepare`, `audit leaks` and `audit dedup` run on a cluster (`--runner beam`).

Each command keeps one set of per-file and per-key functions; its Beam graph maps them over files and keys
(the plan), the local runner calls the same functions in threads. What this module adds:

- `pipeline_options(text)`: Beam's own flags (`--pipeline-options="..."` and those after `--`, see
  beam_cli.py); without `--runner=` the DirectRunner is pinned (Beam's PrismRunner downloads a binary at
  start, which fails offline), by default with 2 worker processes (`DEFAULT_PIPELINE_OPTIONS`); the
  DaskRunner by its short name, one element per Dask task unless told otherwise.
- `guarded(fn)`: bad input (an `OlmaxError` in a worker) travels back as a value (`Failed`), so the
  driver reports the first one in input order as the usual one-line error instead of a worker traceback.
- `run(build, options, log_dir)`: builds and runs a pipeline; the workers' logs (Beam's harnesses log to
  standard error) go to `log_dir/beam.log` and are named in the error when the run fails.
- `spread()`: a redistribution every runner performs (the DaskRunner skips `Reshuffle`).
- `Workspace`: where a job's intermediate files (`--temp_location` on a cluster, else a local folder) and
  worker logs go, removed when it ends (the logs kept when it failed).
- `collect(pcoll, folder, name)` / `collected(folder, name)`: small per-task results (summaries, hit
  arrays) written by the workers as `olmax.wire` lines (JSON, no pickle) in text files under `folder` (a
  path or a URL the workers can write: the output's temporary folder, or `--temp_location` on a
  cluster) and read back by the driver; all of a pipeline's collections end in one sink.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import shlex
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from olmax import storage, wire
from olmax.errors import OlmaxError

RUNNERS = ("local", "beam")
DEFAULT_PIPELINE_OPTIONS = (
    "--runner=DirectRunner --direct_num_workers=2 --direct_running_mode=multi_processing"
)


def require_beam():
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # its import warns about optional GCP client libraries at the root logger
    try:
        import apache_beam
    except ImportError:
        raise OlmaxError(
            "--runner beam needs Apache Beam: pip install 'olmax[beam]' (or 'apache-beam==2.77.0')"
        ) from None
    finally:
        root.setLevel(level)
    return apache_beam


@dataclass(frozen=True)
class Failed:
    """An OlmaxError raised by a worker, returned as a value; `order` sorts failures into input order."""

    order: tuple
    message: str


def guarded(fn: Callable, order: Callable = lambda x: (0,)) -> Callable:
    """`fn` with an OlmaxError turned into a `Failed` result (ordered by `order(element)`)."""

    def call(element):
        try:
            return fn(element)
        except OlmaxError as e:
            return Failed(tuple(order(element)), str(e))

    return call


def raise_first_failure(results: Iterable) -> None:
    failures = sorted((r for r in results if isinstance(r, Failed)), key=lambda f: f.order)
    if failures:
        more = f" (and {len(failures) - 1} more failing tasks)" if len(failures) > 1 else ""
        raise OlmaxError(failures[0].message + more)


DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"


def pipeline_options(text: str | None):
    """Beam PipelineOptions from a flag string; the DirectRunner unless `--runner=` says otherwise.

    Defaults olmax adds where the flags leave them out: the DirectRunner's 2 worker processes, and for
    the DaskRunner (`--runner=DaskRunner` names it too) one element per Dask partition
    (`--dask_partition_size=1`): its own default puts up to 128 elements (files) into one task, which one
    worker runs alone."""
    require_beam()
    from apache_beam.options.pipeline_options import PipelineOptions

    try:
        args = shlex.split(text if text is not None else DEFAULT_PIPELINE_OPTIONS)
    except ValueError as e:
        raise OlmaxError(f"--pipeline-options {text!r}: {e}") from None
    args = [
        f"--runner={args[i + 1]}" if a == "--runner" and i + 1 < len(args) else a
        for i, a in enumerate(args)
        if not (i and args[i - 1] == "--runner")
    ]
    at = max((i for i, a in enumerate(args) if a.startswith("--runner=")), default=None)  # the last wins
    if at is None:
        args, at = ["--runner=DirectRunner", *args], 0
    runner = args[at].split("=", 1)[1]
    if runner == "DaskRunner":
        runner = DASK_RUNNER
        args[at] = f"--runner={runner}"
    if runner.lower() in ("directrunner", "direct") and not any(
        a.startswith(("--direct_num_workers", "--direct_running_mode")) for a in args
    ):
        args += ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
    if runner.endswith("DaskRunner") and not any(
        a.startswith(("--dask_npartitions", "--dask_partition_size")) for a in args
    ):
        args += ["--dask_partition_size=1"]
    return PipelineOptions(args + ["--default_sdk_harness_log_level=ERROR"])


def describe(options) -> str:
    """One line: the runner and, for the DirectRunner, its worker count and mode."""
    from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

    runner = options.view_as(StandardOptions).runner or "DirectRunner"
    if "direct" in str(runner).lower():
        d = options.view_as(DirectOptions)
        return f"{runner} ({d.direct_num_workers} workers, {d.direct_running_mode})"
    return str(runner)


@contextlib.contextmanager
def _stderr_to(path: str):
    """Send this process's standard error (and its children's: the SDK harnesses) to `path`."""
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def run(build: Callable, options, log_dir: str, what: str) -> float:
    """Build the pipeline with `build(pipeline)` and run it to completion; returns seconds taken."""
    beam = require_beam()

    os.makedirs(log_dir, exist_ok=True)
    log = os.path.join(log_dir, "beam.log")
    print(f"olmax: {what} on Apache Beam, {describe(options)}; worker logs → {log}", file=sys.stderr)
    t0 = time.monotonic()
    quiet = [logging.getLogger(), logging.getLogger("apache_beam")]
    levels = [q.level for q in quiet]
    try:
        for q in quiet:
            q.setLevel(logging.ERROR)
        with _stderr_to(log):
            pipeline = beam.Pipeline(options=options)
            try:
                build(pipeline)
                sinks = _SINKS.pop(id(pipeline), [])
            finally:
                _SINKS.pop(id(pipeline), None)
            if sinks:
                sinks | "Results" >> beam.Flatten() | "Save results" >> beam.ParDo(_SaveBundles())
            result = pipeline.run()
            try:
                state = result.wait_until_finish()
            finally:
                # the DaskRunner's result holds a distributed Client it never closes
                client = getattr(result, "client", None)
                if client is not None and hasattr(client, "close"):
                    client.close()
    except OlmaxError:
        raise
    except Exception as e:  # noqa: BLE001 - a failed pipeline: one line and where the full story is
        first = _cause(e)
        raise OlmaxError(f"{what}: the Beam pipeline failed ({first[:300]}); see {log}") from None
    finally:
        for q, lv in zip(quiet, levels):
            q.setLevel(lv)
    if state is not None and str(state).upper().rsplit(".", 1)[-1] not in ("DONE", "UNKNOWN"):
        raise OlmaxError(f"{what}: the Beam pipeline ended in state {state}; see {log}")
    return time.monotonic() - t0


class Workspace:
    """Where one Beam job keeps its intermediate files and its workers' logs (a context manager).

    Files (`files`): under `--temp_location` when the options give one (a cluster's workers must reach
    it), else a local folder (the DirectRunner's workers share this machine); any other runner without
    `--temp_location` is an error. Logs (`logs`, where `run` writes beam.log): a local folder under
    `local_dir` (default: the system's temporary folder), kept when a pipeline failed, since its error
    names the log; both go when the job ends otherwise."""

    def __init__(self, options, what: str, local_dir: str | None = None):
        from apache_beam.options.pipeline_options import GoogleCloudOptions, StandardOptions

        self.options, self.what = options, what
        temp = options.view_as(GoogleCloudOptions).temp_location
        runner = str(options.view_as(StandardOptions).runner or "DirectRunner").lower()
        if not temp and not any(r in runner for r in ("direct", "prism")):
            raise OlmaxError(
                f"--runner beam on {describe(options)} needs a folder its workers can reach: add "
                "--temp_location=URL (e.g. gs://BUCKET/tmp, or a folder every worker mounts) to Beam's flags"
            )
        if temp and not storage.is_url(temp):
            # the workers run in folders of their own: a relative folder would be another one on each
            temp = os.path.abspath(temp)
        slug = f"olmax-{what.removeprefix('olmax ').replace(' ', '-')}"
        if local_dir:
            os.makedirs(local_dir, exist_ok=True)
        self.logs = tempfile.mkdtemp(prefix=slug + "-", dir=local_dir)
        self.files = (
            storage.join(temp, f"{slug}-{uuid.uuid4().hex[:12]}") if temp else os.path.join(self.logs, "work")
        )
        self.keep_logs = False

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        storage.remove_tree(self.files)
        if not self.keep_logs:
            shutil.rmtree(self.logs, ignore_errors=True)

    def run(self, build: Callable, what: str | None = None) -> float:
        """`run` with this job's options and log folder; the logs stay when it fails."""
        self.keep_logs = True
        seconds = run(build, self.options, self.logs, what or self.what)
        self.keep_logs = False
        return seconds

    def failed(self, message: str) -> OlmaxError:
        """An error about this job that names its worker log (which then stays)."""
        self.keep_logs = True
        return OlmaxError(f"{message}; see {os.path.join(self.logs, 'beam.log')}")


class _SaveBundles:
    """A DoFn writing each bundle's (folder, name, element) records into one file `folder/name-*.txt` per
    (folder, name) through olmax.storage (so any fsspec store the workers can reach will do), one
    `olmax.wire` line per element: the driver reads data back, never a pickle."""

    def __new__(cls):
        beam = require_beam()

        class Save(beam.DoFn):
            def start_bundle(self):
                self.lines = {}

            def process(self, record):
                folder, name, element = record
                self.lines.setdefault((folder, name), []).append(wire.dumps(element))

            def finish_bundle(self):
                for (folder, name), lines in self.lines.items():
                    storage.write_bytes(
                        storage.join(folder, f"{name}-{uuid.uuid4().hex}.txt"), b"\n".join(lines) + b"\n"
                    )
                self.lines = {}

        return Save()


class _Sink:
    """`element -> (folder, name, element)`, picklable."""

    def __init__(self, folder: str, name: str):
        self.folder, self.name = folder, name

    def __call__(self, element):
        return self.folder, self.name, element


def _random_key(element) -> tuple:
    return random.getrandbits(31), element


def _values(kv) -> list:
    return list(kv[1])


def spread():
    """A PTransform redistributing its input over the workers: Beam's `Reshuffle` as a random-key
    GroupByKey (the DaskRunner runs `Reshuffle` as a no-op, which leaves everything one task produced,
    all the shards of a plan say, to one worker)."""
    beam = require_beam()

    class Spread(beam.PTransform):
        def expand(self, pcoll):
            return (
                pcoll
                | "Key" >> beam.Map(_random_key)
                | "Group" >> beam.GroupByKey()
                | "Values" >> beam.FlatMap(_values)
            )

    return Spread()


def map_tasks(p, name: str, tasks: list, fn: Callable, order: Callable):
    """`fn` over `tasks` in pipeline `p`, spread over the workers (`spread`), an OlmaxError of a task a
    `Failed` result ordered by `order(task)` (`guarded`): the PCollection of the results. Transforms
    labelled `name: tasks`, `name: spread`, `name: map`."""
    beam = require_beam()
    return (
        p
        | f"{name}: tasks" >> beam.Create(tasks)
        | f"{name}: spread" >> spread()
        | f"{name}: map" >> beam.Map(guarded(fn, order))
    )


def _cause(e: BaseException) -> str:
    """The innermost `SomeError: message` line of a failed pipeline's error text (Beam wraps the worker's
    traceback into the message)."""

    text = str(e)
    found = re.findall(
        r"^\s*([A-Za-z_][\w.]*(?:Error|Exception)): (.+?)(?: \[while running .*)?$", text, re.M
    )
    if found:
        kind, msg = found[-1]
        return f"{kind.rsplit('.', 1)[-1]}: {msg}"
    return text.strip().splitlines()[0] if text.strip() else type(e).__name__


def collect(pcoll, folder: str, name: str) -> None:
    """Have every element of `pcoll` written into files `folder/name-*.txt` (for `collected`) when the
    pipeline runs through `run`, which joins all of a pipeline's collections into one sink: a pipeline
    with one end (the DaskRunner computes only the last transform's lineage; other runners don't mind)."""
    beam = require_beam()
    tagged = pcoll | f"Tag {name} results" >> beam.Map(_Sink(folder, name))
    _SINKS.setdefault(id(pcoll.pipeline), []).append(tagged)


_SINKS: dict[int, list] = {}  # id(pipeline) -> its collections for `collect`, while `run` builds it


def collected(folder: str, name: str) -> list:
    """The elements `collect` wrote under `folder/name-*` (in no particular order)."""
    out = []
    for rel in storage.list_files(folder):
        if os.path.basename(rel).startswith(name + "-") and rel.endswith(".txt"):
            for line in storage.read_bytes(storage.join(folder, rel)).splitlines():
                if line.strip():
                    out.append(wire.loads(line))
    return out
