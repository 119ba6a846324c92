"""Data: raw documents to OLMo token shards, mix files, the index, the order, the Grain loader, eval-set reading.

Public API (resolved lazily): `StreamSpec` (the one description of a data stream: mix, L, G, seed, order,
dtype; plain data, turned into an index or a loader by `stream_index` / `open_loader` in olmax.data.loader),
`Loader`, `TokenIndex` / `build_index`, `read_mix`, `PrepareConfig` (run by
`olmax.data.prepare_runner.prepare`; `olmax.data.prepare` is the local runner's module), `SourceSpec` /
`load_mix_spec`, `prepare_demo_mix` (the embedded stdlib mix).
"""

from olmax.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "StreamSpec": "olmax.data.stream",
        "DATA_SEED": "olmax.data.stream",
        "Loader": "olmax.data.loader",
        "TokenIndex": "olmax.data.index",
        "build_index": "olmax.data.index",
        "read_mix": "olmax.data.mixfile",
        "PrepareConfig": "olmax.data.prepare",
        "SourceSpec": "olmax.data.mixspec",
        "load_mix_spec": "olmax.data.mixspec",
        "prepare_demo_mix": "olmax.data.demo_mix",
    },
)
