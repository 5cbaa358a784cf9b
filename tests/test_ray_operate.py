"""Operating tpuemb on a Ray cluster (issue 26, item 5): as a Ray Job, from KubeRay, via ray://.

**Ray Jobs.** ``ray job submit -- tpuemb simulate ...`` needs Ray's dashboard (``ray[default]``),
which the ``test`` extra does not install (README, "Dependencies"). What a job does to its
entrypoint is small and read here from Ray 2.60's sources
(``ray/dashboard/modules/job/job_supervisor.py``: ``JobSupervisor.run``,
``_get_driver_env_vars``, ``_exec_entrypoint``; ``ray/_private/runtime_env/working_dir.py``):
the supervisor actor runs in the job's ``working_dir`` (unpacked on the head node, its worker
started with ``cd DIR &&`` and DIR first on ``PYTHONPATH``), and starts the entrypoint with
``shell=True`` in a new session, in that folder, with the supervisor's environment minus Ray's
internal flags (``RAY_JOB_ID`` among them), plus ``RAY_ADDRESS`` (the cluster's GCS address),
``RAY_JOB_CONFIG_JSON_ENV_VAR`` (the job's runtime_env and metadata, which the driver's
``ray.init`` merges) and ``PYTHONUNBUFFERED=1``, its standard output and error appended to one
log file after a ``Running entrypoint for job ...`` line. These tests do exactly that on a
``tests/raynodes.py`` cluster (``ray start --head``), with the job's ``env_vars`` in the
environment as the supervisor has them, and check relative paths, outputs, the log lines and
the exit codes.

**KubeRay.** ``examples/ray/rayjob.yaml`` is parsed (pyyaml ships with Ray): its fields against
KubeRay's ``ray.io/v1`` types, its entrypoint through tpuemb's own option parser and as a
``--dry-run``, its pods' memory against docs/scale.md's rule.

**ray://** without ``ray[client]``: one line, before any connection is tried.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # ships with Ray (a dependency of ray itself)
from conftest import EXAMPLES, ROOT, run_cli
from raynodes import RayNodes

JOB = "raysubmit_tpuemb0000000001"
#: The job's runtime_env: what ``ray job submit --runtime-env-json`` would give.
RUNTIME_ENV = {"env_vars": {"TPUEMB_LOG_EVERY": "3600"}}
PYTHON = shlex.quote(sys.executable)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayNodes]:
    """A head node of 2 CPUs, where the job's driver and its host actors run (what a job does
    on the nodes is the other multi-node tests' business: here, what it does to the process)."""
    nodes = RayNodes(tmp_path_factory.mktemp("operate"), [], head_cpus=2)
    try:
        yield nodes
    finally:
        nodes.stop()


def _working_dir(tmp_path: Path) -> Path:
    """Where Ray unpacks a job's working_dir on the head node (its layout), with the job's
    files: the configuration."""
    folder = tmp_path / "session" / "runtime_resources" / "working_dir_files" / "_ray_pkg_0a1b"
    folder.mkdir(parents=True)
    shutil.copy(EXAMPLES / "quickstart.pbtxt", folder / "model.pbtxt")
    return folder


