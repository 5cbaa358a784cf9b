"""A direct channel between the driver and a host actor on the driver's Ray node.

A Ray actor call costs the driver about a millisecond on a small machine (submitting the task,
storing and fetching its reply object, the wake-ups of the scheduler's threads): on a 2-core
machine that is more than the whole work of a small model's step, so a step of four hosts (two
calls each) took 7x the local step. The hosts on the driver's node - the same Ray node, hence
the same machine - take their calls through a Unix socket instead: one frame each way per call,
its arrays sent as raw bytes beside a pickled header (pickle protocol 5, out of band: no copy
into a pickle), the replies in the order of the calls. Ray still starts, places and ends the
actors and carries the calls of the hosts on other nodes; the rows themselves still travel
through the shared-memory arena (``host.Arena``), so a frame is a few hundred bytes.

Host side, :class:`Listener`: a socket with a random name (Linux's abstract namespace: no file
to leave behind; elsewhere a file in a private directory, removed once connected) served by a
daemon thread of the actor process. It accepts a connection, reads the driver's token first
(another process of the machine that connects without it is turned away), then runs each frame's
``(method, args)`` with ``handler`` and answers ``("ok", result)`` or ``("error", exception)``,
until the driver closes the connection.

Driver side, :class:`Link`: ``submit(method, args)`` sends a frame and returns a
:class:`LinkReply`; ``reply.result(timeout)`` waits for it (the replies of one host arrive in
the order of its calls, so waiting for a later one reads and keeps the earlier ones). A host
whose process died closes the socket: :class:`LinkLost`; an exception the host raised:
:class:`HostRaised`, with the exception as ``cause``; no reply within the timeout: the builtin
``TimeoutError``, and the link stays usable (a frame is read only once its first bytes have
come, and a host writes a frame whole), so the storage can poll its hosts with short timeouts
between checks of their nodes and keep its own deadline.
"""

from __future__ import annotations

import hmac
import os
import pickle
import select
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["HostRaised", "Link", "LinkError", "LinkLost", "LinkReply", "Listener", "dumps"]

#: A frame starts with the number of its parts (a pickle, then its out-of-band buffers) and
#: then each part's length.
_COUNT = struct.Struct("<Q")
#: Buffers given to one ``sendmsg`` (Linux's IOV_MAX is 1024).
_IOV = 512


class LinkError(Exception):
    """A call over a link failed without an answer from the host's code."""


class LinkLost(LinkError):
    """The host's end closed: its process died (or closed the link)."""


