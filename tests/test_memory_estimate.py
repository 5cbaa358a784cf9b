"""The memory estimate counts every working array of a step (``executor.memory``); measured
against peak RSS by ``benchmarks/bench_models.py``, not here."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLES, run_cli

from tpuemb_cfg.executor.memory import (
    ZIPF_EXPONENT,
    expected_unique,
    library_estimate,
    memory_estimate,
)
from tpuemb_cfg.executor.workload import parse_ids
from tpuemb_cfg.formats.io import load
from tpuemb_cfg.session import prepare
from tpuemb_cfg.sim import synthetic

# The configuration of issue 16: a small table, 2.56 million bags a step.
ISSUE = """\
table_descriptor { name: "t" vocabulary_size: 1000 dimension: 128
  optimization_parameters { adagrad { } learning_rate { constant: 0.1 } } }
mode: TRAINING num_hosts: 1 num_tensor_cores: 128
feature_descriptor { table_id: 0 input_shape: 200 input_shape: 5 input_shape: 20 }
"""


def test_the_zipf_law_is_the_synthetic_one() -> None:
    assert ZIPF_EXPONENT == synthetic._ZIPF_EXPONENT


@pytest.mark.parametrize("ids", ["zipf:1.1", "zipf:0.8", "zipf:1.0", "zipf:2", "uniform"])
@pytest.mark.parametrize(("vocabulary", "draws"), [(100, 10_000), (10**5, 10**4),
                                                    (10**6, 3 * 10**5), (10**8, 10**5)])
def test_expected_unique_matches_the_sampler(vocabulary: int, draws: int, ids: str) -> None:
    import numpy as np

    from tpuemb_cfg.executor.plan import TablePlan

    table = TablePlan.__new__(TablePlan)
    object.__setattr__(table, "vocabulary", vocabulary)
    object.__setattr__(table, "index", 0)
    data = synthetic.SyntheticData.__new__(synthetic.SyntheticData)
    data.ids = parse_ids(ids)
    counts = [np.unique(data._ids(np.random.default_rng(seed), table, draws)).size
              for seed in range(3)]
    assert expected_unique(vocabulary, draws, data.ids) == pytest.approx(np.mean(counts),
                                                                         rel=0.03)
    assert expected_unique(vocabulary, 0, data.ids) == 0


def test_counts_the_batch_arrays() -> None:
    plan = prepare(load(ISSUE.encode(), "text")).plan
    parts = library_estimate(plan)
    bags = 128 * 200 * 5 * 20  # one id per position
    assert parts.state == 1000 * 128 * 4 * 2
    # Activations and their gradients alone are 2 * 4 * bags * 128 bytes (2.6 GB).
    assert parts.steady >= 2 * 4 * bags * 128
    # Measured (benchmarks/bench_memory.py, NumPy engine): 5.35 GB at the peak, the process's
    # 160 MB included.
    assert memory_estimate(plan) == parts.total > 5 * 10**9


def test_grows_with_bag_sizes_and_cores() -> None:
    text = ISSUE.replace("input_shape: 200 input_shape: 5 input_shape: 20", "input_shape: 64")
    plan = prepare(load(text.encode(), "text")).plan
    base = memory_estimate(plan)
    assert memory_estimate(plan.with_bags([10])) > base  # 10 ids a bag instead of 1 to 4
    more_cores = prepare(load(text.replace("128", "256", 2).replace(
        "dimension: 256", "dimension: 128").encode(), "text")).plan
    assert memory_estimate(more_cores) > base


def test_non_lazy_optimizers_count_whole_tables() -> None:
    lazy = ISSUE.replace("adagrad { }", "adam { epsilon: 1e-7 }").replace(
        "input_shape: 200 input_shape: 5 input_shape: 20", "input_shape: 4")
    lazy = lazy.replace("vocabulary_size: 1000", "vocabulary_size: 1000000")
    eager = lazy.replace("epsilon: 1e-7", "epsilon: 1e-7 use_non_lazy_adam: true")
    lazy_bytes = memory_estimate(prepare(load(lazy.encode(), "text")).plan)
    eager_bytes = memory_estimate(prepare(load(eager.encode(), "text")).plan)
    assert eager_bytes - lazy_bytes >= 5 * 4 * 10**6 * 128


@pytest.mark.parametrize(("engine", "needed"), [("numba", "2.6 GiB"), ("numpy", "5 GiB")])
def test_simulate_refuses_in_one_line(tmp_path: Path, engine: str, needed: str) -> None:
    # The executor refuses before it allocates anything (its tables and a step, without the
    # process): measured (benchmarks/bench_memory.py), the numba engine's run peaks at
    # 2.73 GiB with the process, the NumPy engine's (per-occurrence temporaries) at 5.2 GiB.
    path = tmp_path / "issue.pbtxt"
    path.write_text(ISSUE)
    result = run_cli("simulate", str(path), "--max-memory", "64M", "--out-dir",
                     str(tmp_path / "o"), "--engine", engine)
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert f"the simulation needs about {needed}" in result.output
    assert "give the features smaller batches" in result.output  # the step dominates
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("model", ["dlrm_criteo", "dcnv2_mlperf"])
def test_example_models_are_estimated_before_allocating(model: str) -> None:
    # The full models need tens of GB: refused up front, in one line.
    result = run_cli("simulate", str(EXAMPLES / "models" / f"{model}.pbtxt"), "--steps", "1",
                     "--max-memory", "1G", "--out-dir", "unused")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "more than the memory limit" in result.output


# --------------------------------------------------------------------------------------------
# The estimate of a whole run: shown by --dry-run, --json and inspect; refusals


ONE = """\
table_descriptor { name: "t" vocabulary_size: %d dimension: %d
  optimization_parameters { %s learning_rate { constant: 0.1 } } }
