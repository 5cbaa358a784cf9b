"""The Ray backend on a cluster of several nodes (``raynodes``: a head and two worker nodes
started with ``ray start`` on this machine, actors on the worker nodes only).

Bit identity: golden cases replayed on 4 hosts (MOD and DIV_DEFAULT) and a synthetic run
checkpointed and resumed give the local backend's bytes. Faults: a worker node killed while a
host is inside each phase of a run - start (the rows of ``--resume``), a step's reads, its
update, a checkpoint write, the output write - ends the command within its deadline with exit
status 2 and one line naming the host, the phase and the last checkpoint, with nothing
half-written; a host that stalls without dying ends at its deadline; ``--resume`` then ends
with the uninterrupted run's bytes. A host is stopped inside a phase by the fault-injection
hook ``host.STALL_ENV`` (the named call writes its process id to a file, then stalls), and the
node whose processes include it is killed; the line names that node's address and id.

Also: SIGTERM to a running driver (exit 143, tpuemb's line, no actor left); an object lost with
its node (no line of Ray's own on stderr); a driver of another Ray version (both versions
named); the head killed during a checkpoint write, on a cluster of its own (exit 2, one line
naming the head and the last checkpoint).
"""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import GOLDEN, ROOT, require_data, run_simulate

pytest.importorskip("ray", reason="Ray is not installed: pip install 'tpuemb[ray]'")

from raycluster import TWO_TABLES  # noqa: E402
from raynodes import NodeSpec, RayNodes  # noqa: E402  (after the skip)

from tpuemb_cfg.backends.ray.deadlines import DEADLINE_SCALE_ENV  # noqa: E402
from tpuemb_cfg.backends.ray.host import STALL_ENV  # noqa: E402

#: The cluster notices a dead node after a few missed health checks (about 2 s with these,
#: 15-30 s with Ray's defaults); the driver's poll of the node table reports it at once.
FAST_HEALTH_CHECKS = {"RAY_health_check_initial_delay_ms": "1000",
                      "RAY_health_check_period_ms": "500",
                      "RAY_health_check_timeout_ms": "1000",
                      "RAY_health_check_failure_threshold": "3"}
#: "No hang": the generous bound from a node's death to the command's exit.
ENDS_WITHIN = 60.0

#: Golden cases replayed on 4 hosts, and their layout (one of each).
CASES = [("tf/06_adam_lazy_bias_corrected_lr", "MOD"),
         ("tf/13_three_tables_shared_tags", "DIV_DEFAULT")]

#: The fault tests' two tables on 4 hosts.
FOUR_HOSTS = TWO_TABLES.replace("num_hosts: 2", "num_hosts: 4")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayNodes]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in FAST_HEALTH_CHECKS.items():
            patch.setenv(name, value)
        nodes = RayNodes(tmp_path_factory.mktemp("nodes"), [NodeSpec(cpus=1), NodeSpec(cpus=1)],
                         head_cpus=0)
    try:
        yield nodes
    finally:
        nodes.stop()


# ------------------------------------------------------------------------------------------------
# Bit identity


