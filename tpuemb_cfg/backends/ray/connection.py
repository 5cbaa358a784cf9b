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
import warnings
from collections.abc import Iterator
from typing import Any

from ...errors import UsageError, parameter

__all__ = [
    "INSTALL_HINT",
    "JoinedRunningCluster",
    "connect",
    "describe_cluster",
    "disconnect",
    "first_line",
    "idle_reservations",
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


def idle_reservations(token: tuple[str, str]) -> list[int]:
    """The reserved bytes of this session's idle actors, in the order ``take_actor`` takes
    them (a new storage's hosts reuse these before Ray places new ones)."""
    return [reserved for _, reserved, session in _POOL if session == token]


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


def _require_client(address: str, origin: str) -> None:
    """A ``ray://`` address goes through Ray Client, whose gRPC dependency only the
    ``ray[client]`` extra installs (Ray checks the same import); without it, one line saying
    so, before any connection is tried (Ray's own refusal reads like a failed join)."""
    try:
        import grpc  # noqa: F401
    except ImportError:
        raise UsageError(
            f"{origin} {address}: a ray:// address connects through Ray Client, which needs "
            "`pip install 'ray[client]'` (grpcio) in this environment; install it, or run "
            "tpuemb on a machine of the cluster with the address HOST:6379, or as a Ray Job "
            "(docs/scale.md)") from None


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


class JoinedRunningCluster(UserWarning):
    """``auto`` (``--ray-address auto``, ``RAY_ADDRESS=auto``) joined the Ray cluster running on
    this machine, whichever it is; the warning names it (:func:`describe_cluster`)."""


def describe_cluster(ray: Any) -> str:
    """The connected cluster in a few words: its address, alive nodes, CPUs and the memory
    its nodes offer actors (Ray's ``memory`` resource)."""
    from ...units import format_size

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    cpus = sum(float(n.get("Resources", {}).get("CPU", 0)) for n in nodes)
    memory = sum(int(n.get("Resources", {}).get("memory", 0)) for n in nodes)
    return (f"the Ray cluster at {ray.get_runtime_context().gcs_address} ({len(nodes)} "
            f"node{'' if len(nodes) == 1 else 's'}, {cpus:g} CPU{'' if cpus == 1 else 's'}, "
            f"{format_size(memory)} of "
            "memory for actors)")


def connect(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Connect this process to Ray unless it is connected; return True when this call did.

    ``address``: a cluster to join (``HOST:PORT`` or ``ray://HOST:PORT``); None: ``RAY_ADDRESS``
    when set, else a new local instance with ``num_cpus`` (default: this machine's cores), no
    dashboard. An address nobody answers at is one ``UsageError`` line, before anything starts.
    ``auto`` joins whatever cluster Ray finds on this machine (the last ``ray start`` there):
    it works, with a :class:`JoinedRunningCluster` warning naming the cluster joined (its
    address, nodes, CPUs and memory); the address itself joins the same cluster silently.
    """
    ray = import_ray()
    if ray.is_initialized():
        return False
    origin = parameter("ray_address")
    if address is None and os.environ.get("RAY_ADDRESS"):
        address, origin = os.environ["RAY_ADDRESS"], "RAY_ADDRESS"
    quiet = {"logging_level": logging.ERROR, "log_to_driver": False}
    if address is not None and address.startswith("ray://"):
        _require_client(address, origin)
    if address is None:
        ray.init(address="local", num_cpus=num_cpus or os.cpu_count() or 1,
                 include_dashboard=False, **quiet)
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
    if address.strip().lower() == "auto":
        given = "RAY_ADDRESS=auto" if origin == "RAY_ADDRESS" else "the Ray address 'auto'"
        warnings.warn(JoinedRunningCluster(
            f"{given} joined {describe_cluster(ray)}, the one running on this machine; "
            "give its address to join it on purpose, or no address (and no RAY_ADDRESS) for a "
            "Ray instance of the run's own"), stacklevel=2)
    return True


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
