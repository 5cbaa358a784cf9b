"""One warning a process: why an engine, or some tables, run on the NumPy path."""

from __future__ import annotations

import warnings

__all__ = ["warn_once"]

_warned: set[str] = set()  # fallback reasons already shown in this process


def warn_once(reason: str, stacklevel: int = 2) -> None:
    """``RuntimeWarning(reason)``, the first time ``reason`` comes up in this process (why an
    engine, or some tables, run on the NumPy path)."""
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(reason, RuntimeWarning, stacklevel=stacklevel + 1)
