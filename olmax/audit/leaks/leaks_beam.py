"""`olmax audit leaks --runner beam`: the Beam plan of the leak audit's per-file phases.

The functions mapped are run.py's (`probe_path`, then `verify_file`), passed in by `audit_leaks`; this
module only maps them over files: `Create(tasks) | spread | Map(guarded(fn))`, results back to the
driver through `olmax.beam.collect`. What every task shares (the eval index and the word tables: the
index grows with the eval sets, the tables are ~8 MB, neither belongs in the pipeline graph) is staged
once by the driver into the work folder as arrays (`.npz`) and JSON (`olmax.wire.stage`, no pickle:
whoever can write `--temp_location` cannot run code on a worker) and loaded once per worker process
(`StagedCall`).

A worker's OlmaxError (a missing or corrupt training file) comes back as a value (`olmax.beam.guarded`)
and the driver raises the first one in task order. Files and logs: `olmax.beam.Workspace`.
"""

from __future__ import annotations

from collections.abc import Callable

from olmax import storage, wire
from olmax.beam import (
    Workspace,
    collect,
    collected,
    describe,
    map_tasks,
    pipeline_options,
    raise_first_failure,
    require_beam,
)

_STAGED: dict[str, tuple] = {}  # url -> the staged tuple, per worker process


def load_staged(url: str, classes: frozenset[str]) -> tuple:
    """The tuple the driver staged at `url` (`olmax.wire.stage`; `classes`: the classes it holds, as the
    driver saw them), read once per process."""
    if url not in _STAGED:
        if len(_STAGED) >= 4:
            _STAGED.clear()
        _STAGED[url] = wire.load_staged(url, classes)
    return _STAGED[url]


class StagedCall:
    """Picklable `task -> fn(task, *staged, **kwargs)`, `staged` the tuple the driver staged at `url`."""

    def __init__(self, fn: Callable, url: str, classes: frozenset[str], kwargs: dict):
        self.fn, self.url, self.classes, self.kwargs = fn, url, classes, kwargs

    def __call__(self, task):
        return self.fn(task, *load_staged(self.url, self.classes), **self.kwargs)


class BeamRunner:
    """Per-file maps as Beam pipelines (a context: its `olmax.beam.Workspace` lives inside it)."""

    def __init__(self, options_text: str, what: str):
        require_beam()
        self.what = what
        self.options = pipeline_options(options_text)
        self.description = describe(self.options)
        self.space = Workspace(self.options, what)

    def __enter__(self) -> BeamRunner:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.space.__exit__(exc_type, exc, tb)

    def map_files(
        self, name: str, tasks: list, fn: Callable, shared: tuple, order: Callable, **kwargs
    ) -> list:
        """[fn(task, *shared, **kwargs) for task in tasks] (in no particular order) as one pipeline; the
        first OlmaxError of a task (in `order(task)` order) is raised here. `fn`, `order` and the tasks
        must pickle; `shared` is staged once."""
        if not tasks:
            return []
        require_beam()
        state = storage.join(self.space.files, f"{name}-shared")
        classes = wire.stage(
            tuple(shared), state
        )  # the allowed classes travel in the pipeline, not the bucket
        out = storage.join(self.space.files, name)
        call = StagedCall(fn, state, classes, kwargs)

        def build(p):
            collect(map_tasks(p, name, tasks, call, order), out, name)

        what = f"{self.what} ({name})"
        self.space.run(build, what)
        results = collected(out, name)
        raise_first_failure(results)
        if len(results) != len(tasks):
            raise self.space.failed(f"{what}: {len(results)} results came back for {len(tasks)} tasks")
        return results
