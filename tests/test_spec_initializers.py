"""A spec's table initializers give the table's initial rows (issue 22, part C:
``executor.initializers``).

References: Keras 3's initializers called by TensorFlow 2.21 on a table shape
(``tests/data/tf/initializers.json``, written by ``generate_schedules.py``): the random draw each
one makes and its arguments (computed by Keras from the fan-in and fan-out), statistics of the
drawn table, and whole tables for the deterministic initializers. tpuemb draws its own bits
(counter-based: element (r, c) is a function of (seed, table, r, c)), so random tables are
compared by their distribution's parameters, which must be Keras' exactly, and by statistics;
deterministic ones bit for bit.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import DATA, require_data, run_simulate

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.embedding import (
    SGD,
    ConstantInitializer,
    FeatureConfig,
    RowIdInitializer,
    TableConfig,
    TruncatedNormalInitializer,
    build_config,
)
from tpuemb_cfg.embedding.initializers import TRUNCATED_STD, resolve
from tpuemb_cfg.executor import FeatureInput
from tpuemb_cfg.executor.counter import normal_rows
from tpuemb_cfg.executor.initial import initial_state
from tpuemb_cfg.executor.initializers import table_rows
from tpuemb_cfg.executor.state import initial_table_rows
from tpuemb_cfg.model import TableInit
from tpuemb_cfg.model.layout import TableLayout
from tpuemb_cfg.session import prepare
from tpuemb_cfg.simulate import Executor

F32 = np.float32


def _data() -> dict[str, Any]:
    return json.loads(require_data(DATA / "tf" / "initializers.json").read_text())


def _case_names() -> list[str]:
    path = DATA / "tf" / "initializers.json"
    return [c["name"] for c in json.loads(path.read_text())["cases"]] if path.exists() else [
        "no-data"]


def _case(name: str) -> dict[str, Any]:
    return next(c for c in _data()["cases"] if c["name"] == name)


def _keras_like(class_name: str, config: dict[str, Any], **attributes: Any) -> Any:
    """An object as Keras makes it: its class name and ``get_config()`` (Keras not needed)."""

    def get_config(self: Any) -> dict[str, Any]:
        return dict(config)

    def call(self: Any, shape: Any, dtype: Any = None) -> Any:
        raise AssertionError("a known initializer is computed by tpuemb, not called")

    return type(class_name, (), {"get_config": get_config, "__call__": call, **attributes})()


def _compiled(initializer: Any, vocabulary: int = 300, dim: int = 8, **table: Any) -> Any:
    config = TableConfig(vocabulary_size=vocabulary, dim=dim, name="t", initializer=initializer,
                         optimizer=SGD(learning_rate=0.1), **table)
    return build_config({"f": FeatureConfig(config)}, per_replica_batch_size=4)


def _table(compiled: Any, seed: int = 0) -> np.ndarray:
    """The whole initial table ``t`` of a compiled spec (every row computed)."""
    prepared = prepare(compiled)
    return np.asarray(initial_state(prepared.plan, seed=seed)["table/t"])


# -- what each initializer is: Keras' parameters ------------------------------------------------


@pytest.mark.parametrize("name", _case_names())
def test_parameters_are_keras(name: str) -> None:
    """Every Keras initializer resolves to the draw Keras makes on that shape, with the same
    arguments (``minval``/``maxval``, ``mean``/``stddev`` from the fan-in and fan-out), from its
    serialized form, its name and an object of its class."""
    case = _case(name)
    shape = case["shape"]
    serialized = case["serialized"]
    forms = [serialized, _keras_like(serialized["class_name"], serialized["config"])]
    if case["identifier"] is not None:
        forms.append(case["identifier"])
    for form in forms:
        init = resolve(form, "t", *shape)
        assert init is not None
        if not case["draws"]:
            assert init.kind in ("constant", "identity")
            continue
        (draw,) = case["draws"]
        kind = {"uniform": "uniform", "normal": "normal",
                "truncated_normal": "truncated_normal"}[draw["draw"]]
        assert init.kind == kind, form
        if kind == "uniform":
            assert (init.low, init.high) == (draw["minval"], draw["maxval"])
        else:
            assert (init.mean, init.stddev) == (draw["mean"], draw["stddev"])


def test_fans_of_a_table_are_its_vocabulary_and_dimension() -> None:
    """Keras' fan-in of a [vocabulary, dim] variable is the vocabulary, its fan-out the dim."""
    v, d = 4000, 32
    glorot = resolve("glorot_uniform", "t", v, d)
    assert glorot is not None and glorot.high == math.sqrt(6 / (v + d)) == -glorot.low
    he = resolve("he_normal", "t", v, d)
    assert he is not None and he.stddev == math.sqrt(2 / v) / TRUNCATED_STD
    rs = resolve({"class_name": "VarianceScaling", "config": {"mode": "fan_out"}}, "t", v, d)
    assert rs is not None and rs.stddev == math.sqrt(1 / d) / TRUNCATED_STD  # keras-rs' default
    axes = resolve({"class_name": "VarianceScaling", "config": {
        "mode": "fan_in", "distribution": "uniform", "input_axes": [1], "output_axes": [0]}},
        "t", v, d)
    assert axes is not None and axes.high == math.sqrt(3 / d)
    assert resolve(TruncatedNormalInitializer(0.0, 1 / math.sqrt(d)), "t", v, d) is None


