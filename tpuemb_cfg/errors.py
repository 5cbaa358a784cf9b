"""Exceptions that carry a location a user can act on.

Every error about user input is an :class:`InputError`; its ``str()`` is the one line the CLI prints
(``FILE:LINE:COL: error: ...``) before exiting with status 2.
"""

from __future__ import annotations


class TpuembError(Exception):
    """Base class of every error tpuemb raises on purpose."""


class InputError(TpuembError):
    """A file, byte string or array that cannot be used, with where and why.

    ``line`` and ``column`` are 1-based positions in a text file; ``offset`` is a byte offset in a
    binary file; ``key`` names an entry of an .npz archive or a JSON/TOML key.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        column: int | None = None,
        offset: int | None = None,
        key: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line
        self.column = column
        self.offset = offset
        self.key = key

    def location(self) -> str:
        where = self.path if self.path is not None else "<input>"
        if self.line is not None:
            return f"{where}:{self.line}:{self.column if self.column is not None else 1}"
        if self.offset is not None:
            return f"{where}: byte {self.offset}"
        if self.key is not None:
            return f"{where}: key {self.key}"
        return where

    def __str__(self) -> str:
        return f"{self.location()}: error: {self.message}"


class UsageError(TpuembError):
    """Options that do not fit together or name something that does not exist."""
