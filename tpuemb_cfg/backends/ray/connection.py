"""The Ray connection of the sharded storage, and the actors it keeps between executors.

:func:`connect` joins the cluster at an address (``--ray-address``, else ``RAY_ADDRESS``) or starts
a local instance with this machine's cores and no dashboard; :func:`ray_session` does that for one
command and disconnects at its end; an address nobody answers at, or a cluster that refuses the
join, is one ``UsageError`` line. Ray is optional: :func:`import_ray` says how to install it.

Starting a Python process per host is the slow part of setting up a ``RayStorage``, so the
actors of a closed (or garbage-collected) storage are emptied and kept for the next storage of
the same Ray session (:func:`keep_actors`, :func:`take_actor`); :func:`disconnect` drops them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator
from typing import Any

from ...errors import UsageError, parameter

__all__ = [
    "INSTALL_HINT",
    "connect",
    "disconnect",
    "first_line",
    "import_ray",
    "keep_actors",
    "ray_session",
    "session_token",
    "take_actor",
]

#: The refusal when Ray cannot be imported (its parameter marked by ``errors.parameter``).
INSTALL_HINT = (
    f"{parameter('backend')} ray needs Ray, which is not installed; install it with "
    f"`pip install 'tpuemb[ray]'` (or `pip install ray`), or use {parameter('backend')} local"
)


def import_ray() -> Any:
    """The ``ray`` module, or ``UsageError`` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UsageError(INSTALL_HINT) from None
    return ray


_POOL: list[tuple[Any, int, tuple[str, str]]] = []  # idle actors: (handle, reserved bytes, session)


def session_token(ray: Any) -> tuple[str, str]:
    """What tells this Ray session from an earlier one of the same process (an actor kept from
    a shut-down session must not be reused)."""
    context = ray.get_runtime_context()
    return str(context.gcs_address), str(context.get_node_id())


def first_line(exc: BaseException, limit: int = 160) -> str:
    """The first line of an error's text, shortened (Ray's messages run over many lines)."""
    text = (str(exc).strip().splitlines() or [""])[0].strip()
    return text if len(text) <= limit else text[:limit - 1] + "…"


def keep_actors(ray: Any, actors: list[Any], reserved: list[int], dead: set[int]) -> None:
    """Empty the actors of a closed (or collected) storage and keep them for the next one,
    except the lost ones (``dead``; Ray ends them with their last handle)."""
    if ray.is_initialized():
        token = session_token(ray)
        for host, (actor, size) in enumerate(zip(actors, reserved, strict=True)):
            if host not in dead:
                actor.reset.remote()
                _POOL.append((actor, size, token))
    actors.clear()
    reserved.clear()


def take_actor(token: tuple[str, str], need: int) -> tuple[Any, int] | None:
    """An idle actor of this session with at least ``need`` bytes reserved, out of the pool."""
    for index, (actor, reserved, session) in enumerate(_POOL):
        if session == token and reserved >= need:
            del _POOL[index]
            return actor, reserved
    return None


def _check_reachable(address: str, origin: str) -> None:
    """A TCP connection to ``host:port`` within 5 s, or ``UsageError`` naming the address."""
    target = address.removeprefix("ray://")
    if target in ("auto", "local") or ":" not in target:
        return
    host, _, port = target.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        raise UsageError(f"{origin} {address!r}: expected HOST:PORT (e.g. 10.0.0.1:6379), "
                         "the address `ray start --head` prints") from None
    try:
        socket.create_connection((host.strip("[]"), number), timeout=5).close()
    except OSError as exc:
        raise UsageError(
            f"{origin} {address}: no Ray cluster answers there ({exc.strerror or exc}); start one "
            "with `ray start --head` and pass the address it prints, or leave the address out to "
            "run on a local Ray instance"
        ) from None


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[None]:
    """File descriptor 2 points to /dev/null for the block (output of native code included);
    a failure is then reported in one line by the caller."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to silence
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def connect(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Connect this process to Ray unless it is connected; return True when this call did.

    ``address``: a cluster to join (``HOST:PORT`` or ``ray://HOST:PORT``); None: ``RAY_ADDRESS``
    when set, else a new local instance with ``num_cpus`` (default: this machine's cores), no
    dashboard. An address nobody answers at is one ``UsageError`` line, before anything starts.
    """
    ray = import_ray()
    if ray.is_initialized():
        return False
    origin = parameter("ray_address")
    if address is None and os.environ.get("RAY_ADDRESS"):
        address, origin = os.environ["RAY_ADDRESS"], "RAY_ADDRESS"
    quiet = {"logging_level": logging.ERROR, "log_to_driver": False}
    if address is None:
        ray.init(address="local", num_cpus=num_cpus or os.cpu_count() or 1,
                 include_dashboard=False, **quiet)
        _without_notices()
        return True
    _check_reachable(address, origin)
    try:
        with _stderr_silenced():  # Ray's C++ client logs every failed attempt there
            ray.init(address=address, **quiet)
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError ...
        hint = ("" if os.environ.get("RAY_AUTH_MODE") else
                "; if the cluster uses token authentication (new clusters of recent Ray "
                "releases do), set RAY_AUTH_MODE=token, and RAY_AUTH_TOKEN to the output of "
                "`ray get-auth-token` on the head machine when this is another machine")
        raise UsageError(f"{origin} {address}: cannot join the Ray cluster there "
                         f"({first_line(exc) or type(exc).__name__}){hint}") from None
    _without_notices()
    return True


def _without_notices() -> None:
    """Keep Ray's cluster notices (e.g. "The node with node id ... has been marked dead") off
    this process's stdout: the storage reports a lost host in one line of its own, and stdout
    is the command's (``--json``). Ray prints them from a thread of the driver unless its worker
    logs are off - the switch its debugger uses; a Ray without it prints them."""
    import ray._private.worker as worker

    if hasattr(worker, "_worker_logs_enabled"):
        worker._worker_logs_enabled = False


def disconnect() -> None:
    """Leave Ray (a local instance this process started stops); idle actors are dropped."""
    ray = import_ray()
    _POOL.clear()
    if ray.is_initialized():
        ray.shutdown()


@contextlib.contextmanager
def ray_session(address: str | None = None) -> Iterator[None]:
    """Connected to Ray for the block (see :func:`connect`); disconnected at its end when the
    block connected."""
    started = connect(address)
    try:
        yield
    finally:
        if started:
            disconnect()
