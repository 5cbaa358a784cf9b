"""tpuemb ships itself: a worker node whose Python lacks tpuemb runs the host actors.

One cluster for the module (``raynodes.RayNodes``): a head node with no CPUs (no actor goes
there) and one worker node running a bare Python - a venv without pip whose site-packages holds
every entry of this environment's site-packages but tpuemb's, so it imports Ray, NumPy, numba
and protobuf but not ``tpuemb_cfg``. The driver is a ``tpuemb simulate`` subprocess run from a
temporary directory (Ray adds the driver's working directory to the workers' path: a checkout
there would hide what is tested), with the numpy engine (no numba compilation on a node whose
cache is cold: the test is about the package, not the kernels). Its ``tables.npz`` is the local
backend's, byte for byte; with ``--no-ship`` it stops with one line naming the missing module.
The ``--runtime-env`` refusals and the reading of Ray's errors need no cluster.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import run_cli, run_simulate
from raynodes import NodeSpec, RayNodes

pytest.importorskip("ray", reason="Ray is not installed: pip install 'tpuemb[ray]'")

from tpuemb_cfg.backends.ray.runtime_env import EXCLUDES, actor_runtime_env, package_dir  # noqa: E402

CONFIG = """
table_descriptor { name: "a" vocabulary_size: 40 dimension: 4 optimization_parameters {
  adagrad { } learning_rate { constant: 0.1 } } }
table_descriptor { name: "b" vocabulary_size: 30 dimension: 2 optimization_parameters {
  stochastic_gradient_descent { } learning_rate { constant: 0.05 } } }
mode: TRAINING num_hosts: 2 num_tensor_cores: 1 sharding_strategy: MOD
feature_descriptor { name: "x" input_shape: 8 }
feature_descriptor { name: "y" table_id: 1 input_shape: 5 }
"""


def _tpuemb_entries() -> set[str]:
    """The names tpuemb's installation put in site-packages: ``tpuemb_cfg/`` and the dist-info
    of a regular install; the ``__editable__`` path file, finder and dist-info of an editable
    one (``pip install -e``); read from the distribution's RECORD."""
    names = {"tpuemb_cfg"}
    # the distribution installed in site-packages, not the ``tpuemb.egg-info`` that an editable
    # install leaves in the checkout (found first when the tests run from there)
    site = sysconfig.get_paths()["purelib"]
    files = [f for d in importlib.metadata.distributions(path=[site])
             if d.metadata["Name"] == "tpuemb" for f in d.files or []]
    names.update(Path(str(f)).parts[0] for f in files if not str(f).startswith(".."))
    return names - {"__pycache__"}  # shared with other modules' caches


def bare_python(root: Path) -> str:
    """A venv's Python that has every package of this environment but tpuemb (each other entry
    of site-packages linked into its own site-packages)."""
    venv = root / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site = Path(subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())
    skip = _tpuemb_entries()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name not in skip and not (site / entry.name).exists():
            (site / entry.name).symlink_to(entry)
    return python


@dataclass
class Cluster:
    nodes: RayNodes
    driver_env: dict[str, str]  # the cluster's environment, with this process's PYTHONPATH


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("ship")
    python = bare_python(root)
    pythonpath = os.environ.get("PYTHONPATH")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PYTHONPATH", raising=False)  # the nodes' workers must not see a checkout
        plain = dict(os.environ)
        lacks = subprocess.run([python, "-c", "import tpuemb_cfg"], env=plain, cwd=root,
                               capture_output=True, text=True)
        assert lacks.returncode != 0 and "No module named 'tpuemb_cfg'" in lacks.stderr
        has = subprocess.run([python, "-c", "import ray, numpy, numba, google.protobuf"],
                             env=plain, cwd=root, capture_output=True, text=True)
        assert has.returncode == 0, has.stderr
        nodes = RayNodes(root, [NodeSpec(cpus=2, python=python)], head_cpus=0)
    env = dict(nodes.env)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    try:
        yield Cluster(nodes, env)
    finally:
        nodes.stop()