def results(backend: str, out: Path) -> None:
    """The files compared: each golden case of ``CASES`` replayed on 4 hosts in its layout,
    and a synthetic run of ``FOUR_HOSTS`` (DIV_DEFAULT) checkpointed at step 3 and resumed on
    new actors to step 5 (its tables, and its checkpoint with the run's history). Run by the
    test for ``local`` and, in a driver process on the cluster, for ``ray``."""
    import tpuemb_cfg
    from tpuemb_cfg.executor import parse_combiners
    from tpuemb_cfg.formats.npzio import atomic_write_npz, read_npz
    from tpuemb_cfg.simulate import SyntheticRun, replay

    out.mkdir(parents=True, exist_ok=True)
    for name, layout in CASES:
        case = GOLDEN / "optimizers" / name
        text = (case / "config.pbtxt").read_text().replace(
            "num_hosts: 1", f"num_hosts: 4\nsharding_strategy: {layout}")
        config = tpuemb_cfg.load(text.encode(), "text")
        arguments = shlex.split((case / "combiner.txt").read_text())
        reports: list[Any] = []

        def record(step: int, found: Any, into: list[Any] = reports) -> None:
            into.append({k: v.as_dict() for k, v in found.items()})

        arrays = replay(config, read_npz(case / "batches.npz"), read_npz(case / "init.npz"),
                        combiners=parse_combiners(arguments[1::2],
                                                  len(config.feature_descriptor)),
                        backend=backend, on_step=record)
        stem = f"{name.replace('/', '-')}-{layout}"
        atomic_write_npz(out / f"{stem}.npz", arrays)
        (out / f"{stem}.json").write_text(json.dumps(reports, sort_keys=True))
    config = tpuemb_cfg.load(FOUR_HOSTS.replace("MOD", "DIV_DEFAULT").encode(), "text")
    first = SyntheticRun(config, seed=7, backend=backend)
    first.run(3)
    saved = {key: np.asarray(value) for key, value in first.checkpoint_arrays().items()}
    first.executor.close()
    resumed = SyntheticRun(config, seed=7, backend=backend)
    resumed.restore(saved, "checkpoint")
    resumed.run(5)
    atomic_write_npz(out / "synthetic-tables.npz", resumed.executor.state_arrays())
    atomic_write_npz(out / "synthetic-checkpoint.npz", resumed.checkpoint_arrays())
    resumed.executor.close()


def test_golden_cases_and_a_resumed_run_are_bit_identical_on_two_nodes(
        cluster: RayNodes, tmp_path: Path) -> None:
    for name, _ in CASES:
        require_data(GOLDEN / "optimizers" / name)
    code = ("import sys; sys.path[:0] = [sys.argv[1]]; from pathlib import Path; "
            "from test_ray_nodes import results; results('ray', Path(sys.argv[2]))")
    done = subprocess.run([sys.executable, "-c", code, str(ROOT / "tests"), str(tmp_path / "ray")],
                          env=cluster.env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results("local", tmp_path / "local")
    names = sorted(p.name for p in (tmp_path / "local").iterdir())
    assert len(names) == 2 * len(CASES) + 2
    assert sorted(p.name for p in (tmp_path / "ray").iterdir()) == names
    for name in names:
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), \
            name


# ------------------------------------------------------------------------------------------------
# A worker node lost in each phase


def _command(config: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tpuemb_cfg", "simulate", str(config), "--steps", "4",
            "--seed", "3", "--checkpoint-every", "2", "-q", "--out-dir", str(out), "--backend",
            "ray", *extra]


