"""Issue 33 item 6, by property: the library entry points (``sparsecore.preprocess`` in both modes,
``sparsecore.stack`` and the TensorFlow stacker feeds, the ``jte`` mirror functions,
``session.plan`` with its ``PlanOptions``), given any mix of right and wrong arguments, either
work or raise a ``TpuembError``, ``TypeError`` or ``ValueError`` of their own - never an
``AttributeError``, ``KeyError``, ``IndexError``, ``RecursionError`` (or any other exception)
from inside, and never Python's own ``TypeError``/``ValueError`` text about an operation deep
in the code (``'<=' not supported between instances of 'int' and 'NoneType'``), which names no
argument.

Each argument is its right value or a hostile one: None, bools, huge and negative integers,
NaN and infinities, text, bytes, lists, dicts, NumPy arrays and scalars, deep nesting, and the
library's own objects in the wrong place (a ``SparseCoreConfig`` for its ``Stacking``).

Profiles (docs/testing.md): 60 examples per property in the default profile (what ``pytest``
and CI run), 10,000 in the long one, run before a release (``TPUEMB_PROPERTY_EXAMPLES`` sets the
count in either):

    TPUEMB_TEST_PROFILE=long .venv/bin/python -m pytest -q tests/test_library_properties.py
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import EXAMPLES, derandomized, examples, zipf_sample
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_sparsecore_entry_args import CONFIG, STACKING  # 1 table, 4 chips x 2 SparseCores

from tpuemb_cfg import sparsecore as sc
from tpuemb_cfg.base.errors import TpuembError
from tpuemb_cfg.sparsecore import jte

EXAMPLES_COUNT = examples(60, long=10_000)
SETTINGS = settings(max_examples=EXAMPLES_COUNT, deadline=None,
                    derandomize=derandomized(EXAMPLES_COUNT),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])

JAX_IDS = {"f": np.arange(16, dtype=np.int64).reshape(16, 1)}
TF_IDS = {"f": np.arange(64, dtype=np.int64).reshape(64, 1)}  # 16 samples x 4 local devices

#: Python's own messages about an operation inside the code: they name no argument.
INTERNAL = re.compile("|".join([
    r"has no len\(\)", r"not supported between instances of", r"is not iterable",
    r"object is not subscriptable", r"unhashable type", r"object is not callable",
    r"unsupported operand type", r"invalid literal for int\(\)",
    r"could not convert string to float", r"must be real number, not",
    r"dictionary update sequence", r"'NoneType'", r"can only join an iterable",
    r"expected str instance", r"truth value of an array", r"setting an array element",
    r"cannot convert float (NaN|infinity) to integer", r"values to unpack",
    r"takes \d+ positional arguments? but", r"got an unexpected keyword argument",
    r"argument must be a string or a (real )?number", r"int\(\) argument must be",
]))


def deep(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
    st.sampled_from([0, -1, 1, 2, 3, 2 ** 31, 2 ** 63]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8), st.binary(max_size=4),
    st.lists(st.integers(-3, 3), max_size=3), st.dictionaries(st.text(max_size=3),
                                                              st.integers(-3, 3), max_size=2),
    st.sampled_from([np.int64(4), np.float32(np.nan), np.array([1, 2]), np.zeros((2, 2)),
                     np.array("x"), object(), (), (1,), ("a", "b"), {"t": 64}, {"t": (8,)},
                     {"t": ("a", 1)}, {"zz": (8, 8)}, {"f": None}, {"f": "ids"},
                     {"f": np.zeros((16, 1))}, {"f": ([1, 2], [0, 1])}, CONFIG, STACKING,
                     deep(3000), "MOD", "jax", "tensorflow", "v6e", Path("/nonexistent")]),
)


def arg(good: Any) -> st.SearchStrategy[Any]:
    """The right value most of the time, a hostile one otherwise."""
    return st.one_of(st.just(good), st.just(good), HOSTILE)


def check(call: Callable[[], Any]) -> None:
    """``call()`` works, or raises one of the library's own refusals."""
    try:
        call()
    except (TpuembError, TypeError, ValueError) as exc:
        message = str(exc)
        assert message.strip(), f"{type(exc).__name__} without a message"
        assert not INTERNAL.search(message), f"{type(exc).__name__} from inside: {message}"


# -- SparseCore ------------------------------------------------------------------------------------


@SETTINGS
@given(stacking=arg(STACKING), features=arg(JAX_IDS), weights=arg(None),
       local_devices=arg(4), global_devices=arg(None), sparse_cores=arg(None),
       dropping=arg(False), leading=arg(True), limits=arg(None), mode=arg("jax"),
       minibatching=arg(False))
