"""Where the host actors of a ``RayStorage`` would go, and whether they fit, before any starts.

**What a host actor needs.** Each actor reserves Ray's ``memory`` resource for its life:

    reservation(h) = max(shard_bytes(h), ROWS_FLOOR) + PROCESS_BYTES

``host.shard_bytes`` is the estimate of its arrays (its rows of every table and slot, with a
non-lazy table's working arrays); :data:`PROCESS_BYTES` is the Python process around them.
:data:`ROWS_FLOOR` keeps the actors of small tables interchangeable: an idle actor is reused
only by a host that needs no more than it reserved, and without a floor an actor made for a
table of 2 MB could not serve the next configuration's table of 3 MB (a new process each time).
Ray counts CPUs too: an actor that reserves memory holds no CPU, but Ray places it only on a
node with a free CPU (``ray.actor``'s defaults: one CPU to place it, none while it runs), so a
node without one (a head started with ``--num-cpus 0``) takes no host.

**How they would be placed.** :func:`pack` is first-fit decreasing: the hosts by reservation,
largest first (the lower host number first among equals), each onto the first node with the
room left, the nodes in the order the storage's default placement tries them - the driver's
node first (``ActorOptions.placement="driver"``: its hosts exchange rows through shared
memory), then the others by available memory, most first. Hosts that will take an idle actor
of an earlier storage (:func:`reuse`, which mirrors ``connection.take_actor``) keep that actor
and its reservation and need no new room. Ray's own scheduler does not promise this order, so
the packing is a check, not a placement: what it cannot place, Ray could not place either
unless a cleverer packing exists (hosts differ by at most one row per table, so first-fit
decreasing is close to the best packing), and Ray may still place what it places elsewhere.

**The refusals** (:func:`refusal`), in this order, each one line naming the limit and the fix:
no node has a free CPU; the hosts together need more than the cluster has available (how much
is missing: add nodes, or fewer processes - more hosts cannot help, each adds a process); a
single host needs more than the largest node has available (more hosts, found by
:func:`suggest_shards`, or bigger machines); they would fit in total but not one piece per host
(the host that finds no room, and a number of hosts that packs).

Everything here is plain arithmetic on :class:`Node` records except :func:`cluster_nodes`
(what a connected Ray reports) and :func:`machine_node` (this machine, for a dry run without
a cluster), so the packing and the refusals are tested without Ray.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tpuemb_cfg.base.errors import parameter
from tpuemb_cfg.base.units import format_size
from tpuemb_cfg.model.layout import TableLayout

if TYPE_CHECKING:
    from ...executor.plan import Plan

__all__ = [
    "LOCAL_OBJECT_STORE_SHARE",
    "PROCESS_BYTES",
    "ROWS_FLOOR",
    "HostPlace",
    "Node",
    "PlacementPlan",
    "cluster_nodes",
    "machine_node",
    "pack",
    "plan_hosts",
    "plan_placement",
    "refusal",
    "reservation",
    "reuse",
    "suggest_shards",
]

#: Bytes of a host actor's process beyond its arrays: Python, NumPy, numba and its compiled
#: kernels, tpuemb's modules and Ray's worker runtime. Measured with
#: ``benchmarks/bench_ray_process.py`` (``/proc/self/smaps_rollup`` of each actor, RSS minus the
#: bytes of its arrays; Ray 2.60, Python 3.11, the 2-core development VM), the largest of:
#: numba engine, quickstart on 2 actors: 238 MiB set up, 274-276 MiB after 5 steps (the
#: compiled kernels loaded); 1/16 DLRM (26 tables) on 4 actors: 222 MiB set up, 269-272 MiB
#: after 3 steps; numpy engine: 117 MiB either way. The unshared part (USS) is lower,
#: 53-139 MiB: the libraries' pages are shared by the actors of one machine, but one actor
#: alone on a node pays them all. 300 MiB covers the largest RSS with a 10% margin.
PROCESS_BYTES = 300 << 20

#: The least a host actor reserves for its arrays (see the module docstring: reuse).
ROWS_FLOOR = 64 << 20

#: Of the memory available when it starts, the share a Ray node gives its object store by
#: default (``RAY_DEFAULT_OBJECT_STORE_MEMORY_PROPORTION``); the rest is its ``memory``
#: resource, what actors reserve.
LOCAL_OBJECT_STORE_SHARE = 0.3


def reservation(estimate: int) -> int:
    """What a host actor reserves: its arrays' estimate (at least :data:`ROWS_FLOOR`) plus
    :data:`PROCESS_BYTES`."""
    return max(int(estimate), ROWS_FLOOR) + PROCESS_BYTES


def _rows(estimates: Sequence[int]) -> str:
    """``estimates``' reserved bytes of rows, in words (saying so where the floor applies)."""
    reserved = format_size(sum(max(e, ROWS_FLOOR) for e in estimates))
    if all(e >= ROWS_FLOOR for e in estimates):
        return f"{reserved} of rows"
    return f"{reserved} of rows ({format_size(ROWS_FLOOR)} at least per host)"