def _job_environment(cluster: RayNodes, working_dir: Path) -> dict[str, str]:
    """The entrypoint's environment as Ray's JobSupervisor makes it (module docstring); tpuemb
    on ``PYTHONPATH`` stands for its installation in the cluster's image."""
    from ray._private import ray_constants

    env = {k: v for k, v in cluster.env.items() if k not in ray_constants.RAY_INTERNAL_FLAGS}
    env.update(RUNTIME_ENV["env_vars"])  # the supervisor is a worker of the job's runtime_env
    env["PYTHONPATH"] = os.pathsep.join([str(working_dir), str(ROOT),
                                         *filter(None, [os.environ.get("PYTHONPATH")])])
    env["RAY_JOB_CONFIG_JSON_ENV_VAR"] = json.dumps(
        {"runtime_env": RUNTIME_ENV, "metadata": {"job_submission_id": JOB}})
    env["RAY_ADDRESS"] = cluster.address
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _run_entrypoint(cluster: RayNodes, working_dir: Path, entrypoint: str,
                    log: Path) -> int:
    """Run ``entrypoint`` as Ray's job supervisor does; its exit status (the job's)."""
    with open(log, "a") as out:
        out.write(f"Running entrypoint for job {JOB}: {entrypoint}\n")
        out.flush()
        process = subprocess.Popen(entrypoint, shell=True, start_new_session=True, stdout=out,
                                   stderr=subprocess.STDOUT, cwd=working_dir,
                                   env=_job_environment(cluster, working_dir))
    try:
        return process.wait(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise


def _stamped(text: str) -> list[str]:
    """The progress lines of a log, without their time stamps."""
    marker = " tpuemb simulate: "
    return [line.split(marker, 1)[1] for line in text.splitlines() if marker in line]


def test_a_job_resolves_relative_paths_in_its_working_dir(cluster: RayNodes,
                                                          tmp_path: Path) -> None:
    folder = _working_dir(tmp_path)
    log = tmp_path / f"job-driver-{JOB}.log"
    entrypoint = (f"{PYTHON} -m tpuemb_cfg simulate model.pbtxt --backend ray "
                  "--steps 4 --checkpoint-every 2 --save-batches b.npz --out-dir out "
                  "--engine numpy")
    assert _run_entrypoint(cluster, folder, entrypoint, log) == 0, log.read_text()
    # Every output in the working dir, as typed relative to it; nothing anywhere else.
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) == [
        "b.npz", "model.pbtxt", "out", "out/checkpoint.npz", "out/summary.json",
        "out/tables.npz"]
    summary = json.loads((folder / "out" / "summary.json").read_text())
    assert (summary["config"], summary["out_dir"]) == ("model.pbtxt", "out")
    # The bytes of the same run on the local backend.
    local = tmp_path / "local"
    result = run_cli("simulate", str(folder / "model.pbtxt"), "--steps", "4",
                     "--checkpoint-every", "2", "--save-batches", str(tmp_path / "b.npz"),
                     "--out-dir", str(local), "--engine", "numpy", "-q")
    assert result.exit_code == 0, result.output
    assert (folder / "out" / "tables.npz").read_bytes() == (local / "tables.npz").read_bytes()
    assert (folder / "b.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    loss = json.loads((local / "summary.json").read_text())["loss"]
    assert summary["loss"] == loss
    # The log: the supervisor's line, the progress lines (first and last step, each
    # checkpoint, the outputs), then the summary the command prints on stdout, in that order.
    text = log.read_text()
    assert text.startswith(f"Running entrypoint for job {JOB}: {entrypoint}\n")
    lines = _stamped(text)
    assert [line.split(",")[0].split(" (")[0] for line in lines] == [
        "step 1/4", "checkpoint out/checkpoint.npz written at step 2", "step 4/4",
        "checkpoint out/checkpoint.npz written at step 4", "wrote out/tables.npz"], text
    assert lines[0].endswith(f"loss {loss[0]:.6g}") and lines[2].endswith(f"loss {loss[3]:.6g}")
    assert lines[4].startswith("wrote out/tables.npz, out/summary.json, b.npz (")
    after = text.split(lines[4], 1)[1]
    assert "out/tables.npz" in after and "Traceback" not in text  # the summary comes last


def test_a_failing_job_exits_2_with_one_line_and_writes_nothing(cluster: RayNodes,
                                                                tmp_path: Path) -> None:
    folder = _working_dir(tmp_path)
    log = tmp_path / "job.log"
    entrypoint = (f"{PYTHON} -m tpuemb_cfg simulate missing.pbtxt --backend ray --steps 2 "
                  "--out-dir out")
    assert _run_entrypoint(cluster, folder, entrypoint, log) == 2
    said = log.read_text().splitlines()[1:]
    assert len(said) == 1 and "missing.pbtxt" in said[0], said
    assert sorted(p.name for p in folder.iterdir()) == ["model.pbtxt"]


# ------------------------------------------------------------------------------------------------
# KubeRay: examples/ray/rayjob.yaml

MANIFEST = EXAMPLES / "ray" / "rayjob.yaml"
# The fields of KubeRay's ray.io/v1 types (ray-operator/apis/ray/v1/rayjob_types.go and
# raycluster_types.go, json tags) this check accepts.
RAYJOB_SPEC = {
    "activeDeadlineSeconds", "backoffLimit", "rayClusterSpec", "submitterPodTemplate",
    "metadata", "clusterSelector", "submitterConfig", "managedBy", "deletionStrategy",
    "entrypoint", "runtimeEnvYAML", "jobId", "submissionMode", "entrypointResources",
    "entrypointNumCpus", "entrypointNumGpus", "ttlSecondsAfterFinished",
    "shutdownAfterJobFinishes", "suspend", "schedule"}
RAYCLUSTER_SPEC = {
    "headGroupSpec", "workerGroupSpecs", "rayVersion", "enableInTreeAutoscaling",
    "autoscalerOptions", "headServiceAnnotations", "suspend", "authOptions"}
HEAD_GROUP = {"serviceType", "headService", "enableIngress", "rayStartParams", "template"}
WORKER_GROUP = {"groupName", "replicas", "minReplicas", "maxReplicas", "numOfHosts",
                "rayStartParams", "template", "scaleStrategy"}
#: An actor's Python process above its rows (the issue's measurement: 220-400 MiB).
ACTOR_PROCESS = 400 << 20
#: What Ray's own processes of a node take (raylet, agents; the head also GCS and dashboard).
RAY_NODE, RAY_HEAD = 512 << 20, 1536 << 20
_UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}


