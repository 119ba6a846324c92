"""The one exception type users see: a message that names the file, the offset and the fix."""

from __future__ import annotations


class OlmaxError(Exception):
    """A user-facing error. The CLI prints it without a traceback and exits with `code` (default 2)."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code
