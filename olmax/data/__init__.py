"""Data: OLMo token shards and mix files, the index, the order, the Grain loader; prepare in `olmax.data.prepare`.

Public API (resolved lazily): `StreamSpec` (the one description of a data stream: mix, L, G, seed, order,
dtype; plain data, turned into an index or a loader by `stream_index` / `open_loader` in olmax.data.loader),
`Loader`, `TokenIndex` / `build_index`, `read_mix`. Writing shards (`olmax data prepare`) is the package
`olmax.data.prepare`, which the loader never imports.
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
    },
)
