"""One home for two helpers that were written several times (issue 35).

- **Showing a user's value** in a message: ``errors.shown`` (a bounded ``repr``) and
  ``errors.described`` (``an int (64)``); the constructors' ``show``, the SparseCore checks'
  ``_show`` and the SparseCore entry points' ``found`` are these functions, not copies.
- **Signals**: ``_interrupt`` holds the handling; ``atomic`` holds signals back with
  ``_interrupt.held``, the Ray connection keeps the command's handlers over ``ray.init`` with
  ``_interrupt.kept``.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType

import numpy as np
import pytest

from tpuemb_cfg.base import errors
from tpuemb_cfg.base import interrupt as _interrupt
from tpuemb_cfg.embedding import _checks, pbvalues
from tpuemb_cfg.sparsecore import _args
from tpuemb_cfg.sparsecore import checks as sc_checks


def test_every_value_helper_is_the_one_in_errors() -> None:
    assert pbvalues.show is errors.shown
    assert _checks.show is errors.shown
    assert sc_checks._show is errors.shown
    assert _args.found is errors.described


def test_shown_abbreviates_containers_and_huge_ints() -> None:
    assert errors.shown(1.5) == "1.5"
    assert errors.shown(list(range(10))) == "[0, 1, 2, 3, 4, 5, ...]"
    assert errors.shown(-(10**45)) == "-100000... (an int of 46 digits)"
    text = errors.shown("x" * 200)
    assert len(text) <= 80 and text.startswith("'xx") and text.endswith("x'")

    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    assert errors.shown(Broken()).startswith("<Broken")  # never the exception


def test_described_keeps_the_entry_points_wording() -> None:
    assert errors.described(None) == "None"
    assert errors.described(64) == "an int (64)"
    assert errors.described(True) == "a bool (True)"
    assert errors.described(np.int64(3)) == f"an int64 ({np.int64(3)!r})"
    assert errors.described(object()) == "an object"
    long = "y" * 50
    # the whole repr cut at 40 characters: 39 of them and an ellipsis
    assert errors.described(long) == f"a str ({repr(long)[:39]}…)"
    assert errors.described(10**50) == f"an int ({str(10**50)[:39]}…)"


def _main_thread_only() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are set in the main thread")


def test_kept_sets_the_handlers_again_after_a_library_replaced_them() -> None:
    _main_thread_only()

    def mine(signum: int, frame: FrameType | None) -> None:
        pass

    before = {n: signal.getsignal(n) for n in _interrupt.SIGNALS}
    try:
        signal.signal(signal.SIGTERM, mine)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        with _interrupt.kept():
            signal.signal(signal.SIGTERM, lambda n, f: sys.exit(15))  # what ray.init does
            signal.signal(signal.SIGINT, signal.default_int_handler)
        assert signal.getsignal(signal.SIGTERM) is mine
        # a default handler is left to the block's code
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signal masks")
def test_held_blocks_the_signals_and_defers_the_handler() -> None:
    _main_thread_only()
    outside = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    with _interrupt.held():
        inside = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        assert set(_interrupt.SIGNALS) <= inside
        # the command's handler, called now (the signal reached another thread), waits
        try:
            _interrupt.raise_once(signal.SIGTERM, None)
        finally:
            pending = _interrupt._pending
            _interrupt._pending = None  # not acted on when the section ends
    assert pending == signal.SIGTERM
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == outside


def test_messages_and_statuses() -> None:
    assert [_interrupt.status(n) for n in (signal.SIGINT, signal.SIGTERM)] == [130, 143]
    assert _interrupt.message(signal.SIGINT) == _interrupt.MESSAGE
    assert _interrupt.message(signal.SIGTERM) == (
        "tpuemb: stopped by SIGTERM; no output file was left half-written")