# -- the rows: the documented values ------------------------------------------------------------


@pytest.mark.parametrize("name", ["zeros", "ones", "constant", "identity", "identity_wide"])
def test_deterministic_initializers_give_kerass_values(name: str) -> None:
    case = _case(name)
    serialized = dict(case["serialized"])
    if name == "identity":  # Keras 3 does not serialize Identity's gain: the object has it
        form: Any = _keras_like("Identity", {}, gain=2.0)
    else:
        form = serialized
    rows, dim = case["shape"]
    init = resolve(form, "t", rows, dim)
    assert init is not None
    values = table_rows(init, 0, 0, np.arange(rows), dim)
    assert values.dtype == F32 and values.tolist() == case["values"]


def test_tpuembs_own_initializers_give_what_they_compute() -> None:
    """RowIdInitializer and ConstantInitializer give their own __call__'s table exactly; the
    default TruncatedNormalInitializer keeps the default rows of spec section 11."""
    for initializer in (RowIdInitializer(offset=3), RowIdInitializer(), ConstantInitializer(-0.5)):
        assert np.array_equal(_table(_compiled(initializer)), initializer((300, 8)))
    default = _table(_compiled(None), seed=7)
    assert np.array_equal(default, normal_rows(7, 0, np.arange(300), 8, 1 / math.sqrt(8)))
    own = _table(_compiled(TruncatedNormalInitializer(mean=0.5, stddev=0.25)), seed=7)
    # mean + stddev x of the same draws x (rounded once from float64: within one float32 unit
    # of the unit draws, themselves rounded to float32, scaled)
    unit = normal_rows(7, 0, np.arange(300), 8, 1.0).astype(np.float64)
    assert np.allclose(own, 0.5 + 0.25 * unit, rtol=0, atol=2 * np.spacing(F32(1.0)))
    assert (np.abs(own - 0.5) < 0.5).all()  # within two deviations


def _moments(values: np.ndarray) -> tuple[float, float]:
    flat = values.astype(np.float64).reshape(-1)
    return float(flat.mean()), float(flat.std())


@pytest.mark.parametrize("name", [n for n in _case_names() if n not in (
    "zeros", "ones", "constant", "identity", "identity_wide")])
def test_random_initializers_follow_their_distribution(name: str) -> None:
    """Mean, deviation and bounds of the drawn table as the distribution's parameters give
    them, and as close to Keras' own table as two samples of that size are."""
    case = _case(name)
    rows, dim = case["shape"]
    init = resolve(case["serialized"], "t", rows, dim)
    assert init is not None
    values = table_rows(init, 3, 1, np.arange(rows), dim)
    n = values.size
    mean, std = _moments(values)
    keras = case["statistics"]
    if init.kind == "uniform":
        assert F32(init.low) <= values.min() and values.max() <= F32(init.high)
        width = init.high - init.low
        expected_mean, expected_std = (init.low + init.high) / 2, width / math.sqrt(12)
        assert values.min() < init.low + 0.001 * width and values.max() > init.high - 0.001 * width
    elif init.kind == "normal":
        expected_mean, expected_std = init.mean, init.stddev
    else:  # within two deviations; the truncated distribution's deviation is 0.8796 of it
        assert (np.abs(values.astype(np.float64) - init.mean) < 2 * init.stddev + 1e-7).all()
        expected_mean, expected_std = init.mean, init.stddev * TRUNCATED_STD
    # 5 standard errors: a spurious failure has a probability below 1e-6
    assert abs(mean - expected_mean) < 5 * expected_std / math.sqrt(n)
    assert abs(std - expected_std) < 5 * expected_std / math.sqrt(2 * n) * 1.5
    assert abs(mean - keras["mean"]) < 7 * expected_std / math.sqrt(n)
    assert abs(std - keras["std"]) < 7 * expected_std / math.sqrt(n)


