"""What `tpuemb simulate` says while a run goes: one source of events, a view chosen once.

A run reports three kinds of event to a :class:`RunLog`: a step done (the ``progress`` callback
every run of ``tpuemb_cfg.sim`` and ``executor.replay`` already takes), a checkpoint written and
the outputs written. Where they go depends on standard error, decided when the log is made:

- a terminal: the progress bar (click's), as before; checkpoints and outputs say nothing, since
  a line would tear the bar and the summary follows at the end anyway;
- a file or a pipe (a Ray Job's log file, CI, ``nohup``): plain lines, each starting with
  its UTC time, because a bar redrawn with carriage returns is one unreadable line in a file and
  nothing at all is shown before the end. A step line says ``step N/TOTAL``, the rate, the time
  left and the loss; it is written for the first and the last step and otherwise at most every
  :data:`LOG_EVERY` seconds (``TPUEMB_LOG_EVERY`` overrides it; ``0``: every step), so a run
  of a million steps writes a few lines a minute. Each checkpoint and the outputs get a line
  with their path, size and the seconds they took;
- ``--quiet``, or standard error that is no file descriptor (an in-process caller such as
  click's ``CliRunner`` capturing the messages in memory): nothing.

The library never prints: it calls back, and this module (the commands layer) decides. The
clocks are parameters, so the rate limit is tested without waiting.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TextIO

import click

from tpuemb_cfg.base.errors import UsageError, printable
from tpuemb_cfg.base.units import format_size

__all__ = ["LOG_EVERY", "LOG_EVERY_ENV", "RunLog", "format_duration", "log_every"]

#: Without a terminal, a step line at most this often (seconds), besides the first and last.
LOG_EVERY = 10.0
#: The environment variable that overrides :data:`LOG_EVERY` (seconds; 0: every step).
LOG_EVERY_ENV = "TPUEMB_LOG_EVERY"

#: What a step callback is given: the steps (or events) done so far, counted from 0.
Advance = Callable[[int], None]


def log_every(environ: Mapping[str, str] | None = None) -> float:
    """The seconds between two step lines: ``TPUEMB_LOG_EVERY`` when set, else
    :data:`LOG_EVERY`; a value that is not a number of seconds >= 0 is one ``UsageError``."""
    text = (os.environ if environ is None else environ).get(LOG_EVERY_ENV, "").strip()
    if not text:
        return LOG_EVERY
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise UsageError(f"{LOG_EVERY_ENV}={text!r}: expected the seconds between two progress "
                         f"lines, a number of 0 or more (default {LOG_EVERY:g}; 0: a line per "
                         "step)")
    return value


def format_duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``2 h 07 min``: a time left or taken, to the second (the
    minute past an hour)."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _is_descriptor(stream: TextIO) -> bool:
    """Whether ``stream`` writes to a file descriptor (a file, a pipe) rather than into a Python
    object (click's ``CliRunner``, a caller capturing the output in memory)."""
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    return True


class RunLog:
    """The events of one ``tpuemb simulate`` run and the view they go to (``bar``, ``lines`` or
    ``silent``: see the module). ``clock`` measures rates and the rate limit (monotonic
    seconds), ``wall`` stamps the lines (seconds since the epoch): both injectable for tests."""

    def __init__(self, view: str, stream: TextIO | None = None, *, every: float = LOG_EVERY,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        if view not in ("bar", "lines", "silent"):
            raise ValueError(f"unknown view {view!r}")
        self.view = view
        self._stream = stream
        self.every = every
        self.clock = clock
        self._wall = wall

    @classmethod
    def for_stderr(cls, quiet: bool) -> RunLog:
        """The view of this process's standard error: silent with ``--quiet``, the bar on a
        terminal, lines every :func:`log_every` seconds on a file or pipe; silent too when
        standard error is a Python object (an in-process caller capturing the command's
        messages wants those, not a log to watch)."""
        if quiet:
            return cls("silent")
        if _is_terminal(sys.stderr):
            return cls("bar", sys.stderr)
        if not _is_descriptor(sys.stderr):
            return cls("silent")
        return cls("lines", sys.stderr, every=log_every())

    def line(self, text: str) -> None:
        """``text`` as one line of the log, after its UTC time (lines view only)."""
        if self.view != "lines" or self._stream is None:
            return
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._wall()))
        self._stream.write(f"{stamp} tpuemb simulate: {printable(text)}\n")
        self._stream.flush()

    @contextlib.contextmanager
    def steps(self, total: int, *, start: int = 0, unit: str = "step",
              detail: Callable[[], str] | None = None) -> Iterator[Advance | None]:
        """The callback a run calls with the ``done`` count after each of its ``total`` steps
        (or other ``unit``: a multi-worker run counts its gradient events), from ``start``
        (a resumed run's checkpoint step); None when silent (the runs take None as "no
        progress"). ``detail()`` adds what the line shows after the rate (the loss)."""
        if self.view == "silent" or total <= start:
            yield None
            return
        if self.view == "bar":
            with click.progressbar(length=total - start, label="simulating", file=self._stream,
                                   show_pos=True) as bar:
                yield lambda _done: bar.update(1)
            return
        yield _StepLines(self, total, start, unit, detail)

    def checkpoint(self, path: str, step: int, size: int, seconds: float) -> None:
        """A checkpoint of ``size`` bytes written to ``path`` (as the user typed it) at
        ``step``, in ``seconds``."""
        self.line(f"checkpoint {path} written at step {step:,} ({format_size(size)} in "
                  f"{seconds:.2f} s)")

    def outputs(self, paths: Sequence[tuple[str, str]], seconds: float) -> None:
        """The run's outputs written, in ``seconds``: ``(shown, real)`` path pairs (the path as
        typed, and the one to measure the size of)."""
        size = 0
        for _, real in paths:
            with contextlib.suppress(OSError):
                size += os.path.getsize(real)
        names = ", ".join(shown for shown, _ in paths)
        self.line(f"wrote {names} ({format_size(size)} in {seconds:.2f} s)")

    @contextlib.contextmanager
    def timed(self) -> Iterator[Callable[[], float]]:
        """A block's duration: the callable returns the seconds since the block began."""
        began = self.clock()
        yield lambda: self.clock() - began


class _StepLines:
    """A run's step callback in the lines view: the first and last step, and a step at least
    ``every`` seconds after the previous line."""

    def __init__(self, log: RunLog, total: int, start: int, unit: str,
                 detail: Callable[[], str] | None) -> None:
        self.log, self.total, self.start, self.unit, self.detail = log, total, start, unit, detail
        self.began = log.clock()
        self.last: float | None = None

    def __call__(self, done: int) -> None:
        now = self.log.clock()
        last = self.last
        if last is not None and done < self.total and now - last < self.log.every:
            return
        self.last = now
        elapsed = now - self.began
        ran = done - self.start
        parts = [f"{self.unit} {done:,}/{self.total:,} ({100 * done / self.total:.0f}%)"]
        if ran > 0 and elapsed > 0:
            rate = ran / elapsed
            parts.append(f"{rate:.3g} {self.unit}s/s")
            if done < self.total:
                parts.append(f"ETA {format_duration((self.total - done) / rate)}")
            else:
                parts.append(f"took {format_duration(elapsed)}")
        if self.detail is not None:
            text = self.detail()
            if text:
                parts.append(text)
        self.log.line(", ".join(parts))
