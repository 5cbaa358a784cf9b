"""What a run asks of the Ray backend besides its storage (``executor.hooks.RunHooks``): its
options, how it reads a state file, the plan of its host actors and the plan's text, and what
a lost host means (``RayBackend`` in ``storage.py`` is one of these, and opens the storage).

``tpuemb simulate --backend ray --dry-run`` shows each host actor's rows, estimate and
reservation and the node it would go to (``placement.plan_hosts``), on the cluster of
``--ray-address`` or ``RAY_ADDRESS`` (joined to read its nodes, then left: no actor starts),
else on this machine as the local Ray instance a run would start (Ray is not started).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tpuemb_cfg.backends.ray import connection
from tpuemb_cfg.backends.ray import placement as places
from tpuemb_cfg.backends.ray.errors import ShardLost
from tpuemb_cfg.backends.ray.options import RayOptions
from tpuemb_cfg.backends.ray.runtime_env import parse_runtime_env
from tpuemb_cfg.base.errors import UsageError, printable
from tpuemb_cfg.base.units import format_size
from tpuemb_cfg.executor.hooks import RunHooks
from tpuemb_cfg.formats.npzio import map_npz

__all__ = ["RayTools", "plan_lines"]


class RayTools(RunHooks):
    """The Ray backend's hooks: each host's rows in its own actor, out of this process."""

    options = ("ray_address", "shards", "runtime_env", "no_ship")

    def runtime_env(self, text: str | None) -> dict[str, Any] | None:
        """``--runtime-env`` (a JSON object or ``@FILE.json``), checked before anything
        starts."""
        if text is None:
            return None

        return parse_runtime_env(text)

    def read_state(self) -> Callable[..., Any]:
        """The hosts receive a state file a block at a time: it is mapped, not read."""
        return map_npz

    def plan(self, plan: Any, placement: Any, limit: int | None,
             machine_memory: Callable[[], int | None],
             say: Callable[[UsageError], str] = str) -> dict[str, Any] | None:
        """Each host actor's rows, estimate, reservation and node (``placement.plan_hosts``);
        ``machine_memory()``: this machine's available memory, the node of a local Ray
        instance; ``say``: how the refusal of a plan that does not fit is worded."""
        options = placement.options if isinstance(placement.options, RayOptions) else RayOptions()
        hosts = int(options.shards if options.shards is not None else plan.num_hosts)
        address = options.ray_address or os.environ.get("RAY_ADDRESS") or None
        idle: list[int] = []
        if address is None:
            available = machine_memory()
            nodes = [places.machine_node(available)] if available is not None else []
            where = "this machine (the local Ray instance a run starts; Ray was not started)"
        else:

            with connection.ray_session(options.ray_address):
                ray = connection.import_ray()
                nodes = places.cluster_nodes(ray)
                where = connection.describe_cluster(ray)
                # a process already connected may hold idle actors a run would reuse
                idle = connection.idle_reservations(connection.session_token(ray))
        found = places.plan_hosts(plan, hosts, nodes, idle=idle)
        over = [h.host for h in found.hosts if limit is not None and h.reservation > limit]
        shown = found.as_dict()
        if found.refusal is not None:  # as the run's refusal would say it (--shards)
            shown["refusal"] = say(UsageError(found.refusal))
        return {"where": where, "max_memory_bytes": limit, "over_max_memory": over, **shown}

    def plan_lines(self, shown: Mapping[str, Any]) -> list[str]:
        return plan_lines(shown)

    @contextlib.contextmanager
    def lost(self, hint: str | Callable[[], str]) -> Iterator[None]:
        """A Ray host lost during the block: its one-line error, completed with ``hint``."""
        try:
            yield
        except ShardLost as exc:
            raise exc.with_resume_hint(hint if isinstance(hint, str) else hint()) from None

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """A Ray host lost during the block is said to be lost in phase ``name``
        (``checkpoint``, ``output``: what was being written when the hosts' rows were read)."""
        try:
            yield
        except ShardLost as exc:
            raise exc.in_phase(name) from None


def plan_lines(ray: Mapping[str, Any]) -> list[str]:
    """The text of a :meth:`RayTools.plan`: a line per host and per node, and whether they
    fit."""
    hosts = ray["hosts"]
    lines = [f"ray: {len(hosts)} host actor(s) on {ray['where']}; each reserves its rows' "
             f"estimate and {format_size(ray['process_bytes'])} for its process"]
    rows = [("host", "rows", "estimate", "reservation", "node")]
    for host in hosts:
        node = host["node"]
        rows.append((str(host["host"]), f"{host['rows']:,}", format_size(host["estimate_bytes"]),
                     format_size(host["reservation_bytes"]),
                     "an idle actor, reused" if host["reused"] else
                     "does not fit" if node is None else printable(node)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
              for row in rows]
    for node in ray["nodes"]:
        cpus = node["cpus"]
        note = ("no free CPU: takes no host" if cpus < 1 else
                "the driver's: tried first" if node["driver"] else "")
        lines.append(f"  node {printable(node['name'])}: {format_size(node['memory_bytes'])} of "
                     f"memory and {cpus:g} CPU{'' if cpus == 1 else 's'} available"
                     + (f" ({note})" if note else ""))
    if not ray["nodes"]:
        lines.append("  no node: this machine's available memory is unknown")
    if ray["over_max_memory"]:
        lines.append(f"  over --max-memory ({format_size(ray['max_memory_bytes'])}): host(s) "
                     + ", ".join(str(h) for h in ray["over_max_memory"]))
    lines.append("  placement: " + ("every host fits" if ray["fits"]
                                    else f"would be refused: {ray['refusal']}"))
    return lines