def _driver(cluster: RayNodes, command: list[str], **env: str) -> subprocess.Popen[str]:
    """The command as a driver process of the cluster, its hosts spread over the nodes."""
    return subprocess.Popen(command, env={**cluster.env, "TPUEMB_RAY_PLACEMENT": "spread", **env},
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _stalled(mark: Path, driver: subprocess.Popen[str], seconds: float = 120.0) -> int:
    """The process id the stalled host wrote to ``mark``, once it is there."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if mark.exists() and mark.read_text():
            return int(mark.read_text())
        if driver.poll() is not None:
            raise AssertionError(f"the run ended before the stall: {driver.communicate()}")
        time.sleep(0.05)
    driver.kill()
    raise AssertionError("the host never reached the stalled call")


def _node_of(cluster: RayNodes, pid: int) -> int:
    """The index of the worker node whose ``ray start`` process ``pid`` descends from."""
    starts = {node.process.pid: index for index, node in enumerate(cluster.nodes[1:])}
    while pid > 1:
        if pid in starts:
            return starts[pid]
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the parent's
    raise AssertionError("the stalled process belongs to no worker node")


def _lose_node_in(cluster: RayNodes, tmp: Path, command: list[str], stall: str,
                  named: bool = False, **env: str) -> tuple[str, float]:
    """Run ``command`` until host ``stall`` (``HOST:METHOD:NTH``) stalls, kill its node, and
    return the command's one line of output and the seconds from the kill to its exit (exit
    status 2); a new node takes the lost one's place. ``named``: the line names the node by
    the start of its id, as the cluster's node table has it."""
    mark = tmp / f"stalled-{stall.replace(':', '-')}"
    mark.unlink(missing_ok=True)
    driver = _driver(cluster, command, **{STALL_ENV: f"{stall}:{mark}"}, **env)
    node = _node_of(cluster, _stalled(mark, driver))
    node_id = cluster.node_id(node) if named else ""
    cluster.kill_node(node)
    killed = time.monotonic()
    try:
        stdout, stderr = driver.communicate(timeout=ENDS_WITHIN + 60)
    except subprocess.TimeoutExpired:
        driver.kill()
        raise AssertionError("the driver hung after its node was killed") from None
    ended = time.monotonic() - killed
    cluster.add_node(NodeSpec(cpus=1), wait=False)  # joins while the next run starts
    assert driver.returncode == 2, (stdout, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert not stdout.strip(), stdout
    if named:
        assert len(node_id) == 56, node_id
        assert f" id {node_id[:8]}) died during " in lines[0], (node_id, lines[0])
    return lines[0], ended


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The configuration, and the files of the uninterrupted run on the local backend."""
    tmp = tmp_path_factory.mktemp("runs")
    config = tmp / "four.pbtxt"
    config.write_text(FOUR_HOSTS.replace("num_hosts: 4", "num_hosts: 2"))  # one on each node
    code, output = run_simulate(str(config), "--steps", "4", "--seed", "3", "--checkpoint-every",
                                "2", "-q", "--out-dir", str(tmp / "local"))
    assert code == 0, output
    return {"config": config, "local": tmp / "local", "ray": tmp / "ray", "tmp": tmp}


def _only_the_checkpoint(out: Path) -> None:
    """Nothing half-written: the checkpoint alone, no output, no temporary file."""
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.npz"]


HOST = r"host 1 of 2 \(its Ray actor, node [0-9.]+ id [0-9a-f]{8}\) died during "


def test_a_node_lost_in_each_phase_ends_in_one_line_then_resume_is_identical(
        cluster: RayNodes, runs: dict[str, Path]) -> None:
    config, out, tmp = runs["config"], runs["ray"], runs["tmp"]
    checkpoint = f"the last checkpoint is {out / 'checkpoint.npz'}"
    # The checkpoint of step 4 (the 5th read of each host: 4 arrays a checkpoint).
    line, ended = _lose_node_in(cluster, tmp, _command(config, out), "1:read:5", named=True)
    assert re_match(HOST + r"a checkpoint write, while sending its rows of ", line)
    assert f"{checkpoint} (step 2): run the same command with --resume" in line
    assert ended < ENDS_WITHIN
    _only_the_checkpoint(out)
    saved = (out / "checkpoint.npz").read_bytes()
    resume = _command(config, out, "--resume")
    phases = [("1:put:1", "the start, while receiving its rows",
               f"the checkpoint {out / 'checkpoint.npz'} is as it was"),
              ("1:gather:1", "a step's reads, while reading rows of table 'b' \\(or, before "
               "it in the same call, reading rows of table 'a'\\)", f"{checkpoint} (step 2)"),
              ("1:update_kept:1", "a step's update, while updating table 'b' \\(or, before it "
               "in the same call, updating table 'a'\\)", f"{checkpoint} (step 2)")]
    for stall, where, hint in phases:
        line, ended = _lose_node_in(cluster, tmp, resume, stall)
        assert re_match(HOST + where, line), (stall, line)
        assert hint in line, line
        assert ended < ENDS_WITHIN, stall
        _only_the_checkpoint(out)
        assert (out / "checkpoint.npz").read_bytes() == saved
    # The output write of a resumed run (its checkpoint of step 4 is the 1st to 4th read).
    other = tmp / "ray-output"
    other.mkdir()
    shutil.copy(out / "checkpoint.npz", other)
    line, ended = _lose_node_in(cluster, tmp, _command(config, other, "--resume"), "1:read:5")
    assert re_match(HOST + r"the output write, while sending rows of ", line), line
    assert f"the last checkpoint is {other / 'checkpoint.npz'} (step 4)" in line
    assert ended < ENDS_WITHIN
    _only_the_checkpoint(other)
    # A host that stalls without dying: the deadline (base 60 s, scaled to 3 s) ends the wait.
    start = time.monotonic()
    driver = _driver(cluster, resume, **{STALL_ENV: f"0:gather:1:{tmp / 'silent'}",
                                         DEADLINE_SCALE_ENV: "0.05"})
    stdout, stderr = driver.communicate(timeout=ENDS_WITHIN + 60)
    assert driver.returncode == 2, (stdout, stderr)
    assert time.monotonic() - start < ENDS_WITHIN
    assert re_match(r"host 0 of 2 \(its Ray actor, node [0-9.]+ id [0-9a-f]{8}\) did not answer "
                    r"within 3 s during a step's reads, while reading rows of table 'b' \(or, "
                    r"before it in the same call, reading rows of table 'a'\) \(the deadline of "
                    rf"this work; {DEADLINE_SCALE_ENV}=2 doubles every deadline\)", stderr), stderr
    _only_the_checkpoint(out)
    # Resumed on the cluster: the uninterrupted run's bytes.
    driver = _driver(cluster, resume)
    stdout, stderr = driver.communicate(timeout=300)
    assert driver.returncode == 0, stderr
    for name in ("tables.npz", "checkpoint.npz"):
        assert (out / name).read_bytes() == (runs["local"] / name).read_bytes(), name


# ------------------------------------------------------------------------------------------------
# SIGTERM, Ray's own log lines, a lost head

#: tpuemb's line for a command ended by SIGTERM (docs/cli.md: exit status 143).
STOPPED = "tpuemb: stopped by SIGTERM; no output file was left half-written\n"


def _no_actors_left(cluster: RayNodes) -> int:
    """The actors the cluster counts as alive once a driver is gone (a job's actors end with
    it; the cluster takes a moment to end them), waited for up to 60 s."""
    end = time.monotonic() + 60
    while (alive := cluster.alive_actors()) and time.monotonic() < end:
        time.sleep(0.5)
    return alive


def test_sigterm_ends_a_run_with_status_143_and_tpuemb_line_leaving_no_actors(
        cluster: RayNodes, runs: dict[str, Path]) -> None:
    """``kill -TERM`` (what ``ray job stop`` sends the driver) while a host works: tpuemb's
    line and 143, not Ray's ``sys.exit(15)`` and its C++ core's stack dump; the actors end."""
    tmp = runs["tmp"]
    out, mark = tmp / "terminated", tmp / "stalled-sigterm"
    driver = _driver(cluster, _command(runs["config"], out), **{STALL_ENV: f"1:gather:1:{mark}"})
    _stalled(mark, driver)
    driver.send_signal(signal.SIGTERM)
    stdout, stderr = driver.communicate(timeout=ENDS_WITHIN)
    assert (driver.returncode, stderr, stdout) == (143, STOPPED, "")
    assert not out.exists() or not list(out.iterdir())
    assert _no_actors_left(cluster) == 0


#: A driver that joins the cluster through tpuemb's ``connect`` (RAY_ADDRESS) and owns an object
#: (8 MiB: in the object store of the node its task ran on) until the test kills that node, then
#: reads it: Ray recovers it by running its task again on another node, and the driver prints
#: what it got.
LOST_OBJECT = """
import os, sys
import numpy as np
from tpuemb_cfg.backends.ray.connection import connect, import_ray
connect()
ray = import_ray()
@ray.remote(num_cpus=1, num_returns=2, scheduling_strategy="SPREAD")
def rows():
    return os.getpid(), np.ones(1 << 20)
pid, block = rows.remote()
print(ray.get(pid), flush=True)
ray.wait([block], fetch_local=False)
sys.stdin.readline()
print(float(ray.get(block, timeout=120).sum()), flush=True)
"""


def test_ray_logs_no_line_of_its_own_when_a_node_with_an_object_is_lost(
        cluster: RayNodes) -> None:
    """Ray's C++ core logs "Attempting to recover 1 lost objects ..." to the driver's stderr
    when the node holding an object it owns is lost; a process joined by tpuemb's ``connect``
    keeps it off (the storage reports a lost host in its own one line)."""
    driver = subprocess.Popen([sys.executable, "-c", LOST_OBJECT], env=cluster.env, cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    assert driver.stdout is not None and driver.stdin is not None
    pid = int(driver.stdout.readline())
    cluster.kill_node(_node_of(cluster, pid))
    cluster.add_node(NodeSpec(cpus=1), wait=False)  # where the task runs again, if need be
    driver.stdin.write("\n")
    driver.stdin.flush()
    stdout, stderr = driver.communicate(timeout=ENDS_WITHIN + 60)
    assert driver.returncode == 0, stderr
    assert stdout.strip() == str(float(1 << 20))  # the object, made again
    assert stderr == ""


def test_a_lost_head_ends_in_one_line_naming_it_and_the_last_checkpoint(
        tmp_path_factory: pytest.TempPathFactory, runs: dict[str, Path]) -> None:
    """The head node (the cluster's GCS) killed during a checkpoint write: exit 2 within the
    deadline, one line naming the head's address and the last checkpoint (intact), instead of
    Ray's "Failed to connect to GCS within 60 seconds" and exit 1. A cluster of its own (the
    module's keeps its head): a head and one worker node."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in FAST_HEALTH_CHECKS.items():
            patch.setenv(name, value)
        # (a short path: the Unix sockets of a node live under it)
        nodes = RayNodes(tmp_path_factory.mktemp("head"), [NodeSpec(cpus=2)], head_cpus=0)
    try:
        out, mark = nodes.tmp / "out", nodes.tmp / "stalled"
        # The checkpoint of step 4 (the 5th read of host 1): the one of step 2 is written.
        driver = _driver(nodes, _command(runs["config"], out), **{STALL_ENV: f"1:read:5:{mark}"})
        _stalled(mark, driver)
        nodes.kill_head()
        killed = time.monotonic()
        stdout, stderr = driver.communicate(timeout=ENDS_WITHIN + 60)
        ended = time.monotonic() - killed
    finally:
        nodes.stop()
    assert driver.returncode == 2, (stdout, stderr)
    assert not stdout
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert stderr.startswith(f"the Ray cluster's head {nodes.address} (its GCS) stopped "
                             "answering during a checkpoint write, while host 1 of 2 was "), stderr
    assert (f"the last checkpoint is {out / 'checkpoint.npz'} (step 2): run the same command "
            "with --resume") in stderr
    assert ended < ENDS_WITHIN
    _only_the_checkpoint(out)


#: ``tpuemb`` in a process whose Ray says it is 2.0.0 (the version Ray checks on joining).
OLD_RAY = ("import sys, ray; ray.__version__ = '2.0.0'; from tpuemb_cfg.cli import main; "
           "sys.argv[0] = 'tpuemb'; main()")


def test_joining_a_cluster_of_another_ray_version_names_both_versions(
        cluster: RayNodes, runs: dict[str, Path]) -> None:
    import platform

    import ray

    out = runs["tmp"] / "mismatch"
    done = subprocess.run([sys.executable, "-c", OLD_RAY, *_command(runs["config"], out)[3:]],
                          env=cluster.env, cwd=ROOT, capture_output=True, text=True,
                          timeout=ENDS_WITHIN)
    python = platform.python_version()
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == (
        f"RAY_ADDRESS {cluster.address}: cannot join the Ray cluster there (version mismatch: "
        f"the cluster runs Ray {ray.__version__} on Python {python}, this process Ray 2.0.0 on "
        f"Python {python}; run tpuemb with the cluster's Ray and Python versions (e.g. on one of "
        "its nodes, or as a Ray Job))\n")
    assert not out.exists()


def re_match(pattern: str, text: str) -> bool:
    import re

    return re.search(pattern, text) is not None
