"""Every lazily exported public name of every olmax package resolves (a stale entry fails only when used)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

PACKAGES = [
    "olmax.audit",
    "olmax.audit.leaks",
    "olmax.data",
    "olmax.data.prepare",
    "olmax.evals",
    "olmax.evalsets",
    "olmax.model",
    "olmax.train",
]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_export_resolves(package):
    mod = importlib.import_module(package)
    assert mod.__all__
    missing = [name for name in mod.__all__ if not hasattr(mod, name)]
    assert not missing, f"{package}: {missing}"


@pytest.mark.parametrize("package", PACKAGES)
def test_no_export_is_shadowed_by_a_submodule(package):
    """`olmax.data.prepare.local_runner` was both an export and a module: once the module is imported, the module wins."""
    mod = importlib.import_module(package)
    folder = Path(mod.__file__).parent
    shadowed = [name for name in mod.__all__ if (folder / f"{name}.py").exists() or (folder / name).is_dir()]
    assert not shadowed, f"{package}: exports named like a submodule: {shadowed}"
