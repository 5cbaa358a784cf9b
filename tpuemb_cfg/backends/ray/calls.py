"""Calls to the hosts of a Ray storage: how a batch of calls goes out (one frame of a host's
direct link, or one Ray call per host, from threads when the arrays are large), how the replies
are waited for (``deadlines``: never longer than the work allows; a dead node or head ends the
wait), and what a failure does (the open step rolled back on every host, then the host's own
error or :class:`~tpuemb_cfg.backends.ray.errors.ShardLost`)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from tpuemb_cfg.base.errors import TpuembError
from tpuemb_cfg.model.layout import HostRows, TableLayout

from ...executor.engines import Engine
from ...executor.plan import Plan, TablePlan
from .connection import first_line, head_address, head_unreachable
from .deadlines import DEADLINE_SCALE_ENV, POLL_SECONDS, Work, seconds
from .errors import HeadLost, NoAnswer, NodeLost, ShardLost
from .host import Arena, call, call_many
from .link import HostRaised, Link

__all__ = ["NODE_ID_CHARS", "PARALLEL_BYTES", "WHOLE_METHODS", "HostCalls", "RayState",
           "Submitted"]

#: Array bytes of one batch of calls above which each host's calls are sent by a thread.
PARALLEL_BYTES = 1 << 20
#: A submitted call: (host, the Ray reference of its reply, its position in a batch's replies
#: or None for a call of its own).
Submitted = tuple[int, Any, int | None]
#: Characters of a Ray node id (hex) a message shows: enough to tell the nodes of a cluster
#: apart (``ray list nodes`` shows them whole).
NODE_ID_CHARS = 8

#: Calls that go over every row of the host (its whole share counts as touched: ``_work``).
WHOLE_METHODS = frozenset({"allocate", "put_defaults", "snapshot", "change_sumsq", "abort",
                           "undo_tables"})
#: Calls that run a table's optimizer kernel: the first of each optimizer a storage sends may
#: compile it on the hosts (``deadlines.Work.compiles``).
UPDATE_METHODS = frozenset({"update", "update_kept", "update_shared"})
#: The phase of a run a batch of calls belongs to, by the first of its methods found here.
_PHASE_OF_METHOD = {
    "update": "update", "update_kept": "update", "update_shared": "update",
    "snapshot": "update", "change_sumsq": "update", "change_sumsq_rows": "update",
    "undo_tables": "update", "gather": "step", "gather_shared": "step",
    "setup": "start", "allocate": "start", "put": "start", "put_defaults": "start",
    "read": "read", "nbytes": "read",
}


def _phase_of(calls: Sequence[tuple[int, str, tuple[Any, ...]]]) -> str:
    """The phase of a run ``calls`` belong to (a key of ``PHASES``); ``step`` by default (the
    arena's set-up, made by a step's reads or update)."""
    found = {_PHASE_OF_METHOD.get(method) for _, method, _ in calls}
    return next((phase for phase in ("update", "step", "start", "read") if phase in found),
                "step")


def _count(local: Any) -> int:
    """The number of rows of a call's local rows (a slice of a range, or row numbers)."""
    if isinstance(local, slice):
        return max(0, int(local.stop or 0) - int(local.start or 0))
    return int(getattr(local, "shape", (0,))[0])


# ------------------------------------------------------------------------------------------------
# The storage's state and its calls


