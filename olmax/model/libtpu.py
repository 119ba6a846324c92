"""The TPU compiler settings olmax's kernels need, set in the environment before JAX starts the TPU.

libtpu reads LIBTPU_INIT_ARGS once, when the TPU backend starts, so the `olmax` command applies
`libtpu_env` first thing (and the TPU benchmarks do the same); on any other backend nothing reads it.
This module imports nothing heavy: the command line applies it before JAX is imported.
"""

from __future__ import annotations

from collections.abc import Mapping

# The compiler's scoped-VMEM budget: splash attention's 2048-edge tiles with the fused backward hold
# ~28 MiB of VMEM scratch, over libtpu's 16 MiB default (MaxText's OLMo 3 launcher sets the same value).
SCOPED_VMEM_FLAG = "--xla_tpu_scoped_vmem_limit_kib"
SCOPED_VMEM_KIB = 65536


def libtpu_env(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with the scoped-VMEM flag added to LIBTPU_INIT_ARGS unless it sets one already (a
    user's value wins)."""
    args = environ.get("LIBTPU_INIT_ARGS", "")
    if SCOPED_VMEM_FLAG in args:
        return dict(environ)
    return {**environ, "LIBTPU_INIT_ARGS": f"{args} {SCOPED_VMEM_FLAG}={SCOPED_VMEM_KIB}".strip()}
