"""The public SparseCore functions check their arguments at entry: a wrong kind of object is a
TypeError (a value out of range a ValueError) naming the function, the argument, the type found
and what is expected - never an AttributeError or a bare TypeError from inside (issue 33)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tpuemb_cfg import sparsecore as sc
from tpuemb_cfg.sparsecore import jte
from tpuemb_cfg.sparsecore.config import (
    SparseCoreConfig,
    SparseCoreFeature,
    SparseCoreOptimizer,
    SparseCoreTable,
)
from tpuemb_cfg.sparsecore.topology import Topology

CONFIG = SparseCoreConfig(
    api="tensorflow", mode="tensorflow",
    tables=(SparseCoreTable("t", 1000, 16, SparseCoreOptimizer("adagrad", group="g")),),
    features=(SparseCoreFeature("f", "t", (16,), (16, 16)),),
    topology=Topology(chips=4, sparse_cores_per_chip=2))
STACKING = sc.stack(CONFIG)
IDS = {"f": np.zeros((16, 1), np.int64)}

Call = Callable[[], Any]

CASES: list[tuple[str, Call, type[Exception], str]] = [
    ("the configuration instead of its stacking",
     lambda: sc.preprocess(CONFIG, IDS, local_devices=4), TypeError,
     "preprocess(): stacking must be a Stacking (sparsecore.stack(config)), got a "
     "SparseCoreConfig: pass sparsecore.stack(config)"),
    ("no features", lambda: sc.preprocess(STACKING, None, local_devices=4), TypeError,
     "preprocess(): features must be a dict of feature name -> ids, got None"),
    ("one limit where a pair is expected",
     lambda: sc.preprocess(STACKING, IDS, local_devices=4, limits={"t": 64}), TypeError,
     "preprocess(): limits['t'] must be a pair (max_ids_per_partition, "
     "max_unique_ids_per_partition), got an int (64): pass (64, 64) for both"),
    ("limits not a dict", lambda: sc.preprocess(STACKING, IDS, local_devices=4, limits=[64]),
     TypeError, "preprocess(): limits must be a dict of stack name -> (max_ids_per_partition, "
     "max_unique_ids_per_partition) or None, got a list"),
    ("a limit not an integer",
     lambda: sc.preprocess(STACKING, IDS, local_devices=4, limits={"t": ("a", 8)},
                           mode="tensorflow"),
     TypeError, "preprocess(): limits['t'] must be an int, got a str ('a')"),
    ("local_devices missing its value", lambda: sc.preprocess(STACKING, IDS, local_devices=None),
     TypeError, "preprocess(): local_devices must be an int, got None"),
    ("global_devices as text",
     lambda: sc.preprocess(STACKING, IDS, local_devices=4, global_devices="4"), TypeError,
     "preprocess(): global_devices must be an int or None, got a str ('4')"),
    ("local_devices 0", lambda: sc.preprocess(STACKING, IDS, local_devices=0), ValueError,
     "preprocess(): local_devices must be at least 1, got 0"),
    ("weights not a dict", lambda: sc.preprocess(STACKING, IDS, [1.0], local_devices=4),
     TypeError, "preprocess(): weights must be a dict of feature name -> weights or None, got "
     "a list"),
    ("a flag as text",
     lambda: sc.preprocess(STACKING, IDS, local_devices=4, allow_id_dropping="yes"), TypeError,
     "preprocess(): allow_id_dropping must be True or False, got a str ('yes')"),
    ("mode None", lambda: sc.preprocess(STACKING, IDS, local_devices=4, mode=None), TypeError,
     "preprocess(): mode must be a str ('jax' or 'tensorflow'), got None"),
    ("TensorFlow's limit per chip None",
     lambda: sc.preprocess_tensorflow(STACKING, IDS, local_devices=4,
                                      max_ids_per_chip_per_sample=None), TypeError,
     "preprocess_tensorflow(): max_ids_per_chip_per_sample must be an int, got None"),
    ("TensorFlow's preprocessing of the configuration",
     lambda: sc.preprocess_tensorflow(CONFIG, IDS, local_devices=4), TypeError,
     "preprocess_tensorflow(): stacking must be a Stacking (sparsecore.stack(config)), got a "
     "SparseCoreConfig: pass sparsecore.stack(config)"),
    ("stack of a stacking", lambda: sc.stack(STACKING), TypeError,
     "stack(): config must be a SparseCoreConfig, got a Stacking: a Stacking is already "
     "stacked: pass the SparseCoreConfig it was made from"),
    ("stack of a dict", lambda: sc.stack({}), TypeError,
     "stack(): config must be a SparseCoreConfig, got a dict: build one"),
    ("tensorflow_layouts of None", lambda: sc.tensorflow_layouts(None), TypeError,
     "tensorflow_layouts(): config must be a SparseCoreConfig, got None"),
    ("tensorflow_stacker of an int", lambda: sc.tensorflow_stacker(1), TypeError,
     "tensorflow_stacker(): config must be a SparseCoreConfig, got an int (1)"),
    ("tensorflow_stacker_calls of an int", lambda: sc.tensorflow_stacker_calls(1), TypeError,
     "tensorflow_stacker_calls(): config must be a SparseCoreConfig, got an int (1)"),
    ("layouts_to_stacks of a configuration", lambda: sc.layouts_to_stacks(CONFIG, CONFIG),
     TypeError, "layouts_to_stacks(): layouts must be a SparseCoreTableLayouts "
     "(tensorflow_layouts(config)), got a SparseCoreConfig"),
    ("layouts_to_stacks with a stacking for the configuration",
     lambda: sc.layouts_to_stacks(sc.tensorflow_layouts(CONFIG), STACKING), TypeError,
     "layouts_to_stacks(): config must be a SparseCoreConfig, got a Stacking"),
    ("jax stacking of a stacking", lambda: sc.stack_config(STACKING), TypeError,
     "stack_config(): config must be a SparseCoreConfig, got a Stacking"),
    ("prepare_feature_specs_for_training of a number",
     lambda: sc.prepare_feature_specs_for_training([1], 4, 2), ValueError,
     "feature_specs: feature spec 1 has no 'table_spec'"),
    ("preprocess_sparse_dense_matmul_input's sharding None",
     lambda: sc.preprocess_sparse_dense_matmul_input([], None, [], 1, 4, num_sc_per_device=2,
                                                     sharding_strategy=None), TypeError,
     "preprocess_sparse_dense_matmul_input(): sharding_strategy must be a str ('MOD'), got None"),
    ("preprocess_sparse_dense_matmul_input's local devices None",
     lambda: sc.preprocess_sparse_dense_matmul_input([], None, [], None, 4, num_sc_per_device=2),
     TypeError,
     "preprocess_sparse_dense_matmul_input(): local_device_count must be an int, got None"),
    ("preprocess_sparse_dense_matmul_input's flag as text",
     lambda: sc.preprocess_sparse_dense_matmul_input(
         [], None, [], 1, 4, num_sc_per_device=2, allow_id_dropping="no"), TypeError,
     "preprocess_sparse_dense_matmul_input(): allow_id_dropping must be True or False, got a "
     "str ('no')"),
    ("describe_optimizer of None", lambda: jte.describe_optimizer(None), TypeError,
     "describe_optimizer(): spec must be an optimizer spec (e.g. AdagradOptimizerSpec(...)), "
     "got None"),
    ("stack_name of None", lambda: jte.stack_name(None), TypeError,
     "stack_name(): tables must be a sequence of table names (str), got None"),
    ("stack_name of numbers", lambda: jte.stack_name([1, 2]), TypeError,
     "stack_name(): tables must be a sequence of table names (str), got a list"),
]


@pytest.mark.parametrize(("call", "error", "message"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_a_wrong_argument_is_named(call: Call, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as caught:
        call()
    assert type(caught.value) is error or issubclass(type(caught.value), error)
    assert str(caught.value).startswith(message), str(caught.value)


def test_right_arguments_still_preprocess() -> None:
    """The checks accept what the functions took (NumPy integers and bools too)."""
    batch = sc.preprocess(STACKING, IDS, local_devices=np.int64(4),
                          allow_id_dropping=np.bool_(False), limits={"t": (np.int32(8), 8)})
    assert set(batch.stacks) == {"t"}
    rows = {"f": np.zeros((64, 1), np.int64)}  # TensorFlow: 16 samples x 4 local devices
    assert set(sc.preprocess(STACKING, rows, local_devices=4, mode="tensorflow").stacks) == {"t"}
    assert jte.stack_name(("a", "b")) == "a_b"