class RayState:
    """What the parts of a :class:`~tpuemb_cfg.backends.ray.storage.RayStorage` share: its
    attributes (set by ``RayStorage.__init__``), declared once for the mixins below it
    (``HostCalls`` here, ``transport.Transport``, ``session.Lifecycle``)."""

    plan: Plan
    engine: Engine
    hosts: int
    _tables: dict[str, TablePlan]
    layouts: dict[str, TableLayout]
    estimates: list[int]
    reservations: list[int]
    traffic: np.ndarray
    calls: np.ndarray
    _actors: list[Any]
    _reserved: list[int]
    _broken: ShardLost | None
    _dead: set[int]
    _senders: ThreadPoolExecutor | None
    _open: bool
    _step: int
    _unconfirmed: set[int]
    _version: int
    _cache: dict[str, tuple[np.ndarray, list[np.ndarray]]]
    _ops: list[tuple[Any, ...]]
    _flushing: bool
    _measured: dict[tuple[str, str], tuple[int, list[Any]]]
    _splits: dict[str, tuple[np.ndarray, list[HostRows]]]
    _pipelined: bool
    _sumsq: dict[str, list[float]]
    _want_shared: bool
    _local_hosts: list[int]
    _want_links: bool
    links: dict[int, Link]
    shared: set[int]
    _arena: Arena | None
    _reads: int
    _kept: dict[str, tuple[np.ndarray, int]]
    _scale: float
    _nodes: list[str]
    _addresses: dict[str, str]
    _ray: Any
    _owns_session: bool
    shipped: bool
    _runtime_env: Any
    _kind: str
    _release: Any
    _updated: set[str]

    def flush(self) -> None:
        """Send the queued updates (``RayStorage.flush``)."""
        raise NotImplementedError

    def _settle(self) -> None:
        """Send the queued updates before anything reads the tables or the arena."""
        if self._ops:
            self.flush()


