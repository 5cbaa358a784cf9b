"""``tpuemb plan`` through limits (issue 34 item 2): a TensorFlow-mode step over a limit is
counted (failed steps, the ids lost, the SparseCores concerned), never an input error; every
limit hint names a setting the spec's API reads; PLAN010/PLAN011 never point at a field SC003
or SC004 calls ignored. Expected numbers are derived by hand in the comments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_cli

# One table "t" of 64 rows on 2 v6e chips x 2 SparseCores (N = 4), 8 samples per chip: 16 rows
# a step, one id each. A one-table stack "t" has rotation 0, so id x goes to partition x mod 4;
# SparseCore s of chip d holds rows 8d + 4s .. 8d + 4s + 3. Limits 2 / 2.
TF_SPEC = '''
from tpuemb_cfg.embedding import SGD, FeatureConfig, SparseCoreEmbeddingConfig, TableConfig

topology = "v6e-2"
t = TableConfig(vocabulary_size=64, dim=8, name="t", combiner="sum", optimizer=SGD(0.1))
feature_config = {"f": FeatureConfig(t, output_shape=[8])}
sparse_core_config = SparseCoreEmbeddingConfig(
    max_ids_per_table={"t": 2},
    max_unique_ids_per_table={"t": 2},
)
'''
# step 0: every row id 0: each SparseCore sends 4 entries (4 samples, 1 distinct id) to
#         partition 0: 4 > 2 fails the step.
# step 1: ids 0, 1, 2, 3 repeated: each SparseCore sends 1 id to each partition: passes.
# step 2: as step 1 but chip 1's SparseCore 1 holds ids 4, 8, 12, 16: 4 ids (4 distinct) to
#         partition 0: fails.
# So 2 of 3 steps fail, each losing its 16 ids: 32 of 48 dropped; only partition 0 overfilled.
# Observed maxima 4 / 4 (step 2); suggested 8 ceil(1.2 x 4 / 8) = 8 for both; at 8 / 8 nothing
# fails, and the buffer (64 x 8 = 512 entries a chip) holds every step: 0 dropped.
TF_STEPS = [np.zeros(16, np.int64), np.arange(16) % 4, np.r_[np.arange(12) % 4, [4, 8, 12, 16]]]

# keras-rs on TensorFlow (keras-rs 0.4.0's config classes as stand-ins: the 25 lines that open
# the keras-rs spec of the API tests): one table "a" whose own limits (512) never reach
# TensorFlow: its stack keeps 256 / 256. Global batch 4 on 2 v6e chips: 2 samples a chip, 1 per
# SparseCore.
KERAS_RS_SPEC = "".join(
    (Path(__file__).parent / "data" / "sparsecore" / "api_keras_rs_spec.py").read_text()
    .splitlines(keepends=True)[:25]) + '''
a = TableConfig("a", 2048, 8, optimizer="sgd", combiner="sum", placement="sparsecore",
                max_ids_per_partition=512, max_unique_ids_per_partition=512)
feature_config = {"fa": FeatureConfig("fa", a, (4, 300), (4, 8))}
topology = "v6e-2"
'''
# Row 0 (chip 0, SparseCore 0) holds the 300 ids 0, 4, ..., 1196: 300 distinct ids to partition
# 0, over 256: the step fails and its 303 ids are lost. Suggested: 8 ceil(1.2 x 300 / 8) = 360.
# At 360 / 360 the step runs, but chip 0's buffer is 64 x 2 samples = 128 entries: SparseCore
# 0's run of 300 keeps 128 (172 dropped), SparseCore 1's id 1 (row 1) finds it full: 173
# dropped; a device needed roundup8(300) + roundup8(1) = 312.
KERAS_RS_IDS = (np.r_[np.arange(300) * 4, [1, 2, 3]], np.array([0, 300, 301, 302, 303]))

# jax-tpu-embedding: two tables of one width and optimizer make one stack "u_v", whose limits
# come from the stack callables (4 / 4), not from u's own 1024 (SC003).
JAX_SPEC = '''
from tpuemb_cfg.sparsecore.jte import AdagradOptimizerSpec, FeatureSpec, TableSpec

global_device_count = 2
num_sc_per_device = 4
adagrad = AdagradOptimizerSpec(learning_rate=0.05, initial_accumulator_value=0.1)
u = TableSpec(name="u", vocabulary_size=4000, embedding_dim=8, initializer=None,
              optimizer=adagrad, combiner="sum", max_ids_per_partition=1024,
              max_unique_ids_per_partition=1024)
v = TableSpec(name="v", vocabulary_size=4000, embedding_dim=8, initializer=None,
              optimizer=adagrad, combiner="sum")
feature_specs = {
    "u": FeatureSpec(name="u", table_spec=u, input_shape=[64, 1], output_shape=[64, 8]),
    "v": FeatureSpec(name="v", table_spec=v, input_shape=[64, 1], output_shape=[64, 8]),
}
stack_to_max_ids_per_partition = lambda name, samples: 4
stack_to_max_unique_ids_per_partition = lambda name, samples: 4
'''


def _npz(path: Path, steps: list[tuple[np.ndarray, np.ndarray]]) -> str:
    arrays = {}
    for s, (ids, splits) in enumerate(steps):
        arrays[f"s{s}/f0/ids"] = ids.astype(np.int64)
        arrays[f"s{s}/f0/row_splits"] = splits.astype(np.int64)
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return str(path)


def _plan(*args: str) -> tuple[int, dict[str, Any]]:
    result = run_cli("plan", *args, "--format", "json", "-q")
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def test_tensorflow_step_over_a_limit_is_counted_not_refused(tmp_path: Path) -> None:
    spec = tmp_path / "tf_tight.py"
    spec.write_text(TF_SPEC)
    sample = _npz(tmp_path / "B.npz", [(ids, np.arange(17)) for ids in TF_STEPS])
    code, report = _plan(str(spec), "--ids", sample)
    assert code == 0  # counted, no gate
    limits = report["limits"]
    assert (limits["mode"], limits["steps"], limits["failed_steps"],
            limits["ids_in_failed_steps"]) == ("tensorflow", 3, 2, 32)
    (stack,) = limits["stacks"]
    now, later = stack["current"], stack["suggested"]
    assert (stack["observed_max_ids"], stack["observed_max_unique_ids"]) == (4, 4)
    assert (now["failed_steps"], now["dropped"], now["over_limit_sparse_cores"]) == (2, 32, [0])
    assert now["drops"] == [{"table": "t", "ids": 48, "dropped": 32, "share": 32 / 48}]
    assert (later["max_ids_per_partition"], later["max_unique_ids_per_partition"]) == (8, 8)
    assert (later["failed_steps"], later["dropped"]) == (0, 0)
    (finding,) = [d for d in report["findings"] if d["rule"] == "PLAN010"]
    assert finding["field_path"] == 'sparse_core_config.max_ids_per_table["t"]'
    assert finding["hint"] == ('set sparse_core_config.max_ids_per_table["t"] = 8 and '
                               'sparse_core_config.max_unique_ids_per_table["t"] = 8')
    assert "fails 2 of 3 step(s)" in finding["message"]
    gated = run_cli("plan", str(spec), "--ids", sample, "--fail-on", "drops", "-q")
    assert gated.exit_code == 1, gated.output
    assert ("gate: FAILED - drops: 32 ids dropped at the current limits, 2 step(s) failed"
            in gated.stdout)
    assert "failed steps: 2 of 3 at the current limits" in gated.stdout
    assert f"{spec}:8:24: error[PLAN010]" in gated.stdout  # the "t" key of max_ids_per_table
    compared = run_cli("plan", str(spec), "--ids", sample, "--compare", "hosts=2", "-q").stdout
    (row,) = [line for line in compared.splitlines() if "failed steps (current)" in line]
    assert row.split()[-2:] == ["2", "2"]  # as configured, hosts=2: the same steps


def test_keras_rs_on_tensorflow_says_the_limit_is_not_settable(tmp_path: Path) -> None:
    spec = tmp_path / "keras_rs_tight.py"
    spec.write_text(KERAS_RS_SPEC)
    sample = _npz(tmp_path / "B.npz", [KERAS_RS_IDS])
    code, report = _plan(str(spec), "--ids", sample)
    assert code == 0
    (stack,) = report["limits"]["stacks"]
    now, later = stack["current"], stack["suggested"]
    assert (now["max_ids_per_partition"], now["failed_steps"], now["dropped"]) == (256, 1, 303)
    assert (later["max_ids_per_partition"], later["dropped"]) == (360, 173)
    assert stack["required_buffer_size_per_device"] == 312
    rules = {d["rule"]: d for d in report["findings"]}
    assert rules["PLAN010"]["field_path"] == 'tables["a"]'
    assert rules["PLAN010"]["hint"].startswith("not settable through keras-rs on TensorFlow: ")
    assert "max_ids_per_table={'a': 360}" in rules["PLAN010"]["hint"]
    assert rules["PLAN011"]["hint"].startswith("not settable through keras-rs on TensorFlow: ")
    assert "312" in rules["PLAN011"]["hint"]
    assert run_cli("plan", str(spec), "--ids", sample, "--fail-on", "drops", "-q").exit_code == 1
    _no_contradiction(spec, report)


def test_jax_multi_table_stack_points_at_the_stack_callables(tmp_path: Path) -> None:
    """PLAN010 on a stack of several tables names auto_stack_tables' callables, the setting
    SC003 names, never the TableSpec field SC003 calls ignored (the contradiction of issue 34)."""
    spec = tmp_path / "jax_tight.py"
    spec.write_text(JAX_SPEC)
    # every sample id 0 in both features: 64 / 8 SparseCores = 8 samples each, 8 ids of u's row
    # 0 to one partition: over 4
    zeros = (np.zeros(64, np.int64), np.arange(65))
    arrays = {f"s0/f{f}/{k}": v for f in (0, 1) for k, v in zip(("ids", "row_splits"), zeros,
                                                                 strict=True)}
    np.savez(tmp_path / "B.npz", **arrays)  # type: ignore[arg-type]
    code, report = _plan(str(spec), "--ids", str(tmp_path / "B.npz"))
    assert code == 0
    (finding,) = [d for d in report["findings"] if d["rule"] == "PLAN010"]
    assert finding["field_path"] == "stack_to_max_ids_per_partition"
    assert finding["line"] == 16  # where the spec defines it
    assert finding["hint"].startswith("return ") and "'u_v'" in finding["hint"]
    _no_contradiction(spec, report)


def test_jax_one_table_stack_keeps_its_table_field() -> None:
    from tpuemb_cfg.sparsecore.advice import limit_advice
    from tpuemb_cfg.sparsecore.config import SparseCoreConfig
    from tpuemb_cfg.sparsecore.topology import Topology

    config = SparseCoreConfig("jax", "jax", (), (), Topology(1, 4))
    advice = limit_advice(config, "t", ("t",), (4, 4))
    assert advice.path == 'tables["t"].max_ids_per_partition'
    assert advice.limits(16, 16) == ("set max_ids_per_partition=16 and "
                                     "max_unique_ids_per_partition=16 on TableSpec 't' (a "
                                     "one-table stack keeps its table's limits)")


def _no_contradiction(spec: Path, report: dict[str, Any]) -> None:
    """No PLAN finding sits at, or tells the user to set, a field SC003/SC004 calls ignored;
    where SC003 names the setting to use, the plan's hint names the same one."""
    result = run_cli("validate", str(spec), "--format", "json")
    validated = json.loads(result.stdout)
    diagnostics = [d for f in validated["files"] for d in f["diagnostics"]]
    ignored = {d["field_path"]: d for d in diagnostics if d["rule"] in ("SC003", "SC004")}
    assert ignored, validated  # the specs above are built to show the conflict
    plan = [d for d in report["findings"] if d["rule"] in ("PLAN010", "PLAN011")]
    assert plan
    for finding in plan:
        assert finding["field_path"] not in ignored
        for path in ignored:
            field = path.rsplit(".", 1)[-1]
            assert f"set {path}" not in finding["hint"]
            assert f"{field}=" not in finding["hint"].split("TPUEmbeddingV2")[0]
        for rule in ignored.values():
            if rule["rule"] == "SC003" and "stack_to_" in (rule["hint"] or ""):
                assert "stack_to_max_ids_per_partition" in finding["hint"]


