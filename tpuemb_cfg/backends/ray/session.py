"""A Ray storage's hosts set up and released: the limits checked before anything starts (each
actor's memory, what the cluster's nodes can place), the actors taken from the session's idle
ones or started (placed near the driver, or spread), each given its host, the hosts on the
driver's node linked directly (``link``); ``close`` keeps the actors for the next storage."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.base.errors import parameter as arg
from tpuemb_cfg.base.units import format_size

from .connection import (
    disconnect,
    drop_idle,
    first_line,
    idle_reservations,
    session_token,
    start_failure,
    take_actor,
)
from .deadlines import Work, seconds
from .errors import NoAnswer, ShardLost
from .host import STALL_ENV, Shard, fitting_hosts
from .link import Link, LinkError
from .placement import PROCESS_BYTES, cluster_nodes, plan_hosts
from .transport import Transport

__all__ = ["PLACEMENT_ENV", "PLACEMENT_TIMEOUT", "Lifecycle"]

#: The variable that chooses where new host actors go (``ActorOptions.placement``).
PLACEMENT_ENV = "TPUEMB_RAY_PLACEMENT"
#: Seconds to wait for the cluster to place an actor before saying it cannot.
PLACEMENT_TIMEOUT = 120.0


class Lifecycle(Transport):
    """The set-up and release of a storage's hosts (see the module docstring)."""


    def _check_limit(self, limit: int, what: str, fix: str) -> None:
        """Refuse a host whose actor (its rows and its process) needs more than ``limit``
        bytes (``max_memory``), naming the number of hosts that fits."""

        # What the actor holds, not what it reserves: the floor of a reservation
        # (``placement.ROWS_FLOOR``) is for reusing actors, not memory in use.
        needs = [e + PROCESS_BYTES for e in self.estimates]
        host = int(np.argmax(needs))
        if needs[host] <= limit:
            return
        fits = (fitting_hosts(self.plan, limit - PROCESS_BYTES, self.hosts)
                if limit > PROCESS_BYTES else None)
        if fits is not None:
            split = f"split the tables over more hosts ({arg('shards')} {fits} fits)"
        elif limit <= PROCESS_BYTES:
            split = "no number of hosts fits: a host's process alone needs more"
        else:
            split = "no number of hosts fits: a single row of a table is too large"
        raise UsageError(
            f"host {host} of {self.hosts} would need {format_size(needs[host])} "
            f"({format_size(self.estimates[host])} for its rows of every table and slot, with "
            f"a step's working arrays, and {format_size(PROCESS_BYTES)} for its process), more "
            f"than {what} ({format_size(limit)}); {split}, or {fix}"
        )

    def _check_cluster(self) -> None:
        """Refuse, before any actor starts, hosts the cluster cannot place (instead of waiting
        for Ray to place them): ``placement.plan_hosts`` packs the reservations of the
        hosts that need a new actor into the alive nodes' available memory and CPUs, and says
        which limit stops them - a node's, the cluster's total, or the packing."""
        found = plan_hosts(self.plan, self.hosts, cluster_nodes(self._ray),
                           idle=idle_reservations(session_token(self._ray), self._kind))
        if found.refusal is not None:
            raise UsageError(found.refusal)

    def _scheduling(self, placement: str | None) -> Any:
        """Ray's scheduling strategy for a new actor (``ActorOptions.placement``)."""
        choice = (placement or os.environ.get(PLACEMENT_ENV, "") or "driver").strip().lower()
        if choice == "spread":
            return "SPREAD"
        if choice != "driver":
            raise UsageError(f"actor placement {choice!r} ({PLACEMENT_ENV} or "
                             "ActorOptions.placement): expected 'driver' or 'spread'")
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = str(self._ray.get_runtime_context().get_node_id() or "")
        if not here:  # a driver outside the cluster (a Ray client): nowhere to prefer
            return "SPREAD"
        return NodeAffinitySchedulingStrategy(node_id=here, soft=True)

    def _start(self, threads: int | None, placement: str | None = None) -> None:
        """Take idle actors of this session or start new ones, and give each its host."""
        ray = self._ray
        token = session_token(ray)
        strategy = self._scheduling(placement)
        env = dict(self._runtime_env or {})
        # The tests' fault injection, passed on to new hosts (idle ones do not have it).
        stall = os.environ.get(STALL_ENV)
        if stall:
            env["env_vars"] = {**env.get("env_vars", {}), STALL_ENV: stall}
        options = {"runtime_env": env} if env else {}
        try:  # Ray refuses local paths in an actor's runtime_env (only a job's are uploaded)
            remote = ray.remote(max_restarts=0, max_task_retries=0, **options)(Shard)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{arg('runtime_env')} of the host actors: {first_line(exc)}"
                             ) from None
        taken = [None if stall else take_actor(token, self.reservations[host], self._kind)
                 for host in range(self.hosts)]
        if any(idle is None for idle in taken):
            drop_idle(ray, token)  # the idle actors left would hold memory the new ones need
        for host, idle in enumerate(taken):
            if idle is None:
                reserved = self.reservations[host]
                idle = (remote.options(memory=reserved, scheduling_strategy=strategy).remote(),
                        reserved)
            self._actors.append(idle[0])
            self._reserved.append(idle[1])
        where = [(h, actor.where.remote(), None) for h, actor in enumerate(self._actors)]
        # Placement may wait for resources (another run's actors going away): at least
        # PLACEMENT_TIMEOUT whatever the scale, more for many actors (``deadlines``).
        limit = max(PLACEMENT_TIMEOUT, seconds(Work(actors=self.hosts), self._scale))
        replies, failure = self._wait(where, limit)
        if failure is not None and isinstance(failure[1], NoAnswer):
            raise UsageError(
                f"the Ray cluster placed {len(replies)} of {self.hosts} host actors within "
                f"{limit:.0f} s; it lacks the CPUs or memory for the others "
                f"(ray status shows its resources), or use fewer {arg('shards')}"
            )
        if failure is not None:
            try:
                self._fail(*failure, "starting", "start", limit)
            except ShardLost as lost:  # a module missing on its node ...: the cause and the fix
                raise start_failure(ray, where[lost.host][1], lost.host, self.hosts,
                                    self.shipped) or lost from None
        places = [replies[ref] for _, ref, _ in where]
        self._nodes = [node for _, _, node in places]
        self._addresses = {str(n["NodeID"]): str(n.get("NodeManagerAddress", ""))
                           for n in ray.nodes()}
        per_machine: dict[str, int] = {}
        for name, _, _ in places:
            per_machine[name] = per_machine.get(name, 0) + 1
        engine = self.engine.name
        self._run([
            (h, "setup", (self.plan, h, self.hosts, engine,
                          threads or max(1, cpus // per_machine[name])))
            for h, (name, cpus, _) in enumerate(places)
        ], "starting")
        here = str(ray.get_runtime_context().get_node_id() or "")
        near = [h for h, (_, _, node) in enumerate(places) if here and node == here]
        if self._want_shared:
            self._local_hosts = near
        if self._want_links and near:
            self._link(near)

    def _link(self, hosts: list[int]) -> None:
        """Call ``hosts`` (on the driver's node) over direct links from now on (``link``): a
        host that cannot be reached that way keeps taking its calls through Ray."""
        token = os.urandom(16)
        addresses = self._run([(h, "listen", (token,)) for h in hosts], "starting")
        for host, address in zip(hosts, addresses, strict=True):
            try:
                self.links[host] = Link(address, token)
            except (OSError, LinkError):
                continue

    def close(self) -> None:
        """Release the actors (kept, emptied, for the next storage of this Ray session; also
        done when the storage is garbage-collected) and, when this storage connected to Ray,
        disconnect."""
        for link in self.links.values():
            link.close()
        self.links = {}
        self._release()
        self._drop_arena()
        if self._senders is not None:
            self._senders.shutdown(wait=False)
            self._senders = None
        if self._owns_session:
            self._owns_session = False
            disconnect()
