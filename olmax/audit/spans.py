"""The physical identity of the files a mix lists, and where documents are (olmax.data.documents).

Physical identity (olmax.data.token_reads.physical_key: a local file's device and inode, an object's
canonical URL with its pinned size and version) tells a path listed twice (planned repetition) from a
byte-identical copy under another name (an accident the content hashes then find).
"""

from __future__ import annotations

import numpy as np

from olmax.data.documents import Documents, documents
from olmax.data.token_reads import physical_keys

__all__ = ["Documents", "documents", "physical_ids"]


def physical_ids(paths: tuple[str, ...]) -> np.ndarray:
    """int64 (F,): one id per distinct physical file, in first-seen order."""
    seen: dict[tuple, int] = {}
    out = np.empty(len(paths), dtype=np.int64)
    for i, key in enumerate(physical_keys(paths)):
        out[i] = seen.setdefault(key, len(seen))
    return out
