"""jax-tpu-embedding mode: ``tpuemb_cfg.sparsecore.jte`` against jax-tpu-embedding 0.2.0.

Expected values were computed by jax-tpu-embedding 0.2.0 itself (tests/data/sparsecore/
PROVENANCE-B.md): 100 random stackings (``auto_stack_tables`` then
``prepare_feature_specs_for_training``, or the latter alone), the stacking of 198 preprocessing
cases, its 7 error cases, and a few preprocessed batches.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from tpuemb_cfg.algorithms.table import SPARSECORE
from tpuemb_cfg.sparsecore import jte
from tpuemb_cfg.sparsecore.config import SparseCoreConfig, SparseCoreOptimizer, SparseCoreTable
from tpuemb_cfg.sparsecore.topology import Topology

DATA = Path(__file__).parent / "data" / "sparsecore"


def _load(name: str) -> Any:
    path = DATA / name
    if name.endswith(".gz"):
        return json.loads(gzip.decompress(path.read_bytes()))
    return json.loads(path.read_text())


CASES = _load("jte_stacking_cases.json.gz")["cases"]
PREPROCESS_STACKING = _load("jte_preprocess_stacking.json.gz")["cases"]
ERRORS = {e["name"]: e for e in _load("jte_stacking_errors.json")}

#: The generator's optimizers (scripts/gen_jte_stacking.py): a new object per table.
OPTIMIZERS = {
    "sgd_0.1": lambda: jte.SGDOptimizerSpec(learning_rate=0.1),
    "sgd_0.5": lambda: jte.SGDOptimizerSpec(learning_rate=0.5),
    "adagrad_0.1": lambda: jte.AdagradOptimizerSpec(learning_rate=0.1),
    "adam_0.01": lambda: jte.AdamOptimizerSpec(learning_rate=0.01),
    "ftrl_0.01": lambda: jte.FTRLOptimizerSpec(learning_rate=0.01),
}

#: The limit callables named in the data's meta.note (``default`` = no callable: 256).
LIMITS = {
    "default": None,
    "quarter_batch": lambda name, batch: max(1, batch // 4),
    "len_name": lambda name, batch: 100 + len(name),
}


# Stand-ins: plain classes with jax-tpu-embedding's attribute names only (duck typing), as a
# user's own or jax-tpu-embedding's objects would be.
class StandInTable:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)
        self.stacked_table_spec = None
        self.setting_in_stack = None


class StandInFeature:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)
        self.id_transformation = None


class FTRLOptimizerSpec:  # named as jax-tpu-embedding's class; compares by value
    def __init__(self, learning_rate: float) -> None:
        self.learning_rate = learning_rate

    def __hash__(self) -> int:
        return hash((self.learning_rate,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FTRLOptimizerSpec) and hash(self) == hash(other)


def _initializer(*args: Any) -> None:  # never called by stacking
    raise AssertionError


def _build(case: dict[str, Any], *, stand_in: bool = False) -> Any:
    tables = []
    for t in case["tables"]:
        q = t["quantization"]
        quant = jte.QuantizationConfig(min_value=q[0], max_value=q[1], num_buckets=q[2]) \
            if q else None
        fields = dict(
            name=t["name"], vocabulary_size=t["vocabulary_size"], embedding_dim=t["embedding_dim"],
            initializer=_initializer, optimizer=OPTIMIZERS[t["optimizer"]](),
            combiner=t["combiner"], max_ids_per_partition=t["max_ids_per_partition"],
            max_unique_ids_per_partition=t["max_unique_ids_per_partition"],
            suggested_coo_buffer_size_per_device=t["suggested_coo_buffer_size_per_device"],
            quantization_config=quant)
        tables.append(StandInTable(**fields) if stand_in else jte.TableSpec(**fields))
    make = StandInFeature if stand_in else jte.FeatureSpec
    features = [make(name=f["name"], table_spec=tables[f["table"]], input_shape=f["input_shape"],
                     output_shape=f["output_shape"]) for f in case["features"]]
    if case["feature_structure"] == "dict":
        return {f.name: f for f in features}
    return features


def _run(case: dict[str, Any], feats: Any) -> None:
    c = case["call"]
    if c["mode"] == "auto":
        kwargs: dict[str, Any] = {}
        for key in ("stack_to_max_ids_per_partition", "stack_to_max_unique_ids_per_partition"):
            if LIMITS[c[key]] is not None:
                kwargs[key] = LIMITS[c[key]]
        jte.auto_stack_tables(feats, c["global_device_count"], c["num_sc_per_device"],
                              use_short_stack_names=c["use_short_stack_names"],
                              activation_mem_bytes_limit=c["activation_mem_bytes_limit"], **kwargs)
    jte.prepare_feature_specs_for_training(feats, global_device_count=c["global_device_count"],
                                           num_sc_per_device=c["num_sc_per_device"])


def _observed(feats: Any) -> dict[str, Any]:
    """What the generator recorded of jax-tpu-embedding's specs, read from ours."""
    leaves = jte.leaves(feats)
    features = []
    for f in leaves:
        tr, st = f.id_transformation, f.table_spec.setting_in_stack
        features.append(dict(
            name=f.name, table=f.table_spec.name,
            id_transformation=dict(row_offset=tr.row_offset, col_offset=tr.col_offset,
                                   col_shift=tr.col_shift),
            setting_in_stack=dict(stack_name=st.stack_name, padded_vocab_size=st.padded_vocab_size,
                                  padded_embedding_dim=st.padded_embedding_dim,
                                  row_offset_in_shard=st.row_offset_in_shard,
                                  shard_rotation=st.shard_rotation)))
    stacks: dict[str, Any] = {}
    for f in leaves:
        s = f.table_spec.stacked_table_spec
        if s.stack_name in stacks:
            continue
        members = {g.table_spec.name: g.table_spec.setting_in_stack.row_offset_in_shard
                   for g in leaves if g.table_spec.stacked_table_spec.stack_name == s.stack_name}
        stacks[s.stack_name] = dict(
            stack_name=s.stack_name, stack_vocab_size=s.stack_vocab_size,
            stack_embedding_dim=s.stack_embedding_dim,
            optimizer=f"{type(s.optimizer).__name__}(lr={s.optimizer.learning_rate})",
            combiner=s.combiner, total_sample_count=s.total_sample_count,
            max_ids_per_partition=s.max_ids_per_partition,
            max_unique_ids_per_partition=s.max_unique_ids_per_partition,
            activation_mem_bytes_limit=s.activation_mem_bytes_limit,
            suggested_coo_buffer_size_per_device=s.suggested_coo_buffer_size_per_device,
            quantization=list(s.quantization_config.as_tuple()) if s.quantization_config else None,
            tables_in_order=sorted(members, key=members.__getitem__))
    return dict(flattened_feature_order=[f.name for f in leaves], features=features,
                stacks=list(stacks.values()))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"case{c['id']}-{c['call']['mode']}")
