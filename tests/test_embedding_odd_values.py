"""The values of issue 22's second constructor comparison, one by one, with TensorFlow's outcome.

Each expected outcome is what TensorFlow 2.21 (protobuf 6.31.1) did with the same objects in
``tests/data/tf/tfside.py``'s build; the random cases of ``random_cases_2.json`` hold them among
1,600 others (``test_tf_random.py``). The bytes are TensorFlow's for one 8 x 4 table and one
feature with a per-replica batch of 4.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tpuemb_cfg.embedding import (
    SGD,
    Adagrad,
    AdagradMomentum,
    ConfigValidationError,
    EmbeddingConfigError,
    FeatureConfig,
    TableConfig,
    build_config,
)

#: TensorFlow's configuration for SGD(0.1) and Adagrad() on an 8 x 4 table, batch 4.
SGD_BYTES = "0a1b0a077461626c655f30100818042a0c22006a050dcdcccc3d88010110022001280152031a0104"
ADAGRAD_BYTES = "0a1b0a077461626c655f30100818042a0c1a006a050d6f12833a88010110022001280152031a0104"


def build(optimizer: Any, **table: Any) -> str:
    feature = FeatureConfig(TableConfig(8, 4, optimizer=optimizer, **table))
    return build_config(feature, per_replica_batch_size=4).config.SerializeToString().hex()


@pytest.mark.parametrize("make", [
    lambda: build(SGD(learning_rate=np.array(0.1))),
    lambda: build(SGD(learning_rate=np.array([0.1]))),
    lambda: build(SGD(clipvalue=np.array(1.0))),
    lambda: build(SGD(clip_weight_min=np.array(-1.0))),
    lambda: build(SGD(weight_decay_factor=np.array(0.1))),
    lambda: build(AdagradMomentum(use_nesterov=np.array(True))),
    lambda: build(AdagradMomentum(use_nesterov=np.array(1))),
], ids=["lr", "lr-1d", "clipvalue", "clip_weight_min", "weight_decay", "flag-bool", "flag-int"])
def test_numpy_arrays_are_refused_for_numbers_and_flags(make: Any) -> None:
    with pytest.raises(TypeError, match="NumPy array|ndarray"):
        make()


def test_numpy_arrays_tensorflow_takes() -> None:
    # Only compared (> 0), never written: TensorFlow takes it.
    assert build(Adagrad(initial_accumulator_value=np.array(0.1))) == ADAGRAD_BYTES
    # An enum field reads a 0-d integer array by __index__ (packing ENABLED: e0 01 01).
    assert "e00101" in build(SGD(0.1, low_dimensional_packing_status=np.array(1)))
    assert build(SGD(learning_rate=np.float64(0.1))) == SGD_BYTES  # a NumPy scalar is a number


@pytest.mark.parametrize("dtype", ["float", "float32", float, np.float32, np.dtype("float32"),
                                   1, 1.0, True, np.float32(0.5)])
def test_dtype_spellings_tensorflow_takes_as_float32(dtype: Any) -> None:
    assert build(SGD(0.1), dtype=dtype) == SGD_BYTES
    assert TableConfig(8, 4, dtype=dtype).dtype == "float32"


@pytest.mark.parametrize("dtype", ["float64", "int", "half", None, 2, np.float32(2.0), "f4"])
def test_dtype_spellings_tensorflow_refuses(dtype: Any) -> None:
    with pytest.raises(ValueError, match="`dtype` must be float32 or int32"):
        TableConfig(8, 4, dtype=dtype)


def test_ints_beyond_float_range() -> None:
    big = 10**400
    assert build(Adagrad(initial_accumulator_value=big)) == ADAGRAD_BYTES
    assert Adagrad(initial_accumulator_value=big).slot_initial_values() == {
        "accumulators": float("inf")}
    with pytest.raises(ValueError, match="must be > 0"):
        Adagrad(initial_accumulator_value=-big)
    optimizer = SGD(learning_rate=big)  # TensorFlow writes it later, and fails there
    with pytest.raises(OverflowError) as info:
        build(optimizer)
    assert isinstance(info.value, ValueError)
    assert "an int of 401 digits" in str(info.value) and "learning_rate" in str(info.value)
    with pytest.raises(OverflowError, match="clipvalue"):
        SGD(clipvalue=big)  # TensorFlow forms -1.0 * clipvalue at once
    with pytest.raises(OverflowError, match="default initializer"):
        TableConfig(8, big)


def test_an_empty_feature_structure_builds_without_tables() -> None:
    for empty in ([], {}, ()):
        compiled = build_config(empty, SGD(0.1), per_replica_batch_size=4, validate=False)
        assert compiled.config.SerializeToString().hex() == "100220012801"
        with pytest.raises(ConfigValidationError) as info:
            build_config(empty, SGD(0.1), per_replica_batch_size=4)
        assert "TBL001" in str(info.value)


@pytest.mark.parametrize("shapes", [[[4.0]], [[4, 2.5]], {"f": [4, 2.5]}])
def test_float_dimensions_are_a_type_error(shapes: Any) -> None:
    features = {"f": FeatureConfig(TableConfig(8, 4, optimizer=SGD(0.1)))}
    structure = features if isinstance(shapes, dict) else [features["f"]]
    with pytest.raises(TypeError, match="is not an int"):
        build_config(structure, per_replica_input_shapes=shapes)
    with pytest.raises(TypeError, match="is not an int"):
        FeatureConfig(TableConfig(8, 4), output_shape=[16, 2.0])


def test_range_errors_wait_for_the_configuration_as_in_tensorflow() -> None:
    # The type is right, the value does not fit the proto: TensorFlow fails when writing.
    unknown = SGD(0.1, low_dimensional_packing_status="enabled")
    with pytest.raises(EmbeddingConfigError, match="'enabled' is not a value of the enum"):
        build(unknown)
    flag = AdagradMomentum(use_nesterov=2**64)
    with pytest.raises(OverflowError, match="use_nesterov"):
        build(flag)
