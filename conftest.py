"""Settings every test runs under, whichever folder it lives in.

JAX rank promotion raises: an implicit broadcast between arrays of different ranks (a `(n,)` against an
`(n, 1)` quietly becoming `(n, n)`) is an error in tests, in the library code they call and in the
`olmax` subprocesses they start (the environment variable below is inherited by those). Unknown
`pytest.mark.*` names are errors too (`--strict-markers` in pyproject.toml).
"""

import os

os.environ["JAX_NUMPY_RANK_PROMOTION"] = "raise"  # before jax is imported here or in any child process

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture(autouse=True)
def _rank_promotion_raises():
    """Re-applied before each test, so one test that relaxes it cannot relax the tests after it."""
    jax.config.update("jax_numpy_rank_promotion", "raise")
    yield