# -- the same bits however the rows are computed ------------------------------------------------


_KINDS = [
    TableInit("truncated_normal", "t", mean=0.0, stddev=0.3),
    TableInit("truncated_normal", "t", mean=-1.0, stddev=0.3),
    TableInit("normal", "t", mean=0.25, stddev=2.0),
    TableInit("uniform", "t", low=-0.1, high=0.3),
    TableInit("row_id", "t", value=2.0),
    TableInit("identity", "t", value=1.5),
    TableInit("constant", "t", value=0.125),
]


@pytest.mark.parametrize("init", _KINDS, ids=[f"{i.kind}-{n}" for n, i in enumerate(_KINDS)])
def test_rows_depend_on_seed_table_row_and_column_only(init: TableInit) -> None:
    """Any subset of rows, in any order, and every host's rows of a sharded table are the
    same rows of the whole table, bit for bit."""
    from dataclasses import replace

    compiled = _compiled(ConstantInitializer(0.0), vocabulary=4000, dim=300)
    plan = prepare(compiled).plan
    plan = replace(plan, tables=(replace(plan.tables[0], initializer=init),))
    table = plan.tables[0]
    whole = np.asarray(initial_state(plan, seed=5)["table/t"])  # compiled where it can be
    rng = np.random.default_rng(0)
    subset = rng.permutation(4000)[:257]
    assert np.array_equal(initial_table_rows(table, 5, subset), whole[subset])
    # table_rows is NumPy's code: the whole table was compiled where it could be (numba)
    assert np.array_equal(table_rows(init, 5, table.index, subset, 300), whole[subset])
    for mod in (False, True):
        layout = TableLayout(4000, 3, mod)
        for host in range(3):
            ids = layout.global_ids(host)
            assert np.array_equal(initial_table_rows(table, 5, ids), whole[ids])
    lazy = initial_state(plan, seed=5, lazy=True)
    pending = lazy.pending["t"]
    pending.materialize(lazy["table/t"], (), np.sort(subset))
    assert np.array_equal(lazy["table/t"][np.sort(subset)], whole[np.sort(subset)])
    if init.kind not in ("constant", "row_id", "identity"):
        other = np.asarray(initial_state(plan, seed=6)["table/t"])
        assert not np.array_equal(other, whole)  # the seed changes the rows


def test_the_executor_starts_from_the_specs_initializer_lazily_or_not() -> None:
    glorot = _keras_like("GlorotUniform", {"seed": None})
    compiled = _compiled(glorot, vocabulary=500, dim=16)
    batch = [FeatureInput(np.array([3, 77, 499]), np.array([0, 1, 2, 3]), None,
                          np.zeros((3, 16), F32)),]
    states = []
    for engine in ("numpy", "numba"):
        executor = Executor(compiled, engine=engine, seed=11)  # rows computed when touched
        executor.step(batch)
        states.append(np.asarray(executor.state_arrays()["table/t"]))
    eager = np.asarray(initial_state(prepare(compiled).plan, seed=11)["table/t"])
    assert np.array_equal(states[0], eager) and np.array_equal(states[1], eager)
    limit = math.sqrt(6 / (500 + 16))
    assert np.abs(eager).max() <= F32(limit) and np.abs(eager).max() > 0.99 * limit


def test_an_initializers_own_seed_replaces_the_runs() -> None:
    seeded = _compiled(_keras_like("RandomNormal", {"mean": 0.0, "stddev": 1.0, "seed": 42}))
    unseeded = _compiled(_keras_like("RandomNormal", {"mean": 0.0, "stddev": 1.0,
                                                      "seed": None}))
    assert np.array_equal(_table(seeded, seed=1), _table(seeded, seed=2))
    assert not np.array_equal(_table(unseeded, seed=1), _table(unseeded, seed=2))
    assert np.array_equal(_table(seeded, seed=1), _table(unseeded, seed=42))