def test_stacking_matches_jax_tpu_embedding(case: dict[str, Any]) -> None:
    feats = _build(case)
    _run(case, feats)
    assert _observed(feats) == case["expected"]


@pytest.mark.parametrize("case", CASES[::4], ids=lambda c: f"case{c['id']}")
def test_duck_typed_specs_stack_the_same(case: dict[str, Any]) -> None:
    """Plain objects with jax-tpu-embedding's attribute names get the same stacks; the records
    written into them are this package's (their module defines none)."""
    feats = _build(case, stand_in=True)
    _run(case, feats)
    assert _observed(feats) == case["expected"]
    first = jte.leaves(feats)[0]
    assert type(first.table_spec.stacked_table_spec) is jte.StackedTableSpec
    c = case["call"]
    read = jte.stacking_of(feats, global_device_count=c["global_device_count"],
                           num_sc_per_device=c["num_sc_per_device"])
    assert _stacking_fields(read) == _expected_stacking(case)


def test_stand_in_optimizer_maps_by_class_name() -> None:
    table = StandInTable(name="t", vocabulary_size=10, embedding_dim=4, optimizer=FTRLOptimizerSpec(
        0.5), combiner="sum", quantization_config=None)
    feature = StandInFeature(name="f", table_spec=table, input_shape=[8, 1], output_shape=[8, 4])
    config = jte.feature_specs_to_config([feature], global_device_count=1, num_sc_per_device=2)
    opt = config.tables[0].optimizer
    assert (opt.algorithm, opt.learning_rate, opt.source) == ("ftrl", 0.5, table.optimizer)
    assert opt.group == "FTRLOptimizerSpec(learning_rate=0.5)"


