"""The trainer's data: open the configured mix (preparing the embedded demo mix on first use) as a Loader."""

from __future__ import annotations

import os
from pathlib import Path

from olmax.data.loader import Loader, LoaderConfig
from olmax.errors import OlmaxError
from olmax.train.config import DEMO_MIX, DataConfig


def demo_mix_dir(work_dir: str | None) -> Path:
    from olmax.data.order import default_work_dir

    return Path(work_dir or default_work_dir()) / "demo-mix"


def prepare_demo_mix(out: Path) -> Path:
    """The stdlib code+prose mix `olmax demo` builds, tokenized with dolma2; reused when present."""
    from olmax.demo import prepare_demo_mix as prepare

    return prepare(out)


def resolve_mix(cfg: DataConfig, override: str | None = None) -> str:
    """The mix file to read: --mix, else data.mix, where "demo" prepares the embedded mix (primary process)."""
    mix = override or cfg.mix
    if mix in ("???", "", None):
        raise OlmaxError("data.mix is not set: this recipe names the OLMo-core mix it trains on in its "
                         "comment; prepare or download it and pass --mix PATH (or data.mix=PATH)")
    if mix != DEMO_MIX:
        return mix
    import jax

    path = demo_mix_dir(cfg.work_dir) / "shards" / "mix.txt"
    if jax.process_index() == 0:
        prepare_demo_mix(path.parent.parent)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("olmax demo mix prepared")
    return str(path)


def open_loader(cfg: DataConfig, mix: str, eos_token_id: int | None = None) -> Loader:
    """This process's Loader over `mix` at the config's sequence length, batch and seed."""
    from olmax.data.index import open_index

    if not (mix.startswith(("http://", "https://", "gs://", "s3://")) or os.path.exists(mix)):
        raise OlmaxError(f"data.mix {mix}: no such file; pass --mix PATH or data.mix=PATH")
    index = open_index(mix, cfg.seq_len, base_dir=cfg.base_dir)
    from olmax.data.index import DOLMA2_EOS

    # the EOS id only matters for document masks (segments end at EOS)
    eos_token_id = DOLMA2_EOS if eos_token_id is None else eos_token_id
    lcfg = LoaderConfig(seq_len=cfg.seq_len, global_batch_size=cfg.global_batch_size, seed=cfg.seed,
                        order=cfg.order, work_dir=cfg.work_dir, document_masks=cfg.document_masks,
                        eos_token_id=eos_token_id, num_threads=cfg.num_threads,
                        prefetch_buffer_size=cfg.prefetch_buffer_size)
    return Loader(index, lcfg)
