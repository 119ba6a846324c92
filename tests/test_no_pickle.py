"""README: "nothing olmax writes or reads back is a pickle". The package's source holds no pickle-family
import (pickle, cPickle, _pickle, marshal, shelve, dill, cloudpickle, jsonpickle, joblib), no
`allow_pickle=True`, no `read_pickle` and no `torch.load` without `weights_only=True`: what a Beam worker
and its driver exchange through files is olmax.wire (JSON and .npy/.npz). Beam's own pickling of the
pipeline's functions (its runners' machinery, inside apache_beam) is not olmax's code and is not read
from any file olmax writes."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "olmax"
PICKLERS = {
    "pickle",
    "cPickle",
    "_pickle",
    "marshal",
    "shelve",
    "dill",
    "cloudpickle",
    "jsonpickle",
    "joblib",
}


def pickle_uses(source: str, name: str = "<src>") -> list[str]:
    """Each pickle-family use in Python `source`, as 'name:line: what'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [f"{where}: import {a.name}" for a in node.names if a.name.split(".")[0] in PICKLERS]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PICKLERS:
            found.append(f"{where}: from {node.module} import ...")
        elif isinstance(node, ast.Call):
            f = node.func
            fname = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            kw = {k.arg: k.value for k in node.keywords}
            if "allow_pickle" in kw and not (
                isinstance(kw["allow_pickle"], ast.Constant) and kw["allow_pickle"].value is False
            ):
                found.append(f"{where}: allow_pickle not False")
            if fname == "read_pickle":
                found.append(f"{where}: read_pickle")
            base = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
            if base == "torch" and fname == "load":
                w = kw.get("weights_only")
                if not (isinstance(w, ast.Constant) and w.value is True):
                    found.append(f"{where}: torch.load without weights_only=True")
    return found


def test_the_checker_finds_each_kind_of_pickle_use():
    bad = (
        "import pickle\nfrom cloudpickle import loads\nimport numpy as np\nnp.load(p, allow_pickle=True)\n"
        "import pandas as pd\npd.read_pickle(p)\nimport torch\ntorch.load(p)\nimport dill.settings\n"
    )
    assert len(pickle_uses(bad)) == 6
    good = (
        "import numpy as np\nnp.load(p, allow_pickle=False)\nimport torch\ntorch.load(p, weights_only=True)\n"
    )
    assert pickle_uses(good) == []


def test_the_package_reads_and_writes_no_pickle():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50
    found = [u for f in files for u in pickle_uses(f.read_text(), str(f.relative_to(PACKAGE.parent)))]
    assert found == []