def _simulate(cluster: Cluster, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (cwd / "c.pbtxt").write_text(CONFIG)
    return subprocess.run(
        [sys.executable, "-m", "tpuemb_cfg", "simulate", "c.pbtxt", "--steps", "3", "--seed", "4",
         "--quiet", "--engine", "numpy", "--backend", "ray", "--ray-address",
         cluster.nodes.address, *args],
        capture_output=True, text=True, env=cluster.driver_env, cwd=cwd, timeout=180)


def test_a_node_without_tpuemb_runs_the_shipped_copy(cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "c.pbtxt").write_text(CONFIG)
    code, output = run_simulate(str(tmp_path / "c.pbtxt"), "--steps", "3", "--seed", "4", "--quiet",
                                "--engine", "numpy", "--out-dir", str(tmp_path / "local"))
    assert code == 0, output
    done = _simulate(cluster, tmp_path, "--out-dir", "ray",
                     "--runtime-env", '{"env_vars": {"TPUEMB_SHIP_TEST": "1"}}')
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ray" / "tables.npz").read_bytes() == \
        (tmp_path / "local" / "tables.npz").read_bytes()
    # What reached the node: the package with its generated protobuf modules.
    shipped = list((cluster.nodes.tmp / "ray").glob(
        "session_*/runtime_resources/py_modules_files/*/tpuemb_cfg"))
    assert shipped, "no shipped tpuemb_cfg on the node"
    assert list(shipped[0].glob("proto/*_pb2.py"))


def test_without_shipping_the_missing_module_is_one_line(cluster: Cluster, tmp_path: Path
                                                         ) -> None:
    done = _simulate(cluster, tmp_path, "--out-dir", "ray", "--no-ship")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("host 0 of 2 could not start on node ")
    assert "(ModuleNotFoundError: No module named 'tpuemb_cfg'): install tpuemb" in lines[0]
    assert "or let the driver ship it (it did not: shipping is turned off" in lines[0]
    assert not (tmp_path / "ray").exists()  # nothing written


# ------------------------------------------------------------------------------------------------
# --runtime-env: refused before anything starts (no cluster needed)


@pytest.mark.parametrize(("value", "expected"), [
    ("{pip: 1}", "--runtime-env {pip: 1}: not JSON (Expecting property name enclosed in double "
                 "quotes at line 1 column 2)"),
    ('["numpy"]', "--runtime-env: expected a JSON object of runtime_env fields"),
    ('{"pipp": ["numpy"]}', "--runtime-env: unknown field 'pipp'; Ray's runtime_env fields are"),
    ('{"env_vars": {"A": 1}}', "--runtime-env: runtime_env['env_vars'] must be of type "
                               "Dict[str, str]"),
    ('{"py_modules": "x"}', "--runtime-env: `py_modules` must be a list of strings"),
    ('{"config": {"": null}}', "--runtime-env: unknown entry '' of its config; Ray's are "
                               "eager_install, log_files, setup_timeout_seconds"),
    ("@/nonexistent/env.json", "--runtime-env @/nonexistent/env.json: no such file"),
    ("[" * 100_000, "--runtime-env " + "[" * 79 + "…: nested more than 32 levels deep (at line "
                    "1 column 33)"),
    ('{"env_vars": ' * 40, "nested more than 32 levels deep (at line 1 column 417)"),
])
def test_a_bad_runtime_env_is_one_line(tmp_path: Path, value: str, expected: str) -> None:
    for command in (["simulate", "--backend", "ray", "--out-dir", str(tmp_path / "o")],
                    ["bench", "--backend", "ray", "--vocab", "10", "--ids", "4"]):
        result = run_cli(*command, "--runtime-env", value)
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], result.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", [
    ["simulate", "--backend", "ray", "--out-dir", "o"],
    ["bench", "--backend", "ray", "--vocab", "10", "--ids", "4"]])
def test_a_runtime_env_file_obeys_the_input_limit_and_its_nesting_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    """``@FILE``: nested 100,000 deep (a RecursionError before), over ``TPUEMB_MAX_INPUT``
    (ignored before: a 300 MB file was read whole), or a device that never ends (read until
    memory ran out): one line naming the option, exit 2, before Ray starts."""
    monkeypatch.chdir(tmp_path)
    deep = tmp_path / "deep.json"
    deep.write_text('{"a": ' * 100_000)
    large = tmp_path / "large.json"
    large.write_text('{"env_vars": {"A": "' + "x" * 3000 + '"}}')
    cases = [(deep, None, f"--runtime-env @{deep}: nested more than 32 levels deep (at line "
                          "1 column 193); a runtime_env needs a few (e.g. '{\"env_vars\": "
                          "{\"A\": \"1\"}}')"),
             (large, "2K", f"--runtime-env @{large}: the file has 3,023 bytes, more than the "
                           "input limit of 2 KiB; if it really is a runtime_env, raise the "
                           "limit: TPUEMB_MAX_INPUT=1M"),
             (Path("/dev/zero"), "2K", "--runtime-env @/dev/zero: stopped reading after 2 KiB "
                                       "(the input limit) and the input goes on; if it really "
                                       "is a runtime_env, raise the limit: TPUEMB_MAX_INPUT=1M")]
    for path, limit, expected in cases:
        if limit is not None:
            monkeypatch.setenv("TPUEMB_MAX_INPUT", limit)
        result = run_cli(*command, "--runtime-env", f"@{path}")
        assert result.exit_code == 2, result.output
        assert result.stderr == expected + "\n"
    assert not (tmp_path / "o").exists()


