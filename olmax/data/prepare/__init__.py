"""Prepare, and only prepare: raw documents → OLMo token shards, sidecars, manifest.json and mix.txt.

Modules:
  prepare_config.py     the settings as plain data: `PrepareConfig`, `SourceSpec`, `DedupSettings`
  entry.py              the entry point `prepare(cfg, beam_options)`: checks, input expansion, the runner
  batches.py            the documents in input order, in ~4 MB batches (`read_batches`), and their tokens
  local_runner.py       threads on one machine (the default): shards, journal, resume, manifest
  prepare_beam.py       the same bytes from Apache Beam pipelines (`--runner beam`)
  dedup_stages.py       `--dedup exact,minhash,substring`: the decisions, made before any shard is written
  dedup_stages_beam.py  the same decisions from Beam pipelines
  mixspec.py            YAML mix specs and the planned repetition they write into mix.txt
  demo_mix.py           the embedded default mix (the standard library's code and pydoc topics)
  prepare_cli.py        `olmax data prepare`'s options

The loader never imports this package: a stream that names the demo mix finds it prepared by the command
that reads it (`demo_mix.ensure_stream_mix`).

Public API (resolved lazily): `prepare`, `PrepareConfig`, `SourceSpec`, `DedupSettings`, `load_mix_spec`,
`prepare_demo_mix`.
"""

from olmax.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "prepare": "olmax.data.prepare.entry",
        "PrepareConfig": "olmax.data.prepare.prepare_config",
        "SourceSpec": "olmax.data.prepare.prepare_config",
        "DedupSettings": "olmax.data.prepare.prepare_config",
        "load_mix_spec": "olmax.data.prepare.mixspec",
        "prepare_demo_mix": "olmax.data.prepare.demo_mix",
    },
)