def test_preprocess_refuses_what_it_cannot_use(  # noqa: PLR0913 - one strategy per argument
        stacking: Any, features: Any, weights: Any, local_devices: Any, global_devices: Any,
        sparse_cores: Any, dropping: Any, leading: Any, limits: Any, mode: Any,
        minibatching: Any) -> None:
    if isinstance(mode, str) and mode == "tensorflow" and features is JAX_IDS:
        features = TF_IDS
    check(lambda: sc.preprocess(
        stacking, features, weights, local_devices=local_devices,
        global_devices=global_devices, sparse_cores_per_device=sparse_cores,
        allow_id_dropping=dropping, has_leading_dimension=leading, limits=limits, mode=mode,
        enable_minibatching=minibatching))


@SETTINGS
@given(stacking=arg(STACKING), features=arg(TF_IDS), local_devices=arg(4),
       limits=arg(None), per_sample=arg(64))
def test_preprocess_tensorflow_refuses_what_it_cannot_use(
        stacking: Any, features: Any, local_devices: Any, limits: Any, per_sample: Any) -> None:
    check(lambda: sc.preprocess_tensorflow(
        stacking, features, local_devices=local_devices, limits=limits,
        max_ids_per_chip_per_sample=per_sample))


@SETTINGS
@given(config=arg(CONFIG), which=st.sampled_from([
    sc.stack, sc.tensorflow_layouts, sc.tensorflow_stacker, sc.tensorflow_stacker_calls,
    sc.stack_config]))
def test_stacking_functions_refuse_what_they_cannot_use(config: Any,
                                                        which: Callable[[Any], Any]) -> None:
    check(lambda: which(config))


@SETTINGS
@given(layouts=arg(sc.tensorflow_layouts(CONFIG)), config=arg(CONFIG))
def test_layouts_to_stacks_refuses_what_it_cannot_use(layouts: Any, config: Any) -> None:
    check(lambda: sc.layouts_to_stacks(layouts, config))


# -- jax-tpu-embedding's functions -----------------------------------------------------------------


def feature_specs() -> list[Any]:
    """Fresh specs (the stacking functions write into them)."""
    table = jte.TableSpec(name="t", vocabulary_size=1000, embedding_dim=16, initializer=None,
                          optimizer=jte.SGDOptimizerSpec(), combiner="sum")
    return [jte.FeatureSpec(name="f", table_spec=table, input_shape=[64, 1],
                            output_shape=[64, 16])]


FRESH = object()  # stands for feature_specs()


@SETTINGS
@given(specs=arg(FRESH), devices=arg(4), cores=arg(2), short=arg(True),
       activation=arg(None), which=st.sampled_from(["auto", "prepare", "config", "stacking"]))
def test_jte_stacking_refuses_what_it_cannot_use(specs: Any, devices: Any, cores: Any,
                                                 short: Any, activation: Any,
                                                 which: str) -> None:
    specs = feature_specs() if specs is FRESH else specs
    if which == "auto":
        check(lambda: jte.auto_stack_tables(specs, devices, cores, use_short_stack_names=short,
                                            activation_mem_bytes_limit=activation))
    elif which == "prepare":
        check(lambda: jte.prepare_feature_specs_for_training(specs, devices, cores))
    elif which == "config":
        check(lambda: jte.feature_specs_to_config(
            specs, global_device_count=devices, num_sc_per_device=cores,
            use_short_stack_names=short, activation_mem_bytes_limit=activation))
    else:
        check(lambda: jte.stacking_of(specs, global_device_count=devices,
                                      num_sc_per_device=cores))


@SETTINGS
@given(features=arg([np.arange(64, dtype=np.int64).reshape(64, 1)]), weights=arg(None),
       local=arg(4), devices=arg(4), cores=arg(2), strategy=arg("MOD"), leading=arg(False),
       dropping=arg(False), batch=arg(0))
def test_jte_preprocess_refuses_what_it_cannot_use(  # noqa: PLR0913 - one per argument
        features: Any, weights: Any, local: Any, devices: Any, cores: Any, strategy: Any,
        leading: Any, dropping: Any, batch: Any) -> None:
    specs = feature_specs()
    jte.prepare_feature_specs_for_training(specs, 4, 2)
    check(lambda: jte.preprocess_sparse_dense_matmul_input(
        features, weights, specs, local, devices, num_sc_per_device=cores,
        sharding_strategy=strategy, has_leading_dimension=leading, allow_id_dropping=dropping,
        batch_number=batch))


