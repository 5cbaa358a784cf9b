"""A Ray cluster of several nodes on this machine, for the multi-node tests.

``RayNodes(tmp_path)`` starts a head node with ``ray start --head`` and, per ``NodeSpec``, a
worker node with ``ray start --address``: each with its own ports (free ones, asked of the
system), its own temp dir under ``tmp_path``, token authentication off, in its own process
session, and stops them by process id (``SIGTERM`` to the ``ray start --block`` process, which
stops its raylet and workers; ``SIGKILL`` to the whole session after a grace period). It never runs
``ray stop``, which would stop every Ray instance of the machine.

``kill_node(i)`` kills worker node ``i`` at once (its raylet and every process of the node: what a
lost machine looks like to the driver), ``kill_head()`` the head node (the cluster's GCS);
``node_id(i)`` and ``alive_actors()`` ask the cluster. ``env`` is the environment a driver
process needs (``RAY_ADDRESS``, authentication off). A ``NodeSpec`` names a node's CPUs,
memory, custom resources and the Python it runs (``python``: another interpreter, e.g. a venv
without tpuemb).

Starting a node takes a few seconds (two nodes: about 10 s on the 2-core development machine);
the tests that need one share a module-scoped cluster where they can. Under a loaded suite a
node has been seen to need over 60 s, so a start may take up to 180 s before it is an error.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

#: The environment of every process of a test cluster: no token authentication (the machine's
#: ~/.ray/auth_token belongs to whoever else runs Ray here), no usage statistics.
QUIET_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports nobody listens on now (asked of the system)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass(frozen=True)
class NodeSpec:
    """One worker node: ``cpus``, ``memory`` bytes (None: Ray's default), custom ``resources``,
    and the ``python`` it runs (None: this interpreter)."""

    cpus: int = 2
    memory: int | None = None
    resources: dict[str, float] = field(default_factory=dict)
    python: str | None = None


@dataclass
class _Node:
    process: subprocess.Popen[bytes]
    log: Path
    port: int  # its node manager's
    killed: bool = False


class RayNodes:
    """A head node (``head_cpus`` CPUs: 0 keeps actors off it) and the worker nodes ``workers``."""

    def __init__(self, tmp: Path, workers: list[NodeSpec], *, head_cpus: int = 0,
                 head_resources: dict[str, float] | None = None,
                 object_store: int = 100 << 20, timeout: float = 180.0) -> None:
        self.tmp = tmp
        self.nodes: list[_Node] = []
        self.port = free_ports(1)[0]
        self.address = f"127.0.0.1:{self.port}"
        base = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        self._node_env = {**base, **QUIET_ENV}
        self.env = {**self._node_env, "RAY_ADDRESS": self.address}
        self._object_store = object_store
        try:
            self._start("head", sys.executable, [
                "--head", f"--port={self.port}", f"--num-cpus={head_cpus}",
                "--include-dashboard=false",
                f"--resources={json.dumps(head_resources or {})}",
            ])
            self._wait_nodes(1, timeout)
            for spec in workers:
                self.add_node(spec, timeout)
        except BaseException:
            self.stop()
            raise

    def add_node(self, spec: NodeSpec, timeout: float = 180.0, wait: bool = True) -> int:
        """Start one more worker node (e.g. in place of a killed one) and, unless ``wait`` is
        False, wait until the cluster counts it; its index (for ``kill_node``)."""
        index = len(self.nodes) - 1
        extra = [f"--address={self.address}", f"--num-cpus={spec.cpus}",
                 f"--resources={json.dumps(spec.resources)}"]
        if spec.memory is not None:
            extra.append(f"--memory={spec.memory}")
        self._start(f"worker{index}", spec.python or sys.executable, extra)
        if wait:
            self._wait_nodes(sum(node.process.poll() is None for node in self.nodes),
                             timeout)
        return index

    def _start(self, name: str, python: str, extra: list[str]) -> None:
        ports = free_ports(5)
        log = self.tmp / f"{name}.log"
        command = [
            python, "-m", "ray.scripts.scripts", "start", "--block", "--disable-usage-stats",
            f"--temp-dir={self.tmp / 'ray'}" if name == "head" else "",
            f"--node-manager-port={ports[0]}", f"--object-manager-port={ports[1]}",
            f"--dashboard-agent-listen-port={ports[2]}", f"--metrics-export-port={ports[3]}",
            f"--runtime-env-agent-port={ports[4]}",
            "--min-worker-port=0", "--max-worker-port=0",
            f"--object-store-memory={self._object_store}", *extra,
        ]
        with open(log, "wb") as out:
            process = subprocess.Popen([c for c in command if c], stdout=out,
                                       stderr=subprocess.STDOUT, env=self._node_env,
                                       cwd=self.tmp, start_new_session=True)
        self.nodes.append(_Node(process, log, ports[0]))

    def _probe(self, code: str) -> str:
        """The last line that ``code`` prints in a driver process of the cluster (this process
        may be connected to another Ray instance), after ``ray.init``."""
        probe = ("import ray, logging; ray.init(logging_level=logging.ERROR, "
                 f"log_to_driver=False); {code}")
        done = subprocess.run([sys.executable, "-c", probe], env=self.env, capture_output=True,
                              text=True, timeout=60, cwd=self.tmp)
        return (done.stdout.strip().splitlines() or [""])[-1]

    def node_id(self, index: int) -> str:
        """The Ray node id of worker node ``index`` (the cluster's node table, by its node
        manager's port)."""
        return self._probe("print([n['NodeID'] for n in ray.nodes() if n['NodeManagerPort'] == "
                           f"{self.nodes[index + 1].port}][0])")

    def alive_actors(self) -> int:
        """How many actors the cluster counts as alive (of every job)."""
        return int(self._probe("from ray._private.state import actors; "
                               "print(sum(a['State'] == 'ALIVE' for a in actors().values()))"))

    def kill_head(self) -> None:
        """Kill the head node (its GCS, raylet and every other process of it) at once."""
        self.nodes[0].killed = True
        try:
            os.killpg(self.nodes[0].process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.nodes[0].process.wait(timeout=30)

    def alive_nodes(self) -> int:
        """How many nodes the cluster counts as alive (asked in a subprocess: this process may
        be connected to another Ray instance)."""
        try:
            return int(self._probe("print(sum(n['Alive'] for n in ray.nodes()))"))
        except ValueError:
            return 0

    def _wait_nodes(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for node in self.nodes:
                if node.process.poll() is not None and not node.killed:
                    text = node.log.read_text()[-2000:]
                    raise RuntimeError(f"a Ray node exited at start: {text}")
            if self.alive_nodes() >= count:
                return
            time.sleep(0.5)
        raise RuntimeError(f"{count} Ray nodes not alive within {timeout:.0f} s: "
                           f"{self.nodes[-1].log.read_text()[-2000:]}")

    def kill_node(self, index: int) -> None:
        """Kill worker node ``index`` (every process of its session) at once."""
        self.nodes[index + 1].killed = True
        process = self.nodes[index + 1].process
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=30)

    def stop(self) -> None:
        """Stop every node: SIGTERM to each ``ray start --block``, then SIGKILL to what is left."""
        for node in reversed(self.nodes):
            if node.process.poll() is None:
                node.process.terminate()
        for node in reversed(self.nodes):
            try:
                node.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
            try:  # whatever the node started and left behind
                os.killpg(node.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.nodes.clear()
