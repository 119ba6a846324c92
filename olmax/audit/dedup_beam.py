"""partition.map_reduce as an Apache Beam pipeline (imported only then): `olmax audit dedup --runner beam`
and the loader audit's content checks (loader_beam.py).

The graph: the elements (physical files) are spread over the workers (`olmax.beam.spread`); each worker
runs the map, splits each `(kind, records)` it yields by hash partition and emits
("records", (kind, partition), records), and its summary as ("summary", (index,), summary): one output,
since a runner may not keep a ParDo's tagged outputs apart (the DaskRunner hands each consumer all of
them). `CombinePerKey(ConcatRecords)` over (kind, partition) concatenates a partition's arrays before the
shuffle (on runners that lift combines: one array per partition per bundle crosses the network) and
after it; the kind's reduce runs once per partition. The maps' summaries and the reduces' results come
back to the driver through `olmax.beam.collect`, sorted into element and (kind, partition) order, so the
result is the local runner's.
"""

from __future__ import annotations

import typing
from collections.abc import Callable

import numpy as np

from olmax.beam import (
    Failed,
    Workspace,
    collect,
    collected,
    guarded,
    pipeline_options,
    raise_first_failure,
    require_beam,
    spread,
)
from olmax.data.order import work_dir_path
from olmax.dedup.spill import split_partitions
from olmax.errors import OlmaxError

beam = require_beam()


class ConcatRecords(beam.CombineFn):
    """Record arrays of one partition → one array (kept as a list until compacted or extracted)."""

    def create_accumulator(self) -> list:
        return []

    def add_input(self, acc: list, records: np.ndarray) -> list:
        acc.append(records)
        return acc

    def merge_accumulators(self, accs) -> list:
        return [a for acc in accs for a in acc]

    def compact(self, acc: list) -> list:
        return [np.concatenate(acc)] if len(acc) > 1 else acc

    def extract_output(self, acc: list) -> np.ndarray:
        return np.concatenate(acc)


class MapElement(beam.DoFn):
    """Runs `map_fn` on one (index, element). One output (a multi-output ParDo is not kept apart by every
    runner: the DaskRunner hands each tagged output the whole mix), each element tagged by what it is:
    ("records", (kind, partition), records) for the combine, ("summary", (index,), summary or the
    OlmaxError it raised as a `Failed`) for the driver (one shape: Beam infers one coder for both)."""

    def __init__(self, map_fn: Callable, bits: int):
        self.map_fn, self.bits = map_fn, bits

    def process(self, item):
        i, element = item
        try:
            gen = self.map_fn(element)
            while True:
                try:
                    kind, records = next(gen)
                except StopIteration as stop:
                    yield "summary", (i,), stop.value
                    return
                for part, recs in split_partitions(records, self.bits):
                    yield "records", (kind, part), recs
        except OlmaxError as e:
            yield "summary", (i,), Failed((i,), str(e))


def _records(tagged) -> list:
    return [(tagged[1], tagged[2])] if tagged[0] == "records" else []


def _summaries(tagged) -> list:
    if tagged[0] != "summary":
        return []
    return [tagged[2] if isinstance(tagged[2], Failed) else (tagged[1][0], tagged[2])]


class ReduceKeyed:
    """Picklable `((kind, partition), records) -> (kind, partition, reduces[kind](records))`."""

    def __init__(self, reduces: dict[str, Callable]):
        self.reduces = reduces

    def __call__(self, kv):
        (kind, part), records = kv
        return kind, part, self.reduces[kind](records)


def _kind_part_order(kv) -> tuple:
    return tuple(kv[0])


def map_reduce_beam(
    options: str,
    elements: list,
    map_fn: Callable,
    reduces: dict[str, Callable],
    *,
    bits: int,
    work_dir: str | None,
    what: str,
) -> tuple[list, dict[str, list]]:
    """partition.map_reduce on Apache Beam (`options`: Beam's flags): `reduces[kind](records)` per
    partition. Returns (the summaries in element order, {kind: the reduce results in partition order});
    the first failure (in element order, then partition order) is raised as the usual OlmaxError. Functions
    that read objects in a bucket come wrapped in olmax.ranged.WithPins (the versions the driver pinned)."""

    opts = pipeline_options(options)
    kinds = sorted(reduces)
    with Workspace(opts, what, str(work_dir_path(work_dir))) as space:
        folder = space.files

        def build(pipeline) -> None:
            mapped = (
                pipeline
                | "Elements" >> beam.Create(list(enumerate(elements)))
                | "Spread" >> spread()
                | "Map" >> beam.ParDo(MapElement(map_fn, bits)).with_output_types(typing.Any)
            )
            collect(mapped | "Summaries" >> beam.FlatMap(_summaries), folder, "summaries")
            reduced = (
                mapped
                | "Records" >> beam.FlatMap(_records)
                | "Combine" >> beam.CombinePerKey(ConcatRecords())
                | "Reduce" >> beam.Map(guarded(ReduceKeyed(reduces), order=_kind_part_order))
            )
            collect(reduced, folder, "reduced")

        space.run(build)
        summaries = collected(folder, "summaries")
        raise_first_failure(summaries)
        results = collected(folder, "reduced")
        raise_first_failure(results)
        out: dict[str, list] = {kind: [] for kind in kinds}
        for kind, _, result in sorted(results, key=lambda r: (r[0], r[1])):
            out[kind].append(result)
    return [s for _, s in sorted(summaries, key=lambda kv: kv[0])], out
