"""The Ray connection of the sharded storage, and the actors it keeps between executors.

:func:`connect` joins the cluster at an address (``--ray-address``, else ``RAY_ADDRESS``) or starts
a local instance with this machine's cores and no dashboard; :func:`ray_session` does that for one
command and disconnects at its end; an address nobody answers at, or a cluster that refuses the
join, is one ``UsageError`` line. Ray is optional: :func:`import_ray` says how to install it.
Joining a cluster, :func:`connect` gives the job this tpuemb in its ``runtime_env``
(``runtime_env.actor_runtime_env``); :func:`start_failure` turns an actor that could not start
on its node (a module missing there) into one line with the cause and the fix.

Starting a Python process per host is the slow part of setting up a ``RayStorage``, so the
actors of a closed (or garbage-collected) storage are emptied and kept for the next storage of
the same Ray session (:func:`keep_actors`, :func:`take_actor`); :func:`disconnect` drops them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

from tpuemb_cfg.base.errors import UsageError, parameter
from tpuemb_cfg.base.interrupt import (
    kept as _signals_kept,  # ray.init must not keep its SIGTERM handler
)
from tpuemb_cfg.base.units import format_size

from .runtime_env import actor_runtime_env

#: Set in the driver of a Ray Job (``ray job submit``): the job's configuration, runtime_env
#: included, chosen by the submitter.
JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"

__all__ = [
    "INSTALL_HINT",
    "JoinedRunningCluster",
    "connect",
    "describe_cluster",
    "disconnect",
    "drop_idle",
    "actor_env",
    "first_line",
    "head_address",
    "head_unreachable",
    "idle_reservations",
    "import_ray",
    "keep_actors",
    "ray_session",
    "session_token",
    "start_failure",
    "start_failure_line",
    "take_actor",
    "version_mismatch",
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


_POOL: list[tuple[Any, int, tuple[str, ...]]] = []  # idle actors: (handle, reserved bytes, kind)
#: The address each session :func:`connect` opened was joined at, as given (for messages).
_HEADS: dict[tuple[str, str], str] = {}
#: The sessions :func:`connect` opened: (what it was asked: runtime_env and ship, whether the
#: job's runtime_env carries this tpuemb).
_JOBS: dict[tuple[str, str], tuple[str, bool]] = {}


def session_token(ray: Any) -> tuple[str, str]:
    """What tells this Ray session from an earlier one of the same process (an actor kept from
    a shut-down session must not be reused)."""
    context = ray.get_runtime_context()
    return str(context.gcs_address), str(context.get_node_id())


#: Seconds a check of the cluster's head (:func:`head_unreachable`) waits for its answer.
HEAD_TIMEOUT = 5.0


def head_address(ray: Any) -> str:
    """The address of the connected cluster's head: as given to :func:`connect` (the option or
    ``RAY_ADDRESS``), else the GCS address Ray reports."""
    token = session_token(ray)
    return _HEADS.get(token) or token[0]


def head_unreachable(ray: Any) -> str | None:
    """Why the head of the connected cluster (its GCS, which keeps the node table and every
    actor's record) does not answer a TCP connection within :data:`HEAD_TIMEOUT` seconds, or
    None when it answers. Ray's own client retries a lost GCS for a minute, then ends the
    process with its C++ log line; a run that checks first ends in a line of its own."""
    address = str(ray.get_runtime_context().gcs_address)
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=HEAD_TIMEOUT).close()
    except ValueError:  # an address this check cannot read: Ray's own checks apply
        return None
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__
    return None


def first_line(exc: BaseException, limit: int = 160) -> str:
    """The first line of an error's text, shortened (Ray's messages run over many lines)."""
    text = (str(exc).strip().splitlines() or [""])[0].strip()
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _asked(runtime_env: Mapping[str, Any] | None, ship: bool) -> str:
    return json.dumps([runtime_env or {}, ship], sort_keys=True)


def actor_env(ray: Any, runtime_env: Mapping[str, Any] | None, ship: bool
              ) -> tuple[bool, dict[str, Any] | None]:
    """(whether the host actors carry this tpuemb, the ``runtime_env`` to give each actor) for
    actors asked with ``runtime_env`` and ``ship``: nothing more when :func:`connect` opened
    this session with the same (the job's ``runtime_env`` has it all); else, in a process
    connected otherwise (a Ray Job, a notebook), the user's ``runtime_env`` per actor - Ray
    uploads local directories only for a job's ``runtime_env``, so nothing is shipped then."""
    job = _JOBS.get(session_token(ray))
    if job is not None and job[0] == _asked(runtime_env, ship):
        return job[1], None
    mine = dict(runtime_env) if runtime_env else None
    return (job is not None and job[1] and "py_modules" not in (mine or {})), mine


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: The last ``Name: message`` line of a Python traceback in Ray's text is the cause.
_CAUSE = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit)): (.+)$", re.M)
_NODE = re.compile(r"\bip=([0-9A-Fa-f.:]+)")
_MISSING = re.compile(r"No module named '([\w.]+)'")


