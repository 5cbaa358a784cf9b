"""TensorFlow 2.21's constructor checks (validation-rules.md section 4, CTOR001-CTOR022) and the
signatures of the TensorFlow-shaped classes (compile.md section 2).

Every error must be a ValueError (as TensorFlow raises) or TypeError, and its message must name
the argument, show the value received and say what is allowed. TensorFlow's wrong messages
(section 5: Adam's beta_2 message printing beta_1, the non-lazy Adam advice, FTRL's zero
accumulator) are not copied.
"""

from __future__ import annotations

import inspect

import pytest

from tpuemb_cfg import embedding as emb
from tpuemb_cfg.embedding import (
    FTRL,
    SGD,
    Adagrad,
    AdagradMomentum,
    Adam,
    FeatureConfig,
    QuantizationConfig,
    RowIdInitializer,
    TableConfig,
)


def _raises(exc: type[Exception], fn, *words: str) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(exc) as info:
        fn()
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    return message


# -- signatures -----------------------------------------------------------------------------------

SIGNATURES = {
    TableConfig: [
        ("vocabulary_size", inspect.Parameter.empty), ("dim", inspect.Parameter.empty),
        ("initializer", None), ("optimizer", None), ("combiner", "mean"), ("name", None),
        ("quantization_config", None), ("layout", None), ("dtype", "float32"),
    ],
    FeatureConfig: [
        ("table", inspect.Parameter.empty), ("max_sequence_length", 0),
        ("validate_weights_and_indices", True), ("output_shape", None), ("name", None),
    ],
    QuantizationConfig: [
        ("num_buckets", inspect.Parameter.empty), ("lower", inspect.Parameter.empty),
        ("upper", inspect.Parameter.empty),
    ],
    RowIdInitializer: [("offset", 0)],
    SGD: [
        ("learning_rate", 0.01), ("use_gradient_accumulation", True), ("clip_weight_min", None),
        ("clip_weight_max", None), ("weight_decay_factor", None),
        ("multiply_weight_decay_factor_by_learning_rate", None), ("clipvalue", None),
        ("low_dimensional_packing_status", False),
    ],
    Adagrad: [
        ("learning_rate", 0.001), ("initial_accumulator_value", 0.1),
        ("use_gradient_accumulation", True), ("clip_weight_min", None), ("clip_weight_max", None),
        ("weight_decay_factor", None), ("multiply_weight_decay_factor_by_learning_rate", None),
        ("slot_variable_creation_fn", None), ("clipvalue", None),
        ("low_dimensional_packing_status", False),
    ],
    AdagradMomentum: [
        ("learning_rate", 0.001), ("momentum", 0.0), ("use_nesterov", False), ("exponent", 2),
        ("beta2", 1), ("epsilon", 1e-10), ("use_gradient_accumulation", True),
        ("clip_weight_min", None), ("clip_weight_max", None), ("weight_decay_factor", None),
        ("multiply_weight_decay_factor_by_learning_rate", None),
        ("slot_variable_creation_fn", None), ("clipvalue", None),
        ("low_dimensional_packing_status", False),
    ],
    Adam: [
        ("learning_rate", 0.001), ("beta_1", 0.9), ("beta_2", 0.999), ("epsilon", 1e-07),
        ("lazy_adam", True), ("sum_inside_sqrt", True), ("use_gradient_accumulation", True),
        ("clip_weight_min", None), ("clip_weight_max", None), ("weight_decay_factor", None),
        ("multiply_weight_decay_factor_by_learning_rate", None),
        ("slot_variable_creation_fn", None), ("clipvalue", None),
        ("low_dimensional_packing_status", False),
    ],
    FTRL: [
        ("learning_rate", 0.001), ("learning_rate_power", -0.5),
        ("l1_regularization_strength", 0.0), ("l2_regularization_strength", 0.0), ("beta", 0.0),
        ("initial_accumulator_value", 0.1), ("use_gradient_accumulation", True),
        ("clip_weight_min", None), ("clip_weight_max", None), ("weight_decay_factor", None),
        ("multiply_weight_decay_factor_by_learning_rate", None),
        ("slot_variable_creation_fn", None), ("clipvalue", None),
        ("multiply_linear_by_learning_rate", False), ("allow_zero_accumulator", False),
        ("low_dimensional_packing_status", False),
    ],
}