def _expected_stacking(case: dict[str, Any]) -> dict[str, Any]:
    """The expected stacks in the form of tpuemb's :class:`Stacking` fields."""
    e = case["expected"]
    features = {f["name"]: f for f in e["features"]}
    n = case["call"]["global_device_count"] * case["call"]["num_sc_per_device"]
    return dict(
        stacks=[(s["stack_name"], tuple(s["tables_in_order"]), s["stack_vocab_size"],
                 s["stack_embedding_dim"], s["combiner"], s["total_sample_count"],
                 s["max_ids_per_partition"], s["max_unique_ids_per_partition"],
                 s["suggested_coo_buffer_size_per_device"]) for s in e["stacks"]],
        features=[(name, features[name]["setting_in_stack"]["stack_name"],
                   features[name]["id_transformation"]["row_offset"],
                   features[name]["id_transformation"]["col_offset"],
                   features[name]["id_transformation"]["col_shift"],
                   features[name]["setting_in_stack"]["row_offset_in_shard"] * n)
                  for name in e["flattened_feature_order"]])


def _stacking_fields(stacking: Any) -> dict[str, Any]:
    return dict(
        stacks=[(s.name, tuple(t.name for t in s.tables), s.padded_vocabulary_size, s.padded_dim,
                 s.combiner, s.total_sample_count, s.max_ids_per_partition,
                 s.max_unique_ids_per_partition, s.suggested_coo_buffer_size_per_device)
                for s in stacking.stacks],
        features=[(f.name, f.stack, f.row_offset, f.col_offset, f.col_shift, f.col_offset)
                  for f in stacking.features])


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"case{c['id']}-{c['call']['mode']}")
def test_stack_config_and_stacking_of_match(case: dict[str, Any]) -> None:
    """The plain-configuration route gives the same stacks, and reading the stacked specs back
    (``stacking_of``) gives the same record."""
    c = case["call"]
    feats = _build(case)
    config = jte.feature_specs_to_config(
        feats, global_device_count=c["global_device_count"],
        num_sc_per_device=c["num_sc_per_device"],
        stack_to_max_ids_per_partition=LIMITS[c["stack_to_max_ids_per_partition"]],
        stack_to_max_unique_ids_per_partition=LIMITS[c["stack_to_max_unique_ids_per_partition"]],
        use_short_stack_names=c["use_short_stack_names"],
        activation_mem_bytes_limit=c["activation_mem_bytes_limit"],
        auto_stack=c["mode"] == "auto")
    stacking = jte.stack_config(config)
    assert (stacking.mode, stacking.num_partitions, stacking.sparse_cores_per_partition) == (
        "jax", c["global_device_count"], c["num_sc_per_device"])
    assert _stacking_fields(stacking) == _expected_stacking(case)
    _run(case, feats)
    read = jte.stacking_of(feats, global_device_count=c["global_device_count"],
                           num_sc_per_device=c["num_sc_per_device"])
    assert _stacking_fields(read) == _stacking_fields(stacking)
    assert [s.tables for s in read.stacks] == [s.tables for s in stacking.stacks]