MLPERF = Path(__file__).resolve().parents[1] / "examples" / "sparsecore" / "keras_rs_dcnv2_v6e32.py"


def _mlperf_spec(backend: str, tmp_path: Path) -> Path:
    """The example as keras-rs runs it on ``backend``: TensorFlow as it stands; JAX with the
    spec naming its backend (issue 34 item 1: ``keras_backend = "jax"``)."""
    if backend == "tensorflow":
        return MLPERF
    spec = tmp_path / "keras_rs_dcnv2_v6e32_jax.py"
    spec.write_text(MLPERF.read_text() + '\nkeras_backend = "jax"\n')
    return spec


def _mlperf_sample(config: Any, path: Path, steps: int) -> str:
    """``steps`` global batches of 16,384 samples, each feature's bag its multi-hot length
    (the input shape's last axis) of Zipf(1.2) ids folded into the table."""
    rng = np.random.default_rng(34)
    vocabulary = {t.name: t.vocabulary_size for t in config.tables}
    arrays = {}
    for step in range(steps):
        for f, feature in enumerate(config.features):
            k = feature.input_shape[-1]
            ids = (rng.zipf(1.2, 16384 * k) - 1) % vocabulary[feature.table]
            arrays[f"s{step}/f{f}/ids"] = ids.astype(np.int64)
            arrays[f"s{step}/f{f}/row_splits"] = np.arange(16385, dtype=np.int64) * k
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return str(path)


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_keras_rs_mlperf_v6e32_plans_through_its_limits(backend: str, tmp_path: Path) -> None:
    """Issue 34's done-when on keras-rs' MLPerf DLRM-DCNv2 v6e-32 configuration with a Zipf
    sample over the limits: the plan reports the failed steps and drops, exit 0, and 1 under
    ``--fail-on drops``.

    TensorFlow: every stack keeps 256 / 256 (the tables' 8192 / 4096 never reach TensorFlow).
    Feature "20" alone puts 100 Zipf(1.2) ids in each sample: id 0 is missing from a bag with
    probability 0.82^100 (about 1e-9), so each SparseCore's 256 samples send about 256 entries
    of row 0 to one partition, and its ids 64, 128, ... (about 0.12 a bag) more: over 256 on
    every step. A failed step loses the stack's ids: 16,384 x (its features' lengths) a step.
    JAX (keras-rs 0.4.0: one stack of the 9 tables, the tables' limits, dropping always on):
    no step fails, drops are counted instead.
    """
    from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec

    spec = _mlperf_spec(backend, tmp_path)
    config = load_sparsecore_spec(str(spec)).config
    if config.mode != backend:
        pytest.skip(f"keras-rs' {backend} backend is not modelled on this branch (issue 34 "
                    "item 1: keras_backend)")
    sample = _mlperf_sample(config, tmp_path / "day.npz", 1)
    code, report = _plan(str(spec), "--ids", sample)
    assert code == 0
    limits = report["limits"]
    lengths = {f.name: f.input_shape[-1] for f in config.features}
    table_ids = {f.table: 16384 * lengths[f.name] for f in config.features}
    if backend == "tensorflow":
        assert {s["stack"]: (s["current"]["max_ids_per_partition"],
                             s["current"]["max_unique_ids_per_partition"])
                for s in limits["stacks"]} == {"0_1_10_11_19_20_22": (256, 256),
                                               "21_9": (256, 256)}
        assert limits["failed_steps"] == 1
        assert limits["ids_in_failed_steps"] == 16384 * sum(lengths.values())
        big = next(s for s in limits["stacks"] if "20" in s["tables"])
        assert big["current"]["failed_steps"] == 1 and big["observed_max_ids"] > 256
        for stack in limits["stacks"]:
            if stack["current"]["failed_steps"]:
                assert stack["current"]["dropped"] == sum(table_ids[t] for t in stack["tables"])
        hints = [d["hint"] for d in report["findings"] if d["rule"] == "PLAN010"]
        assert hints and all(h.startswith("not settable through keras-rs on TensorFlow")
                             for h in hints)
    else:
        (stack,) = limits["stacks"]
        assert sorted(stack["tables"]) == sorted(table_ids)
        assert limits["failed_steps"] == 0  # JAX drops ids, it never fails a step
    dropped = sum(s["current"]["dropped"] for s in limits["stacks"])
    gated = run_cli("plan", str(spec), "--ids", sample, "--fail-on", "drops", "-q")
    assert gated.exit_code == (1 if dropped else 0), gated.output


