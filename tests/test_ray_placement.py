"""Honest memory and placement of the Ray host actors (issue 26, item 4).

The packing and the refusals are pure functions over plain node records, checked against
numbers worked out by hand (MiB units); then, on the shared local Ray instance
(``raycluster``): the nodes as Ray reports them, a refusal through the real ``RayStorage``
before any actor starts, ``--dry-run``'s per-host plan (on this machine and on the instance)
and the warning of ``auto``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, run_simulate
from raycluster import ray, ray_cluster  # noqa: F401  (the fixture)

import tpuemb_cfg
from tpuemb_cfg.backends.ray import connection
from tpuemb_cfg.backends.ray.placement import (
    PROCESS_BYTES,
    Node,
    cluster_nodes,
    machine_node,
    pack,
    plan_placement,
    reservation,
    reuse,
    suggest_shards,
)
from tpuemb_cfg.backends.ray.storage import RayStorage
from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.base.units import format_size
from tpuemb_cfg.simulate import Executor

MiB = 1 << 20
QUICKSTART = str(ROOT / "examples" / "quickstart.pbtxt")


def even(total_mib: int) -> Any:
    """``estimates_of`` for tables of ``total_mib`` MiB split evenly over n hosts."""
    return lambda n: [total_mib * MiB // n] * n


# ------------------------------------------------------------------------------------------------
# Pure: the reservation, the packing, the reuse of idle actors


def test_a_reservation_is_the_rows_and_the_measured_process() -> None:
    assert PROCESS_BYTES == 300 * MiB
    assert reservation(100 * MiB) == 400 * MiB
    assert reservation(0) == reservation(64 * MiB) == 364 * MiB  # at least 64 MiB of rows


def test_first_fit_decreasing_tries_the_driver_then_the_most_memory_and_needs_a_cpu() -> None:
    nodes = [Node("a", 1000 * MiB, 2, driver=True), Node("b", 1200 * MiB, 2),
             Node("c", 5000 * MiB, 0)]  # c: no free CPU, Ray places nothing there
    # largest first: host 3 (500) -> a (500 left), 0 -> a (100 left), 1 -> b (800), 2 -> b (400)
    assert pack([400 * MiB, 400 * MiB, 400 * MiB, 500 * MiB], nodes) == [0, 1, 1, 0]
    # hosts 4 and 5 (500 each) fill a, hosts 0-2 fill b (1200), host 3 finds no room (c has
    # 5000 MiB free but no CPU)
    assert pack([400 * MiB] * 4 + [500 * MiB] * 2, nodes) == [1, 1, 1, None, 0, 0]


def test_hosts_take_idle_actors_as_the_connection_hands_them_out() -> None:
    # host 0 (400) takes the first idle actor holding 400+ (450); host 1 (500) the 600;
    # host 2 (400): only the 300 is left, too small
    assert reuse([400, 500, 400], [450, 300, 600]) == [0, 2, None]
    nodes = [Node("a", 700 * MiB, 2, driver=True)]
    idle = [600 * MiB]
    plan = plan_placement([300 * MiB, 300 * MiB], nodes, idle=idle)
    assert plan.fits and [h.reused for h in plan.hosts] == [True, False]
    assert [h.node for h in plan.hosts] == [None, 0]
    assert not plan_placement([300 * MiB, 300 * MiB], nodes).fits  # 1200 MiB > 700 MiB


def test_every_hosts_estimate_at_once_is_each_hosts_estimate() -> None:
    from tpuemb_cfg.backends.ray.host import shard_bytes, shard_bytes_all
    from tpuemb_cfg.session import prepare

    plan = prepare(QUICKSTART).plan
    for hosts in (1, 2, 3, 7, 64):
        assert shard_bytes_all(plan, hosts) == [shard_bytes(plan, h, hosts)
                                                for h in range(hosts)]
    # 3 hosts: user 6,667/6,667/6,666 rows x 128 B, item 16,667/16,667/16,666 x 192 B,
    # category 334/333/333 x 32 B
    assert shard_bytes_all(plan, 3) == [6_667 * 128 + 16_667 * 192 + 334 * 32,
                                        6_667 * 128 + 16_667 * 192 + 333 * 32,
                                        6_666 * 128 + 16_666 * 192 + 333 * 32]


def test_a_process_reads_its_own_resident_memory() -> None:
    import numpy as np

    from tpuemb_cfg.backends.ray.host import Shard

    before = Shard().memory()
    assert 0 < before["uss"] <= before["pss"] <= before["rss"] and before["rows"] == 0
    block = np.ones(64 * MiB, dtype=np.uint8)  # 64 MiB of this process's own, touched pages
    after = Shard().memory()
    # Within a few MiB below too: in the suite's long-lived process other threads (Ray's, the
    # fork server's readers) may free pages or share them with a child meanwhile (seen: 63.97 MiB).
    for key in ("rss", "uss"):
        assert 60 * MiB <= after[key] - before[key] < 80 * MiB, (key, before, after)
    del block


# ------------------------------------------------------------------------------------------------
# Pure: the refusals, each naming its limit and its fix


def test_a_host_larger_than_any_node_is_told_how_many_hosts_fit() -> None:
    nodes = [Node("10.0.0.1", 2048 * MiB, 2, driver=True), Node("10.0.0.2", 2048 * MiB, 2)]
    # one host: 3072 MiB of rows + 300 = 3372 MiB > 2048 MiB. Two hosts: 1536 + 300 = 1836 each,
    # one per node; at most (4096 - 3072) // 300 = 3 hosts fit the total
    assert suggest_shards(1, nodes, even(3072)) == 2
    plan = plan_placement([3072 * MiB], nodes, estimates_of=even(3072))
    assert plan.refusal is not None
    assert str(UsageError(plan.refusal)) == (
        "host 0 of 1 needs 3.3 GiB (3 GiB for its rows of every table and slot, with a step's "
        "working arrays, and 300 MiB for its process), more than any Ray node has available "
        "(the most: 2 GiB, on 10.0.0.1); split the tables over more hosts (shards 2 fits this "
        "cluster) or use machines with more memory")
    # two nodes of 1700 MiB: 3372 MiB fit in total, not on one node; 2 hosts of 1836 MiB fit
    # neither, and more than (3400 - 3072) // 300 = 1 host exceed the total. None fits
    small = [Node("10.0.0.1", 1700 * MiB, 2), Node("10.0.0.2", 1700 * MiB, 2)]
    alone = plan_placement([3072 * MiB], small, estimates_of=even(3072))
    assert alone.refusal == (
        "host 0 of 1 needs 3.3 GiB (3 GiB for its rows of every table and slot, with a step's "
        "working arrays, and 300 MiB for its process), more than any Ray node has available "
        "(the most: 1.7 GiB, on 10.0.0.1); no number of hosts fits this cluster: use machines "
        "with more memory")
    # the total short as well: that is what to fix first (more hosts would need more)
    short = plan_placement([3072 * MiB], nodes[:1], estimates_of=even(3072))
    assert str(UsageError(short.refusal or "")) == (
        "the 1 new host actor(s) need 3.3 GiB (3 GiB of rows and 1 x 300 MiB for their "
        "processes), more than the Ray cluster has available (2 GiB on 1 node(s) with a free "
        "CPU): 1.3 GiB is missing; add nodes with 1.3 GiB more memory, with room for 3.3 GiB on "
        "one node (host 0: the largest node has 2 GiB), or lower the memory per host (fewer "
        "rows, a smaller dimension, an optimizer with fewer slots)")


def test_hosts_that_each_fit_but_not_together_are_told_what_is_missing() -> None:
    nodes = [Node("a", 2048 * MiB, 2, driver=True), Node("b", 1536 * MiB, 2)]
    # 4 hosts of 600 MiB: 4 x 900 = 3600 MiB > 3584 MiB available: 16 MiB missing.
    # 3 hosts (800 + 300 each) pack 2 on a, 1 on b, the third nowhere (b has 436 left);
    # 2 hosts (1500 each): one on each node
    assert suggest_shards(4, nodes, even(2400)) == 2
    plan = plan_placement([600 * MiB] * 4, nodes, estimates_of=even(2400))
    assert str(UsageError(plan.refusal or "")) == (
        "the 4 new host actor(s) need 3.5 GiB (2.3 GiB of rows and 4 x 300 MiB for their "
        "processes), more than the Ray cluster has available (3.5 GiB on 2 node(s) with a free "
        "CPU): 16 MiB is missing; shards 2 fits: fewer processes, or add nodes with 16 MiB more "
        "memory, or lower the memory per host (fewer rows, a smaller dimension, an optimizer "
        "with fewer slots)")


def test_hosts_that_fit_in_total_but_not_one_per_node_are_told_so() -> None:
    nodes = [Node("a", 1000 * MiB, 2, driver=True), Node("b", 1000 * MiB, 2)]
    # 3 hosts of 300 MiB need 600 each, 1800 <= 2000 in all; a and b take one each (400
    # left on both), host 2 finds no room. 2 hosts of 450 + 300 = 750 pack one per node
    plan = plan_placement([300 * MiB] * 3, nodes, estimates_of=even(900))
    assert [h.node for h in plan.hosts] == [0, 1, None]
    assert str(UsageError(plan.refusal or "")) == (
        "the 3 new host actor(s) need 1.8 GiB and the Ray cluster has 2 GiB available, but not "
        "in one piece per host: placed largest first, host 2 of 3 (600 MiB: 300 MiB of rows and "
        "300 MiB for its process) finds no node with the room left (the most left: 400 MiB); "
        "shards 2 packs, or add a node with 600 MiB of memory")


def test_nodes_without_a_free_cpu_take_no_host() -> None:
    plan = plan_placement([MiB], [Node("head", 64 << 30, 0, driver=True)])
    assert plan.refusal == (
        "no Ray node has a free CPU to place a host actor on (1 alive node(s); Ray places an "
        "actor only where a CPU is free, though it holds none while it runs): add a node with "
        "CPUs, or end what holds them")


def test_this_machine_offers_what_a_new_local_instance_leaves_to_actors() -> None:
    node = machine_node(10 << 30, cpus=2)  # 30% of it goes to the object store
    assert (node.memory, node.cpus, node.driver) == (7 << 30, 2.0, True)


# ------------------------------------------------------------------------------------------------
# On the local Ray instance


pytest_ray = pytest.mark.usefixtures("ray_cluster")


@pytest_ray
def test_the_nodes_are_what_ray_reports_available() -> None:
    nodes = cluster_nodes(ray)
    assert len(nodes) == 1
    node = nodes[0]
    assert node.memory == int(ray.available_resources()["memory"])
    assert node.driver and node.node_id == ray.get_runtime_context().get_node_id()
    assert node.cpus == ray.available_resources().get("CPU", 0) == 2


def _table(vocabulary: int, hosts: int) -> Any:
    text = f"""table_descriptor {{ name: "big" vocabulary_size: {vocabulary} dimension: 8
      optimization_parameters {{ adagrad {{ }} learning_rate {{ constant: 0.1 }} }} }}
      feature_descriptor {{ name: "f" table_id: 0 input_shape: 16 }}
      mode: TRAINING num_hosts: {hosts} num_tensor_cores: 1"""
    return tpuemb_cfg.load(text.encode(), "text")


@pytest_ray
def test_the_storage_refuses_what_the_node_holds_one_host_at_a_time_but_not_two(
        monkeypatch: pytest.MonkeyPatch) -> None:
    available = int(ray.available_resources()["memory"])
    # 2 hosts, each 60% of the node: one fits, two do not. A row with its accumulator: 64 B.
    rows = int(available * 0.6) // 64
    need = 2 * (rows * 64 + PROCESS_BYTES)

    def no_actor(self: RayStorage, *args: Any) -> None:
        raise AssertionError("an actor was started before the placement check")

    monkeypatch.setattr(RayStorage, "_start", no_actor)
    with pytest.raises(UsageError) as refused:
        Executor(_table(2 * rows, 2), backend="ray")
    assert str(refused.value) == (
        f"the 2 new host actor(s) need {format_size(need)} ({format_size(2 * rows * 64)} of "
        f"rows and 2 x 300 MiB for their processes), more than the Ray cluster has available "
        f"({format_size(available)} on 1 node(s) with a free CPU): "
        f"{format_size(need - available)} is missing; add nodes with "
        f"{format_size(need - available)} more memory, or lower the memory per host (fewer "
        "rows, a smaller dimension, an optimizer with fewer slots)")


@pytest_ray
def test_max_memory_counts_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # 1000 x 8 float32 and the accumulator: 64,000 bytes of rows, plus the process
    monkeypatch.setattr(RayStorage, "_start", lambda self, *a: None)
    with pytest.raises(UsageError, match=r"host 0 of 1 would need 300\.1 MiB \(62\.5 KiB for "
                                         r"its rows .* and 300 MiB for its process\), more than "
                                         r"the memory limit of one actor \(300 MiB\); split the "
                                         r"tables over more hosts \(shards 2 fits\)"):
        Executor(_table(1000, 1), backend="ray", max_memory=PROCESS_BYTES + 40_000)
    with pytest.raises(UsageError, match="no number of hosts fits: a host's process alone"):
        Executor(_table(1000, 1), backend="ray", max_memory=PROCESS_BYTES)


def _dry_run(*args: str) -> dict[str, Any]:
    code, output = run_simulate(QUICKSTART, "--backend", "ray", "--shards", "2", "--dry-run",
                                "--json", *args)
    assert code == 0, output
    plan: dict[str, Any] = json.loads(output)["ray"]
    return plan


def _quickstart_hosts(node: str) -> list[dict[str, Any]]:
    # per host: user 10,000 x 16 (adagrad: 2 arrays), item 25,000 x 16 (lazy adam: 3),
    # category 500 x 8 (sgd: 1) -> 1,280,000 + 4,800,000 + 16,000 bytes
    # (5.8 MiB: each reserves the 64 MiB floor of rows)
    return [{"host": h, "rows": 35_500, "estimate_bytes": 6_096_000,
             "reservation_bytes": 364 * MiB, "node": node, "reused": False}
            for h in range(2)]


def test_dry_run_plans_on_this_machine_without_starting_ray(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr("tpuemb_cfg.commands.simulate.available_memory", lambda: 10 << 30)
    started = ray.is_initialized()
    plan = _dry_run()
    assert ray.is_initialized() == started  # Ray was neither started nor stopped
    assert plan["nodes"] == [{"name": "this machine", "memory_bytes": 7 << 30,
                              "cpus": float(__import__("os").cpu_count()), "driver": True}]
    assert plan["hosts"] == _quickstart_hosts("this machine")
    assert plan["fits"] and plan["refusal"] is None
    # too little memory: the run's own refusal, shown, nothing run (exit 0)
    monkeypatch.setattr("tpuemb_cfg.commands.simulate.available_memory", lambda: 1000 * MiB)
    code, output = run_simulate(QUICKSTART, "--backend", "ray", "--shards", "2", "--dry-run")
    assert code == 0, output
    # 1000 MiB - 300 MiB for the object store = 700 MiB: one host of 364 MiB fits, not two
    # (728 MiB: 28 MiB missing)
    assert ("placement: would be refused: the 2 new host actor(s) need 728 MiB (128 MiB of "
            "rows (64 MiB at least per host) and 2 x 300 MiB for their processes), more than "
            "the Ray cluster has available (700 MiB on 1 node(s) with a free CPU): 28 MiB is "
            "missing; --shards 1 fits: fewer processes, or") in output
    assert "  0     35,500  5.8 MiB   364 MiB      this machine" in output
    assert "  1     35,500  5.8 MiB   364 MiB      does not fit" in output


@pytest_ray
def test_dry_run_plans_on_the_cluster_it_joins(monkeypatch: pytest.MonkeyPatch) -> None:
    # the idle actors earlier tests of the session left: none, then one of 400 MiB
    monkeypatch.setattr(connection, "idle_reservations", lambda token: [])
    before = int(ray.available_resources()["memory"])
    plan = _dry_run("--ray-address", "auto")
    here = ray.util.get_node_ip_address()
    assert plan["nodes"] == [{"name": here, "memory_bytes": before, "cpus": 2.0,
                              "driver": True}]
    assert plan["hosts"] == _quickstart_hosts(here)
    assert ray.get_runtime_context().gcs_address in plan["where"]
    assert int(ray.available_resources()["memory"]) == before  # no actor started
    monkeypatch.setattr(connection, "idle_reservations", lambda token: [400 * MiB])
    code, output = run_simulate(QUICKSTART, "--backend", "ray", "--shards", "2", "--dry-run",
                                "--ray-address", "auto")
    assert code == 0, output
    assert "  0     35,500  5.8 MiB   364 MiB      an idle actor, reused" in output
    assert f"  1     35,500  5.8 MiB   364 MiB      {here}" in output


# ------------------------------------------------------------------------------------------------
# auto: joins, with a warning naming the cluster


@pytest.fixture
def unconnected_once(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """After a call of the returned function, ``connect`` sees no connection once and its
    ``ray.init`` joins nothing: the shared instance stays, and is the cluster ``auto`` finds."""
    answers: list[bool] = []
    connected = ray.is_initialized
    monkeypatch.setattr(ray, "is_initialized", lambda: answers.pop() if answers else connected())
    monkeypatch.setattr(ray, "init", lambda **kwargs: None)
    monkeypatch.setattr(connection, "disconnect", lambda: None)
    return lambda: answers.append(False)


@pytest_ray
def test_auto_warns_with_the_cluster_joined(monkeypatch: pytest.MonkeyPatch,
                                            unconnected_once: Callable[[], None]) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    memory = format_size(int(ray.cluster_resources()["memory"]))
    address = ray.get_runtime_context().gcs_address
    unconnected_once()
    with pytest.warns(connection.JoinedRunningCluster) as caught:
        assert connection.connect("auto")
    assert str(caught[0].message) == (
        f"the Ray address 'auto' joined the Ray cluster at {address} (1 node, 2 CPUs, {memory} "
        "of memory for actors), the one running on this machine; give its address to join it "
        "on purpose, or no address (and no RAY_ADDRESS) for a Ray instance of the run's own")
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    unconnected_once()
    with pytest.warns(connection.JoinedRunningCluster, match=r"^RAY_ADDRESS=auto joined"):
        connection.connect()
    unconnected_once()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert connection.connect(address)  # its own address: joined on purpose, silently
    unconnected_once()
    code, output = run_simulate(QUICKSTART, "--backend", "ray", "--dry-run")
    assert code == 0, output
    assert output.startswith(f"warning: RAY_ADDRESS=auto joined the Ray cluster at {address} "
                             "(1 node, 2 CPUs, ")
    assert f"ray: 1 host actor(s) on the Ray cluster at {address} (1 node" in output


def test_the_dry_run_plan_leaves_nothing_behind(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.chdir(tmp_path)
    code, output = run_simulate(QUICKSTART, "--backend", "ray", "--dry-run")
    assert code == 0, output
    assert list(tmp_path.iterdir()) == []


@pytest_ray
def test_idle_actors_that_cannot_serve_are_ended_before_new_ones_start() -> None:
    """Actors kept by a closed executor hold their reservations; a storage that cannot use them
    (here: another runtime_env) ends them before starting its own, so that its actors never
    wait for memory the idle ones hold."""
    from tpuemb_cfg.backends.ray.options import RayOptions
    from tpuemb_cfg.executor.core import Executor as CoreExecutor
    from tpuemb_cfg.executor.options import Placement, RunOptions
    from tpuemb_cfg.session import prepare

    config = _table(1000, 2)
    first = Executor(config, backend="ray")
    kept = list(first.storage._actors)  # type: ignore[attr-defined]
    first.close()
    token = connection.session_token(ray)
    assert len(connection.idle_reservations(token, "null")) >= 2
    second = CoreExecutor(prepare(config), RunOptions(), Placement(
        "ray", RayOptions(runtime_env={"env_vars": {"TPUEMB_TEST_KIND": "other"}})))
    assert connection.idle_reservations(token, "null") == []
    for actor in kept:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.where.remote(), timeout=60)
    second.close()