@pytest.mark.parametrize("case", PREPROCESS_STACKING, ids=lambda c: f"case{c['id']}")
def test_stacking_of_preprocessing_cases(case: dict[str, Any]) -> None:
    """The stacks jax-tpu-embedding preprocessed: one shared SGD spec, constant limit
    callables, a dict of features."""
    opt = jte.SGDOptimizerSpec(learning_rate=0.1)
    tables = [jte.TableSpec(initializer=_initializer, optimizer=opt, **t) for t in case["tables"]]
    feats = {f["name"]: jte.FeatureSpec(
        name=f["name"], table_spec=tables[f["table"]],
        input_shape=[case["batch_global"], f["valency"]],
        output_shape=[case["batch_global"], tables[f["table"]].embedding_dim])
        for f in case["features"]}
    g, nsc = case["global_device_count"], case["num_sc_per_device"]
    if case["stacking"] == "auto":
        jte.auto_stack_tables(
            feats, g, nsc,
            stack_to_max_ids_per_partition=lambda n, b: case["stack_to_max_ids_per_partition"],
            stack_to_max_unique_ids_per_partition=lambda n, b: case[
                "stack_to_max_unique_ids_per_partition"])
    jte.prepare_feature_specs_for_training(feats, g, nsc)
    observed: dict[str, Any] = {}
    for name in sorted(feats):
        f = feats[name]
        s, st, tr = f.table_spec.stacked_table_spec, f.table_spec.setting_in_stack, \
            f.id_transformation
        entry = observed.setdefault(s.stack_name, dict(
            stack_name=s.stack_name, stack_vocab_size=s.stack_vocab_size,
            total_sample_count=s.total_sample_count,
            max_ids_per_partition=s.max_ids_per_partition,
            max_unique_ids_per_partition=s.max_unique_ids_per_partition,
            suggested_coo_buffer_size_per_device=s.suggested_coo_buffer_size_per_device,
            combiner=s.combiner, features={}))
        entry["features"][name] = dict(
            table=f.table_spec.name, row_offset=tr.row_offset, col_offset=tr.col_offset,
            col_shift=tr.col_shift, row_offset_in_shard=st.row_offset_in_shard,
            shard_rotation=st.shard_rotation, padded_vocab_size=st.padded_vocab_size)
    assert observed == case["expected"]


# ---------------------------------------------------------------- errors (jte_stacking_errors)

def _one() -> dict[str, jte.FeatureSpec]:
    t = jte.TableSpec(name="t", vocabulary_size=100, embedding_dim=8, initializer=_initializer,
                      optimizer=jte.SGDOptimizerSpec(learning_rate=0.1), combiner="sum")
    return {"f": jte.FeatureSpec(name="f", table_spec=t, input_shape=[16, 1],
                                 output_shape=[16, 8])}


def test_error_num_sc_per_device_3() -> None:
    assert ERRORS["num_sc_per_device_3"]["raised"] == "ValueError"
    with pytest.raises(ValueError, match="Invalid num_sc_per_device: 3; .* 4 .* 2"):
        jte.auto_stack_tables(_one(), global_device_count=2, num_sc_per_device=3)


@pytest.mark.parametrize("name", ["num_sc_per_device_None_on_cpu", "prepare_num_sc_None_on_cpu"])
def test_error_num_sc_per_device_none_names_the_fix(name: str) -> None:
    assert ERRORS[name]["raised"] == "ValueError"
    assert "Unknown sparsecore count for device kind: cpu" in ERRORS[name]["message"]
    call = jte.auto_stack_tables if name.startswith("num_sc") \
        else jte.prepare_feature_specs_for_training
    with pytest.raises(ValueError, match=r"device kind: cpu.*num_sc_per_device.*v5p 4, v6e 2"):
        call(_one(), global_device_count=2, num_sc_per_device=None)


def test_error_duplicate_feature_names_accepted() -> None:
    assert ERRORS["duplicate_feature_names"]["raised"] is None
    t = _one()["f"].table_spec
    feats = [jte.FeatureSpec(name="f", table_spec=t, input_shape=[16, 1], output_shape=[16, 8])
             for _ in range(2)]
    jte.auto_stack_tables(feats, global_device_count=2, num_sc_per_device=4)
    # both features are named "f": the offset is looked up by name, so both get the later one
    assert [f.id_transformation.row_offset for f in feats] == [16, 16]
    assert t.stacked_table_spec.total_sample_count == 32


