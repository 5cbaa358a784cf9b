"""build_config: compile.md sections 3-5, checked against the spec's own examples and bytes."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import pytest
from google.protobuf import text_format

from tpuemb_cfg import embedding as emb
from tpuemb_cfg.embedding import (
    FTRL,
    SGD,
    Adagrad,
    Adam,
    ConfigValidationError,
    FeatureConfig,
    TableConfig,
    build_config,
)
from tpuemb_cfg.proto.optimization_parameters_pb2 import OptimizationParameters


def _params(optimizer: emb.Optimizer, keep_lr: bool = False) -> bytes:
    params = OptimizationParameters()
    optimizer.write(params, lambda fn: 0)
    if not keep_lr:
        params.ClearField("learning_rate")
    return params.SerializeToString()


def _one(optimizer: emb.Optimizer | None = None, **table: Any) -> Any:
    t = TableConfig(table.pop("vocabulary_size", 10), table.pop("dim", 4), optimizer=optimizer,
                    **table)
    return t, FeatureConfig(t, output_shape=[8])


# -- section 5: byte-level details ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("optimizer", "hex_bytes"),
    [
        (SGD(), "2200880101"),
        (SGD(use_gradient_accumulation=False), "2200880102"),
        (Adagrad(), "1a00880101"),
        (FTRL(), "2a051d000000bf880101"),
        (SGD(low_dimensional_packing_status=True), "2200880101e00101"),
        (SGD(weight_decay_factor=0.1, multiply_weight_decay_factor_by_learning_rate=True),
         "22008501cdcccc3d880101b00101"),
        # a zero or missing factor writes neither decay field
        (SGD(weight_decay_factor=0.0, multiply_weight_decay_factor_by_learning_rate=True),
         "2200880101"),
        (SGD(weight_decay_factor=-0.0), "2200880101"),
        # FTRL(learning_rate_power=0): present but empty ftrl {}
        (FTRL(learning_rate_power=0), "2a00880101"),
        # clipvalue=0: lower -0.0 written, upper present but empty
        (SGD(clipvalue=0), "22003a090a050d000000801200880101"),
        (SGD(clip_weight_min=-0.0), "12070a050d0000008022 00880101".replace(" ", "")),
    ],
)
def test_optimizer_encodings_from_the_spec(optimizer: emb.Optimizer, hex_bytes: str) -> None:
    assert _params(optimizer).hex() == hex_bytes


def test_default_adam_and_adagrad_momentum_messages() -> None:
    want = OptimizationParameters()
    text_format.Parse(
        "adam { beta1: 0.9 beta2: 0.999 epsilon: 1e-07 use_sum_inside_sqrt: true } "
        "gradient_accumulation_status: ENABLED", want)
    assert _params(Adam()) == want.SerializeToString()
    want = OptimizationParameters()
    text_format.Parse(
        "adagrad_momentum { exponent: 2 beta2: 1 epsilon: 1e-10 } "
        "gradient_accumulation_status: ENABLED", want)
    assert _params(emb.AdagradMomentum()) == want.SerializeToString()
    # Assigning only default values still selects the member: adam { epsilon: 1e-07 }.
    got = OptimizationParameters.FromString(
        _params(Adam(beta_1=0, beta_2=0, sum_inside_sqrt=False)))
    assert got.WhichOneof("parameters") == "adam"
    assert text_format.MessageToString(got.adam, as_one_line=True) == "epsilon: 1e-07"


@pytest.mark.parametrize(
    ("learning_rate", "hex_bytes"),
    [(0.0, "6a050d00000000"), (-0.0, "6a050d00000080"), (0.01, "6a050d0ad7233c")],
)
def test_constant_learning_rates_are_always_written(learning_rate: float, hex_bytes: str) -> None:
    assert _params(SGD(learning_rate=learning_rate), keep_lr=True).hex() == "2200" + hex_bytes + (
        "880101")


def test_tag_zero_is_an_empty_dynamic_message() -> None:
    assert _params(SGD(learning_rate=lambda: 0.1), keep_lr=True).hex() == "22006a021200880101"


def test_non_numeric_learning_rate_fails_at_build_naming_the_table() -> None:
    t, f = _one(SGD(learning_rate="0.1"), name="user")
    with pytest.raises(TypeError) as info:
        build_config(f)
    assert "'user'" in str(info.value) and "learning_rate" in str(info.value)


# -- section 5.1: the worked example --------------------------------------------------------------

WORKED_EXAMPLE_HEX = (
    "0a240a0367656f103218042a1922003a0e0a050d000000bf12050d0000003f6a0212008801010a2a0a077461626c"
    "655f31100418042a1b2a0f0d0ad7233c1d000000bf3d0000003f6a050dcdcc4c3d8801010a260a047573657210e8"
    "0718082a19120e0a050d000080bf12050d0000803f1a006a02120088010110022004280852031a0110520610011a"
    "021005520e0a07757365725f696410021a0110"
)


def test_worked_example_of_compile_md() -> None:
    def warmup() -> float:
        return 0.1

    user = TableConfig(vocabulary_size=1000, dim=8, name="user",
                       optimizer=Adagrad(learning_rate=warmup, clip_weight_min=-1.0,
                                         clip_weight_max=1.0))
    item = TableConfig(vocabulary_size=3, dim=4,
                       optimizer=FTRL(learning_rate=0.05, l1_regularization_strength=0.01,
                                      beta=0.5))
    geo = TableConfig(vocabulary_size=50, dim=4, name="geo")
    features = {"user_id": FeatureConfig(user, name="user_id"),
                "item_hist": FeatureConfig(item, max_sequence_length=5),
                "geo": FeatureConfig(geo, output_shape=[16])}
    compiled = build_config(
        features, SGD(learning_rate=warmup, clipvalue=0.5), num_hosts=4, num_replicas=8,
        per_replica_input_shapes={"user_id": [16], "item_hist": [16, 7], "geo": [16]})
    data = compiled.config.SerializeToString()
    assert len(data) == 157
    assert data.hex() == WORKED_EXAMPLE_HEX
    assert compiled.dynamic_learning_rates == [warmup]
    # TensorFlow writes the inherited optimizer and the default name back into the objects.
    assert item.name == "table_1" and isinstance(geo.optimizer, SGD)
    assert [(u.table, u.argument) for u in compiled.tag_uses[0]] == [
        ("geo", "learning_rate"), ("user", "learning_rate")]


# -- section 3.4: tags ----------------------------------------------------------------------------


def _tags(learning_rates: list[Any]) -> tuple[list[Any], list[Any]]:
    features = [FeatureConfig(TableConfig(10, 4, optimizer=SGD(learning_rate=lr)),
                              output_shape=[4]) for lr in learning_rates]
    compiled = build_config(features)
    lrs = [td.optimization_parameters.learning_rate for td in compiled.config.table_descriptor]
    kinds = [("tag", lr.dynamic.tag) if lr.WhichOneof("learning_rate") == "dynamic"
             else ("constant", round(lr.constant, 6)) for lr in lrs]
    return kinds, compiled.dynamic_learning_rates


def test_tags_by_first_appearance_constants_take_no_tag() -> None:
    def f() -> float:
        return 1.0

    def g() -> float:
        return 2.0

    kinds, lrs = _tags([0.1, f, 0.2, g, f])
    assert kinds == [("constant", 0.1), ("tag", 0), ("constant", 0.2), ("tag", 1), ("tag", 0)]
    assert lrs == [f, g]


def test_two_identical_lambdas_are_two_tags() -> None:
    kinds, lrs = _tags([lambda: 0.1, lambda: 0.1])
    assert kinds == [("tag", 0), ("tag", 1)] and len(lrs) == 2


class _Sched:
    def lr(self) -> float:
        return 0.1


def test_bound_methods_of_one_object_share_a_tag() -> None:
    a, b = _Sched(), _Sched()
    kinds, lrs = _tags([a.lr, b.lr, a.lr])
    assert kinds == [("tag", 0), ("tag", 1), ("tag", 0)]
    assert lrs == [a.lr, b.lr]


class _EqualRate:
    def __init__(self, key: str) -> None:
        self.key = key

    def __call__(self) -> float:
        return 0.1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _EqualRate) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)


def test_callables_with_custom_equality_share_a_tag() -> None:
    kinds, lrs = _tags([_EqualRate("x"), _EqualRate("y"), _EqualRate("x")])
    assert kinds == [("tag", 0), ("tag", 1), ("tag", 0)] and len(lrs) == 2


def test_ctor028_unhashable_callable() -> None:
    class Unhashable(_EqualRate):
        __hash__ = None  # type: ignore[assignment]

    with pytest.raises(TypeError) as info:
        _tags([Unhashable("x")])
    assert "hashable" in str(info.value) and "table_0" in str(info.value)


def test_step_counter_of_frequency_aware_adagrad_takes_the_next_tag() -> None:
    def lr() -> float:
        return 0.1

    def step() -> float:
        return 7.0

    a = TableConfig(10, 4, optimizer=SGD(learning_rate=lr), name="a")
    b = TableConfig(10, 4, name="b", optimizer=emb.FrequencyAwareAdagrad(
        learning_rate=lr, step_counter=step, max_lr_multiplier=4.0, probability_exponent=0.5))
    compiled = build_config([FeatureConfig(a, output_shape=[4]),
                             FeatureConfig(b, output_shape=[4])])
    assert compiled.dynamic_learning_rates == [lr, step]
    faa = compiled.config.table_descriptor[1].optimization_parameters
    assert faa.learning_rate.dynamic.tag == 0
    assert faa.frequency_aware_adagrad.step_counter.tag == 1
    assert [u.argument for u in compiled.tag_uses[1]] == ["step_counter"]


# -- section 3.1-3.3: structure, tables, names ----------------------------------------------------


def test_dict_keys_sorted_at_every_level_and_lists_in_order() -> None:
    tables = {k: TableConfig(10, 4, name=k) for k in ("a", "b", "c", "d")}
    fc = {"z": [FeatureConfig(tables["a"]), FeatureConfig(tables["b"])],
          "B": {"y": FeatureConfig(tables["c"]), "x": FeatureConfig(tables["d"])}}
    compiled = build_config(fc, SGD(), per_replica_batch_size=4)
    assert [t.name for t in compiled.tables] == ["d", "c", "a", "b"]
    assert [f.path for f in compiled.features] == ["B/x", "B/y", "z/0", "z/1"]


def test_named_tuples_follow_their_fields() -> None:
    pair = namedtuple("pair", ["second", "first"])
    t1, t2 = TableConfig(10, 4, name="t1"), TableConfig(10, 4, name="t2")
    compiled = build_config(pair(FeatureConfig(t2), FeatureConfig(t1)), SGD(),
                            per_replica_batch_size=2)
    assert [t.name for t in compiled.tables] == ["t2", "t1"]


def test_mixed_key_types_and_non_feature_leaves_raise_type_errors() -> None:
    t = TableConfig(10, 4)
    with pytest.raises(TypeError, match="sorted"):
        build_config({"a": FeatureConfig(t), 1: FeatureConfig(t)}, SGD(),
                     per_replica_batch_size=2)
    with pytest.raises(TypeError, match="'x/1'.*None"):
        build_config({"x": [FeatureConfig(t), None]}, SGD(), per_replica_batch_size=2)


def test_same_feature_twice_gives_two_descriptors_and_unused_tables_are_dropped() -> None:
    used, unused = TableConfig(10, 4, name="used"), TableConfig(10, 4, name="unused")
    f = FeatureConfig(used)
    compiled = build_config([f, f], SGD(), per_replica_batch_size=2)
    assert len(compiled.config.feature_descriptor) == 2
    assert [t.name for t in compiled.config.table_descriptor] == ["used"]
    assert unused.optimizer is None


def test_ctor023_table_without_optimizer() -> None:
    t, f = _one(None, name="orphan")
    with pytest.raises(ValueError, match="'orphan' has no optimizer"):
        build_config(f)
    with pytest.raises(TypeError, match="optimizer"):
        build_config(f, optimizer="sgd")  # type: ignore[arg-type]


def test_ctor024_default_names_collide_with_explicit_ones() -> None:
    first = TableConfig(10, 4, name="table_1")
    second = TableConfig(10, 4)
    with pytest.raises(ValueError, match="tables 0 and 1 .* both named 'table_1'"):
        build_config([FeatureConfig(first), FeatureConfig(second)], SGD(),
                     per_replica_batch_size=2)


def test_empty_table_name_is_kept_and_rejected_by_the_validator() -> None:
    t, f = _one(SGD(), name="")
    with pytest.raises(ConfigValidationError) as info:
        build_config(f)
    assert "TBL002" in str(info.value)
    assert [d.rule for d in info.value.diagnostics] == ["TBL002"]
    assert build_config(f, validate=False).config.table_descriptor[0].name == ""


def test_validation_errors_are_raised_all_at_once() -> None:
    # Both are errors of TensorFlow's C++ (an empty table name, an input_shape entry of 0).
    table = TableConfig(10, 4, optimizer=SGD(), name="")
    with pytest.raises(ConfigValidationError) as info:
        build_config(FeatureConfig(table, output_shape=[8, 0]))
    rules = {d.rule for d in info.value.diagnostics}
    assert {"TBL002", "FEAT003"} <= rules
    assert isinstance(info.value, ValueError)


# -- section 3.5: output shapes -------------------------------------------------------------------


def _shape(input_shape: Any = None, *, batch: int | None = None, **feature: Any) -> list[int]:
    t = TableConfig(10, 4)
    f = FeatureConfig(t, **feature)
    compiled = build_config(f, SGD(), per_replica_input_shapes=input_shape,
                            per_replica_batch_size=batch)
    return list(compiled.config.feature_descriptor[0].input_shape)


@pytest.mark.parametrize(
    ("input_shape", "feature", "want"),
    [
        ([16], {}, [16]),
        ([16, 1], {}, [16]),
        ([16, 7], {}, [16]),
        ([16, 7], {"max_sequence_length": 5}, [16, 5]),
        ([16, 1], {"max_sequence_length": 5}, [16]),
        ([16, 5, 2], {}, [16, 5]),
        ([16], {"output_shape": [16, 5]}, [16, 5]),
        ([16, 3], {"output_shape": [0, 3]}, [0, 3]),
    ],
)
def test_shapes_from_per_replica_input_shapes(
    input_shape: list[int], feature: dict[str, Any], want: list[int]
) -> None:
    t = TableConfig(10, 4)
    compiled = build_config(FeatureConfig(t, **feature), SGD(),
                            per_replica_input_shapes=input_shape, validate=False)
    assert list(compiled.config.feature_descriptor[0].input_shape) == want


def test_shapes_from_batch_size() -> None:
    assert _shape(batch=16, max_sequence_length=3) == [16, 3]
    assert _shape(batch=16) == [16]
    assert _shape(16, max_sequence_length=3) == [16, 3]  # an int input shape is a batch size
    assert _shape(batch=16, output_shape=[16, 5]) == [16, 5]  # rank 1 incoming: check skipped
    with pytest.raises(ValueError, match=r"\[4\].*\[16\]"):
        _shape(batch=16, output_shape=[4])


@pytest.mark.parametrize(
    ("input_shape", "feature", "words"),
    [
        ([16, 3, 1], {"output_shape": [8, 3]}, ["[8, 3]", "[16, 3]", "inconsistent"]),
        ([8], {"output_shape": []}, ["[]", "[8]", "inconsistent"]),
        (None, {}, ["<unknown>", "not fully defined"]),
        ([], {}, ["[]", "rank"]),
        ([16], {"output_shape": [None, 4]}, ["[None, 4]", "not fully defined"]),
    ],
)
def test_shape_errors(input_shape: Any, feature: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        _shape(input_shape, **feature)
    for word in words:
        assert word in str(info.value)
    assert "founded" not in str(info.value)


def test_input_shapes_as_a_flat_list_in_feature_order() -> None:
    t = TableConfig(10, 4)
    fc = {"b": FeatureConfig(t), "a": FeatureConfig(t, max_sequence_length=2)}
    compiled = build_config(fc, SGD(), per_replica_input_shapes=[[8, 3], [4]])
    assert [list(f.input_shape) for f in compiled.config.feature_descriptor] == [[8, 2], [4]]
    with pytest.raises(ValueError, match="does not match"):
        build_config(fc, SGD(), per_replica_input_shapes=[[8]])


# -- section 3.6-3.8: topology --------------------------------------------------------------------


def test_topology_fields() -> None:
    t, f = _one(SGD(), vocabulary_size=3)
    c = build_config(f, num_hosts=4, num_replicas=8, num_cores_per_replica=1,
                     pipeline_execution_with_tensor_core=True).config
    assert c.table_descriptor[0].vocabulary_size == 4
    assert (c.num_hosts, c.num_tensor_cores) == (4, 8)
    assert c.spmd_sharding.enabled and c.spmd_sharding.num_cores_per_replica == 1
    assert c.pipeline_execution_with_tensor_core
    c = build_config(f, num_hosts=2, num_replicas=4, num_cores_per_replica=0).config
    assert not c.HasField("spmd_sharding") and c.num_tensor_cores == 4
    c = build_config(f, num_hosts=2, num_replicas=4, num_cores_per_replica=2).config
    assert c.num_tensor_cores == 8 and c.spmd_sharding.num_cores_per_replica == 2


def test_quantization_writes_both_bounds() -> None:
    t, f = _one(SGD(), quantization_config=emb.QuantizationConfig(8, 0.0, 1.0))
    sq = build_config(f).config.table_descriptor[0].optimization_parameters.simulated_quantization
    assert sq.enabled and sq.num_buckets == 8
    assert sq.clipping_limits.HasField("lower") and sq.clipping_limits.lower.value == 0.0


@pytest.mark.parametrize(
    ("optimizer", "text"),
    [
        (emb.Momentum(0.1, momentum=0.9, use_nesterov=True),
         "momentum { momentum: 0.9 use_nesterov: true }"),
        (emb.Lion(0.1), "lion { beta1: 0.9 beta2: 0.99 }"),
        (emb.RMSProp(0.1), "rms_prop { rho: 0.9 epsilon: 1e-10 }"),
        (emb.CenteredRMSProp(0.1, momentum=0.5),
         "centered_rms_prop { rho: 0.9 momentum: 0.5 epsilon: 1e-10 }"),
        (emb.Adadelta(1.0), "adadelta { rho: 0.95 epsilon: 1e-08 }"),
        (emb.ProximalAdagrad(0.1, l1=0.01), "proximal_adagrad { l1: 0.01 }"),
        (emb.BoundedAdagrad(0.1, max_var_update=0.5),
         "bounded_adagrad { max_var_update: 0.5 }"),
        (emb.ProximalYogi(0.1), "proximal_yogi { beta2: 0.999 epsilon: 0.001 }"),
        (emb.OnlineYogi(0.1, l2=0.1), "online_yogi { l2: 0.1 beta2: 0.999 }"),
        (emb.MDLAdagradLight(0.1), "mdl_adagrad_light { }"),
        (emb.FrequencyEstimator(0.1, tau=0.1, max_delta=1000, outlier_threshold=4,
                                weight_exponent=1),
         "frequency_estimator { tau: 0.1 max_delta: 1000 outlier_threshold: 4 "
         "weight_exponent: 1 }"),
        (emb.Assign(), "assign { }"),
    ],
)
def test_project_optimizers_write_their_message(optimizer: emb.Optimizer, text: str) -> None:
    want = OptimizationParameters()
    text_format.Parse(text + " gradient_accumulation_status: ENABLED", want)
    assert _params(optimizer) == want.SerializeToString()


def test_values_beyond_the_protos_integer_ranges_raise_clearly() -> None:
    t, f = _one(SGD(), dim=2**31, name="wide")
    with pytest.raises(ValueError, match="'wide'.*too large"):
        build_config(f)
    t, f = _one(SGD())
    with pytest.raises(ValueError, match="2\\^31 - 1"):
        build_config(f, num_replicas=2**30, num_cores_per_replica=4)
    with pytest.raises(ValueError, match="2\\^31 - 1"):
        build_config(FeatureConfig(TableConfig(10, 4), output_shape=[2**31]), SGD())


@pytest.mark.parametrize("algorithm", sorted(emb.extra_optimizers.BY_ALGORITHM))
def test_every_optimizer_with_its_defaults_validates_clean(algorithm: str) -> None:
    from tpuemb_cfg import validate

    cls = emb.extra_optimizers.BY_ALGORITHM[algorithm]
    dim = 4
    if cls is emb.FrequencyEstimator:
        optimizer = cls(lambda: 1.0, tau=0.1, max_delta=1000.0, outlier_threshold=4.0,
                        weight_exponent=1.0)
        dim = 1
    elif cls is emb.FrequencyAwareAdagrad:
        optimizer = cls(step_counter=lambda: 1.0)
    else:
        optimizer = cls()
    table = TableConfig(100, dim, optimizer=optimizer, name="t")
    config = build_config(FeatureConfig(table), per_replica_batch_size=8).config
    params = config.table_descriptor[0].optimization_parameters
    assert params.WhichOneof("parameters") == algorithm
    assert [d.rule for d in validate(config) if d.severity != "info"] == []