@pytest.mark.parametrize("cls", list(SIGNATURES), ids=lambda c: c.__name__)
def test_signature_matches_tensorflow_2_21(cls: type) -> None:
    params = list(inspect.signature(cls).parameters.values())
    got = [(p.name, p.default) for p in params]
    assert got == SIGNATURES[cls]
    for p in params:
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    # Integer defaults stay ints, as in TensorFlow (exponent=2, beta2=1).
    for (name, default), (_, want) in zip(got, SIGNATURES[cls], strict=True):
        assert type(default) is type(want), name


# -- CTOR001 to CTOR011: optimizers ---------------------------------------------------------------

SLOTTED = [Adagrad, AdagradMomentum, Adam, FTRL]


@pytest.mark.parametrize("cls", SLOTTED, ids=lambda c: c.__name__)
def test_ctor001_slot_variable_creation_fn_must_be_callable(cls: type) -> None:
    _raises(ValueError, lambda: cls(slot_variable_creation_fn=3),
            "slot_variable_creation_fn", "3", "None or a callable")
    with pytest.raises(TypeError):
        cls(slot_variable_creation_fn="make")
    cls(slot_variable_creation_fn=lambda *a: None)


def test_ctor001_comes_before_the_optimizers_own_checks() -> None:
    _raises(ValueError, lambda: Adagrad(initial_accumulator_value=0,
                                        slot_variable_creation_fn=1),
            "slot_variable_creation_fn")


@pytest.mark.parametrize("cls", [SGD, *SLOTTED], ids=lambda c: c.__name__)
@pytest.mark.parametrize("clipvalue", [1.0, 0, (None, None), (-1.0, 2.0)])
def test_ctor002_clipvalue_needs_gradient_accumulation(cls: type, clipvalue: object) -> None:
    _raises(ValueError, lambda: cls(use_gradient_accumulation=False, clipvalue=clipvalue),
            "clipvalue", repr(clipvalue), "use_gradient_accumulation",
            "set use_gradient_accumulation=True")


def test_ctor003_clipvalue_forms() -> None:
    sgd = SGD(clipvalue=2)
    assert (sgd.clip_gradient_min, sgd.clip_gradient_max) == (-2.0, 2)
    zero = SGD(clipvalue=0)
    assert str(zero.clip_gradient_min) == "-0.0" and zero.clip_gradient_max == 0
    one_sided = SGD(clipvalue=(None, 3.2))
    assert (one_sided.clip_gradient_min, one_sided.clip_gradient_max) == (None, 3.2)
    # No sign or order check: a negative scalar gives lower > upper (the validator reports it).
    negative = SGD(clipvalue=-1.0)
    assert (negative.clip_gradient_min, negative.clip_gradient_max) == (1.0, -1.0)


@pytest.mark.parametrize(
    ("clipvalue", "exc", "words"),
    [
        ((1.0, 2.0, 3.0), ValueError, ["clipvalue", "2 entries", "(1.0, 2.0, 3.0)"]),
        ((1.0,), ValueError, ["clipvalue", "tuple of 1"]),
        ([-1.0, 1.0], TypeError, ["clipvalue", "[-1.0, 1.0]", "(min, max) tuple"]),
        ("1.0", TypeError, ["clipvalue", "'1.0'"]),
        (("a", 1.0), TypeError, ["clipvalue", "numbers or None"]),
    ],
)
def test_ctor003_bad_clipvalue_forms_raise_clearly(
    clipvalue: object, exc: type[Exception], words: list[str]
) -> None:
    _raises(exc, lambda: SGD(clipvalue=clipvalue), *words)


