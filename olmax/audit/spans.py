"""The physical identity of the files a mix lists, and where documents are (olmax.data.documents).

Physical identity (device, inode) tells a path listed twice (planned repetition) from a byte-identical
copy under another name (an accident the content hashes then find).
"""

from __future__ import annotations

import os

import numpy as np

from olmax.data.documents import Documents, documents
from olmax.errors import OlmaxError
from olmax.storage import is_url

__all__ = ["Documents", "documents", "physical_ids", "require_local"]


def physical_ids(paths: tuple[str, ...]) -> np.ndarray:
    """int64 (F,): one id per distinct physical file (same inode, or the same URL), in first-seen order."""
    seen: dict[object, int] = {}
    out = np.empty(len(paths), dtype=np.int64)
    for i, p in enumerate(paths):
        if is_url(p):
            key: object = p
        else:
            st = os.stat(p)
            key = (st.st_dev, st.st_ino)
        out[i] = seen.setdefault(key, len(seen))
    return out


def require_local(paths, what: str, hint: str = "") -> None:
    """Content passes read whole files through memmaps: refuse URLs with the fix in the message."""
    remote = [p for p in paths if is_url(p)]
    if remote:
        raise OlmaxError(
            f"{remote[0]}: {what} reads every token of the mix's files and needs local "
            f"copies; mirror the files and pass --base-dir to the mirror{hint}"
        )
