"""Ctrl-C, SIGTERM and SIGHUP in the `tpuemb` command: one line, exit status 128 + N (130 for
Ctrl-C, 143 for SIGTERM, 129 for SIGHUP), no traceback, no partial output, no temporary file.

Two phases (see :mod:`tpuemb_cfg.cli`):

- **start-up**: the first statement of ``tpuemb_cfg/__init__.py`` (``_guard_start``, written
  there because it must run before any import, this module's included) makes SIGINT exit at once
  when the process is the `tpuemb` command (the console script, or ``python -m tpuemb_cfg``):
  nothing has been written yet, and a ``KeyboardInterrupt`` raised inside an import would print a
  traceback. A library import changes nothing. (SIGTERM and SIGHUP keep their default action
  there, which ends the process before it has written anything.)
- **running**: the CLI sets :func:`raise_once` for the three signals: the first one raises
  ``KeyboardInterrupt`` (SIGINT) or :class:`Terminated`, a subclass carrying the signal number
  (SIGTERM, SIGHUP), so every ``with`` block unwinds and removes its temporary files - the same
  path for all three; the CLI catches it and prints the line. A second signal exits at once
  (:func:`exit_now`) after removing the temporary files. A signal the command was started with
  ignored (``nohup`` ignores SIGHUP) stays ignored.

Two more sections a signal must respect, also here: :func:`held` (a set of renames that must not be
cut in half: ``atomic.OutputSet``) and :func:`kept` (a library call that replaces the handlers,
``ray.init``: the command's are set again after it).

This module is the one home of the signal handling once the command runs: the CLI calls
:func:`install` and :func:`raise_once`, ``atomic`` :func:`held`, the Ray connection :func:`kept`.
It imports only modules Python has loaded before any line of tpuemb runs (``os``, ``sys`` and the
C module ``_signal``; ``signal`` would build its enums).

Before the first line of tpuemb runs, Python's own start-up (the interpreter and ``site``) answers
Ctrl-C itself; no program can change that window.
"""

from __future__ import annotations

import _signal
import os
import sys

TYPE_CHECKING = False  # typing is not loaded yet when the package's __init__ imports this
if TYPE_CHECKING:
    from typing import Any, NoReturn

MESSAGE = "tpuemb: interrupted; no output file was left half-written"

#: The signals handled like Ctrl-C, where the platform has them, and their names.
_NAMES: dict[int, str] = {getattr(_signal, name): name for name in ("SIGINT", "SIGTERM", "SIGHUP")
                          if hasattr(_signal, name)}
SIGNALS: tuple[int, ...] = tuple(_NAMES)
SIGINT: int = _signal.SIGINT


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
    if signum == SIGINT:
        return MESSAGE
    return (f"tpuemb: stopped by {_NAMES.get(signum, f'signal {signum}')}; no output file was "
            "left half-written")


def exit_now(signum: int | None = None, frame: Any = None) -> NoReturn:
    """Remove temporary outputs, print the one line and exit 128 + N without unwinding."""
    number = SIGINT if signum is None else signum
    # A module still being imported (a signal inside the import system) has no function yet,
    # and then no temporary file of its own either.
    remove = getattr(sys.modules.get("tpuemb_cfg.formats.atomic"), "remove_temporaries", None)
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
    return _received if _received is not None else SIGINT


def wrapped(exc: BaseException) -> KeyboardInterrupt | None:
    """The ``KeyboardInterrupt`` that ``exc`` stands for, if any: a signal whose handler raises
    while C code is calling back into Python (numba's dispatcher loading a kernel, for one)
    comes out as ``SystemError: ... returned a result with an exception set`` with the
    ``KeyboardInterrupt`` as its cause; such an error is the signal, not a bug."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


class deferred:  # noqa: N801 - used as ``with deferred():``, like a function
    """A section a signal must not cut in half (a temporary file created but not yet registered
    for removal; a set of renames): :func:`raise_once` records a signal that arrives inside it
    and acts on it when the outermost section ends. It works whichever thread the system gave
    the signal to, which a signal mask of the main thread alone does not."""

    def __enter__(self) -> None:
        global _deferring
        _deferring += 1

    def __exit__(self, *exc: object) -> None:
        global _deferring, _pending
        _deferring -= 1
        if _deferring == 0 and _pending is not None:
            signum, _pending = _pending, None
            raise_once(signum, None)


class held:  # noqa: N801 - used as ``with held():``, like a function
    """Hold SIGINT, SIGTERM and SIGHUP back while a section that must not be cut in half runs
    (``atomic.OutputSet``'s renames): the command's handler waits for its end
    (:class:`deferred`, whichever thread the signal reached), and on POSIX the main thread's
    signal mask holds them too (so Python's own handler, in a library caller, waits as well when
    the signal is sent to that thread)."""

    def __init__(self) -> None:
        self._deferred = deferred()
        self._mask: object = None

    def __enter__(self) -> None:
        import threading  # loaded already: only a writer holds signals

        self._deferred.__enter__()
        if (hasattr(_signal, "pthread_sigmask")
                and threading.current_thread() is threading.main_thread()):
            self._mask = _signal.pthread_sigmask(_signal.SIG_BLOCK, SIGNALS)

    def __exit__(self, *exc: object) -> None:
        try:
            if self._mask is not None:
                _signal.pthread_sigmask(_signal.SIG_SETMASK, self._mask)
        finally:
            self._deferred.__exit__(*exc)


class kept:  # noqa: N801 - used as ``with kept():``, like a function
    """The handlers this process set for SIGINT, SIGTERM and SIGHUP (the `tpuemb` command's:
    one line and exit status 128 + N, no temporary file left) are set again after the block:
    ``ray.init`` replaces SIGTERM's with its own (``sys.exit(15)``, with its C++ core's stack
    dump). A default handler is left to the block's code; outside the main thread nothing can
    be set."""

    def __init__(self) -> None:
        self._saved: dict[int, Any] = {}

    def __enter__(self) -> None:
        import threading  # loaded already: only a running command connects

        if threading.current_thread() is threading.main_thread():
            self._saved = {signum: _signal.getsignal(signum) for signum in SIGNALS}

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._saved.items():
            if handler is not None and handler != _signal.SIG_DFL:
                _signal.signal(signum, handler)


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
    if signum == SIGINT:
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
            if (not restoring and signum != SIGINT
                    and _signal.getsignal(signum) == _signal.SIG_IGN):
                continue  # `nohup`: the caller asked for this signal to be ignored
            previous[signum] = _signal.signal(signum, wanted)
    except ValueError:  # signal handlers can only be set in the main thread
        return None
    return previous