@dataclass(frozen=True)
class Node:
    """A Ray node as the placement sees it: ``name`` (its address, or ``this machine``), the
    bytes of Ray's ``memory`` resource and the CPUs it has available now, and whether the
    driver runs there (``driver``: the default placement tries it first). ``node_id``: Ray's
    id ("" for a node that is not a Ray node yet)."""

    name: str
    memory: int
    cpus: float
    driver: bool = False
    node_id: str = ""

    @property
    def usable(self) -> bool:
        """Ray can place an actor here: it has a free CPU."""
        return self.cpus >= 1


@dataclass(frozen=True)
class HostPlace:
    """One host in a plan: its arrays' ``estimate``, its ``reservation``, the index of the
    node it would go to (None: none has room), whether it takes an idle actor (``reused``:
    no new reservation) and its ``rows`` (of every table; 0 where not given)."""

    host: int
    estimate: int
    reservation: int
    node: int | None
    reused: bool = False
    rows: int = 0


@dataclass(frozen=True)
class PlacementPlan:
    """Where each host would go on ``nodes``, and the one-line refusal (None: they fit)."""

    hosts: tuple[HostPlace, ...]
    nodes: tuple[Node, ...]
    refusal: str | None

    @property
    def fits(self) -> bool:
        return self.refusal is None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the nodes, every host's bytes and node (by name), the refusal."""
        return {
            "process_bytes": PROCESS_BYTES,
            "nodes": [{"name": n.name, "memory_bytes": n.memory, "cpus": n.cpus,
                       "driver": n.driver} for n in self.nodes],
            "hosts": [{"host": h.host, "rows": h.rows, "estimate_bytes": h.estimate,
                       "reservation_bytes": h.reservation,
                       "node": None if h.node is None else self.nodes[h.node].name,
                       "reused": h.reused} for h in self.hosts],
            "fits": self.fits,
            "refusal": self.refusal,
        }


def _node_order(nodes: Sequence[Node]) -> list[int]:
    """The usable nodes' indices in the order actors go: the driver's, then most memory."""
    usable = [i for i, n in enumerate(nodes) if n.usable]
    return sorted(usable, key=lambda i: (not nodes[i].driver, -nodes[i].memory, i))


def pack(needs: Sequence[int], nodes: Sequence[Node]) -> list[int | None]:
    """First-fit decreasing: per need (bytes), the index of the node it goes to, or None when
    no node has the room left (see the module docstring for the orders)."""
    left = [n.memory for n in nodes]
    order = _node_order(nodes)
    placed: list[int | None] = [None] * len(needs)
    for index in sorted(range(len(needs)), key=lambda i: (-needs[i], i)):
        for node in order:
            if needs[index] <= left[node]:
                left[node] -= needs[index]
                placed[index] = node
                break
    return placed


def reuse(needs: Sequence[int], idle: Sequence[int]) -> list[int | None]:
    """Per host (in order), the index of the idle actor it takes, or None: the first idle
    actor whose reservation (``idle``, bytes) covers the host's need, as
    ``connection.take_actor`` takes them."""
    free = list(range(len(idle)))
    taken: list[int | None] = []
    for need in needs:
        found = next((i for i in free if idle[i] >= need), None)
        if found is not None:
            free.remove(found)
        taken.append(found)
    return taken


def _fewest_hosts(estimates_of: Callable[[int], Sequence[int]], room: int,
                  most: int) -> int | None:
    """The fewest hosts (up to ``most``) whose largest reservation fits ``room``, or None."""
    if most < 1 or reservation(max(estimates_of(most))) > room:
        return None
    low, high = 1, most
    while low < high:  # the largest host shrinks as hosts are added
        middle = (low + high) // 2
        if reservation(max(estimates_of(middle))) <= room:
            high = middle
        else:
            low = middle + 1
    return low


#: How many numbers of hosts :func:`suggest_shards` tries around the current one, at most,
#: and the most hosts it suggests.
SEARCH = 256
MOST_HOSTS = 1 << 16