# -- callables, and what is refused --------------------------------------------------------------


def test_a_callable_initializer_is_called_once_on_the_whole_table() -> None:
    calls: list[tuple[Any, Any]] = []

    def ramp(shape: Any, dtype: Any = None) -> np.ndarray:
        calls.append((shape, dtype))
        return np.arange(shape[0] * shape[1], dtype=np.float64).reshape(shape) / 1000

    executor = Executor(_compiled(ramp, vocabulary=30, dim=4), engine="numpy")
    assert calls == [((30, 4), "float32")]
    assert np.array_equal(executor.state_arrays()["table/t"],
                          (np.arange(120).reshape(30, 4) / 1000).astype(F32))
    # Given rows win: the callable is not called.
    given = {"table/t": np.ones((30, 4), F32)}
    Executor(_compiled(ramp, vocabulary=30, dim=4), initial_state=given, engine="numpy")
    assert len(calls) == 1


def test_a_callable_tables_other_rows_stay_its_values_when_given_in_part() -> None:
    """A partial state (the rows a run touched, ``executor.partial``): those rows, and the
    callable's values everywhere else."""

    def ramp(shape: Any, dtype: Any = None) -> np.ndarray:
        return np.arange(shape[0] * shape[1], dtype=np.float32).reshape(shape)

    rows = np.array([2, 7], dtype=np.int64)
    given = {"table/t/rows": rows, "table/t/values": np.full((2, 4), -1.0, F32)}
    executor = Executor(_compiled(ramp, vocabulary=30, dim=4), initial_state=given,
                        engine="numpy")
    expected = ramp((30, 4))
    expected[rows] = -1.0
    assert np.array_equal(executor.state_arrays()["table/t"], expected)


@pytest.mark.parametrize(("initializer", "message"), [
    (lambda shape, dtype=None: np.zeros((2, 2)),
     "returned shape (2, 2); expected (30, 4) (vocabulary_size, dim)"),
    (lambda shape, dtype=None: np.full(shape, np.nan),
     "returned nan at row 0, column 0; initial values must be finite float32"),
    (lambda shape: np.zeros(shape),
     "raised TypeError: "),
    (lambda shape, dtype=None: "zeros", "returned str; expected an array of numbers"),
])
def test_a_failing_callable_initializer_names_the_table(initializer: Any, message: str) -> None:
    with pytest.raises(InputError, match="table 't': the initializer <lambda> ") as info:
        Executor(_compiled(initializer, vocabulary=30, dim=4), engine="numpy")
    assert message in str(info.value)


@pytest.mark.parametrize(("initializer", "message"), [
    ("orthogonal", "'orthogonal': it computes an orthogonal matrix (the QR decomposition of "
                   "the whole table), not a function of each element"),
    ({"class_name": "MyInit", "config": {}}, "it is not an initializer tpuemb knows"),
    ({"class_name": "VarianceScaling", "config": {"mode": "fan_sideways"}},
     "mode='fan_sideways': expected one of fan_in, fan_out, fan_avg"),
    ({"class_name": "VarianceScaling", "config": {"scale": -1.0}}, "scale=-1.0: it must be "
                                                                   "positive"),
    ({"class_name": "RandomUniform", "config": {"minval": float("nan")}},
     "minval=nan is not a finite number"),
])
def test_what_cannot_be_an_initializer_is_refused(initializer: Any, message: str) -> None:
    with pytest.raises(InputError) as info:
        resolve(initializer, "t", 30, 4)
    assert info.value.message.startswith("table 't': initializer ")
    assert message in info.value.message