def test_error_auto_stack_twice_accepted() -> None:
    assert ERRORS["auto_stack_twice"]["raised"] is None
    feats = _one()
    jte.auto_stack_tables(feats, global_device_count=2, num_sc_per_device=4)
    jte.auto_stack_tables(feats, global_device_count=2, num_sc_per_device=4)
    assert feats["f"].table_spec.stacked_table_spec.stack_vocab_size == 128


def test_error_global_device_count_0_is_a_clear_error() -> None:
    """jax-tpu-embedding divides by zero; tpuemb says what is wrong."""
    assert ERRORS["global_device_count_0"]["raised"] == "ZeroDivisionError"
    with pytest.raises(ValueError, match="global_device_count must be a positive integer, got 0"):
        jte.auto_stack_tables(_one(), global_device_count=0, num_sc_per_device=4)


def test_error_set_limit_after_stacking() -> None:
    assert ERRORS["set_limit_after_stacking"]["raised"] == "AttributeError"
    feats = _one()
    jte.auto_stack_tables(feats, global_device_count=2, num_sc_per_device=4)
    with pytest.raises(AttributeError, match="'max_ids_per_partition'.*already stacked.*"
                                             "update_preprocessing_parameters"):
        feats["f"].table_spec.max_ids_per_partition = 5
    with pytest.raises(AttributeError, match="'vocabulary_size'.*dataclasses.replace"):
        feats["f"].table_spec.vocabulary_size = 5


def test_restacking_a_multi_table_stack_is_refused_before_any_write() -> None:
    opt = jte.SGDOptimizerSpec(0.1)
    tables = [jte.TableSpec(name=n, vocabulary_size=8, embedding_dim=8, initializer=None,
                            optimizer=opt, combiner="sum") for n in ("a", "b")]
    feats = [jte.FeatureSpec(name=f"f{t.name}", table_spec=t, input_shape=[8, 1],
                             output_shape=[8, 8]) for t in tables]
    jte.auto_stack_tables(feats, 1, 2)
    assert tables[1].setting_in_stack.stack_name == "a_b"
    before = [f.id_transformation for f in feats]
    with pytest.raises(ValueError, match="Table a is already stacked in group a_b"):
        jte.auto_stack_tables(feats, 1, 2, use_short_stack_names=False)
    assert [f.id_transformation for f in feats] == before


def test_chip_kind_for_num_sc_per_device() -> None:
    feats = _one()
    jte.auto_stack_tables(feats, 2, "TPU v6 lite")
    assert feats["f"].table_spec.stacked_table_spec.stack_vocab_size == 128  # 8 x 2 x 2 -> 32
    assert jte.sparse_cores_per_device("v5p")[0] == 4
    with pytest.raises(ValueError, match="unknown TPU chip kind"):
        jte.sparse_cores_per_device("v4")


# ---------------------------------------------------------------- optimizer specs

def test_optimizer_defaults_and_algorithms() -> None:
    assert repr(jte.SGDOptimizerSpec()) == "SGDOptimizerSpec(learning_rate=0.001)"
    assert jte.AdagradOptimizerSpec().hyperparameters() == {
        "learning_rate": 0.001, "initial_accumulator_value": 0.1}
    assert jte.AdamOptimizerSpec().hyperparameters() == {
        "learning_rate": 0.001, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-8}
    assert jte.AdagradMomentumOptimizerSpec().hyperparameters() == {
        "learning_rate": 0.001, "momentum": 0.9, "beta2": 1.0, "epsilon": 1e-10,
        "exponent": 2.0, "use_nesterov": False, "initial_accumulator_value": 0.1,
        "initial_momentum_value": 0.0}
    assert jte.FTRLOptimizerSpec().hyperparameters() == {
        "learning_rate": 0.01, "learning_rate_power": -0.5, "l1_regularization_strength": 0.0,
        "l2_regularization_strength": 0.0, "beta": 0.0, "initial_accumulator_value": 0.1,
        "initial_linear_value": 0.0, "multiply_linear_by_learning_rate": False}
    classes = (jte.SGDOptimizerSpec, jte.AdagradOptimizerSpec, jte.AdagradMomentumOptimizerSpec,
               jte.AdamOptimizerSpec, jte.FTRLOptimizerSpec)
    assert tuple(c.algorithm for c in classes) == SPARSECORE
    assert [c().short_name() for c in classes] == ["sgd", "adagrad", "adagrad_momentum", "adam",
                                                   "ftrl"]