def test_jax_stack_callables_not_in_the_spec_place_the_finding_at_the_features(
        tmp_path: Path) -> None:
    """Without the callables the stack takes jax-tpu-embedding's 256 / 256; the finding names
    the callable to add and sits at ``feature_specs`` (line 12 of the spec)."""
    text = JAX_SPEC.split("stack_to_max_ids_per_partition =")[0]
    spec = tmp_path / "jax_default.py"
    spec.write_text(text.replace("[64, 1]", "[64, 40]"))
    # each of the 8 SparseCores holds 8 samples; a bag of the 40 distinct ids 0, 8, ..., 312
    # (all partition 0 for u) in every sample: 320 ids to one partition, over 256
    bag = np.arange(40, dtype=np.int64) * 8
    arrays = {f"s0/f{f}/{k}": v for f in (0, 1) for k, v in (
        ("ids", np.tile(bag, 64)), ("row_splits", np.arange(65, dtype=np.int64) * 40))}
    np.savez(tmp_path / "B.npz", **arrays)  # type: ignore[arg-type]
    _, report = _plan(str(spec), "--ids", str(tmp_path / "B.npz"))
    (finding,) = [d for d in report["findings"] if d["rule"] == "PLAN010"]
    assert (finding["field_path"], finding["line"]) == ("stack_to_max_ids_per_partition", 12)
    assert report["limits"]["stacks"][0]["current"]["max_ids_per_partition"] == 256


