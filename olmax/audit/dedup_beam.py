"""`olmax audit dedup --runner beam`: partition.map_reduce as an Apache Beam pipeline (imported only then).

The graph: the elements (physical files) are spread over the workers; each worker runs the map, splits
each `(kind, records)` it yields by hash partition and emits `(partition, records)` to that kind's output;
`CombinePerKey(ConcatRecords)` concatenates a partition's arrays before the shuffle (one array per
partition per bundle crosses the network) and after it; the kind's reduce runs once per partition. The
maps' summaries and the reduces' results come back to the driver through `olmax.beam.collect`, sorted
into element and partition order, so the result is the local runner's.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from olmax.audit.partition import split_partitions
from olmax.beam import (
    Failed,
    Workspace,
    collect,
    collected,
    guarded,
    pipeline_options,
    raise_first_failure,
    require_beam,
)
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
    """Runs `map_fn` on one (index, element): its records to the kinds' tagged outputs as (partition,
    records), its summary (or the OlmaxError it raised, as a `Failed`) to the main output as (index, ...)."""

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
                    yield i, stop.value
                    return
                for part, recs in split_partitions(records, self.bits):
                    yield beam.pvalue.TaggedOutput(kind, (part, recs))
        except OlmaxError as e:
            yield Failed((i,), str(e))


def _reduce_keyed(fn: Callable) -> Callable:
    def call(kv):
        part, records = kv
        return part, fn(records)

    return call


def _part_order(kv) -> tuple:
    return (kv[0],)


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
    the first failure (in element order, then partition order) is raised as the usual OlmaxError."""
    from olmax.data.order import work_dir_path

    opts = pipeline_options(options)
    kinds = sorted(reduces)
    with Workspace(opts, what, str(work_dir_path(work_dir))) as space:
        folder = space.files

        def build(pipeline) -> None:
            mapped = (
                pipeline
                | "Elements" >> beam.Create(list(enumerate(elements)))
                | "Spread" >> beam.Reshuffle()
                | "Map" >> beam.ParDo(MapElement(map_fn, bits)).with_outputs(*kinds, main="summaries")
            )
            collect(mapped.summaries, folder, "summaries")
            for kind in kinds:
                reduced = (
                    mapped[kind]
                    | f"Combine {kind}" >> beam.CombinePerKey(ConcatRecords())
                    | f"Reduce {kind}" >> beam.Map(guarded(_reduce_keyed(reduces[kind]), order=_part_order))
                )
                collect(reduced, folder, f"reduced-{kind}")

        space.run(build)
        summaries = collected(folder, "summaries")
        raise_first_failure(summaries)
        out = {}
        for kind in kinds:
            results = collected(folder, f"reduced-{kind}")
            raise_first_failure(results)
            out[kind] = [r for _, r in sorted(results, key=lambda kv: kv[0])]
    return [s for _, s in sorted(summaries, key=lambda kv: kv[0])], out