def test_optimizer_equality_is_by_hyperparameter_hash() -> None:
    def schedule(step: int) -> float:
        return 0.1

    def other(step: int) -> float:
        return 0.1

    assert jte.AdagradOptimizerSpec(0.1) == jte.AdagradOptimizerSpec(0.1)
    assert jte.AdagradOptimizerSpec(0.1) != jte.AdagradOptimizerSpec(0.1, 0.2)
    assert jte.SGDOptimizerSpec(schedule) == jte.SGDOptimizerSpec(schedule)
    assert jte.SGDOptimizerSpec(schedule) != jte.SGDOptimizerSpec(other)
    # as in the reference, only hashes are compared: hash(-1) == hash(-2) in CPython
    assert jte.SGDOptimizerSpec(-1) == jte.SGDOptimizerSpec(-2)


def test_distinct_schedules_keep_tables_apart() -> None:
    def schedule(step: int) -> float:
        return 0.1

    def make(lr: Any) -> jte.TableSpec:
        return jte.TableSpec(name=f"t{len(made)}", vocabulary_size=64, embedding_dim=8,
                             initializer=None, optimizer=jte.SGDOptimizerSpec(lr),
                             combiner="sum")

    made: list[jte.TableSpec] = []
    for lr in (schedule, schedule, lambda s: 0.1, lambda s: 0.1):
        made.append(make(lr))
    feats = [jte.FeatureSpec(name=f"f{i}", table_spec=t, input_shape=[8, 1],
                             output_shape=[8, 8]) for i, t in enumerate(made)]
    config = jte.feature_specs_to_config(feats, global_device_count=1, num_sc_per_device=2)
    assert [t.optimizer.group for t in config.tables] == [
        "SGDOptimizerSpec(learning_rate=<callable "
        "test_distinct_schedules_keep_tables_apart.<locals>.schedule>)"] * 2 + [
        "SGDOptimizerSpec(learning_rate=<callable "
        "test_distinct_schedules_keep_tables_apart.<locals>.<lambda>>)",
        "SGDOptimizerSpec(learning_rate=<callable "
        "test_distinct_schedules_keep_tables_apart.<locals>.<lambda>>) #3"]
    stacking = jte.stack_config(config)
    assert [s.name for s in stacking.stacks] == ["t0_t1", "t2", "t3"]


# ---------------------------------------------------------------- stack_config on a config

def _config(**settings: Any) -> SparseCoreConfig:
    """Three width-8 tables, same optimizer group, 2 chips x 2 SparseCores (N = 4)."""
    from tpuemb_cfg.sparsecore.config import SparseCoreFeature
    opt = SparseCoreOptimizer(algorithm="adagrad", group="adagrad lr 0.1")
    tables = tuple(SparseCoreTable(name=n, vocabulary_size=v, dim=8, optimizer=opt,
                                   combiner="sum", max_ids_per_partition=7,
                                   max_unique_ids_per_partition=5,
                                   suggested_coo_buffer_size_per_device=64)
                   for n, v in (("b", 100), ("a", 33), ("c", 1)))
    features = (SparseCoreFeature("y", "a", (64, 1), (64, 8)),
                SparseCoreFeature("x", "b", (64, 1), (64, 8)),
                SparseCoreFeature("w", "a", (32, 1), (32, 8)),
                SparseCoreFeature("v", "c", (64, 1), (64, 8)))
    return SparseCoreConfig(api="jax", mode="jax", tables=tables, features=features,
                            topology=Topology(chips=2, sparse_cores_per_chip=2), **settings)