def test_the_command_runs_a_specs_initializer_and_refuses_a_bad_one(tmp_path: Path) -> None:
    spec = tmp_path / "spec.py"
    spec.write_text(
        "from tpuemb_cfg.embedding import SGD, ConstantInitializer, FeatureConfig, TableConfig\n"
        "table = TableConfig(vocabulary_size=20, dim=2, name='t', optimizer=SGD(0.0),\n"
        "                    initializer=ConstantInitializer(0.75))\n"
        "feature_config = {'f': FeatureConfig(table)}\n"
        "per_replica_batch_size = 4\n")
    code, output = run_simulate(str(spec), "--steps", "2", "--out-dir", str(tmp_path / "o"),
                                "-q", "--tables", "all")
    assert code == 0, output
    with np.load(tmp_path / "o" / "tables.npz") as saved:
        assert (saved["table/t"] == F32(0.75)).all()
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import numpy as np\n"
        "from tpuemb_cfg.embedding import SGD, FeatureConfig, TableConfig\n"
        "class Orthogonal:  # not computed by tpuemb: called once on the whole table\n"
        "    def __call__(self, shape, dtype=None):\n"
        "        return np.eye(2)\n"
        "table = TableConfig(vocabulary_size=20, dim=2, name='t', optimizer=SGD(0.1),\n"
        "                    initializer=Orthogonal())\n"
        "feature_config = {'f': FeatureConfig(table)}\n"
        "per_replica_batch_size = 4\n")
    code, output = run_simulate(str(bad), "--steps", "2", "--out-dir", str(tmp_path / "p"), "-q")
    assert code == 2
    assert output == (f"{bad}: error: table 't': the initializer Orthogonal object returned "
                      "shape (2, 2); expected (20, 2) (vocabulary_size, dim)\n")