@pytest.mark.parametrize("value", [0.0, -0.1, float("nan")])
def test_ctor004_adagrad_initial_accumulator_must_be_positive(value: float) -> None:
    _raises(ValueError, lambda: Adagrad(initial_accumulator_value=value),
            "Adagrad", "initial_accumulator_value", "> 0", repr(value))


@pytest.mark.parametrize("value", [0.0, -1e-10])
def test_ctor005_adagrad_momentum_epsilon_must_be_positive(value: float) -> None:
    _raises(ValueError, lambda: AdagradMomentum(epsilon=value),
            "AdagradMomentum", "`epsilon`", "> 0", repr(value))


@pytest.mark.parametrize("value", [0, -2.0])
def test_ctor006_adagrad_momentum_exponent_must_be_positive(value: float) -> None:
    _raises(ValueError, lambda: AdagradMomentum(exponent=value),
            "AdagradMomentum", "`exponent`", "> 0", repr(value))


def test_ctor007_ftrl_initial_accumulator() -> None:
    _raises(ValueError, lambda: FTRL(initial_accumulator_value=-0.5),
            "FTRL", "initial_accumulator_value", "-0.5", "> 0")
    _raises(ValueError, lambda: FTRL(initial_accumulator_value=0.0),
            "initial_accumulator_value", "0.0", "allow_zero_accumulator=True")
    # TensorFlow bug 3 (section 5) not copied: zero is fine with allow_zero_accumulator.
    ftrl = FTRL(initial_accumulator_value=0.0, allow_zero_accumulator=True)
    assert ftrl.slot_initial_values() == {"accumulators": 0.0, "linears": 0.0}
    _raises(ValueError, lambda: FTRL(initial_accumulator_value=-1.0, allow_zero_accumulator=True),
            "initial_accumulator_value", "-1.0", ">= 0")


@pytest.mark.parametrize("value", [-0.1, 1.0, 1.5])
def test_ctor008_adam_beta_1_range(value: float) -> None:
    _raises(ValueError, lambda: Adam(beta_1=value), "Adam", "`beta_1`", ">= 0 and < 1",
            repr(value))


def test_ctor009_adam_beta_2_range_shows_beta_2s_value() -> None:
    # TensorFlow bug 1 (section 5): its message prints beta_1's value (0.8); ours prints 1.5.
    message = _raises(ValueError, lambda: Adam(beta_1=0.8, beta_2=1.5),
                      "`beta_2`", ">= 0 and < 1", "1.5")
    assert "0.8" not in message
    _raises(ValueError, lambda: Adam(beta_2=-0.01), "`beta_2`", "-0.01")


@pytest.mark.parametrize("value", [0.0, -1e-7])
def test_ctor010_adam_epsilon_must_be_positive(value: float) -> None:
    _raises(ValueError, lambda: Adam(epsilon=value), "Adam", "`epsilon`", "> 0", repr(value))


def test_ctor011_non_lazy_adam_needs_accumulation_and_says_true() -> None:
    # TensorFlow bug 2 (section 5): its advice says False where it means True.
    message = _raises(ValueError, lambda: Adam(lazy_adam=False, use_gradient_accumulation=False),
                      "lazy_adam=False", "use_gradient_accumulation=True")
    assert "to False" not in message
    Adam(lazy_adam=False)  # with accumulation: fine


def test_optimizer_hyper_parameters_must_be_numbers() -> None:
    _raises(TypeError, lambda: FTRL(l1_regularization_strength="0.1"),
            "l1_regularization_strength", "'0.1'", "number")
    _raises(TypeError, lambda: AdagradMomentum(use_nesterov="yes"), "use_nesterov", "'yes'")
    _raises(TypeError, lambda: SGD(clip_weight_min="low"), "clip_weight_min", "'low'")


# -- CTOR012: QuantizationConfig ------------------------------------------------------------------


