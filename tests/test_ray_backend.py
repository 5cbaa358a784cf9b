"""The Ray backend gives what the local one gives, bit for bit (issue 15).

Every golden optimizer case is replayed with its configuration rewritten to 2 and 4 hosts, MOD
and DIV_DEFAULT, through both backends: every output array (tables, slots, activations) and every
per-step report must be equal (the update norm, a float64 sum, to float64 rounding). The same
for a synthetic run, a multi-worker run, both engines, pipelining, DISABLED accumulation and
non-lazy optimizers, and for the files `tpuemb simulate` writes. All on one local Ray instance
(``raycluster``: 2 CPUs, no dashboard).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ADAM_AND_MOMENTUM_TABLES, GOLDEN, require_data, run_cli, run_simulate
from raycluster import ray_cluster, same_reports, same_state  # noqa: F401  (the fixture)

import tpuemb_cfg
from tpuemb_cfg.executor import parse_combiners
from tpuemb_cfg.formats.npzio import npz_bytes, read_npz
from tpuemb_cfg.simulate import Executor, MultiWorkerRun, SyntheticRun, replay

pytestmark = pytest.mark.usefixtures("ray_cluster")

CASES_ROOT = GOLDEN / "optimizers"
CASES = sorted(
    f"{kind}/{case.name}"
    for kind in ("tf", "spec")
    if (CASES_ROOT / kind).is_dir()
    for case in (CASES_ROOT / kind).iterdir()
    if (case / "case.json").is_file()
)
LAYOUTS = [(2, "MOD"), (2, "DIV_DEFAULT"), (4, "MOD"), (4, "DIV_DEFAULT")]


def _rewritten(case: Path, hosts: int, strategy: str) -> Any:
    text = (case / "config.pbtxt").read_text()
    assert "num_hosts: 1" in text
    text = text.replace("num_hosts: 1", f"num_hosts: {hosts}\nsharding_strategy: {strategy}")
    return tpuemb_cfg.load(text.encode(), "text")


def _replay(config: Any, case: Path, **options: Any) -> tuple[dict[str, np.ndarray], list[Any]]:
    arguments = shlex.split((case / "combiner.txt").read_text())
    combiners = parse_combiners(arguments[1::2], len(config.feature_descriptor))
    reports: list[Any] = []
    out = replay(config, read_npz(case / "batches.npz"), read_npz(case / "init.npz"),
                 combiners=combiners, on_step=lambda step, r: reports.append(
                     {name: report.as_dict() for name, report in r.items()}), **options)
    return {key: np.asarray(value) for key, value in out.items()}, reports


@pytest.mark.parametrize("layout", LAYOUTS, ids=[f"{h}-{s}" for h, s in LAYOUTS])
@pytest.mark.parametrize("name", CASES)
def test_golden_cases_on_more_hosts(name: str, layout: tuple[int, str]) -> None:
    case = CASES_ROOT / name
    require_data(case)
    config = _rewritten(case, *layout)
    want, want_reports = _replay(config, case)
    got, got_reports = _replay(config, case, backend="ray")
    assert got.keys() == want.keys()
    for key, array in want.items():
        assert got[key].dtype == array.dtype, key
        np.testing.assert_array_equal(got[key], array, err_msg=key)
    same_reports(got_reports, want_reports)


# ------------------------------------------------------------------------------------------------
# Engines, pipelining, DISABLED accumulation, non-lazy optimizers, apply_row_gradients

MIXED = ADAM_AND_MOMENTUM_TABLES + """\
table_descriptor { name: "c" vocabulary_size: 97 dimension: 3 optimization_parameters {
  adagrad { } learning_rate { constant: 0.1 }
  gradient_clipping_limits { upper { value: 0.05 } } clipping_limits { lower { value: -0.4 } }
  gradient_accumulation_status: ENABLED } }
mode: TRAINING num_hosts: 3 num_tensor_cores: 2 sharding_strategy: MOD
pipeline_execution_with_tensor_core: true
feature_descriptor { name: "x" input_shape: 8 }
feature_descriptor { name: "y" table_id: 1 input_shape: 4 input_shape: 2 }
feature_descriptor { name: "z" table_id: 2 input_shape: 6 }
"""


def _mixed(pipelined: bool = True, strategy: str = "MOD") -> Any:
    text = MIXED.replace("sharding_strategy: MOD", f"sharding_strategy: {strategy}")
    if not pipelined:
        text = text.replace("pipeline_execution_with_tensor_core: true", "")
    return tpuemb_cfg.load(text.encode(), "text")


def _without_history(arrays: dict[str, Any]) -> bytes:
    """The bytes of a checkpoint but for the run's history (its reports hold update norms)."""
    return npz_bytes({k: v for k, v in arrays.items() if k != "run/history"})


@pytest.mark.parametrize("engine", ["numpy", "numba"])
@pytest.mark.parametrize("pipelined", [True, False])
def test_a_synthetic_run_is_bit_identical(engine: str, pipelined: bool) -> None:
    config = _mixed(pipelined, "DIV_DEFAULT" if pipelined else "MOD")
    local = SyntheticRun(config, seed=4, engine=engine)
    sharded = SyntheticRun(config, seed=4, engine=engine, backend="ray")
    same_state(sharded.executor, local.executor)
    local.run(5)
    sharded.run(5)
    same_reports(sharded.history, local.history)
    same_state(sharded.executor, local.executor)
    assert _without_history(sharded.checkpoint_arrays()) == _without_history(
        local.checkpoint_arrays())
    sharded.executor.close()