def _bytes(quantity: str) -> int:
    """A Kubernetes memory quantity (``5Gi``, ``512Mi``, plain bytes) in bytes."""
    for suffix, factor in _UNITS.items():
        if quantity.endswith(suffix):
            return int(float(quantity[:-2]) * factor)
    return int(quantity)


def _documents() -> dict[str, Any]:
    with open(MANIFEST) as handle:
        return {doc["kind"]: doc for doc in yaml.safe_load_all(handle)}


def _container(group: dict[str, Any]) -> dict[str, Any]:
    containers = group["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]  # type: ignore[no-any-return]


def _mounts(group: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """mountPath -> the pod's volume mounted there."""
    volumes = {v["name"]: v for v in group["template"]["spec"].get("volumes", [])}
    return {m["mountPath"]: volumes[m["name"]]
            for m in _container(group).get("volumeMounts", [])}


def _under(path: str, mounts: dict[str, dict[str, Any]], kind: str) -> str:
    """The mount path of the ``kind`` volume ``path`` lies in."""
    for mount, volume in mounts.items():
        if (path + "/").startswith(mount.rstrip("/") + "/") and kind in volume:
            return mount
    raise AssertionError(f"{path} is on no {kind} volume of the head pod: {mounts}")


def test_the_rayjob_manifest_is_kuberay_v1_and_runs_tpuemb() -> None:
    import click

    from tpuemb_cfg.commands.simulate import simulate

    docs = _documents()
    job = docs["RayJob"]
    assert job["apiVersion"] == "ray.io/v1"
    spec = job["spec"]
    assert set(spec) <= RAYJOB_SPEC, set(spec) - RAYJOB_SPEC
    assert spec["shutdownAfterJobFinishes"] is True and spec["backoffLimit"] == 0
    assert yaml.safe_load(spec["runtimeEnvYAML"])["env_vars"]["TPUEMB_LOG_EVERY"] == "30"
    cluster = spec["rayClusterSpec"]
    assert set(cluster) <= RAYCLUSTER_SPEC, set(cluster) - RAYCLUSTER_SPEC
    head, workers = cluster["headGroupSpec"], cluster["workerGroupSpecs"]
    assert set(head) <= HEAD_GROUP and {"rayStartParams", "template"} <= set(head)
    for group in workers:
        assert set(group) <= WORKER_GROUP
        assert {"groupName", "rayStartParams", "template"} <= set(group)
    images = {_container(g)["image"] for g in (head, *workers)}
    assert len(images) == 1 and next(iter(images)).endswith(":" + cluster["rayVersion"])
    for group in (head, *workers):  # rayStartParams: strings only (KubeRay's map[string]string)
        assert all(isinstance(v, str) for v in group["rayStartParams"].values())
    # The entrypoint: tpuemb simulate, its options parsed by the command's own parser.
    argv = shlex.split(spec["entrypoint"])
    assert argv[:2] == ["tpuemb", "simulate"]
    with simulate.make_context("simulate", argv[2:]) as context:
        options: dict[str, Any] = context.params
    assert options["backend"] == "ray" and options["checkpoint_every"] is not None
    assert not options["resume"]  # the first run has no checkpoint to resume from
    mounts = _mounts(head)
    config_mount = _under(options["config"], mounts, "configMap")
    _under(options["out_dir"], mounts, "persistentVolumeClaim")
    claim = mounts[_under(options["out_dir"], mounts, "persistentVolumeClaim")]
    assert claim["persistentVolumeClaim"]["claimName"] == docs["PersistentVolumeClaim"][
        "metadata"]["name"]
    # The whole command line, with the ConfigMap's file (examples/ads_ranking.pbtxt, see the
    # manifest's kubectl line) in its place: a --dry-run plans it without a cluster.
    config = str(EXAMPLES / "ads_ranking.pbtxt")
    assert options["config"] == f"{config_mount}/model.pbtxt"
    result = run_cli(*[config if a == options["config"] else a for a in argv[1:]],
                     "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    _check_memory(options, head, workers, plan)
    with pytest.raises(click.UsageError):  # the parser does refuse what it does not know
        simulate.make_context("simulate", [*argv[2:], "--no-such-option"])


def _check_memory(options: dict[str, Any], head: dict[str, Any],
                  workers: list[dict[str, Any]], plan: dict[str, Any]) -> None:
    """Each worker pod holds its hosts (docs/scale.md: their rows of every table and slot,
    plus the actor process) beside its object store and Ray's processes; the head holds the
    driver's estimate beside Ray's head processes."""
    from tpuemb_cfg.backends.ray.host import shard_bytes
    from tpuemb_cfg.session import prepare

    tables = prepare(str(EXAMPLES / "ads_ranking.pbtxt")).plan
    shards = options["shards"]
    pods = sum(g["replicas"] for g in workers)
    assert all(g["minReplicas"] == g["replicas"] == g["maxReplicas"] for g in workers)
    per_pod = math.ceil(shards / pods)
    host = max(shard_bytes(tables, h, shards) for h in range(shards))
    for group in workers:
        resources = _container(group)["resources"]
        memory = _bytes(resources["limits"]["memory"])
        assert _bytes(resources["requests"]["memory"]) == memory  # nothing to evict first
        store = int(group["rayStartParams"]["object-store-memory"])
        need = per_pod * (host + ACTOR_PROCESS) + store + RAY_NODE
        assert need <= memory, (need / 2**30, memory / 2**30)
        assert int(group["rayStartParams"]["num-cpus"]) >= per_pod  # an actor asks 1 CPU
    assert head["rayStartParams"]["num-cpus"] == "0"  # no host actor beside the driver
    driver = plan["memory"]["estimate"]["total_bytes"]
    assert driver + RAY_HEAD <= _bytes(_container(head)["resources"]["limits"]["memory"])


# ------------------------------------------------------------------------------------------------
# ray:// without ray[client]

_WITHOUT_GRPC = """
import runpy, sys
sys.modules["grpc"] = None  # ray[client] not installed, whatever this environment holds
sys.argv = ["tpuemb", *sys.argv[1:]]
runpy.run_module("tpuemb_cfg", run_name="__main__")
"""


def test_ray_client_without_its_extra_is_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:  # a port nobody listens on: no connection is tried
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"ray://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_GRPC, "simulate", "--steps", "1", "--out-dir", "out",
         "--backend", "ray", "--ray-address", address],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"--ray-address {address}: a ray:// address connects through Ray Client, which needs "
        "`pip install 'ray[client]'` (grpcio) in this environment; install it, or run tpuemb on "
        "a machine of the cluster with the address HOST:6379, or as a Ray Job (docs/scale.md)\n")
    assert list(tmp_path.iterdir()) == []