def start_failure(ray: Any, ref: Any, host: int, hosts: int, shipped: bool) -> UsageError | None:
    """The one line for host ``host``'s actor that could not start (``ref``: the failed reply of
    its first call), with the cause Ray keeps only in its text (an ``ActorDiedError`` of a failed
    creation task or a ``RuntimeEnvSetupError``: the remote traceback's last line, the node's
    address) and the fix; None when the actor died otherwise (the caller's ``ShardLost`` says
    so). ``shipped``: whether the actors' ``runtime_env`` carried this tpuemb
    (``runtime_env.actor_runtime_env``)."""
    try:
        ray.get(ref, timeout=10)  # failed already: raises at once
        return None
    except ray.exceptions.RayError as exc:
        return start_failure_line(exc, host, hosts, shipped)


def start_failure_line(exc: BaseException, host: int, hosts: int, shipped: bool
                       ) -> UsageError | None:
    """:func:`start_failure`'s line for Ray's error ``exc``, or None when it is not about an
    actor that could not start."""
    setup = type(exc).__name__ == "RuntimeEnvSetupError"
    if not (setup or getattr(exc, "actor_init_failed", False)):
        return None
    text = _ANSI.sub("", str(exc))
    causes = _CAUSE.findall(text)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    cause = (f"{causes[-1][0].rpartition('.')[2]}: {causes[-1][1].strip()}" if causes
             else lines[-1] if lines else type(exc).__name__)
    node = _NODE.search(text)
    where = f" on node {node[1]}" if node else ""
    missing = _MISSING.search(cause)
    env = parameter("runtime_env")
    if missing and missing[1].partition(".")[0] == "tpuemb_cfg":
        fix = ("install tpuemb (the driver's version) on every node"
               + ("" if shipped else ", or let the driver ship it (it did not: shipping is "
                  "turned off, or Ray was joined before tpuemb ran, as in a Ray Job; "
                  "docs/scale.md)"))
    elif missing:
        package = missing[1].partition(".")[0]
        fix = (f"install it on every node or pass {env} "
               f"'{{\"pip\": [\"{package}\"]}}' (the pip package may be named otherwise)")
    elif setup:
        fix = f"its runtime_env could not be set up: check {env} (Ray's logs on that node say more)"
    else:
        fix = "its Python could not create the actor (Ray's worker logs on that node say more)"
    cause = cause if len(cause) <= 200 else cause[:199] + "…"
    return UsageError(f"host {host} of {hosts} could not start{where} ({cause}): {fix}")


def keep_actors(ray: Any, actors: list[Any], reserved: list[int], dead: set[int],
                kind: str = "") -> None:
    """Empty the actors of a closed (or collected) storage and keep them for the next one,
    except the lost ones (``dead``; Ray ends them with their last handle). ``kind``: what else
    a reuse must match (the actors' ``runtime_env``), as :func:`take_actor`'s."""
    if ray.is_initialized():
        token = (*session_token(ray), kind)
        for host, (actor, size) in enumerate(zip(actors, reserved, strict=True)):
            if host not in dead:
                actor.reset.remote()
                _POOL.append((actor, size, token))
    actors.clear()
    reserved.clear()


def take_actor(token: tuple[str, str], need: int, kind: str = "") -> tuple[Any, int] | None:
    """An idle actor of this session (``token``) and ``kind`` with at least ``need`` bytes
    reserved, out of the pool."""
    for index, (actor, reserved, session) in enumerate(_POOL):
        if session == (*token, kind) and reserved >= need:
            del _POOL[index]
            return actor, reserved
    return None


