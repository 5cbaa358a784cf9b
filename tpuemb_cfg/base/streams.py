"""Standard output and standard error that fail loudly: a full device, a closed stream.

``tpuemb validate --format sarif x.pbtxt > /dev/full`` or ``tpuemb convert x.pbtxt --to json
>&-`` must not end in a traceback, nor in exit status 1 (which for ``validate`` means
findings), nor silently succeed (click drops what it is given to write when Python found the
stream closed at start-up). While the `tpuemb` command runs, :func:`guarded` puts a thin proxy in
front of ``sys.stdout`` and ``sys.stderr`` that turns any ``OSError`` of a write or flush into a
:class:`StreamError` naming the stream; the CLI reports it in one line on standard error (when
that still works) and exits 2. A stream that is closed at start-up is replaced by one whose
every write fails with ``EBADF``.

When the command is the process itself (not an in-process caller such as click's test runner),
a closed descriptor 1 or 2 is first occupied by ``/dev/null`` opened read-only, so that no file
the command opens can take its number (a write to it then fails, as it should), and after a
failure :func:`silence` points the failed descriptor at ``/dev/null``, so that Python's own
flush at exit cannot fail a second time with its "Exception ignored" message and status 120.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

STDOUT = "standard output"
STDERR = "standard error"


class StreamError(OSError):
    """A write to standard output or standard error failed; ``stream`` names which."""

    def __init__(self, stream: str, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.stream = stream

    def describe(self) -> str:
        """One line for the user (without the program name)."""
        if self.errno == errno.EBADF:
            reason = "it is closed (give the command somewhere to write, e.g. > FILE)"
        else:
            reason = self.strerror or "the write failed"
        return f"cannot write to {self.stream}: {reason}; the output is incomplete"


def _closed_error() -> OSError:
    return OSError(errno.EBADF, os.strerror(errno.EBADF))


class _Guarded:
    """A stream whose write and flush errors are :class:`StreamError`; every other attribute
    is the wrapped stream's (click looks at ``encoding``, ``isatty`` and ``buffer``)."""

    def __init__(self, stream: Any, name: str) -> None:
        self._stream = stream
        self._name = name

    def write(self, data: Any) -> int:
        try:
            return int(self._stream.write(data))
        except StreamError:
            raise
        except OSError as exc:
            raise StreamError(self._name, exc) from None

    def writelines(self, lines: Iterable[Any]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except StreamError:
            raise
        except OSError as exc:
            raise StreamError(self._name, exc) from None
        except ValueError:  # flushing a closed file object
            raise StreamError(self._name, _closed_error()) from None

    @property
    def buffer(self) -> Any:
        return _Guarded(self._stream.buffer, self._name)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._stream, attribute)


class _Closed:
    """What stands for a stream Python found closed at start-up (``sys.stdout is None``):
    text written to it fails with ``EBADF``, as a write to the closed descriptor would."""

    encoding = "utf-8"
    errors = "strict"
    closed = False

    def __init__(self, binary: bool = False) -> None:
        self._binary = binary

    def write(self, data: Any) -> int:
        if isinstance(data, str) == self._binary:  # click probes text streams with write(b"")
            raise TypeError("wrong kind of data for this stream")
        if not data:
            return 0
        raise _closed_error()

    def writelines(self, lines: Iterable[Any]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise _closed_error()

    @property
    def buffer(self) -> _Closed:
        return _Closed(binary=True)


def _occupy(fd: int) -> None:
    """Put ``/dev/null``, read-only, at the closed descriptor ``fd``."""
    try:
        os.fstat(fd)
        return  # open after all
    except OSError:
        pass
    try:
        spare = os.open(os.devnull, os.O_RDONLY)
    except OSError:
        return
    try:
        if spare != fd:
            os.dup2(spare, fd, inheritable=False)
    finally:
        if spare != fd:
            os.close(spare)


@contextmanager
def guarded(*, process: bool) -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` guarded for the block (see the module docstring);
    ``process``: the command is this process, so its descriptors 1 and 2 may be changed."""
    saved = sys.stdout, sys.stderr
    if process:
        for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
            if stream is None:
                _occupy(fd)
    sys.stdout = _Guarded(sys.stdout if sys.stdout is not None else _Closed(), STDOUT)
    sys.stderr = _Guarded(sys.stderr if sys.stderr is not None else _Closed(), STDERR)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def silence(stream: str) -> None:
    """After ``stream`` failed in the `tpuemb` process: point its descriptor at ``/dev/null``
    (what Python still holds for it is flushed there at exit, without a second error)."""
    fd = 1 if stream == STDOUT else 2
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    try:
        os.dup2(null, fd)
    except OSError:
        pass
    finally:
        os.close(null)


def report(error: StreamError) -> None:
    """The one line for a failed stream, on standard error when that is not the one that
    failed (and still works); nothing otherwise."""
    if error.stream == STDERR or error.errno == errno.EPIPE:
        return  # nowhere to say it / the reader left on purpose (``| head``)
    try:
        sys.stderr.write(f"tpuemb: {error.describe()}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