class HostCalls(RayState):
    """Calls to the hosts: sent (a batch per host: a direct link's frame or one Ray call),
    waited for within a deadline, and on a failure the open step rolled back everywhere and
    the error raised (``ShardLost`` for a lost host)."""


    def _submit(self, calls: Sequence[tuple[int, str, tuple[Any, ...]]]) -> list[Submitted]:
        """Send ``calls`` ((host, method, args)); a host receives its calls in their order: a
        host on the driver's node all of them in one frame of its direct link (``link``), any
        other host its consecutive calls in one Ray call (``_send_ray``), so a batch of calls
        costs one call per host however many tables it covers. Queued updates (``update``) are
        sent first.

        Ray copies large array arguments into its object store as it sends them; with several
        hosts and more than ``PARALLEL_BYTES`` of arrays, each host's calls are sent from a thread
        of their own, so the copies run in parallel."""
        if self._broken is not None:
            raise self._broken
        if self._ops and not self._flushing:
            self.flush()
        refs: list[Submitted] = [(0, None, None)] * len(calls)
        by_host: dict[int, list[int]] = {}
        payload = 0
        for index, (host, _, args) in enumerate(calls):
            sent = sum(a.nbytes for a in args if isinstance(a, np.ndarray))
            self.traffic[host, 0] += sent
            payload += sent
            by_host.setdefault(host, []).append(index)

        def send(host: int) -> None:
            committed = self._step if host in self._unconfirmed else None
            self._unconfirmed.discard(host)
            indices = by_host[host]
            link = self.links.get(host)
            if link is None:
                self._send_ray(host, committed, [(i, *calls[i][1:]) for i in indices], refs)
                return
            # every call of the batch in one frame, a ``put`` included
            reply = link.submit("run_batch", (committed, [calls[i][1:] for i in indices]))
            for position, index in enumerate(indices):
                refs[index] = (host, reply, position)
            self.calls[host] += 1

        if len(by_host) > 1 and payload > PARALLEL_BYTES:
            if self._senders is None:
                self._senders = ThreadPoolExecutor(min(self.hosts, os.cpu_count() or 1),
                                                   thread_name_prefix="tpuemb-ray")
            for future in [self._senders.submit(send, host) for host in by_host]:
                future.result()
        else:
            for host in by_host:
                send(host)
        return refs

    def _send_ray(self, host: int, committed: int | None,
                  calls: Sequence[tuple[int, str, tuple[Any, ...]]],
                  refs: list[Submitted]) -> None:
        """Send ``host`` its ``calls`` ((index in ``refs``, method, args)) through Ray: its
        consecutive calls in one Ray call (``host.call_many``), a ``put`` alone (its lists of
        blocks go as they are); each call's reply reference at its index of ``refs``."""
        actor = self._actors[host]
        start = 0
        while start < len(calls):
            stop = start + 1
            if calls[start][1] != "put":
                while stop < len(calls) and calls[stop][1] != "put":
                    stop += 1
            run = calls[start:stop]
            if len(run) == 1:
                index, method, args = run[0]
                refs[index] = (host, call(actor, committed, method, args), None)
            else:
                ref = call_many(actor, committed, [c[1:] for c in run])
                for position, (index, _, _) in enumerate(run):
                    refs[index] = (host, ref, position)
            self.calls[host] += 1
            committed = None
            start = stop

    def _collect(self, submitted: Sequence[Submitted], what: str | Callable[[int], str],
                 work: Work, phase: str = "step") -> list[Any]:
        """Every result, in order, waited for within the deadline of ``work`` (``_wait``); on a
        failure, roll the open step back on every other host and raise (``ShardLost`` for a
        lost or silent actor, the host's own error otherwise). ``what``: what the hosts were
        doing, for the error (a function of the host: what its calls were); ``phase``: the
        phase of the run (a key of ``PHASES``)."""
        # A smaller scale never shortens the start: a new actor's imports and first kernels
        # take what they take (a test's tiny scale is meant for the calls it stalls).
        limit = seconds(work, max(self._scale, 1.0) if phase == "start" else self._scale)
        replies, failure = self._wait(submitted, limit)
        if failure is not None:
            host, exc = failure
            if self._raised(exc):  # the storage lives on: the others' calls end first (arena)
                self._drain([s for s in submitted if s[1] not in replies and s[0] != host],
                            limit)
            self._fail(host, exc, what if isinstance(what, str) else what(host), phase, limit)
        results: list[Any] = []
        for host, reply, position in submitted:
            value = replies[reply] if position is None else replies[reply][position]
            if isinstance(value, np.ndarray):
                self.traffic[host, 1] += value.nbytes
            results.append(value)
        return results

    def _run(self, calls: Sequence[tuple[int, str, tuple[Any, ...]]],
             what: str | Callable[[int], str]) -> list[Any]:
        return self._collect(self._submit(calls), what, self._work(calls), _phase_of(calls))

    def _work(self, calls: Sequence[tuple[int, str, tuple[Any, ...]]]) -> Work:
        """What ``calls`` move and touch (``deadlines.Work``): the arrays sent, the rows read
        back, and on the busiest host those, or its whole share for a call over every row; and
        the optimizers updated for the first time (their kernels may compile on the hosts)."""
        moved = 0
        touched: dict[int, int] = {}
        compiles = 0
        for host, method, args in calls:
            if method in UPDATE_METHODS and args and args[0] in self._tables:
                optimizer = self._tables[args[0]].optimizer.name
                if optimizer not in self._updated:
                    self._updated.add(optimizer)
                    compiles += 1
            size = sum(a.nbytes for a in args if isinstance(a, np.ndarray))
            if method in ("gather", "read"):
                table = args[0] if method == "gather" else str(args[0]).split("/")[1]
                size += _count(args[1]) * self._tables[table].dimension * 4
            moved += size
            whole = method in WHOLE_METHODS or (method == "update" and args[1] is None)
            touched[host] = touched.get(host, 0) + (self.estimates[host] if whole else size)
        return Work(moved=moved, touched=max(touched.values(), default=0), compiles=compiles)

    def _wait(self, submitted: Sequence[Submitted], limit: float
              ) -> tuple[dict[Any, Any], tuple[int, BaseException] | None]:
        """The replies of ``submitted`` (by reply object), or as soon as one fails, those so far
        and ``(host, error)``: Ray's error of a call; ``NodeLost`` when the cluster counts the
        node of a host waited for as dead (checked every ``POLL_SECONDS`` while the wait goes
        on: Ray's own report of a lost node can take many minutes when a reply was in
        transfer); ``NoAnswer`` when ``limit`` seconds pass first. Never waits longer.

        A reply is a Ray object reference, or any object with ``result(timeout)`` that raises
        ``TimeoutError`` while the reply has not come (``_poll``)."""
        end = time.monotonic() + limit
        host_of: dict[Any, int] = {}
        for host, reply, _ in submitted:
            host_of.setdefault(reply, host)
        pending = list(host_of)
        replies: dict[Any, Any] = {}
        while pending:
            done = self._poll(pending, max(0.0, min(POLL_SECONDS, end - time.monotonic())))
            for reply in pending:  # the first failure in the order of the calls
                if reply in done:
                    ok, value = done[reply]
                    if not ok:
                        return replies, (host_of[reply], value)
                    replies[reply] = value
            pending = [reply for reply in pending if reply not in done]
            if not pending:
                break
            lost = self._lost([host_of[reply] for reply in pending])
            if lost is not None:
                return replies, lost
            if time.monotonic() >= end:
                return replies, (host_of[pending[0]], NoAnswer(limit))
        return replies, None

    def _poll(self, pending: Sequence[Any], timeout: float) -> dict[Any, tuple[bool, Any]]:
        """The replies of ``pending`` that came within ``timeout`` seconds: ``(True, value)``
        or ``(False, error)``. Ray references are waited for together (``ray.wait``, which
        returns a failed call's reference too); any other reply by ``result(timeout)``."""
        ray = self._ray
        refs = [r for r in pending if isinstance(r, ray.ObjectRef)]
        others = [r for r in pending if not isinstance(r, ray.ObjectRef)]
        done: dict[Any, tuple[bool, Any]] = {}
        if refs:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0 if others else timeout)
            try:
                done.update((ref, (True, value))
                            for ref, value in zip(ready, ray.get(ready), strict=True))
            except ray.exceptions.RayError:  # which one: each alone (ready: no wait)
                for ref in ready:
                    try:
                        done[ref] = (True, ray.get(ref))
                    except ray.exceptions.RayError as exc:
                        done[ref] = (False, exc)
        for reply in others:
            try:
                done[reply] = (True, reply.result(timeout / len(others)))
            except TimeoutError:
                continue
            except Exception as exc:  # noqa: BLE001 - the host's failure, reported by _fail
                done[reply] = (False, exc)
        return done

    def _drain(self, submitted: Sequence[Submitted], limit: float) -> None:
        """Wait, within ``limit`` seconds, for every call of ``submitted`` whose host answers
        (a host that fails or is lost is left out)."""
        end = time.monotonic() + limit
        while submitted:
            _, failed = self._wait(submitted, max(0.0, end - time.monotonic()))
            if failed is None:
                return
            submitted = [s for s in submitted if s[0] != failed[0]]

    def _raised(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a host's own error (the host lives on), not a lost host."""
        ray = self._ray
        if isinstance(exc, HostRaised):  # over a direct link
            return True
        return (isinstance(exc, ray.exceptions.RayTaskError) and exc.cause is not None
                and not isinstance(exc.cause, ray.exceptions.RayError))

    def _lost(self, hosts: Sequence[int]) -> tuple[int, BaseException] | None:
        """The first of ``hosts`` whose Ray node the cluster counts as dead, with a
        ``NodeLost``; None when all are alive (or their nodes are not known yet)."""
        if not self._nodes:
            return None
        why = head_unreachable(self._ray)
        if why is not None:
            return hosts[0], HeadLost(head_address(self._ray), why)
        alive = {str(n["NodeID"]) for n in self._ray.nodes() if n.get("Alive")}
        for host in hosts:
            if self._nodes[host] not in alive:
                return host, NodeLost()
        return None

    def _node(self, host: int) -> str:
        """``, node ADDRESS id ID`` of the host's Ray node, when known (for messages): its
        address, and the start of its id (:data:`NODE_ID_CHARS`), which tells apart the
        nodes of one machine."""
        node = self._nodes[host] if host < len(self._nodes) else ""
        if not node:
            return ""
        address = self._addresses.get(node)
        short = node[:NODE_ID_CHARS]
        return f", node {address} id {short}" if address else f", node id {short}"

    def _fail(self, host: int, exc: BaseException, what: str, phase: str, limit: float) -> None:
        """Roll the open step back wherever it ran and raise: the host's own error when it
        raised one (the host lives on), else ``ShardLost`` (the actor died: Ray ended it, the
        machine went away or ran out of memory; or it did not answer within ``limit`` seconds,
        and is ended), after which the storage refuses every call. The roll-back on the other
        hosts is waited for within ``limit`` too."""
        ray = self._ray
        if isinstance(exc, HeadLost):  # nothing reaches the cluster: no kill, no roll-back
            self._broken = ShardLost(
                f"the Ray cluster's head {exc.address} (its GCS) stopped answering",
                f"while host {host} of {self.hosts} was {what} ({exc}); the run cannot go on "
                "without the head", host, phase)
            raise self._broken from None
        died = not self._raised(exc)
        rolled = ""
        self._kept.clear()
        if isinstance(exc, NoAnswer | NodeLost):  # it must never take a call again
            with contextlib.suppress(ray.exceptions.RayError, ValueError):
                ray.kill(self._actors[host], no_restart=True)
        if self._open:
            # Every host that answers is rolled back; the others are lost.
            self._drain([(h, self.links[h].submit("call_args", (None, "abort", self._step))
                          if h in self.links else call(a, None, "abort", (self._step,)), None)
                         for h, a in enumerate(self._actors) if not (died and h == host)], limit)
            self._open = False
            rolled = (f"; the open step was rolled back on every {'other ' if died else ''}host "
                      "(applied on none)")
        if not died:
            cause = exc.cause  # type: ignore[attr-defined]  # a RayTaskError (``_raised``)
            if isinstance(cause, TpuembError):
                raise cause
            raise ShardLost(f"host {host} of {self.hosts} failed", f"while {what}: "
                            f"{type(cause).__name__}: {first_line(cause)}{rolled}", host,
                            phase) from None
        self._dead.add(host)
        head = f"host {host} of {self.hosts} (its Ray actor{self._node(host)}) "
        if isinstance(exc, NoAnswer):
            head += f"did not answer within {limit:.0f} s"
            why = (f"the deadline of this work; {DEADLINE_SCALE_ENV}=2 doubles every "
                   "deadline")
        else:
            head += "died"
            why = (str(exc) if isinstance(exc, NodeLost)
                   else f"{type(exc).__name__}: {first_line(exc)}")
        self._broken = ShardLost(head, f"while {what} ({why}){rolled}; the run cannot go on "
                                 "without its rows", host, phase)
        raise self._broken from None

    def _doing(self, host: int, calls: Sequence[tuple[int, str, tuple[Any, ...]]]) -> str:
        """What ``host`` was doing in one batch of ``calls`` (for the error when it fails): the
        last of its calls, and the ones before it in the same Ray call."""
        verbs = {"gather": "reading rows of", "gather_shared": "reading rows of",
                 "update": "updating", "update_kept": "updating", "update_shared": "updating",
                 "snapshot": "copying", "change_sumsq": "summing the change of",
                 "change_sumsq_rows": "summing the change of"}
        done = [f"{verbs.get(method, method)} table {args[0]!r}"
                for h, method, args in calls if h == host]
        if not done:
            return "answering"
        earlier = list(dict.fromkeys(done[:-1]))
        return done[-1] + (f" (or, before it in the same call, {', '.join(earlier)})"
                           if earlier else "")