def test_simulate_step_over_a_limit_names_a_setting_the_api_reads(tmp_path: Path) -> None:
    """tpuemb simulate fails a TensorFlow-mode step over a limit as TensorFlow does; its fix is
    the API's own setting: TensorFlow's max_ids_per_table key (4 ids of row 0 from one
    SparseCore: raise it to 4), and for keras-rs on TensorFlow none (300 > 256)."""
    from tpuemb_cfg.base.errors import InputError
    from tpuemb_cfg.executor.batch import FeatureInput
    from tpuemb_cfg.executor.options import RunOptions
    from tpuemb_cfg.session import prepare_sparsecore
    from tpuemb_cfg.sim.sparsecore.run import SparseCoreRun

    for name, text, ids, splits, rows, expected in (
            ("tf", TF_SPEC, TF_STEPS[0], np.arange(17), 16,
             'set sparse_core_config.max_ids_per_table["t"] = 4 and '
             'sparse_core_config.max_unique_ids_per_table["t"] = 2'),
            ("keras_rs", KERAS_RS_SPEC, *KERAS_RS_IDS, 4,
             "not settable through keras-rs on TensorFlow: its conversion passes no limits")):
        spec = tmp_path / f"{name}.py"
        spec.write_text(text)
        run = SparseCoreRun(prepare_sparsecore(spec), RunOptions(engine="numpy"))
        with pytest.raises(InputError) as caught:
            run.replay_step([FeatureInput(ids, splits, None, np.ones((rows, 8), np.float32))])
        message = str(caught.value)
        assert message.startswith("<input>: error: step 0: stacked table ")
        assert expected in message
        assert "raise max_ids_per_table" not in message