def test_stack_config_by_hand() -> None:
    """Hand-derived. N = 4; padded vocabularies (multiples of 32): a 64, b 128, c 32. Tables in
    first-use order a, b, c. Activation bytes 4 x 8 x sum(samples // 4): a (16 + 8) -> 768,
    b 16 -> 512, c 16 -> 512."""
    stacking = jte.stack_config(_config(activation_mem_bytes_limit=1280,
                                        stack_to_max_ids_per_partition=lambda n, s: s + len(n)))
    # a + b = 1280 <= 1280 joins; c would make 1792: its own stack
    assert [(s.name, [t.name for t in s.tables]) for s in stacking.stacks] == [
        ("a_b", ["a", "b"]), ("c", ["c"])]
    ab, c = stacking.stacks
    assert [(t.padded_vocabulary_size, t.row_offset_in_shard, t.shard_rotation)
            for t in ab.tables] == [(64, 0, 0), (128, 16, 2)]
    assert (ab.total_sample_count, ab.max_ids_per_partition, ab.max_unique_ids_per_partition,
            ab.suggested_coo_buffer_size_per_device) == (160, 163, 256, None)
    assert (c.max_ids_per_partition, c.max_unique_ids_per_partition,
            c.suggested_coo_buffer_size_per_device) == (7, 5, None)
    assert ab.group == "dim 8, adagrad lr 0.1, sum, no quantization"
    assert [(f.name, f.stack, f.row_offset, f.col_offset, f.col_shift)
            for f in stacking.features] == [
        ("y", "a_b", 0, 0, 0), ("x", "a_b", 64, 64, 2), ("w", "a_b", 128, 0, 0),
        ("v", "c", 0, 0, 0)]


def test_stack_config_prepare_only() -> None:
    """``disable_table_stacking``: one stack per table, features by name, own limits kept."""
    stacking = jte.stack_config(_config(disable_table_stacking=True))
    a = stacking.stack("a")
    assert [s.name for s in stacking.stacks] == ["a", "b", "c"]
    assert (a.total_sample_count, a.max_ids_per_partition,
            a.suggested_coo_buffer_size_per_device) == (96, 7, 64)
    # w sorts before y: w at 0, y at 32
    assert {f.name: f.row_offset for f in stacking.features} == {"y": 32, "x": 0, "w": 0, "v": 0}


def test_stack_config_refuses_what_jax_tpu_embedding_refuses() -> None:
    bad = _config()
    with pytest.raises(ValueError, match="Invalid num_sc_per_device: 3"):
        jte.stack_config(SparseCoreConfig(**{**bad.__dict__, "topology": Topology(2, 3)}))
    with pytest.raises(ValueError, match="feature 'y' uses table 'a', which the configuration"):
        jte.stack_config(SparseCoreConfig(**{**bad.__dict__, "tables": bad.tables[:1]}))


def test_stack_name_shortening() -> None:
    assert jte.stack_name(["a" * 25, "b" * 24]) == "a" * 25 + "_" + "b" * 24  # 50: kept
    full = "a" * 25 + "_" + "b" * 25  # 51 characters
    digest = hashlib.sha256(full.encode()).hexdigest()[:12]
    assert jte.stack_name(["a" * 25, "b" * 25]) == full[:50] + "..." + digest
    assert jte.stack_name(["a" * 25, "b" * 25], short=False) == full