@pytest.mark.parametrize("options", [{"workers": 3}, {"workers": 2, "max_staleness": 1}])
def test_a_multi_worker_run_is_bit_identical(options: dict[str, int]) -> None:
    config = _mixed()
    local = MultiWorkerRun(config, seed=2, delay="geometric:0.5", **options)
    sharded = MultiWorkerRun(config, seed=2, delay="geometric:0.5", backend="ray", shards=2,
                             **options)
    local.run(4)
    sharded.run(4)
    same_reports(sharded.summary(), local.summary())
    same_state(sharded.executor, local.executor)
    sharded.executor.close()


def test_the_op_pair_and_row_gradients_match() -> None:
    config = _mixed(pipelined=False)
    local = Executor(config, seed=9, combiners="sqrtn")
    sharded = Executor(config, seed=9, combiners="sqrtn", backend="ray", shards=4)
    rng = np.random.default_rng(1)
    for step in range(3):
        batch = SyntheticRun(config, seed=step).data.next_batch()
        for executor in (local, sharded):
            activations, dedup = executor.recv_activations(batch)
            grads = [np.full_like(a, 0.01 * (step + 1)) for a in activations]
            executor.send_gradients(grads, [0.01], dedup)
    rows = np.array([0, 4, 90, 96])
    grad = rng.normal(0, 0.1, (4, 3)).astype(np.float32)
    for executor in (local, sharded):
        executor.apply_row_gradients("c", rows, grad, [0.01])
    same_state(sharded, local)
    sharded.close()


# ------------------------------------------------------------------------------------------------
# The command


def test_simulate_writes_the_same_files(tmp_path: Path) -> None:
    config = tmp_path / "mixed.pbtxt"
    config.write_text(MIXED)
    outputs = []
    for backend in ("local", "ray"):
        folder = tmp_path / backend
        code, output = run_simulate(str(config), "--steps", "4", "--seed", "3", "--out-dir",
                                    str(folder), "--backend", backend, "--checkpoint-every", "2",
                                    "-q")
        assert code == 0, output
        summary = json.loads((folder / "summary.json").read_text())
        summary.pop("out_dir")
        # the memory plan is the backend's own (the actors hold the tables), not a result
        assert summary.pop("memory")["estimate"]
        checkpoint = read_npz(folder / "checkpoint.npz")
        history = json.loads(checkpoint["run/history"].tobytes())
        outputs.append((summary, history, (folder / "tables.npz").read_bytes(),
                        _without_history(checkpoint)))
    (summary, history, tables, checkpoint), want = outputs[1], outputs[0]
    assert tables == want[2]
    assert checkpoint == want[3]
    same_reports(summary, want[0])
    same_reports(history, want[1])


def test_replay_writes_the_same_out_file(tmp_path: Path) -> None:
    case = CASES_ROOT / "spec" / "06_pipelined_execution"
    require_data(case)
    config = tmp_path / "config.pbtxt"
    config.write_text((case / "config.pbtxt").read_text().replace(
        "num_hosts: 1", "num_hosts: 2\nsharding_strategy: MOD"))
    written = []
    for backend in ("local", "ray"):
        out = tmp_path / f"{backend}.npz"
        code, output = run_simulate(
            str(config), "--batches", str(case / "batches.npz"), "--init", str(case / "init.npz"),
            "--out", str(out), "--backend", backend,
            *shlex.split((case / "combiner.txt").read_text()))
        assert code == 0, output
        written.append(out.read_bytes())
    assert written[0] == written[1]


def test_bench_reports_time_and_bytes_per_host() -> None:
    result = run_cli("bench", "--backend", "ray", "--shards", "2", "--vocab", "5000", "--dim",
                     "8", "--ids", "2000", "--steps", "3", "--engine", "numpy", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["bit_identical"] is True
    assert report["shards"] == 2 and len(report["bytes_sent_per_step"]) == 2
    assert report["ray_sec_per_step"] > 0 and report["local_sec_per_step"] > 0
    # The cost model of docs/scale.md is exact for the payload.
    assert report["bytes_sent_per_step"] == [m[0] for m in report["model_bytes_per_step"]]
    assert report["bytes_received_per_step"] == [m[1] for m in report["model_bytes_per_step"]]


def test_custom_optimizer_and_combiner_tables_run_on_the_hosts() -> None:
    # The actors rebuild each table's pipeline from the plan: a CustomOptimizer's callable must
    # run there on the NumPy path, as it does locally (a built-in kernel lookup would fail).
    import warnings

    from test_custom_executor import batches, compiled

    from tpuemb_cfg.embedding import ConstantInitializer, CustomCombiner, CustomOptimizer

    # Defined here, not imported: Ray ships a module's functions by reference (the actors would
    # import the test module) and local ones by value.
    def adagrad(gradient, embedding_table, slot_variables, learning_rate, hyperparameters):  # type: ignore[no-untyped-def]
        (acc,) = slot_variables
        acc = acc + gradient * gradient
        return embedding_table - learning_rate * gradient / np.sqrt(acc), acc

    def mean(valency, vectors):  # type: ignore[no-untyped-def]
        return vectors[:valency].sum(axis=0) / np.float32(valency)

    source = compiled(CustomOptimizer(adagrad, learning_rate=0.2, slot_names=["acc"],
                                      slot_initializers=[ConstantInitializer(0.1)]),
                      CustomCombiner(mean, max_valency=4), vocabulary=30)
    steps = batches(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # custom tables: the NumPy-path note
        local = Executor(source, seed=3)
        sharded = Executor(source, seed=3, backend="ray", shards=2)
    try:
        for batch in steps:
            for got, want in zip(sharded.step(batch), local.step(batch), strict=True):
                np.testing.assert_array_equal(got, want)
        same_state(sharded, local)
        assert np.any(np.asarray(local.state_arrays()["slot/t/acc"]) != np.float32(0.1))
    finally:
        sharded.close()