mode: TRAINING num_hosts: 1 num_tensor_cores: 1 %s
feature_descriptor { table_id: 0 input_shape: 64 }
"""


def one(vocabulary: int = 1000, dimension: int = 16, optimizer: str = "adagrad { }",
        extra: str = "") -> object:
    return prepare(load((ONE % (vocabulary, dimension, optimizer, extra)).encode(),
                        "text")).plan


def test_the_parts_of_a_run() -> None:
    from tpuemb_cfg.executor.memory import (
        BASE_PROCESS,
        NUMBA_PROCESS,
        PLOT_PROCESS,
        RunShape,
        estimate,
    )

    plan = one()
    parts = estimate(plan, RunShape(tables="all", numba=True))  # type: ignore[arg-type]
    assert parts.state == parts.whole_state == 1000 * 16 * 4 * 2  # table and accumulators
    assert parts.process == BASE_PROCESS + NUMBA_PROCESS == 152 * 2**20
    assert estimate(plan, RunShape(numba=False, plot=True)).process == (  # type: ignore[arg-type]
        BASE_PROCESS + PLOT_PROCESS)
    assert parts.total == sum(parts.as_dict()[key] for key in (
        "process_bytes", "tables_and_slots_bytes", "step_bytes", "pipelining_bytes",
        "history_bytes", "outputs_bytes"))
    # Non-lazy Adam, pipelined: the whole table's pre-update copy stays between steps.
    adam = one(optimizer="adam { epsilon: 1e-7 use_non_lazy_adam: true }",
               extra="pipeline_execution_with_tensor_core: true")
    assert estimate(adam, RunShape()).pipelining == 1000 * 16 * 4  # type: ignore[arg-type]
    assert estimate(one(), RunShape()).pipelining == 0  # type: ignore[arg-type]


def test_touched_rows_make_few_pages_resident() -> None:
    from tpuemb_cfg.executor.memory import RunShape, estimate

    plan = one(vocabulary=10**7, dimension=8)  # 320 MB a table and its accumulators
    whole = 10**7 * 8 * 4 * 2
    small = RunShape(steps=1, tables="touched", huge_pages=False)
    one_step = estimate(plan, small)  # type: ignore[arg-type]
    # 64 bags of 1 to 4 ids: 160 ids, 100 to 160 of them distinct, each on a 4 KiB page of
    # its own in the table and in the accumulators.
    assert 2 * 100 * 4096 < one_step.state < 2 * 160 * 4096
    huge = estimate(plan, RunShape(steps=1, tables="touched", huge_pages=True))  # type: ignore
    # With huge pages a 2 MiB page holds 65,536 rows: 100 to 160 scattered rows hit
    # 1 - exp(-u * 65536 / 10^7), 48% to 65%, of the 153 pages of each array.
    assert 0.45 * whole < huge.state < 0.68 * whole
    assert estimate(plan, RunShape(steps=1, tables="all")).state == whole  # type: ignore
    assert estimate(plan, RunShape(steps=1, tables="touched",  # type: ignore[arg-type]
                                   checkpoints=True)).state == whole


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "c.pbtxt"
    path.write_text(ONE % (1000, 16, "adagrad { }", ""))
    result = run_cli("simulate", str(path), "--dry-run", "--steps", "7", "--out-dir",
                     str(tmp_path / "o"), "--save-batches", str(tmp_path / "b.npz"))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("tpuemb simulate --dry-run: 7 steps of synthetic data on ")
    assert "t      1,000 x 16        adagrad    160.0" in result.output  # 64 bags of 1-4 ids
    assert any(line.startswith("memory: about ") for line in lines)
    assert "the run fits" in result.output or "would be refused" in result.output
    assert lines[-1] == "nothing was run or written (--dry-run)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pbtxt"]


def test_dry_run_json_is_the_library_estimate(tmp_path: Path) -> None:
    import json

    from tpuemb_cfg.sim.options import SyntheticOptions
    from tpuemb_cfg.sim.synthetic import run_estimate

    path = tmp_path / "c.pbtxt"
    path.write_text(ONE % (5000, 16, "adagrad { }", ""))
    result = run_cli("simulate", str(path), "--dry-run", "--json", "--steps", "30", "--ids",
                     "uniform", "--tables", "all", "--engine", "numpy", "--max-memory", "1G")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    parts = run_estimate(prepare(str(path)).plan, 30, engine="numpy",
                         data=SyntheticOptions(ids="uniform"), tables="all")
    assert shown["memory"]["estimate"] == parts.as_dict()
    assert shown["memory"]["limit_bytes"] == 2**30 and shown["memory"]["fits"] is True
    assert shown["tables"][0]["unique_ids_per_step"] == pytest.approx(
        5000 * (1 - (1 - 1 / 5000) ** 160), abs=0.1)  # 64 bags of 2.5 ids on average


def test_a_runs_json_reports_the_estimate(tmp_path: Path) -> None:
    import json

    result = run_cli("simulate", "--steps", "3", "--json", "--out-dir", str(tmp_path / "o"))
    assert result.exit_code == 0, result.output
    from tpuemb_cfg.sim.synthetic import run_estimate

    memory = json.loads(result.stdout)["memory"]
    plan = prepare(str(EXAMPLES / "quickstart.pbtxt")).plan  # the built-in example
    assert memory == {"estimate": run_estimate(plan, 3, tables="touched").as_dict()}
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["memory"] == memory


def test_a_refusal_suggests_only_what_the_machine_can_do(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from tpuemb_cfg.formats import limits

    monkeypatch.setattr(limits, "total_memory", lambda: 2 * 2**30)
    monkeypatch.setattr(limits, "available_memory", lambda meminfo="": 2**30)
    path = tmp_path / "issue.pbtxt"
    path.write_text(ISSUE)
    for extra in ((), ("--max-memory", "1G")):
        result = run_cli("simulate", str(path), "--out-dir", str(tmp_path / "o"), *extra)
        assert result.exit_code == 2
        output = result.output
        assert "and more than this machine has (2 GiB)" in output, output
        assert "--max-memory" not in output.replace("--max-memory 1G", "")
        assert "give the features smaller batches" in output
        assert "--backend ray --ray-address ADDR --shards N" in output
    # What the machine can hold is still suggested: 793 MiB (and 10% to spare) under 512 MiB.
    small = ISSUE.replace("input_shape: 200 input_shape: 5 input_shape: 20",
                          "input_shape: 200 input_shape: 5 input_shape: 6")
    path.write_text(small)
    result = run_cli("simulate", str(path), "--out-dir", str(tmp_path / "o"),
                     "--max-memory", "512M")
    assert result.exit_code == 2 and "raise the limit to --max-memory 1G" in result.output, (
        result.output)


def test_inspect_shows_the_simulations_estimate() -> None:
    import json

    from tpuemb_cfg.sim.synthetic import run_estimate

    config = str(EXAMPLES / "quickstart.pbtxt")
    text = run_cli("inspect", config)
    assert text.exit_code == 0, text.output
    assert ("simulation (tpuemb simulate CONFIG: 100 synthetic steps, numba engine, --tables "
            "touched): about ") in text.output
    shown = json.loads(run_cli("inspect", config, "--json").output)["simulation"]
    expected = run_estimate(prepare(config).plan, 100, tables="touched")
    assert shown == {"steps": 100, "engine": "numba", "memory": expected.as_dict()}


# --------------------------------------------------------------------------------------------
# --dry-run of a multi-worker run and of a replay: the whole process's estimate, in parts


def test_a_multi_worker_dry_run_shows_the_whole_process(tmp_path: Path) -> None:
    import json

    from tpuemb_cfg.executor.memory import RunShape, estimate
    from tpuemb_cfg.sim.multiworker import GRADIENT_BYTES, TABLE_GRADIENT_BYTES, for_chief

    path = tmp_path / "c.pbtxt"
    path.write_text(ONE % (1000, 16, "adagrad { }", ""))
    options = ("--workers", "3", "--replicas-to-aggregate", "2", "--steps", "5", "--engine",
               "numpy", "--out-dir", str(tmp_path / "o"))
    result = run_cli("simulate", str(path), *options, "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert (shown["workers"], shown["mode"], shown["replicas_to_aggregate"]) == (
        3, "sync_replicas", 2)
    parts = shown["memory"]["estimate"]
    # 64 bags of 2.5 ids on average: 160 ids, u of them distinct; each worker's gradient in
    # flight and the accumulators of R = 2 gradients hold u rows of 4 * 16 + 16 bytes.
    u = expected_unique(1000, 160)
    assert parts["workers_bytes"] == int(3 * u * 80 + 2 * u * 80)
    # The record of the 3 x 5 gradients; the tables as 15 synthetic steps touch them.
    assert parts["history_bytes"] == 15 * (GRADIENT_BYTES + TABLE_GRADIENT_BYTES)
    chief = for_chief(prepare(str(path))).plan
    alone = estimate(chief, RunShape(steps=15, engine="numpy", tables="touched"))
    assert parts["tables_and_slots_bytes"] == alone.state
    assert parts["step_bytes"] == alone.steady + alone.peak
    assert parts["process_bytes"] == alone.process
    assert parts["total_bytes"] == sum(v for k, v in parts.items() if k not in (
        "total_bytes", "tables_and_slots_whole_bytes"))
    assert not (tmp_path / "o").exists()
    text = run_cli("simulate", str(path), *options, "--dry-run").output
    assert "workers: 3, sync replicas, R = 2, init tokens R, delay fixed:0" in text
    assert "workers' gradients and accumulators" in text
    # The run reports the estimate --dry-run showed, in its summary and in summary.json.
    ran = run_cli("simulate", str(path), *options, "--json", "-q")
    assert ran.exit_code == 0, ran.output
    assert json.loads(ran.stdout)["memory"] == {"estimate": parts}
    saved = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert saved["memory"] == {"estimate": parts}
    stale = json.loads(run_cli("simulate", str(path), *options[:2], "--max-staleness", "1",
                               *options[4:], "--dry-run", "--json").output)
    assert stale["mode"] == "drop_stale" and stale["max_staleness"] == 1
    # DropStale: no accumulators, each worker's gradient in flight and one applied at a time.
    assert stale["memory"]["estimate"]["workers_bytes"] == int(3 * u * 80 + u * 80)


def test_a_multi_worker_refusal_names_the_parts(tmp_path: Path) -> None:
    path = tmp_path / "c.pbtxt"
    path.write_text(ONE % (1000, 16, "adagrad { }", ""))
    result = run_cli("simulate", str(path), "--workers", "2", "--steps", "2", "--max-memory",
                     "1M", "--out-dir", str(tmp_path / "o"))
    assert result.exit_code == 2, result.output
    assert "workers' gradients and accumulators" in result.output
    assert not (tmp_path / "o").exists()


def test_a_replay_dry_run_reads_only_the_headers(tmp_path: Path) -> None:
    import json

    import numpy as np

    from tpuemb_cfg.executor.memory import BASE_PROCESS, REPLAY_STEP_BYTES
    from tpuemb_cfg.formats.npzio import atomic_write_npz

    path = tmp_path / "c.pbtxt"
    path.write_text(ONE % (1000, 16, "adagrad { }", ""))
    batches = {}
    for step in range(2):  # 64 bags, 100 ids, a [64, 16] gradient
        splits = np.sort(np.r_[0, np.random.default_rng(step).integers(0, 100, 63), 100])
        batches[f"s{step}/f0/ids"] = np.arange(100, dtype=np.int64) * 7 % 1000
        batches[f"s{step}/f0/row_splits"] = splits.astype(np.int64)
        batches[f"s{step}/f0/grad"] = np.ones((64, 16), np.float32)
    atomic_write_npz(tmp_path / "b.npz", batches)
    result = run_cli("simulate", str(path), "--batches", str(tmp_path / "b.npz"), "--dry-run",
                     "--json", "--engine", "numpy")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["steps"] == 2 and shown["tables"][0]["ids_per_step"] == 100
    parts = shown["memory"]["estimate"]
    per_step = 100 * 8 + 65 * 8 + 64 * 16 * 4
    assert parts["inputs_bytes"] == shown["batches_bytes"] == 2 * per_step
    # Every table written at the end with each step's activations (as large as the gradients).
    assert parts["outputs_bytes"] == 1000 * 16 * 4 + 2 * 64 * 16 * 4
    assert parts["tables_and_slots_bytes"] == 2 * 1000 * 16 * 4
    assert parts["history_bytes"] == 2 * REPLAY_STEP_BYTES
    assert parts["process_bytes"] == BASE_PROCESS  # the NumPy engine: numba is not loaded
    # The step (module docstring, NumPy engine, n = 100 ids all distinct, b = 64 bags, D = 16):
    # held all step 20 n + 8 b + 2 * 4 b D + 28 n + 8 u + 16 (one host) + V / 4 = 14,570; on
    # top the largest transient: NumPy drawing the 16,000 default values (numba is not loaded),
    # 48 bytes each, 768,000 - more than the update of lazy Adagrad, (2 S + 4) * 4 u D = 38,400,
    # the lookup (4 u D + 2 * 4 n D), the backward pass (2 * 4 n D + 2 * 4 u D), the NaN check.
    assert parts["step_bytes"] == 14570 + 48 * 16000
    text = run_cli("simulate", str(path), "--batches", str(tmp_path / "b.npz"),
                   "--dry-run").output
    assert "replay of the 2 recorded steps of" in text
    assert "batches and initial arrays" in text
    assert text.splitlines()[-1] == "nothing was run or written (--dry-run)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.npz", "c.pbtxt"]