def test_docs_example() -> None:
    """docs/sparsecore/stacking-jax.md. Hand-derived: v6e-64 has N = 64 x 2 = 128, vocabularies
    pad to multiples of 1024: user 1e6 -> 977 x 1024 = 1000448, item 250000 -> 245 x 1024 =
    250880; both (32 wide, equal Adagrad specs, mean) take 4 x 32 x 4096 // 128 = 4096 activation
    bytes and stack; sorted keys put item first: "item_user", 1251328 rows, limits 256."""
    user = jte.TableSpec(name="user", vocabulary_size=1_000_000, embedding_dim=32,
                         initializer=None, optimizer=jte.AdagradOptimizerSpec(0.05),
                         combiner="mean")
    item = jte.TableSpec(name="item", vocabulary_size=250_000, embedding_dim=32,
                         initializer=None, optimizer=jte.AdagradOptimizerSpec(0.05),
                         combiner="mean", max_ids_per_partition=64)
    feats = {n: jte.FeatureSpec(name=n, table_spec=t, input_shape=[4096, 1],
                                output_shape=[4096, 32])
             for n, t in (("user_id", user), ("item_id", item))}
    jte.auto_stack_tables(feats, global_device_count=64, num_sc_per_device="v6e")
    stacked = user.stacked_table_spec
    assert (stacked.stack_name, stacked.stack_vocab_size, stacked.max_ids_per_partition) == (
        "item_user", 1251328, 256)
    assert (user.setting_in_stack.row_offset_in_shard, user.setting_in_stack.shard_rotation,
            feats["user_id"].id_transformation) == (
        250880 // 128, 2, jte.FeatureIdTransformation(4096, 250880, 2))


def test_leaves_follow_jax_order() -> None:
    from collections import OrderedDict
    assert jte.leaves({"b": 1, "a": [2, (3, None)], "c": OrderedDict(z=4, y=5)}) == [2, 3, 1, 4, 5]


# ---------------------------------------------------------------- preprocessing (engineer C)

HAS_PREPROCESS = importlib.util.find_spec("tpuemb_cfg.sparsecore.preprocessing") is not None


@pytest.mark.skipif(not HAS_PREPROCESS, reason="needs preprocess (engineer C)")
@pytest.mark.parametrize("case", _load("jte_preprocess_wrapper.json.gz")["cases"],
                         ids=lambda c: f"case{c['id']}")
def test_preprocess_wrapper_matches_jax_tpu_embedding(case: dict[str, Any]) -> None:
    import numpy as np

    opt = jte.SGDOptimizerSpec(learning_rate=0.1)
    tables = [jte.TableSpec(initializer=_initializer, optimizer=opt, **t) for t in case["tables"]]
    specs, feats, weights = {}, {}, {}
    for f in case["features"]:
        t = tables[f["table"]]
        k = max([len(r) for r in f["ids"]] + [1])
        specs[f["name"]] = jte.FeatureSpec(name=f["name"], table_spec=t,
                                           input_shape=[case["batch_global"], k],
                                           output_shape=[case["batch_global"], t.embedding_dim])
        if f["ragged"]:
            feats[f["name"]] = np.empty(len(f["ids"]), dtype=object)
            weights[f["name"]] = np.empty(len(f["ids"]), dtype=object)
            for i, row in enumerate(f["ids"]):
                feats[f["name"]][i] = np.asarray(row, dtype=np.int32)
                if f["weights"] is not None:
                    weights[f["name"]][i] = np.asarray(f["weights"][i], dtype=np.float32)
        else:
            feats[f["name"]] = np.asarray(f["ids"], dtype=np.int32)
            weights[f["name"]] = np.asarray(f["weights"], dtype=np.float32)
    g, nsc, local = case["global_device_count"], case["num_sc_per_device"], \
        case["local_device_count"]
    if case["stacking"] == "auto":
        jte.auto_stack_tables(
            specs, g, nsc,
            stack_to_max_ids_per_partition=lambda n, b: case["stack_to_max_ids_per_partition"],
            stack_to_max_unique_ids_per_partition=lambda n, b: case[
                "stack_to_max_unique_ids_per_partition"])
    jte.prepare_feature_specs_for_training(specs, g, nsc)
    pre, stats = jte.preprocess_sparse_dense_matmul_input(
        feats, weights if case["weights_mode"] != "none" else None, specs, local, g,
        num_sc_per_device=nsc, has_leading_dimension=case["has_leading_dimension"],
        allow_id_dropping=case["allow_id_dropping"])
    e = case["expected"]
    for field in ("max_ids_per_partition", "max_unique_ids_per_partition",
                  "required_buffer_size_per_sc"):
        assert {k: list(map(int, v)) for k, v in getattr(stats, field).items()} == \
            e["stats"][field], field
    assert {k: int(v) for k, v in stats.id_drop_counters.items()} == e["stats"]["id_drop_counters"]
    assert np.asarray(pre.num_minibatches).tolist() == e["num_minibatches"]
    for key, shape in e["csr_shapes"].items():
        stack, part = key.split("/", 1)[1].rsplit("/", 1)
        if part != "valid_mask":
            assert list(np.shape(getattr(pre, f"lhs_{part}")[stack])) == shape, key
