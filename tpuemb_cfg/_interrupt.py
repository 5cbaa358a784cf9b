"""Ctrl-C, SIGTERM and SIGHUP in the `tpuemb` command: one line, exit status 128 + N (130 for
Ctrl-C, 143 for SIGTERM, 129 for SIGHUP), no traceback, no partial output, no temporary file.

Two phases (see :mod:`tpuemb_cfg.cli`):

- **start-up**: the first statement of ``tpuemb_cfg/__init__.py`` (``_guard_start``) makes SIGINT
  exit at once when the process is the `tpuemb` command (the console script, or ``python -m
  tpuemb_cfg``): nothing has been written yet, and a ``KeyboardInterrupt`` raised inside an import
  would print a traceback. A library import changes nothing. (SIGTERM and SIGHUP keep their
  default action there, which ends the process before it has written anything.)
- **running**: the CLI sets :func:`raise_once` for the three signals: the first one raises
  ``KeyboardInterrupt`` (SIGINT) or :class:`Terminated`, a subclass carrying the signal number
  (SIGTERM, SIGHUP), so every ``with`` block unwinds and removes its temporary files - the same
  path for all three; the CLI catches it and prints the line. A second signal exits at once
  (:func:`exit_now`) after removing the temporary files. A signal the command was started with
  ignored (``nohup`` ignores SIGHUP) stays ignored.

Before the first line of tpuemb runs, Python's own start-up (the interpreter and ``site``) answers
Ctrl-C itself; no program can change that window.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

MESSAGE = "tpuemb: interrupted; no output file was left half-written"

#: The signals handled like Ctrl-C, where the platform has them.
SIGNALS: tuple[int, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP while a command runs: unwinds exactly as Ctrl-C does (every handler of
    ``KeyboardInterrupt`` applies), with the signal's number for the exit status."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def status(signum: int) -> int:
    """The exit status of a command ended by signal ``signum``: 128 + N, as a shell reports it."""
    return 128 + signum


def message(signum: int) -> str:
    """The one line printed when signal ``signum`` ends a command."""
    if signum == signal.SIGINT:
        return MESSAGE
    return (f"tpuemb: stopped by {signal.Signals(signum).name}; no output file was left "
            "half-written")


def exit_now(signum: int | None = None, frame: Any = None) -> NoReturn:
    """Remove temporary outputs, print the one line and exit 128 + N without unwinding."""
    number = signal.SIGINT if signum is None else signum
    # A module still being imported (a signal inside the import system) has no function yet,
    # and then no temporary file of its own either.
    remove = getattr(sys.modules.get("tpuemb_cfg.atomic"), "remove_temporaries", None)
    if remove is not None:
        remove()
    try:
        os.write(2, (message(number) + "\n").encode())
    except OSError:
        pass
    os._exit(status(number))


def in_import_machinery(frame: Any) -> bool:
    """Whether ``frame`` (where a signal arrived) runs Python's import system. An exception
    raised there can land in a callback the interpreter calls itself (the module lock's weakref
    callback), which prints it as "Exception ignored ..." with a traceback and goes on."""
    code = getattr(frame, "f_code", None)
    return code is not None and code.co_filename.startswith("<frozen importlib")


#: How many :func:`deferred` sections are running, and the signal that arrived in one.
_deferring = 0
_pending: int | None = None
#: The signal :func:`raise_once` last acted on (:func:`received`).
_received: int | None = None


def forget_received() -> None:
    """Forget the signal :func:`raise_once` last acted on (a command starts)."""
    global _received
    _received = None


def received(exc: KeyboardInterrupt) -> int:
    """The signal that ``exc`` reports: its own number (:class:`Terminated`), else the one
    :func:`raise_once` last acted on - a library that catches the exception and raises a plain
    ``KeyboardInterrupt`` in its place (Ray's ``ray.get`` and ``ray.wait`` do) loses the
    number - else SIGINT."""
    if isinstance(exc, Terminated):
        return exc.signum
    return _received if _received is not None else signal.SIGINT


@contextmanager
def deferred() -> Iterator[None]:
    """A section a signal must not cut in half (a temporary file created but not yet registered
    for removal; a set of renames): :func:`raise_once` records a signal that arrives inside it
    and acts on it when the outermost section ends. It works whichever thread the system gave
    the signal to, which a signal mask of the main thread alone does not."""
    global _deferring, _pending
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        if _deferring == 0 and _pending is not None:
            signum, _pending = _pending, None
            raise_once(signum, None)


def raise_once(signum: int, frame: Any) -> None:
    """The first signal of a running command unwinds (``KeyboardInterrupt``, or
    :class:`Terminated` for SIGTERM and SIGHUP); later ones exit at once, and so does a first
    one that arrives inside the import system (:func:`in_import_machinery`: an import writes
    nothing, and :func:`exit_now` removes the temporary files). Inside a :func:`deferred`
    section the first one waits for the section's end."""
    global _pending, _received
    if _deferring and _pending is None:
        _pending = signum
        return
    _received = signum
    install(exit_now)
    if in_import_machinery(frame):
        exit_now(signum, frame)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def install(handler: Any) -> Any:
    """Set ``handler`` for SIGINT, SIGTERM and SIGHUP (a signal that is ignored stays ignored),
    or restore what an earlier call returned (a mapping from signal to handler). Returns the
    previous handlers, or None outside the main thread."""
    previous: dict[int, Any] = {}
    restoring = isinstance(handler, dict)
    try:
        for signum in SIGNALS:
            wanted = handler.get(signum) if restoring else handler
            if wanted is None:  # nothing to restore (a handler set outside Python)
                continue
            if (not restoring and signum != signal.SIGINT
                    and signal.getsignal(signum) is signal.SIG_IGN):
                continue  # `nohup`: the caller asked for this signal to be ignored
            previous[signum] = signal.signal(signum, wanted)
    except ValueError:  # signal handlers can only be set in the main thread
        return None
    return previous
