"""Ctrl-C in the `tpuemb` command: one line, exit status 130, no traceback, no partial output.

Two phases (see :mod:`tpuemb_cfg.cli`):

- **start-up**: the first statement of ``tpuemb_cfg/__init__.py`` (``_guard_start``) makes SIGINT
  exit at once when the process is the `tpuemb` command (the console script, or ``python -m
  tpuemb_cfg``): nothing has been written yet, and a ``KeyboardInterrupt`` raised inside an import
  would print a traceback. A library import changes nothing.
- **running**: the CLI sets :func:`raise_once`: the first Ctrl-C raises ``KeyboardInterrupt``, so
  every ``with`` block unwinds and removes its temporary files; the CLI catches it and prints the
  line. A second Ctrl-C exits at once (:func:`exit_now`) after removing the temporary files.

Before the first line of tpuemb runs, Python's own start-up (the interpreter and ``site``) answers
Ctrl-C itself; no program can change that window.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, NoReturn

MESSAGE = "tpuemb: interrupted; no output file was left half-written"


def exit_now(signum: int | None = None, frame: Any = None) -> NoReturn:
    """Remove temporary outputs, print the one line and exit 130 without unwinding."""
    atomic = sys.modules.get("tpuemb_cfg.atomic")
    if atomic is not None:
        atomic.remove_temporaries()
    try:
        os.write(2, (MESSAGE + "\n").encode())
    except OSError:
        pass
    os._exit(130)


def raise_once(signum: int, frame: Any) -> None:
    """The first Ctrl-C of a running command unwinds (``KeyboardInterrupt``); later ones exit."""
    install(exit_now)
    raise KeyboardInterrupt


def install(handler: Any) -> Any:
    """Set the SIGINT handler; the previous one, or None outside the main thread."""
    try:
        return signal.signal(signal.SIGINT, handler)
    except ValueError:  # signal handlers can only be set in the main thread
        return None
