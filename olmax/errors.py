"""The one exception type users see: a message that names the file, the offset and the fix."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class OlmaxError(Exception):
    """A user-facing error. The CLI prints it without a traceback and exits with `code` (default 2)."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def closest(name: str, accepted: Iterable[str], n: int = 5) -> list[str]:
    """The accepted names nearest in spelling to a mistyped `name`, nearest first (difflib's ratio), so an
    error's suggestions are names the command takes."""
    return difflib.get_close_matches(name, list(accepted), n=n, cutoff=0.6)