@SETTINGS
@given(value=HOSTILE, which=st.sampled_from([jte.describe_optimizer, jte.stack_name,
                                             jte.sparse_cores_per_device]))
def test_jte_helpers_refuse_what_they_cannot_use(value: Any,
                                                 which: Callable[[Any], Any]) -> None:
    check(lambda: which(value))


# -- session.plan and PlanOptions (the examples below are what this property found) ------------


@pytest.fixture(scope="module")
def plan_inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    zipf = zipf_sample()
    config = str(EXAMPLES / "quickstart.pbtxt")
    sample = str(tmp_path_factory.mktemp("plan") / "B.npz")
    zipf.write(sample, zipf.zipf_columns(zipf.schema_of(config), 128), 64)
    return config, sample


@contextmanager
def address_space_cap(extra: int = 2 << 30) -> Iterator[None]:
    """At most ``extra`` more bytes of address space for the block (Linux: RLIMIT_AS), so that
    an argument that makes the planner allocate per host (``hosts=846732``: 25.8 GiB) raises
    MemoryError here instead of taking the shared machine's memory."""
    try:
        import resource

        with open("/proc/self/statm") as handle:
            used = int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (ImportError, OSError, ValueError):
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = used + extra if hard == resource.RLIM_INFINITY else min(used + extra, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


#: A plan reads a sample: a third of the examples in CI's short profile, all of them in the long
#: one (the release check runs every property 10,000 times).
PLAN_SETTINGS = settings(SETTINGS, max_examples=EXAMPLES_COUNT if EXAMPLES_COUNT > 300
                         else max(EXAMPLES_COUNT // 3, 10))


def _found(**changed: Any) -> Any:
    """An example the property found (the right arguments but ``changed``)."""
    right = {"source": "CONFIG", "ids": "SAMPLE", "fmt": None, "progress": None,
             "topology": None, "hosts": None, "host_memory": None, "hbm": None,
             "quantile": 1.0, "headroom": 1.2}
    return example(**{**right, **changed})


@PLAN_SETTINGS
@_found(ids=None)  # 'NoneType' object is not iterable (planner/inputs.py)
@_found(fmt={"f": "ids"})  # unhashable type: 'dict'
@_found(hosts=[])  # unhashable type: 'list'
@_found(hosts="")  # '<' not supported between instances of 'str' and 'int'
@_found(hbm="")  # '<=' not supported between instances of 'int' and 'str'
@_found(progress=False)  # 'bool' object is not callable
@_found(hosts=846732)  # MemoryError: 25.8 GiB for an array of shape (8192, 846732)
@given(source=arg("CONFIG"), ids=arg("SAMPLE"), fmt=arg(None), progress=arg(None),
       topology=arg(None), hosts=arg(None), host_memory=arg(None), hbm=arg(None),
       quantile=arg(1.0), headroom=arg(1.2))
def test_plan_refuses_what_it_cannot_use(  # noqa: PLR0913 - one per argument
        plan_inputs: tuple[str, str], source: Any, ids: Any, fmt: Any, progress: Any,
        topology: Any, hosts: Any, host_memory: Any, hbm: Any, quantile: Any,
        headroom: Any) -> None:
    from tpuemb_cfg.planner.planning import PlanOptions
    from tpuemb_cfg.session import plan

    config, sample = plan_inputs
    source = config if isinstance(source, str) and source == "CONFIG" else source
    ids = sample if isinstance(ids, str) and ids == "SAMPLE" else ids

    def call() -> Any:
        options = PlanOptions(topology=topology, hosts=hosts, host_memory_bytes=host_memory,
                              hbm_bytes=hbm, quantile=quantile, headroom=headroom)
        return plan(source, ids, options=options, fmt=fmt, progress=progress)

    with address_space_cap():
        check(call)


def test_a_value_shown_in_a_message_is_short_however_deep() -> None:
    """``errors.shown``: what every refusal above prints of the value it was given."""
    from tpuemb_cfg.base.errors import shown

    looped: list[Any] = []
    looped.append(looped)

    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    assert shown(deep(3000)) == "[[[[[...]]]]]"
    assert shown(looped) == "[[[[[...]]]]]"
    assert shown(-(10 ** 50)) == "-100000... (an int of 51 digits)"
    assert shown(Broken()).startswith("<Broken")  # reprlib names an instance whose repr fails
    long = shown("x" * 500)  # reprlib: the start and the end of the string, 80 characters
    assert len(long) == 80 and long.startswith("'xxx") and "..." in long and long.endswith("x'")
    assert shown({"t": 64}) == "{'t': 64}"