def drop_idle(ray: Any, token: tuple[str, str]) -> int:
    """End this session's idle actors (their reservations go back to the cluster); how many.
    Made when a storage must start new actors: idle ones too small for its hosts (or of
    another ``runtime_env``) would otherwise hold memory the new ones wait for."""
    kept = [entry for entry in _POOL if entry[2][:2] != token]
    dropped = [entry[0] for entry in _POOL if entry[2][:2] == token]
    _POOL[:] = kept
    for actor in dropped:
        with contextlib.suppress(Exception):  # already gone: nothing to free
            ray.kill(actor, no_restart=True)
    return len(dropped)


def idle_reservations(token: tuple[str, str], kind: str = "") -> list[int]:
    """The reserved bytes of this session's idle actors of ``kind``, in the order
    ``take_actor`` takes them (a new storage's hosts reuse these before Ray places new ones)."""
    return [reserved for _, reserved, session in _POOL if session == (*token, kind)]


def _host_port(address: str, origin: str) -> tuple[str, int] | None:
    """(host, port) of ``HOST:PORT`` or ``ray://HOST:PORT``; None for ``auto``, ``local`` or an
    address without a port (Ray's own reading applies); a port that is not a number from 1 to
    65535 (digits only) is one ``UsageError`` line."""
    target = address.removeprefix("ray://")
    if target in ("auto", "local") or ":" not in target:
        return None
    host, _, port = target.rpartition(":")
    number = int(port) if port.isascii() and port.isdigit() and len(port) <= 5 else 0
    if not 0 < number < 65536:
        raise UsageError(f"{origin} {address!r}: expected HOST:PORT with a port from 1 to 65535 "
                         "(e.g. 10.0.0.1:6379), the address `ray start --head` prints")
    return host, number