@pytest.mark.parametrize("buckets", [1, 0, -3])
def test_ctor012_quantization_needs_two_buckets(buckets: int) -> None:
    _raises(ValueError, lambda: QuantizationConfig(buckets, -1.0, 1.0),
            "num_buckets", ">= 2", repr(buckets))


def test_ctor012_quantization_bounds_are_not_checked_and_kept_as_given() -> None:
    q = QuantizationConfig(num_buckets=2, lower=3, upper=-3)
    assert (q.num_buckets, q.lower, q.upper) == (2, 3, -3)
    _raises(TypeError, lambda: QuantizationConfig(16.0, -1.0, 1.0), "num_buckets", "16.0")


# -- CTOR013 to CTOR018: TableConfig --------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -5])
def test_ctor013_vocabulary_size_at_least_one(value: int) -> None:
    _raises(ValueError, lambda: TableConfig(value, 8), "vocabulary_size", ">= 1", repr(value))


@pytest.mark.parametrize("value", [10.0, "10", None])
def test_ctor013_vocabulary_size_must_be_an_int(value: object) -> None:
    message = _raises(ValueError, lambda: TableConfig(value, 8), "vocabulary_size", repr(value),
                      "an int")
    with pytest.raises(TypeError):
        TableConfig(value, 8)
    assert message


def test_ctor013_bool_passes_as_an_int_like_tensorflow() -> None:
    assert TableConfig(True, 4).vocabulary_size is True


@pytest.mark.parametrize("value", [0, -1, 2.5])
def test_ctor014_dim_at_least_one(value: object) -> None:
    _raises(ValueError, lambda: TableConfig(10, value), "`dim`", ">= 1", repr(value))


def test_ctor015_initializer_must_be_callable() -> None:
    _raises(TypeError, lambda: TableConfig(10, 4, initializer=0.5), "initializer", "0.5",
            "callable")
    # None becomes a truncated normal with standard deviation 1/sqrt(dim).
    table = TableConfig(10, 16)
    assert table.initializer.stddev == pytest.approx(0.25)
    values = table.initializer((1000, 16))
    assert values.shape == (1000, 16) and abs(values).max() <= 0.5


def test_ctor016_combiner() -> None:
    _raises(ValueError, lambda: TableConfig(10, 4, combiner="max"), "combiner", "'max'",
            "'mean', 'sum', 'sqrtn'")
    _raises(TypeError, lambda: TableConfig(10, 4, combiner=None), "combiner", "None")
    for combiner in ("mean", "sum", "sqrtn"):
        assert TableConfig(10, 4, combiner=combiner).combiner == combiner


def test_ctor017_dtype() -> None:
    _raises(ValueError, lambda: TableConfig(10, 4, dtype="float16"), "dtype", "'float16'",
            "float32 or int32")
    assert TableConfig(10, 4, dtype="int32").dtype == "int32"
    np = pytest.importorskip("numpy")
    assert TableConfig(10, 4, dtype=np.float32).dtype == "float32"


def test_ctor018_name() -> None:
    assert TableConfig(10, 4).name is None
    assert TableConfig(10, 4, name="").name == ""
    _raises(TypeError, lambda: TableConfig(10, 4, name=7), "name", "7")


def test_table_quantization_config_type() -> None:
    _raises(TypeError, lambda: TableConfig(10, 4, quantization_config=(8, -1, 1)),
            "quantization_config", "QuantizationConfig")


# -- CTOR019 to CTOR022: FeatureConfig -------------------------------------------------------------


def test_ctor019_feature_table_must_be_a_table_config() -> None:
    # TensorFlow raises ValueError here; ours is both a ValueError and a TypeError.
    for exc in (ValueError, TypeError):
        _raises(exc, lambda: FeatureConfig(FTRL()), "`table`", "TableConfig", "FTRL")