def test_a_toml_specs_initializers(tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(
        "per_replica_batch_size = 4\n"
        "[optimizer]\ntype = \"SGD\"\nlearning_rate = 0.1\n"
        "[tables.ids]\nvocabulary_size = 40\ndim = 3\n"
        "initializer = {kind = \"row_id\", offset = 5}\n"
        "[tables.narrow]\nvocabulary_size = 40\ndim = 3\n"
        "initializer = {kind = \"truncated_normal\", stddev = 0.01}\n"
        "[features.a]\ntable = \"ids\"\n[features.b]\ntable = \"narrow\"\n")
    state = initial_state(prepare(str(spec)).plan, seed=0)
    assert np.array_equal(state["table/ids"], np.repeat(np.arange(5, 45, dtype=F32)[:, None], 3,
                                                        axis=1))
    narrow = np.asarray(state["table/narrow"])
    assert 0 < np.abs(narrow).max() < 0.02


def test_the_default_is_tensorflows_table_config_default() -> None:
    """TensorFlow's TableConfig default, TruncatedNormal(0, 1/sqrt(dim)), is tpuemb's: the rows
    of spec section 11, whichever of the two objects a spec holds."""
    recorded = _data()["table_config_default"]
    dim = recorded["dim"]
    ours = TableConfig(vocabulary_size=10, dim=dim).initializer
    assert (ours.mean, ours.stddev) == (recorded["config"]["mean"], recorded["config"]["stddev"])
    tf_object = _keras_like(recorded["class_name"], recorded["config"])
    init = resolve(tf_object, "t", 10, dim)
    assert init is not None and (init.kind, init.mean, init.stddev) == (
        "truncated_normal", 0.0, 1 / math.sqrt(dim))
    assert np.array_equal(table_rows(init, 4, 2, np.arange(10), dim),
                          normal_rows(4, 2, np.arange(10), dim, 1 / math.sqrt(dim)))


# Every initializer the compiler accepts, named in a TOML spec (docs/compile.md): the parameters
# below are derived by hand from Keras' formulas on a 40 x 3 table (fan_in 40, fan_out 3).
TOML_KINDS = {
    "row_id": ("{kind = \"row_id\", offset = 5}", ("row_id", {"value": 5.0})),
    "constant": ("{kind = \"constant\", value = 2.5}", ("constant", {"value": 2.5})),
    "truncated_normal": ("{kind = \"truncated_normal\", mean = 1.0, stddev = 0.01, seed = 4}",
                         ("truncated_normal", {"mean": 1.0, "stddev": 0.01, "seed": 4})),
    "zeros": ("{kind = \"zeros\"}", ("constant", {"value": 0.0})),
    "ones": ("{kind = \"ones\"}", ("constant", {"value": 1.0})),
    "random_uniform": ("{kind = \"random_uniform\", minval = -1, maxval = 2, seed = 3}",
                       ("uniform", {"low": -1.0, "high": 2.0, "seed": 3})),
    "random_normal": ("{kind = \"random_normal\", mean = 1.0, stddev = 0.5}",
                      ("normal", {"mean": 1.0, "stddev": 0.5})),
    "variance_scaling": ("{kind = \"variance_scaling\", scale = 2.0, mode = \"fan_out\", "
                         "distribution = \"uniform\"}",
                         ("uniform", {"low": -math.sqrt(2.0), "high": math.sqrt(2.0)})),
    "glorot_uniform": ("{kind = \"glorot_uniform\", seed = 7}",
                       ("uniform", {"low": -math.sqrt(3 / 21.5), "high": math.sqrt(3 / 21.5),
                                    "seed": 7})),
    "glorot_normal": ("{kind = \"glorot_normal\"}",
                      ("truncated_normal", {"stddev": math.sqrt(1 / 21.5) / TRUNCATED_STD})),
    "he_uniform": ("{kind = \"he_uniform\"}",
                   ("uniform", {"low": -math.sqrt(6 / 40), "high": math.sqrt(6 / 40)})),
    "he_normal": ("{kind = \"he_normal\"}",
                  ("truncated_normal", {"stddev": math.sqrt(2 / 40) / TRUNCATED_STD})),
    "lecun_uniform": ("{kind = \"lecun_uniform\"}",
                      ("uniform", {"low": -math.sqrt(3 / 40), "high": math.sqrt(3 / 40)})),
    "lecun_normal": ("{kind = \"lecun_normal\"}",
                     ("truncated_normal", {"stddev": math.sqrt(1 / 40) / TRUNCATED_STD})),
    "identity": ("{kind = \"identity\", gain = 2.0}", ("identity", {"value": 2.0})),
}


def _toml_spec(tmp_path: Path, initializer: str) -> Path:
    spec = tmp_path / "spec.toml"
    spec.write_text(
        "per_replica_batch_size = 4\n"
        "[optimizer]\ntype = \"SGD\"\nlearning_rate = 0.1\n"
        f"[tables.t]\nvocabulary_size = 40\ndim = 3\ninitializer = {initializer}\n"
        "[features.a]\ntable = \"t\"\n")
    return spec


@pytest.mark.parametrize("kind", sorted(TOML_KINDS))
def test_a_toml_spec_offers_every_initializer(tmp_path: Path, kind: str) -> None:
    text, (expected_kind, parameters) = TOML_KINDS[kind]
    init = prepare(str(_toml_spec(tmp_path, text))).plan.tables[0].initializer
    assert init is not None and init.kind == expected_kind
    for name, value in parameters.items():
        assert getattr(init, name) == pytest.approx(value, rel=1e-15), name
    assert init.seed == parameters.get("seed")


def test_a_toml_specs_identity_rows(tmp_path: Path) -> None:
    plan = prepare(str(_toml_spec(tmp_path, TOML_KINDS["identity"][0]))).plan
    rows = np.asarray(initial_state(plan, seed=0)["table/t"])
    assert np.array_equal(rows, 2 * np.eye(40, 3, dtype=F32))


@pytest.mark.parametrize(("initializer", "message"), [
    ("{kind = \"orthogonal\"}", "spec.toml:8:1: error: tables.t.initializer.kind: `kind` must "
     "be one of 'row_id', 'constant', 'truncated_normal', 'zeros', "),
    ("{kind = \"glorot_uniform\", scale = 2.0}", "unknown key 'scale'; allowed here: seed"),
    ("{kind = \"variance_scaling\", mode = \"fan\"}",
     "mode: must be one of fan_in, fan_out, fan_avg; received 'fan'"),
    ("{kind = \"random_uniform\", maxval = \"1\"}", "maxval: must be a finite number"),
    ("{kind = \"he_normal\", seed = 1.5}", "seed: must be an integer; received 1.5"),
    ("{kind = \"constant\", value = nan}", "value: must be a finite number; received nan"),
])
def test_a_toml_specs_bad_initializer_is_placed(tmp_path: Path, initializer: str,
                                                message: str) -> None:
    path = _toml_spec(tmp_path, initializer)
    code, output = run_simulate(str(path), "--dry-run")
    assert code == 2 and message in output, output
    assert output.startswith(f"{path}:"), output
