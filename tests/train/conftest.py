"""Trainer tests share XLA's persistent compilation cache, so repeated identical steps compile once."""

import jax

from tests.train.train_testdata import CACHE_DIR

jax.config.update("jax_compilation_cache_dir", CACHE_DIR)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_numpy_rank_promotion", "raise")