@pytest.mark.parametrize(("value", "exc"), [(-1, ValueError), (2.0, TypeError)])
def test_ctor020_max_sequence_length(value: object, exc: type[Exception]) -> None:
    _raises(exc, lambda: FeatureConfig(TableConfig(10, 4), max_sequence_length=value),
            "max_sequence_length", ">= 0", repr(value))


def test_ctor021_output_shape_negative_dimension() -> None:
    _raises(ValueError, lambda: FeatureConfig(TableConfig(10, 4), output_shape=[16, -1]),
            "output_shape", "-1", ">= 0")
    # Unknown and partly unknown shapes and zero dimensions are accepted here.
    for shape in (None, [None, 4], [0], []):
        FeatureConfig(TableConfig(10, 4), output_shape=shape)
    assert FeatureConfig(TableConfig(10, 4), output_shape=16).output_shape == (16,)
    _raises(TypeError, lambda: FeatureConfig(TableConfig(10, 4), output_shape=["a"]),
            "output_shape", "'a'")


def test_ctor022_validate_weights_and_indices_must_be_bool() -> None:
    _raises(ValueError, lambda: FeatureConfig(TableConfig(10, 4),
                                              validate_weights_and_indices=1),
            "validate_weights_and_indices", "1", "True or False")


def test_row_id_initializer_fills_rows_with_offset_plus_index() -> None:
    values = RowIdInitializer(3)((4, 2), "float32")
    assert values.tolist() == [[3, 3], [4, 4], [5, 5], [6, 6]]
    assert str(values.dtype) == "float32"


# -- project classes -------------------------------------------------------------------------------


def test_project_optimizers_take_base_arguments_and_proto_field_names() -> None:
    from tpuemb_cfg.proto.optimization_parameters_pb2 import OptimizationParameters

    oneof = OptimizationParameters.DESCRIPTOR.oneofs_by_name["parameters"]
    names = {f.name for f in oneof.fields} - {"user_defined_program"}
    assert set(emb.extra_optimizers.BY_ALGORITHM) == names
    base = ["use_gradient_accumulation", "clip_weight_min", "clip_weight_max",
            "weight_decay_factor", "multiply_weight_decay_factor_by_learning_rate", "clipvalue",
            "low_dimensional_packing_status"]
    tf_classes = {SGD, Adagrad, AdagradMomentum, Adam, FTRL}
    for algorithm, cls in emb.extra_optimizers.BY_ALGORITHM.items():
        params = list(inspect.signature(cls).parameters)
        assert params[0] == "learning_rate"
        assert set(base) <= set(params), cls
        if cls in tf_classes:
            continue
        message = OptimizationParameters.DESCRIPTOR.fields_by_name[algorithm].message_type
        fields = [f.name for f in message.fields if f.name != "step_counter"]
        assert params[1 : 1 + len(fields)] == fields, cls


def test_frequency_aware_adagrad_needs_a_step_counter() -> None:
    _raises(TypeError, lambda: emb.FrequencyAwareAdagrad(), "step_counter", "callable")


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: emb.RMSProp(epsilon=0.0), ["RMSProp", "epsilon", "> 0"]),
        (lambda: emb.CenteredRMSProp(epsilon=-1.0), ["CenteredRMSProp", "epsilon"]),
        (lambda: emb.Adadelta(epsilon=0), ["Adadelta", "epsilon"]),
        (lambda: emb.ProximalAdagrad(initial_accumulator_value=0),
         ["ProximalAdagrad", "initial_accumulator_value"]),
        (lambda: emb.ProximalYogi(initial_accumulator_value=-1),
         ["ProximalYogi", "initial_accumulator_value", ">= 0"]),
        (lambda: emb.Lion(beta1="x"), ["Lion", "beta1", "'x'"]),
        (lambda: emb.Momentum(use_nesterov=1.5), ["Momentum", "use_nesterov"]),
    ],
)
def test_project_optimizer_checks(make, words: list[str]) -> None:  # type: ignore[no-untyped-def]
    _raises(ValueError, make, *words)
