"""A signal that lands between a temporary output's creation and the block that owns it.

The CLI's report of an interrupt removes every temporary output still registered (a checkpoint's
``.checkpoint.npz.*.tmp`` was once left behind when Ctrl-C arrived in that window), and
creating a temporary file holds the signals back until it is registered."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tpuemb_cfg import atomic, cli


def test_the_interrupt_report_removes_unowned_temporaries(tmp_path: Path) -> None:
    target, tmp, fd = atomic._create_temporary(tmp_path / "checkpoint.npz")
    os.close(fd)
    assert Path(tmp).exists() and Path(tmp).parent == tmp_path
    with pytest.raises(SystemExit) as exited:
        cli._interrupted(KeyboardInterrupt())
    assert exited.value.code == 130
    assert list(tmp_path.iterdir()) == []


def test_a_signal_during_creation_waits_until_the_file_is_registered(tmp_path: Path) -> None:
    seen: list[bool] = []
    real = atomic.tempfile.mkstemp

    def mkstemp(**kwargs: object) -> tuple[int, str]:
        made = real(**kwargs)  # type: ignore[call-overload]
        os.kill(os.getpid(), signal.SIGINT)  # delivered once the creation is registered
        return made  # type: ignore[no-any-return]

    def handler(signum: int, frame: object) -> None:
        seen.append(any(Path(p).parent == tmp_path for p in atomic._LIVE))
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        atomic.tempfile.mkstemp = mkstemp  # type: ignore[assignment]
        with pytest.raises(KeyboardInterrupt):
            atomic._create_temporary(tmp_path / "out.npz")
    finally:
        atomic.tempfile.mkstemp = real
        signal.signal(signal.SIGINT, previous)
    assert seen == [True]
    atomic.remove_temporaries()
    assert list(tmp_path.iterdir()) == []
