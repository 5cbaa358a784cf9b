"""The direct link of the hosts on the driver's node (``backends.ray.link``), without Ray: frames
carry arrays bit for bit, replies come back in order, a host's error comes back as itself, a
stranger without the token is turned away, and a lost or silent host is an error, never a hang.
"""

from __future__ import annotations

import ast
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from tpuemb_cfg.backends.ray.link import HostRaised, Link, LinkLost, Listener
from tpuemb_cfg.base.errors import InputError

TOKEN = b"0123456789abcdef"


class Host:
    """What a link serves: a few methods and a log of the calls, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.release = threading.Event()

    def __call__(self, method: str, args: Sequence[Any]) -> Any:
        self.calls.append(method)
        if method == "echo":
            return list(args)
        if method == "double":
            (array,) = args
            array *= 2  # received arrays are writable: no copy needed to work in place
            return array
        if method == "fail":
            raise InputError("the host refuses", path="x.npz")
        if method == "wait":
            self.release.wait(30)
            return "late"
        raise AttributeError(method)


def _pair(host: Host | None = None) -> tuple[Listener, Link, Host]:
    host = host or Host()
    listener = Listener(TOKEN, host)
    return listener, Link(listener.address, TOKEN), host


def test_arrays_travel_bit_for_bit_and_replies_keep_their_order() -> None:
    listener, link, host = _pair()
    rng = np.random.default_rng(0)
    block = rng.standard_normal((1000, 37)).astype(np.float32)
    block[3, 4] = np.nan
    rows = np.arange(10**6, dtype=np.int64)[::3]  # not contiguous: pickled in band
    pending = [link.submit("echo", ("a", block, rows, slice(2, 9), None)),
               link.submit("double", (np.ones(5, dtype=np.float64),)),
               link.submit("echo", ())]
    # a later reply first: the earlier ones are read and kept
    assert pending[2].result(10) == []
    doubled = pending[1].result(10)
    np.testing.assert_array_equal(doubled, np.full(5, 2.0))
    name, got, got_rows, where, nothing = pending[0].result(10)
    assert (name, where, nothing) == ("a", slice(2, 9), None)
    assert got.dtype == np.float32 and got.tobytes() == block.tobytes()
    assert got.flags.writeable
    np.testing.assert_array_equal(got_rows, rows)
    assert host.calls == ["echo", "double", "echo"]
    link.close()
    listener.close()


def test_the_hosts_error_comes_back_as_itself_and_the_link_goes_on() -> None:
    listener, link, _ = _pair()
    with pytest.raises(HostRaised) as raised:
        link.submit("fail", ()).result(10)
    assert isinstance(raised.value.cause, InputError)
    assert raised.value.cause.path == "x.npz"
    assert link.submit("echo", (1,)).result(10) == [1]
    link.close()
    listener.close()


def test_a_connection_without_the_token_is_turned_away() -> None:
    listener = Listener(TOKEN, Host())
    stranger = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stranger.connect(listener.address)
    stranger.sendall(b"x" * len(TOKEN))
    stranger.settimeout(10)
    assert stranger.recv(1) == b""  # closed without a word
    stranger.close()
    with pytest.raises(LinkLost):  # a wrong token over the real protocol
        Link(listener.address, b"y" * len(TOKEN), timeout=10)
    link = Link(listener.address, TOKEN)  # the driver still gets in
    assert link.submit("echo", (2,)).result(10) == [2]
    link.close()
    listener.close()


def test_a_silent_host_times_out_and_the_link_goes_on() -> None:
    listener, link, host = _pair()
    begin = time.monotonic()
    reply = link.submit("wait", ())
    later = link.submit("echo", (4,))
    with pytest.raises(TimeoutError, match="no reply within"):
        reply.result(0.3)
    with pytest.raises(TimeoutError):  # the later call waits behind it
        later.result(0.1)
    assert time.monotonic() - begin < 10
    host.release.set()  # the host answers after all: nothing was lost by polling
    assert reply.result(10) == "late"
    assert later.result(10) == [4]
    link.close()
    listener.close()


HOST_PROCESS = """
import sys, time
from tpuemb_cfg.backends.ray.link import Listener
listener = Listener(bytes.fromhex(sys.argv[1]), lambda method, args: list(args))
print(repr(listener.address), flush=True)
time.sleep(120)
"""


def test_a_host_whose_process_dies_is_lost_not_awaited() -> None:
    process = subprocess.Popen([sys.executable, "-c", HOST_PROCESS, TOKEN.hex()],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        address = ast.literal_eval(process.stdout.readline())
        link = Link(address, TOKEN)
        assert link.submit("echo", (3,)).result(10) == [3]
        process.kill()
        process.wait(30)
        begin = time.monotonic()
        with pytest.raises(LinkLost):
            link.submit("echo", ()).result(60)
        assert time.monotonic() - begin < 10  # at once, not at the timeout
        with pytest.raises(LinkLost):  # and for every later call
            link.submit("echo", ()).result(60)
        link.close()
    finally:
        process.kill()
        process.wait(30)