def suggest_shards(hosts: int, nodes: Sequence[Node],
                   estimates_of: Callable[[int], Sequence[int]]) -> int | None:
    """The number of hosts nearest ``hosts`` (fewer first among equals) whose reservations
    pack into ``nodes`` (``estimates_of(n)``: the estimates of n hosts), or None.

    The rows' total does not depend on the number of hosts, the processes do: n hosts need
    ``rows + n * PROCESS_BYTES``, so at most ``(available - rows) // PROCESS_BYTES`` hosts can
    fit, and at least as many as make the largest one fit the largest node."""
    usable = [n for n in nodes if n.usable]
    if not usable:
        return None
    rows = sum(estimates_of(hosts))
    most = min((sum(n.memory for n in usable) - rows) // PROCESS_BYTES, MOST_HOSTS)
    fewest = _fewest_hosts(estimates_of, max(n.memory for n in usable), int(most))
    if fewest is None:
        return None
    candidates = sorted(range(fewest, int(most) + 1), key=lambda n: (abs(n - hosts), n))
    for count in candidates[:SEARCH]:
        if None not in pack([reservation(e) for e in estimates_of(count)], nodes):
            return count
    return None


def _shards_hint(suggested: int | None, hosts: int, what: str) -> str:
    if suggested is None or suggested == hosts:
        return ""
    return f"{parameter('shards')} {suggested} {what}, or "


def refusal(estimates: Sequence[int], nodes: Sequence[Node], placed: Sequence[int | None],
            reused: Sequence[bool],
            estimates_of: Callable[[int], Sequence[int]] | None = None) -> str | None:
    """Why hosts of ``estimates`` placed as ``placed`` (None: nowhere) on ``nodes`` cannot
    start, in one line naming the limit and the fix; None when every host has a place.
    ``estimates_of(n)``: the estimates of n hosts, to suggest a number of hosts that fits."""
    hosts = len(estimates)
    if all(p is not None or r for p, r in zip(placed, reused, strict=True)):
        return None
    usable = [n for n in nodes if n.usable]
    if not usable:
        return (f"no Ray node has a free CPU to place a host actor on ({len(nodes)} alive "
                "node(s); Ray places an actor only where a CPU is free, though it holds none "
                "while it runs): add a node with CPUs, or end what holds them")
    suggested = (suggest_shards(hosts, nodes, estimates_of) if estimates_of is not None
                 else None)
    needs = [reservation(e) for e in estimates]
    new = [h for h in range(hosts) if not reused[h]]
    largest = max(usable, key=lambda n: n.memory)
    big = max(new, key=lambda h: (needs[h], -h))
    floor = f" ({format_size(ROWS_FLOOR)} at least)" if estimates[big] < ROWS_FLOOR else ""
    host = (f"({format_size(max(estimates[big], ROWS_FLOOR))} for its rows of every table and "
            f"slot, with a step's working arrays{floor}, and {format_size(PROCESS_BYTES)} for "
            "its process)")
    total = sum(needs[h] for h in new)
    available = sum(n.memory for n in usable)
    if total > available:  # more hosts cannot help: each adds a process
        missing = format_size(total - available)
        fewer = _shards_hint(suggested, hosts, "fits: fewer processes")
        bigger = ("" if needs[big] <= largest.memory else
                  f", with room for {format_size(needs[big])} on one node (host {big}: the "
                  f"largest node has {format_size(largest.memory)})")
        return (f"the {len(new)} new host actor(s) need {format_size(total)} "
                f"({_rows([estimates[h] for h in new])} and {len(new)} x "
                f"{format_size(PROCESS_BYTES)} for their processes), more than the Ray cluster "
                "has available "
                f"({format_size(available)} on {len(usable)} node(s) with a free CPU): "
                f"{missing} is missing; {fewer}add nodes with {missing} more memory{bigger}, "
                "or lower the memory per host (fewer rows, a smaller dimension, an optimizer "
                "with fewer slots)")
    if needs[big] > largest.memory:
        fix = (f"split the tables over more hosts ({parameter('shards')} {suggested} fits this "
               "cluster) or use machines with more memory" if suggested is not None else
               "no number of hosts fits this cluster: use machines with more memory")
        return (f"host {big} of {hosts} needs {format_size(needs[big])} {host}, more than any "
                f"Ray node has available (the most: {format_size(largest.memory)}, on "
                f"{largest.name}); {fix}")
    return _no_room(estimates, nodes, placed, new, _shards_hint(suggested, hosts, "packs"))


def _no_room(estimates: Sequence[int], nodes: Sequence[Node], placed: Sequence[int | None],
             new: Sequence[int], repack: str) -> str:
    """The refusal of hosts that fit the cluster in total, but not one piece per host."""
    needs = [reservation(e) for e in estimates]
    total = sum(needs[h] for h in new)
    available = sum(n.memory for n in nodes if n.usable)
    stuck = min((h for h in new if placed[h] is None), key=lambda h: (-needs[h], h))
    left = [n.memory for n in nodes]
    for h in new:
        node = placed[h]
        if node is not None:
            left[node] -= needs[h]
    most_left = max(left[i] for i, n in enumerate(nodes) if n.usable)
    return (f"the {len(new)} new host actor(s) need {format_size(total)} and the Ray cluster "
            f"has {format_size(available)} available, but not in one piece per host: placed "
            f"largest first, host {stuck} of {len(estimates)} ({format_size(needs[stuck])}: "
            f"{_rows([estimates[stuck]])} and {format_size(PROCESS_BYTES)} for its process) "
            "finds no node with the room left (the most left: "
            f"{format_size(most_left)}); {repack}add a node with "
            f"{format_size(needs[stuck])} of memory")


def plan_placement(estimates: Sequence[int], nodes: Sequence[Node], *,
                   idle: Sequence[int] = (),
                   estimates_of: Callable[[int], Sequence[int]] | None = None,
                   rows: Sequence[int] = ()) -> PlacementPlan:
    """Where hosts of ``estimates`` (bytes of their arrays, ``host.shard_bytes``) would go on
    ``nodes``: the hosts that take one of the ``idle`` actors (their reservations, bytes) keep
    it, the others are packed (:func:`pack`); with the refusal when some cannot be placed.
    ``rows``: each host's rows, shown by the plan."""
    needs = [reservation(e) for e in estimates]
    taken = reuse(needs, idle)
    reused = [t is not None for t in taken]
    new = [h for h in range(len(needs)) if not reused[h]]
    packed = pack([needs[h] for h in new], nodes)
    placed: list[int | None] = [None] * len(needs)
    for h, node in zip(new, packed, strict=True):
        placed[h] = node
    hosts = tuple(HostPlace(h, int(estimates[h]), needs[h], placed[h], reused[h],
                            int(rows[h]) if rows else 0)
                  for h in range(len(needs)))
    return PlacementPlan(hosts, tuple(nodes),
                         refusal(estimates, nodes, placed, reused, estimates_of))


def plan_hosts(plan: Plan, hosts: int, nodes: Sequence[Node], *,
               idle: Sequence[int] = ()) -> PlacementPlan:
    """:func:`plan_placement` of ``plan``'s tables over ``hosts`` hosts (spec section 8's
    layout: each host's rows of every table, ``host.shard_bytes``), suggesting another number
    of hosts when they do not fit: what ``RayStorage`` checks before it starts an actor, and
    what ``tpuemb simulate --backend ray --dry-run`` shows."""
    from .host import shard_bytes_all

    def estimates_of(count: int) -> list[int]:
        return shard_bytes_all(plan, count)

    layouts = [TableLayout(t.vocabulary, hosts, plan.mod_sharding) for t in plan.tables]
    rows = [sum(layout.rows_of(h) for layout in layouts) for h in range(hosts)]
    return plan_placement(estimates_of(hosts), nodes, idle=idle, estimates_of=estimates_of,
                          rows=rows)


# ------------------------------------------------------------------------------------------------
# Where the nodes come from


def cluster_nodes(ray: Any) -> list[Node]:
    """The alive nodes of the connected Ray cluster with what they have available now (Ray's
    per-node available resources; each node's total where Ray cannot say)."""
    try:
        from ray._private import state

        per_node: Callable[[], dict[str, dict[str, float]]] = (
            state.available_resources_per_node)  # a developer API of Ray, unannotated
        available = per_node()
    except Exception:  # noqa: BLE001 - an older or newer Ray without it: the totals
        available = {}
    here = str(ray.get_runtime_context().get_node_id() or "")
    alive = [n for n in ray.nodes() if n.get("Alive")]
    addresses = [str(n.get("NodeManagerAddress") or "") for n in alive]
    nodes = []
    for found, address in zip(alive, addresses, strict=True):
        node_id = str(found.get("NodeID", ""))
        resources = available.get(node_id, found.get("Resources", {}))
        # several nodes of one machine share its address: their ids tell them apart
        name = (address if address and addresses.count(address) == 1
                else f"{address or 'node'} {node_id[:8]}".strip())
        nodes.append(Node(name=name, memory=int(resources.get("memory", 0)),
                          cpus=float(resources.get("CPU", 0)),
                          driver=node_id == here, node_id=node_id))
    return nodes


def machine_node(available: int, cpus: int | None = None) -> Node:
    """This machine as the one node of the local Ray instance a run would start: of the
    ``available`` bytes, what a new node leaves to actors after its object store
    (:data:`LOCAL_OBJECT_STORE_SHARE`), and its cores."""
    memory = available - int(available * LOCAL_OBJECT_STORE_SHARE)
    return Node(name="this machine", memory=memory, cpus=float(cpus or os.cpu_count() or 1),
                driver=True)
