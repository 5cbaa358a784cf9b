"""A signal that lands between a temporary output's creation and the block that owns it.

The CLI's report of an interrupt removes every temporary output still registered (a checkpoint's
``.checkpoint.npz.*.tmp`` was once left behind when Ctrl-C arrived in that window), and
creating a temporary file holds the signals back until it is registered: the command's handler
waits for the section's end whichever thread the system delivered the signal to, and the main
thread's signal mask holds a signal sent to that thread."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tpuemb_cfg import cli
from tpuemb_cfg.base import interrupt as _interrupt
from tpuemb_cfg.formats import atomic


def test_the_interrupt_report_removes_unowned_temporaries(tmp_path: Path) -> None:
    target, tmp, fd = atomic._create_temporary(tmp_path / "checkpoint.npz")
    os.close(fd)
    assert Path(tmp).exists() and Path(tmp).parent == tmp_path
    with pytest.raises(SystemExit) as exited:
        cli._interrupted(KeyboardInterrupt())
    assert exited.value.code == 130
    assert list(tmp_path.iterdir()) == []


def _create_with_a_signal_inside(tmp_path: Path, send: Callable[[], None],
                                 handler: Callable[[int, object], None]) -> None:
    real = atomic.tempfile.mkstemp

    def mkstemp(**kwargs: object) -> tuple[int, str]:
        made = real(**kwargs)  # type: ignore[call-overload]
        send()  # the file exists, not yet registered for removal
        return made  # type: ignore[no-any-return]

    previous = _interrupt.install(handler)
    try:
        atomic.tempfile.mkstemp = mkstemp  # type: ignore[assignment]
        with pytest.raises(KeyboardInterrupt):
            atomic._create_temporary(tmp_path / "out.npz")
    finally:
        atomic.tempfile.mkstemp = real
        _interrupt.install(previous)
    atomic.remove_temporaries()
    assert list(tmp_path.iterdir()) == []


class _AnotherThread:
    """A thread started before the section (so it does not share the main thread's mask) that
    receives SIGINT on request, as the system may choose for a Ctrl-C: Python then runs the
    handler in the main thread at once, whatever the main thread's mask."""

    def __init__(self) -> None:
        self._go = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        self._go.wait()
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    def send(self) -> None:
        self._go.set()
        self._thread.join()


def test_the_commands_handler_waits_until_the_file_is_registered(tmp_path: Path) -> None:
    """``raise_once`` (the running command's handler) acts on the signal only once the file is
    registered, so the removal of temporaries finds it (else the folder keeps it)."""
    _create_with_a_signal_inside(tmp_path, _AnotherThread().send, _interrupt.raise_once)


def test_the_main_threads_mask_holds_a_signal_sent_to_it(tmp_path: Path) -> None:
    """Python's own handling (a library caller): a signal sent to the main thread waits."""
    registered: list[bool] = []

    def handler(signum: int, frame: object) -> None:
        registered.append(any(Path(p).parent == tmp_path for p in atomic._LIVE))
        raise KeyboardInterrupt

    main = threading.main_thread().ident
    assert main is not None
    _create_with_a_signal_inside(
        tmp_path, lambda: signal.pthread_kill(main, signal.SIGINT), handler)
    assert registered == [True]