def _check_reachable(address: str, origin: str) -> None:
    """A TCP connection to ``host:port`` within 5 s, or ``UsageError`` naming the address."""
    parsed = _host_port(address, origin)
    if parsed is None:
        return
    host, number = parsed
    try:
        socket.create_connection((host.strip("[]"), number), timeout=5).close()
    except (OSError, UnicodeError) as exc:
        raise UsageError(
            f"{origin} {address}: no Ray cluster answers there "
            f"({getattr(exc, 'strerror', None) or exc}); start one "
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


#: The variable that sets the level of the log lines of Ray's C++ core in this process.
CORE_LOG_ENV = "RAY_BACKEND_LOG_LEVEL"


@contextlib.contextmanager
def _core_quiet() -> Iterator[None]:
    """Ray's C++ core of this process (started by ``ray.init`` in the block) logs only fatal
    errors, unless ``RAY_BACKEND_LOG_LEVEL`` says otherwise: it writes its error lines to this
    process's stderr, where they come before tpuemb's one line (e.g. "Attempting to recover 1
    lost objects" when a node is lost; the storage reports the lost host itself). The variable
    is read once, as the core starts, and removed again after the block; a local instance
    (whose own processes would inherit it) is not started in such a block."""
    if CORE_LOG_ENV in os.environ:
        yield
        return
    os.environ[CORE_LOG_ENV] = "fatal"
    try:
        yield
    finally:
        os.environ.pop(CORE_LOG_ENV, None)


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


#: Ray's refusal of a driver whose versions differ from the cluster's (``check_version_info``
#: of ``ray._private.utils``): the cluster's Ray and Python, then this process's.
_MISMATCH = re.compile(r"Version mismatch: The cluster was started with:\s*Ray: (\S+)\s*"
                       r"Python: (\S+)\s*This process on .*? was started with:\s*Ray: (\S+)"
                       r"\s*Python: (\S+)", re.S)


def version_mismatch(exc: BaseException) -> str | None:
    """The cause of Ray's refusal ``exc`` when it is a version mismatch, with both sides'
    versions (Ray prints them over several lines, which a first line alone would cut), and
    the fix; None for any other error."""
    found = _MISMATCH.search(str(exc))
    if found is None:
        return None
    theirs, mine = found.group(1, 2), found.group(3, 4)
    return (f"version mismatch: the cluster runs Ray {theirs[0]} on Python {theirs[1]}, this "
            f"process Ray {mine[0]} on Python {mine[1]}; run tpuemb with the cluster's Ray and "
            "Python versions (e.g. on one of its nodes, or as a Ray Job)")


class JoinedRunningCluster(UserWarning):
    """``auto`` (``--ray-address auto``, ``RAY_ADDRESS=auto``) joined the Ray cluster running on
    this machine, whichever it is; the warning names it (:func:`describe_cluster`)."""


def describe_cluster(ray: Any) -> str:
    """The connected cluster in a few words: its address, alive nodes, CPUs and the memory
    its nodes offer actors (Ray's ``memory`` resource)."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    cpus = sum(float(n.get("Resources", {}).get("CPU", 0)) for n in nodes)
    memory = sum(int(n.get("Resources", {}).get("memory", 0)) for n in nodes)
    return (f"the Ray cluster at {ray.get_runtime_context().gcs_address} ({len(nodes)} "
            f"node{'' if len(nodes) == 1 else 's'}, {cpus:g} CPU{'' if cpus == 1 else 's'}, "
            f"{format_size(memory)} of "
            "memory for actors)")


def connect(address: str | None = None, num_cpus: int | None = None, *,
            runtime_env: Mapping[str, Any] | None = None, ship: bool = True) -> bool:
    """Connect this process to Ray unless it is connected; return True when this call did.

    ``address``: a cluster to join (``HOST:PORT`` or ``ray://HOST:PORT``); None: ``RAY_ADDRESS``
    when set, else a new local instance with ``num_cpus`` (default: this machine's cores), no
    dashboard. An address nobody answers at is one ``UsageError`` line, before anything starts.
    ``auto`` joins whatever cluster Ray finds on this machine (the last ``ray start`` there):
    it works, with a :class:`JoinedRunningCluster` warning naming the cluster joined (its
    address, nodes, CPUs and memory); the address itself joins the same cluster silently.

    ``runtime_env`` (checked: ``runtime_env.check_runtime_env``) becomes the job's, with this
    tpuemb in its ``py_modules`` when ``ship`` and the cluster is not a local instance started
    here (whose workers run this interpreter) nor a Ray Job's (whose ``runtime_env`` is the
    submitter's): ``runtime_env.actor_runtime_env``.
    """
    ray = import_ray()
    if ray.is_initialized():
        return False
    origin = parameter("ray_address")
    if address is None and os.environ.get("RAY_ADDRESS"):
        address, origin = os.environ["RAY_ADDRESS"], "RAY_ADDRESS"
    quiet: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False}
    if address is not None and address.startswith("ray://"):
        _host_port(address, origin)  # a malformed address first: no client needed to say so
        _require_client(address, origin)
    shipped = ship and address is not None and JOB_CONFIG_ENV not in os.environ
    quiet["runtime_env"] = actor_runtime_env(runtime_env, shipped)
    if address is None:
        with _signals_kept():
            ray.init(address="local", num_cpus=num_cpus or os.cpu_count() or 1,
                     include_dashboard=False, **quiet)
        _JOBS[session_token(ray)] = (_asked(runtime_env, ship), shipped)
        _without_notices()
        return True
    _check_reachable(address, origin)
    try:
        with _signals_kept(), _stderr_silenced(), _core_quiet():
            ray.init(address=address, **quiet)
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError ...
        hint = ("" if os.environ.get("RAY_AUTH_MODE") else
                "; if the cluster uses token authentication (new clusters of recent Ray "
                "releases do), set RAY_AUTH_MODE=token, and RAY_AUTH_TOKEN to the output of "
                "`ray get-auth-token` on the head machine when this is another machine")
        mismatch = version_mismatch(exc)
        if mismatch is not None:
            raise UsageError(f"{origin} {address}: cannot join the Ray cluster there "
                             f"({mismatch})") from None
        raise UsageError(f"{origin} {address}: cannot join the Ray cluster there "
                         f"({first_line(exc) or type(exc).__name__}){hint}") from None
    if address.strip().lower() == "auto":
        given = "RAY_ADDRESS=auto" if origin == "RAY_ADDRESS" else "the Ray address 'auto'"
        warnings.warn(JoinedRunningCluster(
            f"{given} joined {describe_cluster(ray)}, the one running on this machine; "
            "give its address to join it on purpose, or no address (and no RAY_ADDRESS) for a "
            "Ray instance of the run's own"), stacklevel=2)
    _JOBS[session_token(ray)] = (_asked(runtime_env, ship), shipped)
    if address.strip().lower() != "auto":
        _HEADS[session_token(ray)] = address.strip()
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
def ray_session(address: str | None = None, *, runtime_env: Mapping[str, Any] | None = None,
                ship: bool = True) -> Iterator[None]:
    """Connected to Ray for the block (see :func:`connect`); disconnected at its end when the
    block connected."""
    started = connect(address, runtime_env=runtime_env, ship=ship)
    try:
        yield
    finally:
        if started:
            disconnect()