def test_the_runtime_env_options_need_the_ray_backend(tmp_path: Path) -> None:
    (tmp_path / "env.json").write_text('{"pip": ["numpy"]}')
    for option in (["--runtime-env", f"@{tmp_path / 'env.json'}"], ["--no-ship"]):
        code, output = run_simulate("--out-dir", str(tmp_path / "o"), *option)
        assert code == 2
        assert f"{option[0]} applies to --backend ray only" in output
        result = run_cli("bench", "--vocab", "10", "--ids", "4", *option)
        assert result.exit_code == 2
        assert "--runtime-env and --no-ship apply to --backend ray only" in result.stderr


def test_the_users_env_is_merged_with_the_package() -> None:
    given = {"pip": ["numpy"], "py_modules": ["/opt/mine"], "excludes": ["data/"],
             "env_vars": {"A": "1"}}
    assert actor_runtime_env(given, ship=True) == {
        "pip": ["numpy"], "env_vars": {"A": "1"},
        "py_modules": [package_dir(), "/opt/mine"], "excludes": [*EXCLUDES, "data/"]}
    assert actor_runtime_env(given, ship=False) == given
    assert actor_runtime_env(None, ship=False) is None
    assert Path(package_dir(), "proto").is_dir()
    assert json.loads(json.dumps(actor_runtime_env(None, ship=True)))  # JSON-ready, as Ray needs


# What Ray 2.60 said of an actor whose module is missing on its node (the creation task's
# traceback, coloured), and of a runtime_env that could not be set up.
DIED = ("The actor died because of an error raised in its creation task, \x1b[36mray::Shard."
        "__init__()\x1b[39m (pid=12616, ip=192.0.2.2, actor_id=0a55)\n           ^^^^^^\n"
        "RuntimeError: The actor with name Shard failed to import on the worker. This may be "
        "because needed library dependencies are not installed in the worker environment:\n\n"
        "\x1b[36mray::Shard.__init__()\x1b[39m (pid=12616, ip=192.0.2.2, actor_id=0a55)\n"
        "                  ^^^^^^\nModuleNotFoundError: No module named 'numba'")


class _Died(Exception):
    actor_init_failed = True


def test_the_cause_of_a_failed_start_is_named() -> None:
    from ray.exceptions import RuntimeEnvSetupError

    from tpuemb_cfg.backends.ray.connection import start_failure_line
    from tpuemb_cfg.commands.flags import cli_message

    line = start_failure_line(_Died(DIED), 1, 4, shipped=True)
    assert line is not None
    assert cli_message(line) == (
        "host 1 of 4 could not start on node 192.0.2.2 (ModuleNotFoundError: No module named "
        "'numba'): install it on every node or pass --runtime-env '{\"pip\": [\"numba\"]}' (the "
        "pip package may be named otherwise)")
    setup = RuntimeEnvSetupError("pip install failed:\nERROR: No matching distribution found "
                                 "for nosuchpackage\n")
    line = start_failure_line(setup, 0, 2, shipped=True)
    assert line is not None
    assert cli_message(line) == (
        "host 0 of 2 could not start (ERROR: No matching distribution found for nosuchpackage): "
        "its runtime_env could not be set up: check --runtime-env (Ray's logs on that node say "
        "more)")
    assert start_failure_line(Exception("killed"), 0, 2, shipped=True) is None


def test_a_version_mismatch_names_both_versions() -> None:
    """Ray's refusal of a driver of other versions, raised by Ray's own check with a cluster's
    record of Ray 2.9.3 on Python 3.10.12: both sides' versions, not the first line alone
    ("Version mismatch: The cluster was started with:")."""
    import platform

    import ray
    from ray._private.utils import check_version_info

    from tpuemb_cfg.backends.ray.connection import version_mismatch

    with pytest.raises(RuntimeError) as raised:
        check_version_info({"ray_version": "2.9.3", "python_version": "3.10.12"},
                           "10.0.0.2:6379")
    assert version_mismatch(raised.value) == (
        f"version mismatch: the cluster runs Ray 2.9.3 on Python 3.10.12, this process Ray "
        f"{ray.__version__} on Python {platform.python_version()}; run tpuemb with the cluster's "
        "Ray and Python versions (e.g. on one of its nodes, or as a Ray Job)")
    assert version_mismatch(RuntimeError("Version mismatch: something else")) is None
