"""olmax: OLMo 3 7B pretraining in JAX, built around its data (prepare, load, audit, train, eval)."""

__version__ = "0.1.0"