def test_suggested_limits_below_the_largest_step_say_so(tmp_path: Path) -> None:
    """With --quantile 0.5 the suggestion covers the smaller of two steps' maxima. Step A: the
    16 rows id 0 (4 ids a SparseCore to partition 0); step B: row 0 holds the 20 distinct ids
    0, 4, ..., 76 (20 to partition 0), the other 15 rows id 1. Per-step maxima 4 and 20: the
    nearest-rank median is 4, suggested 8 ceil(1.2 x 4 / 8) = 8 (distinct: 1 -> 8). At 8 / 8
    step B still fails (20 > 8): 1 failed step, its 35 ids dropped; PLAN011 blames the quantile
    (not the buffer) and gives the pair for the largest step, 8 ceil(1.2 x 20 / 8) = 24."""
    spec = tmp_path / "tf_tight.py"
    spec.write_text(TF_SPEC.replace("vocabulary_size=64", "vocabulary_size=128"))
    step_b = (np.r_[np.arange(20) * 4, np.ones(15, np.int64)], np.r_[0, np.arange(20, 36)])
    sample = _npz(tmp_path / "B.npz", [(np.zeros(16, np.int64), np.arange(17)), step_b])
    _, report = _plan(str(spec), "--ids", sample, "--quantile", "0.5")
    (stack,) = report["limits"]["stacks"]
    later = stack["suggested"]
    assert (later["max_ids_per_partition"], later["max_unique_ids_per_partition"]) == (8, 8)
    assert (later["failed_steps"], later["dropped"]) == (1, 35)
    assert stack["current"]["dropped"] == 16 + 35
    (finding,) = [d for d in report["findings"] if d["rule"] == "PLAN011"]
    assert "they cover quantile 0.5 of the per-step maxima" in finding["message"]
    assert "fails 1 step(s)" in finding["message"]
    assert finding["hint"] == ('set sparse_core_config.max_ids_per_table["t"] = 24 and '
                               'sparse_core_config.max_unique_ids_per_table["t"] = 24')