class HostRaised(LinkError):
    """The host's code raised ``cause`` (the host lives on)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause


def dumps(value: Any, buffer_callback: Callable[[pickle.PickleBuffer], Any] | None = None
          ) -> bytes:
    """``value`` pickled (protocol 5; ``buffer_callback``: its out-of-band buffers), with Ray's
    cloudpickle for what pickle cannot (a user's callable of a custom optimizer): how every
    call to a host is pickled, over a link or through Ray."""
    buffers: list[pickle.PickleBuffer] = []
    keep = buffers.append if buffer_callback is not None else None
    try:
        head = pickle.dumps(value, protocol=5, buffer_callback=keep)
    except (pickle.PicklingError, AttributeError, TypeError):
        from ray import cloudpickle

        buffers.clear()
        cloud: Callable[..., bytes] = cloudpickle.dumps  # ray's cloudpickle is unannotated
        head = cloud(value, protocol=5, buffer_callback=keep)
    if buffer_callback is not None:
        for buffer in buffers:
            buffer_callback(buffer)
    return head


def _send(sock: socket.socket, value: Any) -> None:
    """One frame holding ``value``."""
    buffers: list[pickle.PickleBuffer] = []
    parts: list[Any] = [dumps(value, buffers.append)]
    parts += [b.raw() for b in buffers]
    sizes = [len(memoryview(p).cast("B")) for p in parts]
    header = _COUNT.pack(len(parts)) + struct.pack(f"<{len(parts)}Q", *sizes)
    views = [memoryview(header)] + [memoryview(p).cast("B") for p, n in zip(parts, sizes,
                                                                            strict=True) if n]
    while views:
        sent = sock.sendmsg(views[:_IOV])
        while sent:
            first = len(views[0])
            if sent >= first:
                sent -= first
                views.pop(0)
            else:
                views[0] = views[0][sent:]
                sent = 0


def _read_exactly(sock: socket.socket, size: int) -> bytearray:
    data = bytearray(size)
    view = memoryview(data)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise LinkLost("the other end closed the connection")
        got += n
    return data


def _receive(sock: socket.socket) -> Any:
    """The value of the next frame (its buffers are writable ``bytearray`` objects)."""
    (count,) = _COUNT.unpack(_read_exactly(sock, _COUNT.size))
    if not 1 <= count <= 1 << 20:
        raise LinkLost(f"a malformed frame ({count} parts)")
    sizes = struct.unpack(f"<{count}Q", _read_exactly(sock, 8 * count))
    head = _read_exactly(sock, sizes[0])
    buffers = [_read_exactly(sock, n) for n in sizes[1:]]
    return pickle.loads(head, buffers=buffers)


class Listener:
    """The host's end: a socket served by a daemon thread that runs ``handler(method, args)``
    for each frame of the one connection that presents ``token``."""

    def __init__(self, token: bytes, handler: Callable[[str, Sequence[Any]], Any]) -> None:
        self._token = token
        self._handler = handler
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._dir: str | None = None
        if sys.platform.startswith("linux"):
            self.address = f"\0tpuemb-{os.getpid()}-{os.urandom(12).hex()}"
        else:  # pragma: no cover - no abstract namespace: a file in a private directory
            self._dir = tempfile.mkdtemp(prefix="tpuemb-link-")
            self.address = os.path.join(self._dir, "socket")
        self._sock.bind(self.address)
        self._sock.listen(4)
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="tpuemb-link", daemon=True)
        self._thread.start()

    def _accept(self) -> socket.socket | None:
        """The driver's connection (the first to present the token), or None when closed."""
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return None
            try:
                conn.settimeout(10.0)
                token = _read_exactly(conn, len(self._token))
            except (OSError, LinkError):
                conn.close()
                continue
            if hmac.compare_digest(bytes(token), self._token):
                conn.settimeout(None)
                return conn
            conn.close()
        return None

    def _serve(self) -> None:
        conn = self._accept()
        self._remove_dir()
        if conn is None:
            return
        try:
            _send(conn, ("ok", None))
            while True:
                try:
                    method, args = _receive(conn)
                except (LinkError, OSError):
                    return  # the driver closed the link (or went away)
                try:
                    answer: tuple[str, Any] = ("ok", self._handler(method, args))
                except Exception as exc:  # noqa: BLE001 - every error goes back to the driver
                    answer = ("error", exc)
                try:
                    _send(conn, answer)
                except (pickle.PicklingError, TypeError, AttributeError):
                    error = answer[1] if answer[0] == "error" else None
                    _send(conn, ("error", RuntimeError(
                        f"{type(error).__name__}: {error}" if error is not None
                        else "the host's reply could not be pickled")))
        except OSError:
            return
        finally:
            conn.close()
            self.close()

    def _remove_dir(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def close(self) -> None:
        """Stop accepting (a served connection ends when the driver closes it)."""
        if not self._closed:
            self._closed = True
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
            self._remove_dir()


class LinkReply:
    """The reply to one call over a :class:`Link`."""

    __slots__ = ("_link", "_number")

    def __init__(self, link: Link, number: int) -> None:
        self._link = link
        self._number = number

    def result(self, timeout: float | None = None) -> Any:
        """The host's return value; raises ``HostRaised``, ``LinkLost``, or ``TimeoutError``
        when it has not come within ``timeout`` seconds (None: wait for it)."""
        return self._link.result(self._number, timeout)


class Link:
    """The driver's end of a host's :class:`Listener` at ``address``, authenticated by
    ``token``; calls are answered in order."""

    def __init__(self, address: str, token: bytes, timeout: float = 30.0) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._broken: LinkError | None = None
        try:
            self._sock.settimeout(timeout)
            self._sock.connect(address)
            self._sock.sendall(token)
            status, _ = _receive(self._sock)
            if status != "ok":
                raise LinkLost("the host refused the link")
            self._sock.settimeout(None)
        except (OSError, LinkError):
            self._sock.close()
            raise
        self._sent = 0  # calls sent
        self._read = 0  # replies read
        self._replies: dict[int, tuple[str, Any]] = {}
        self._lock = threading.Lock()

    def submit(self, method: str, args: Sequence[Any]) -> LinkReply:
        """Send ``method(*args)`` to the host; its :class:`LinkReply`. A link that is broken,
        or breaks while sending, raises its error from the reply's ``result`` (where the
        caller handles a host's failure), not here."""
        with self._lock:
            self._sent += 1
            if self._broken is None:
                try:
                    _send(self._sock, (method, tuple(args)))
                except OSError as exc:
                    self._broken = LinkLost(f"sending failed ({exc.strerror or exc})")
            return LinkReply(self, self._sent)

    def result(self, number: int, timeout: float | None) -> Any:
        """The reply to call ``number`` (reading, and keeping, the replies before it); no
        frame within ``timeout`` seconds: ``TimeoutError`` (the link stays usable)."""
        end = None if timeout is None else time.monotonic() + timeout
        while number not in self._replies:
            if self._broken is not None:
                raise self._broken
            if self._read >= number:
                raise LinkError(f"the reply to call {number} was already taken")
            if end is not None:
                left = max(0.0, end - time.monotonic())
                if not select.select([self._sock], [], [], left)[0]:
                    raise TimeoutError(f"no reply within {timeout:g} s")
            self._sock.settimeout(None)  # a frame has begun: the host sends it whole
            try:
                reply = _receive(self._sock)
            except LinkLost as exc:
                self._broken = exc
                raise
            except OSError as exc:
                self._broken = LinkLost(f"the connection failed ({exc.strerror or exc})")
                raise self._broken from None
            self._read += 1
            self._replies[self._read] = reply
        status, value = self._replies.pop(number)
        if status == "error":
            raise HostRaised(value)
        return value

    def close(self) -> None:
        """Close the connection (the host's thread then ends)."""
        self._broken = self._broken or LinkLost("the link was closed")
        try:
            self._sock.close()
        except OSError:
            pass
