"""`tpuemb simulate` on a SparseCore configuration (tpuemb_cfg.sim.sparsecore).

The hand example: two tables ``a`` and ``b`` (8 rows, dimension 2) stacked into ``a_b`` on one
chip with two SparseCores (N = 2), the stack's limits 3 ids and 3 distinct ids per partition,
features ``fa`` -> a and ``fb`` -> b of two samples each, the ``mean`` combiner:

    fa: sample 0 ids [0, 2], sample 1 ids [1]          (weights 1)
    fb: sample 0 ids [4, 6] weights [1, 3], sample 1 ids [3]

SparseCore 0 takes sample 0 of both features. Id x goes to partition x mod 2 and row
x // 2 + row_offset (a: 0, b: 8), so partition 0 of SparseCore 0 receives the rows 0, 1
(fa's 0 and 2), 10 and 11 (fb's 4 and 6), sorted by row: the fourth, fb's id 6, is over the
limit of 3 and dropped. SparseCore 1 sends fa's 1 and fb's 3 to partition 1 (2 ids): kept.
jax-tpu-embedding 0.2.0 gives the same (run on this input: id_drop_counters {'a_b': 1}, the
kept entries rows 0, 1, 10 with gains 0.5, 0.5, 0.25 and rows 0, 9 with gains 1, 1).

The gains are over the whole row: fb's sample 0 has weight sum 4, so id 4 keeps gain 1/4 after
id 6 (gain 3/4) is dropped: its activation is b[4] / 4, not b[4].
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_simulate

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.executor import FeatureInput
from tpuemb_cfg.executor.core import Executor
from tpuemb_cfg.executor.options import RunOptions
from tpuemb_cfg.session import prepare, prepare_sparsecore
from tpuemb_cfg.sim.sparsecore import Drops, SparseCoreRun, SparseCoreSetup, jax_message
from tpuemb_cfg.sim.sparsecore.legacy import sparsecore_message
from tpuemb_cfg.sparsecore.config import (
    SparseCoreConfig,
    SparseCoreFeature,
    SparseCoreOptimizer,
    SparseCoreTable,
)
from tpuemb_cfg.sparsecore.stacking import FeatureSlot, Stack, StackedTable, Stacking
from tpuemb_cfg.sparsecore.topology import Topology

F32 = np.float32
LR = 0.5


def _config(algorithm: str = "stochastic_gradient_descent", combiner: str = "mean",
            hyper: dict[str, Any] | None = None, allow: bool = True) -> SparseCoreConfig:
    optimizer = SparseCoreOptimizer(algorithm, {"learning_rate": LR, **(hyper or {})})
    tables = tuple(SparseCoreTable(name, 8, 2, optimizer, combiner) for name in ("a", "b"))
    features = (SparseCoreFeature("fa", "a", (2, 1), (2, 2)),
                SparseCoreFeature("fb", "b", (2, 1), (2, 2)))
    return SparseCoreConfig("jax", "jax", tables, features, Topology(1, 2),
                            allow_id_dropping=allow)


def _stacking(combiner: str = "mean") -> Stacking:
    """auto_stack_tables' result for the hand example (jax-tpu-embedding 0.2.0)."""
    stack = Stack("a_b", (StackedTable("a", 8, 2, 16, 8, 0, 0),
                          StackedTable("b", 8, 2, 16, 8, 8, 0)), "g", combiner, 4, 3, 3)
    return Stacking("jax", 1, 2, (stack,), (FeatureSlot("fa", "a", "a_b", 0, 0, 0, 2),
                                            FeatureSlot("fb", "b", "a_b", 2, 16, 0, 2)))


def _setup(algorithm: str = "stochastic_gradient_descent", combiner: str = "mean",
           **hyper: Any) -> SparseCoreSetup:
    return prepare_sparsecore(_config(algorithm, combiner, hyper), stacking=_stacking(combiner))


GRAD_A = np.array([[1, 2], [3, 4]], F32)
GRAD_B = np.array([[2, 2], [1, -1]], F32)


def _batch() -> list[FeatureInput]:
    return [FeatureInput(np.array([0, 2, 1]), np.array([0, 2, 3]), None, GRAD_A),
            FeatureInput(np.array([4, 6, 3]), np.array([0, 2, 3]),
                         np.array([1, 3, 1], F32), GRAD_B)]


def _initial() -> dict[str, np.ndarray]:
    """a[r] = [r, 0], b[r] = [0, r]."""
    rows = np.arange(8, dtype=F32)
    zeros = np.zeros(8, F32)
    return {"table/a": np.stack([rows, zeros], 1), "table/b": np.stack([zeros, rows], 1)}


#: The hand example's drops: fb's id 6 (position 1 of its ids), counted once in the stack.
HAND_DROPS = Drops((None, np.array([False, True, False])), {"a_b": 1})


def _fixed(drops: Drops = HAND_DROPS) -> Any:
    return lambda step, checked: drops


def _run(setup: SparseCoreSetup, engine: str = "numpy", **kwargs: Any) -> SparseCoreRun:
    kwargs.setdefault("dropper", _fixed())
    return SparseCoreRun(setup, RunOptions(engine=engine), initial_state=_initial(), **kwargs)


def test_hand_example_drops_fb_id_6() -> None:
    setup = _setup()
    run = SparseCoreRun(setup, RunOptions(engine="numpy"), initial_state=_initial())
    run.replay_step(_batch())
    report = run.step_reports[0]
    assert report["tables"]["a"]["dropped"] == 0
    assert report["tables"]["b"]["dropped"] == 1
    assert report["stacks"]["a_b"] == {"ids": 6, "dropped": 1, "id_drop_counter": 1}
    state = run.executor.state_arrays()
    assert state["table/b"][6].tolist() == [0.0, 6.0]  # dropped: untouched


def test_without_dropping_a_limit_refuses_the_step() -> None:
    run = SparseCoreRun(_setup(), RunOptions(engine="numpy"), allow_id_dropping=False)
    with pytest.raises(InputError, match="step 0"):
        run.replay_step(_batch())


def test_hand_example_sgd() -> None:
    """Worked by hand: activations fa [1, 0], [1, 0]; fb b[4]/4 = [0, 1], b[3] = [0, 3].
    Row gradients: a0, a2 += g0 / 2 = [0.5, 1]; a1 += [3, 4]; b4 += g0 / 4 = [0.5, 0.5];
    b3 += [1, -1]; b6 none. SGD, lr 0.5."""
    run = _run(_setup())
    activations = run.replay_step(_batch())
    assert activations[0].tolist() == [[1, 0], [1, 0]]
    assert activations[1].tolist() == [[0, 1], [0, 3]]
    a = run.executor.state_arrays()["table/a"]
    b = run.executor.state_arrays()["table/b"]
    assert a[:4].tolist() == [[-0.25, -0.5], [-0.5, -2.0], [1.75, -0.5], [3, 0]]
    assert b[3].tolist() == [-0.5, 3.5]
    assert b[4].tolist() == [-0.25, 3.75]
    assert b[6].tolist() == [0, 6]


def test_hand_example_adagrad() -> None:
    """The same row gradients through Adagrad (accumulator 0.1): acc = 0.1 + g^2,
    w -= lr g / sqrt(acc)."""
    run = _run(_setup("adagrad", initial_accumulator_value=0.1))
    run.replay_step(_batch())
    state = run.executor.state_arrays()
    expected = {("a", 0): ([0, 0], [0.5, 1]), ("a", 2): ([2, 0], [0.5, 1]),
                ("a", 1): ([1, 0], [3, 4]), ("b", 4): ([0, 4], [0.5, 0.5]),
                ("b", 3): ([0, 3], [1, -1])}
    for (table, row), (start, grad) in expected.items():
        acc = [0.1 + g * g for g in grad]
        want = [w - LR * g / math.sqrt(s) for w, g, s in zip(start, grad, acc, strict=True)]
        np.testing.assert_allclose(state[f"table/{table}"][row], want, rtol=1e-6)
        np.testing.assert_allclose(state[f"slot/{table}/accumulators"][row], acc, rtol=1e-6)
    assert state["table/b"][6].tolist() == [0, 6]
    assert state["slot/b/accumulators"][6].tolist() == pytest.approx([0.1, 0.1])


@pytest.mark.parametrize(("combiner", "gain"), [("sum", 1.0), ("mean", 0.25),
                                                ("sqrtn", 1 / math.sqrt(10.0))])
def test_gain_over_the_whole_row(combiner: str, gain: float) -> None:
    """fb's bag [4, 6], weights [1, 3], id 6 dropped: id 4 keeps its gain over the whole row
    (sum 1, mean 1/4, sqrtn 1/sqrt(1 + 9)); activation gain * b[4], b[4] -= lr gain g."""
    run = _run(_setup(combiner=combiner))
    activations = run.replay_step(_batch())
    np.testing.assert_allclose(activations[1][0], [0, 4 * gain], rtol=1e-6)
    b = run.executor.state_arrays()["table/b"]
    np.testing.assert_allclose(b[4], [-LR * gain * 2, 4 - LR * gain * 2], rtol=1e-6)
    assert b[6].tolist() == [0, 6]


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_nothing_dropped_is_the_executor_with_the_combiner(combiner: str) -> None:
    """Without drops the gains are the executor's own: the same bytes as its ``combiner``
    run."""
    setup = _setup("adagrad", combiner=combiner)
    run = _run(setup, dropper=_fixed(Drops((None, None))))
    mine = run.replay_step(_batch())
    plain = Executor(prepare(setup.prepared.config, combiners=combiner),
                     RunOptions(engine="numpy"), initial_state=_initial())
    theirs = plain.step(_batch())
    for x, y in zip(mine, theirs, strict=True):
        assert x.tobytes() == y.tobytes()
    for key, value in plain.state_arrays().items():
        assert run.executor.state_arrays()[key].tobytes() == value.tobytes(), key


def test_drop_report() -> None:
    run = _run(_setup())
    run.replay_step(_batch())
    run.replay_step(_batch())
    summary = run.summary()
    drops = summary["drops"]
    assert drops["tables"]["a"] == {"ids": 6, "dropped": 0, "dropped_per_step": [0, 0],
                                    "zero_denominator_bags": 0, "share": 0.0}
    assert drops["tables"]["b"]["dropped_per_step"] == [1, 1]
    assert drops["tables"]["b"]["share"] == pytest.approx(2 / 6)
    assert drops["stacks"]["a_b"] == {"ids": 12, "dropped": 2, "dropped_per_step": [1, 1],
                                      "id_drop_counter": 2, "share": pytest.approx(2 / 12)}
    assert drops["total"] == {"ids": 12, "dropped": 2, "share": pytest.approx(2 / 12)}
    assert summary["steps"] == 2 and "compare" not in summary


def test_compare_dropping_against_two_executor_runs() -> None:
    """The drift equals two plain executor runs compared by NumPy: one fed the kept ids with
    their gains (sum combiner), one the whole batch with the mean combiner."""
    setup = _setup("adagrad", initial_accumulator_value=0.1)
    run = _run(setup, compare=True)
    mine = [run.replay_step(_batch()) for _ in range(2)]
    summary = run.summary()["compare"]

    kept = Executor(setup.prepared, RunOptions(engine="numpy"), initial_state=_initial())
    full = Executor(prepare(setup.prepared.config, combiners="mean"),
                    RunOptions(engine="numpy"), initial_state=_initial())
    batch = _batch()
    kept_batch = [FeatureInput(batch[0].ids, batch[0].row_splits,
                               np.array([0.5, 0.5, 1], F32), GRAD_A),
                  FeatureInput(np.array([4, 3]), np.array([0, 1, 2]),
                               np.array([0.25, 1], F32), GRAD_B)]
    for step in range(2):
        a = kept.step(kept_batch)
        b = full.step(_batch())
        for x, y in zip(a, mine[step], strict=True):
            assert x.tobytes() == y.tobytes()
        diff = np.concatenate([(x.astype(np.float64) - y).ravel() for x, y in zip(a, b,
                                                                                  strict=True)])
        assert summary["activations"][step] == {
            "step": step, "max_abs": pytest.approx(np.abs(diff).max()),
            "rms": pytest.approx(np.sqrt(np.mean(diff ** 2)))}
    k, f = kept.state_arrays(), full.state_arrays()
    for table in ("a", "b"):
        for key, name in ((f"table/{table}", None), (f"slot/{table}/accumulators",
                                                     "accumulators")):
            diff = k[key].astype(np.float64) - f[key]
            entry = (summary["tables"][table]["table"] if name is None
                     else summary["tables"][table]["slots"][name])
            assert entry == {"frobenius": pytest.approx(np.sqrt((diff ** 2).sum())),
                             "max_abs": pytest.approx(np.abs(diff).max())}
    assert summary["tables"]["a"]["table"]["max_abs"] == 0.0
    assert summary["tables"]["b"]["table"]["max_abs"] > 0.0


def test_synthetic_same_bytes_with_numpy_and_numba() -> None:
    from tpuemb_cfg.sim.synthetic import SyntheticData

    def every_third(step: int, checked: Any) -> Drops:
        return Drops(tuple((np.arange(c.ids.shape[0]) + step) % 3 == 0 for c in checked))

    results = []
    for engine in ("numpy", "numba"):
        setup = _setup("adagrad", initial_accumulator_value=0.1)
        run = SparseCoreRun(setup, RunOptions(engine=engine, seed=3), dropper=every_third,
                            compare=True)
        data = SyntheticData(run.plan, seed=3)
        activations = [run.synthetic_step(data) for _ in range(3)]
        results.append((activations, run.executor.state_arrays(),
                        json.dumps(run.summary(), sort_keys=True)))
    (acts_a, state_a, summary_a), (acts_b, state_b, summary_b) = results
    assert summary_a == summary_b
    assert all(x.tobytes() == y.tobytes() for s, t in zip(acts_a, acts_b, strict=True)
               for x, y in zip(s, t, strict=True))
    assert all(state_a[k].tobytes() == state_b[k].tobytes() for k in state_a)
    assert json.loads(summary_a)["drops"]["total"]["dropped"] > 0


def test_jax_slots_start_at_the_optimizer_specs_values() -> None:
    """jax-tpu-embedding's Adagrad-momentum accumulator starts at its
    initial_accumulator_value (0.1 by default), TensorFlow's at 0."""
    setup = _setup("adagrad_momentum", initial_accumulator_value=0.1, momentum=0.5,
                   beta2=1.0, epsilon=1e-10, exponent=2.0, use_nesterov=False)
    table = setup.prepared.plan.tables[0]
    assert table.slot_defaults == (F32(0.1), F32(0.0))
    assert table.hyper.momentum == F32(0.5)


def test_jax_learning_rate_callable_of_the_step() -> None:
    """A jax-tpu-embedding rate ``lambda step: 0.5 / (step + 1)``: 0.5, then 0.25, so b[3]
    (gradient [1, -1] each step) ends at [0, 3] - 0.75 [1, -1]."""
    def rate(step: int) -> float:
        return 0.5 / (step + 1)

    setup = _setup(learning_rate=rate)
    assert setup.prepared.plan.num_learning_rates == 1
    run = _run(setup)
    run.replay_step(_batch())
    run.replay_step(_batch())
    assert run.executor.state_arrays()["table/b"][3].tolist() == [-0.75, 3.75]


def test_jax_adam_is_refused() -> None:
    with pytest.raises(InputError, match="epsilon"):
        jax_message(_config("adam"))


def test_tensorflow_message_drops_clipping_and_refuses_decay() -> None:
    record = jax_message(_config("adagrad"))
    legacy = record.message
    legacy.table_descriptor[0].optimization_parameters.clipping_limits.upper.value = 1.0
    out = sparsecore_message(legacy, _config("adagrad"))
    assert not out.message.table_descriptor[0].optimization_parameters.HasField(
        "clipping_limits")
    assert out.notes == ["table 'a': weight clipping ignored: TensorFlow's TPUEmbeddingV2 does "
                         "not pass it to its SparseCore kernels"]
    legacy.table_descriptor[1].optimization_parameters.weight_decay_factor = 0.1
    with pytest.raises(InputError, match="NotImplementedError"):
        sparsecore_message(legacy, _config("adagrad"))


# The command: a spec file is routed to the SparseCore run; the spec loader and the
# preprocessing are replaced by the hand example's here (their own tests are theirs).


@pytest.fixture
def spec_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import tpuemb_cfg.session
    import tpuemb_cfg.sim.sparsecore.run as run_module

    spec = tmp_path / "spec.py"
    spec.write_text("# a TPUEmbeddingV2 spec\n")
    setup = _setup("adagrad", initial_accumulator_value=0.1)
    monkeypatch.setattr(tpuemb_cfg.session, "is_sparsecore_spec", lambda path: path == str(spec))
    monkeypatch.setattr(tpuemb_cfg.session, "prepare_sparsecore", lambda path: setup)
    monkeypatch.setattr(run_module, "preprocess_dropper",
                        lambda setup, allow: _second_id_of_fb)
    return spec


def _second_id_of_fb(step: int, checked: Any) -> Drops:
    """The hand example's drop (fb's second id), on any batch."""
    return Drops((None, np.arange(checked[1].ids.shape[0]) == 1), {"a_b": 1})


def _batches_file(tmp_path: Path) -> Path:
    arrays: dict[str, np.ndarray] = {}
    for f, item in enumerate(_batch()):
        arrays[f"s0/f{f}/ids"] = item.ids.astype(np.int64)
        arrays[f"s0/f{f}/row_splits"] = item.row_splits.astype(np.int64)
        arrays[f"s0/f{f}/grad"] = item.grad
        if item.weights is not None:
            arrays[f"s0/f{f}/weights"] = item.weights
    path = tmp_path / "b.npz"
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return path


def test_cli_replay_with_compare(spec_file: Path, tmp_path: Path) -> None:
    out, init = tmp_path / "o.npz", tmp_path / "i.npz"
    np.savez(init, **_initial())  # type: ignore[arg-type]
    code, output = run_simulate(str(spec_file), "--batches", str(_batches_file(tmp_path)),
                                "--init", str(init), "--out", str(out), "--compare-dropping",
                                "--json", "--engine", "numpy")
    assert code == 0, output
    summary = json.loads(output)
    assert summary["drops"]["tables"]["b"]["dropped"] == 1
    assert summary["compare"]["tables"]["a"]["table"]["max_abs"] == 0.0
    with np.load(out) as arrays:
        assert arrays["s0/f1/activations"][0].tolist() == [0, 1]
        assert sorted(k for k in arrays if not k.startswith("s0/")) == [
            "slot/a/accumulators", "slot/b/accumulators", "table/a", "table/b"]


def test_cli_text_report_and_summary_json(spec_file: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "run"
    code, output = run_simulate(str(spec_file), "--steps", "2", "--out-dir", str(out_dir),
                                "--quiet")
    assert code == 0, output
    summary = json.loads((out_dir / "summary.json").read_text())
    total = summary["drops"]["total"]
    assert total["dropped"] == 2 and total["share"] == pytest.approx(2 / total["ids"])
    assert summary["drops"]["tables"]["b"]["dropped_per_step"] == [1, 1]
    assert (f"total: 2 of {total['ids']} ids dropped ({100 * total['share']:.3g}%); "
            "id dropping on") in output
    assert (out_dir / "tables.npz").exists()


@pytest.mark.parametrize(("args", "expected"), [
    (("--batches", "missing.npz", "--out", "o.npz"), "missing.npz"),
    (("--batches", "b.npz"), "--batches needs --out O.npz"),
    (("--workers", "2"), "--workers: not available for a SparseCore spec"),
    (("--combiner", "sum"), "--combiner: not available for a SparseCore spec"),
    (("--max-memory", "1K", "--compare-dropping"), "of the run and of its twin without dropping"),
])
def test_cli_refusals_exit_2(spec_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             args: tuple[str, ...], expected: str) -> None:
    monkeypatch.chdir(tmp_path)
    _batches_file(tmp_path)
    code, output = run_simulate(str(spec_file), *args)
    assert code == 2, output
    assert expected in output and "Traceback" not in output
    assert not (tmp_path / "o.npz").exists() and not (tmp_path / "tpuemb-out").exists()


def test_cli_compare_dropping_needs_a_sparsecore_spec(tmp_path: Path) -> None:
    code, output = run_simulate("--compare-dropping", "--dry-run")
    assert code == 2
    assert "apply to SparseCore specs only" in output


def test_cli_dry_run(spec_file: Path) -> None:
    code, output = run_simulate(str(spec_file), "--dry-run", "--json", "--compare-dropping")
    assert code == 0, output
    info = json.loads(output)
    assert info["stacks"] == [{"name": "a_b", "tables": ["a", "b"], "max_ids_per_partition": 3,
                               "max_unique_ids_per_partition": 3}]
    assert info["compare_dropping"] is True and info["allow_id_dropping"] is True
    # the slice it used: Topology(1, 2) is one chip of 2 SparseCores, one device, one host
    assert {k: info["topology"][k] for k in ("chips", "devices", "hosts", "sparse_cores")} == {
        "chips": 1, "devices": 1, "hosts": 1, "sparse_cores": 2}
    text = run_simulate(str(spec_file), "--dry-run")[1]
    assert "1 chip, 1 device, 1 host, 2 SparseCores" in text
    memory = info["memory"]
    one = memory["estimate"]
    assert memory["executors"] == 2
    assert memory["total_bytes"] == 2 * one["total_bytes"] - one["process_bytes"] > 0


EXAMPLE = Path(__file__).parent.parent / "examples" / "sparsecore" / "simulate_jax_limits.py"


def test_example_end_to_end(tmp_path: Path) -> None:
    """The example spec through the whole chain: its limits drop only ``user`` ids (``item``'s
    rows come first in the stack ``item_user``), the totals add up, and the drift lies in
    ``user`` alone. Without --allow-id-dropping the first step is refused (exit 2)."""
    code, output = run_simulate(str(EXAMPLE), "--allow-id-dropping", "--compare-dropping",
                                "--steps", "3", "--out-dir", str(tmp_path / "run"), "--json")
    assert code == 0, output
    summary = json.loads(output)
    drops = summary["drops"]
    assert drops["tables"]["item"]["dropped"] == 0
    user = drops["tables"]["user"]
    assert user["dropped"] > 0 and sum(user["dropped_per_step"]) == user["dropped"]
    stack = drops["stacks"]["item_user"]
    assert stack["dropped"] == user["dropped"] == stack["id_drop_counter"]
    assert stack["ids"] == drops["total"]["ids"] == user["ids"] + drops["tables"]["item"]["ids"]
    compare = summary["compare"]["tables"]
    assert compare["item"]["table"]["max_abs"] == 0.0
    assert compare["user"]["table"]["frobenius"] > 0.0
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["drops"] == drops
    code, output = run_simulate(str(EXAMPLE), "--steps", "1", "--out-dir", str(tmp_path / "x"))
    assert code == 2 and "max_ids_per_partition = 32" in output
    assert not (tmp_path / "x").exists()


_TF_SPEC = """
from tpuemb_cfg.embedding import Adagrad, FeatureConfig, SparseCoreEmbeddingConfig, TableConfig
user = TableConfig(vocabulary_size=64, dim=8, name="user", optimizer=Adagrad(
    learning_rate=0.1, initial_accumulator_value=0.5, clip_weight_min=-1.0,
    clip_weight_max=1.0{decay}))
feature_config = {{"user_id": FeatureConfig(user, output_shape=[16])}}
sparse_core_config = SparseCoreEmbeddingConfig(allow_id_dropping=True)
topology = "v6e-1"
"""


def test_tensorflow_spec_semantics(tmp_path: Path) -> None:
    """TensorFlow: the Adagrad accumulator starts at initial_accumulator_value, weight clipping
    is dropped with a note (TPUEmbeddingV2 does not pass it to the SparseCore kernels), weight
    decay is refused."""
    spec = tmp_path / "tf_spec.py"
    spec.write_text(_TF_SPEC.format(decay=""))
    setup = prepare_sparsecore(spec)
    table = setup.prepared.plan.tables[0]
    assert table.slot_defaults == (F32(0.5),)
    assert table.clip_weights is None
    assert setup.notes == ("table 'user': weight clipping ignored: TensorFlow's TPUEmbeddingV2 "
                           "does not pass it to its SparseCore kernels",)
    assert setup.allow_id_dropping and setup.combiners == ("mean",)
    spec.write_text(_TF_SPEC.format(decay=", weight_decay_factor=0.1"))
    with pytest.raises(InputError, match="weight_decay_factor"):
        prepare_sparsecore(spec)


_TF_BUFFER_SPEC = """
from tpuemb_cfg.embedding import SGD, FeatureConfig, SparseCoreEmbeddingConfig, TableConfig
user = TableConfig(vocabulary_size=64, dim=8, optimizer=SGD(learning_rate=0.5), name="user",
                   combiner="sum")
feature_config = {"user_id": FeatureConfig(user, output_shape=[4])}
sparse_core_config = SparseCoreEmbeddingConfig(max_ids_per_chip_per_sample=4,
                                               allow_id_dropping=True)
topology = "v6e-1"
"""


def test_tensorflow_drops_what_does_not_fit_the_device_buffer(tmp_path: Path) -> None:
    """TensorFlow 2.21 drops only what does not fit the device's buffer of
    max_ids_per_chip_per_sample x samples = 4 x 4 = 16 entries. Ids [0, 1, 2, 3], one a
    sample, on one v6e chip (2 SparseCores, N = 2): SparseCore 0 (samples 0, 1) writes
    partition 0's run [0] and partition 1's run [1], each padded to 8: 16 entries, the whole
    buffer; SparseCore 1's ids 2 and 3 do not fit and are dropped. SGD, lr 0.5, gradient 1:
    rows 0 and 1 move by -0.5, rows 2 and 3 stay. Without dropping the step fails."""
    spec = tmp_path / "tf_buffer.py"
    spec.write_text(_TF_BUFFER_SPEC)
    setup = prepare_sparsecore(spec)
    zeros = {"table/user": np.zeros((64, 8), F32)}
    run = SparseCoreRun(setup, RunOptions(engine="numpy"), initial_state=zeros)
    run.replay_step([FeatureInput(np.array([0, 1, 2, 3]), None, None, np.ones((4, 8), F32))])
    assert run.step_reports[0]["tables"]["user"] == {"ids": 4, "dropped": 2,
                                                     "zero_denominator_bags": 0}
    table = run.executor.state_arrays()["table/user"]
    assert table[:4, 0].tolist() == [-0.5, -0.5, 0.0, 0.0]
    strict = SparseCoreRun(setup, RunOptions(engine="numpy"), allow_id_dropping=False)
    with pytest.raises(InputError, match="max_ids_per_chip_per_sample"):
        strict.replay_step([FeatureInput(np.array([0, 1, 2, 3]), None, None,
                                         np.ones((4, 8), F32))])


# -- the batch of a step: the slice's batch, bags as the input shapes say ---------------------

_SAME_MODEL_JAX = """
from tpuemb_cfg.sparsecore.jte import FeatureSpec, SGDOptimizerSpec, TableSpec
topology = "v6e:4"
clicks = TableSpec(name="clicks", vocabulary_size=1000, embedding_dim=8, initializer=None,
                   optimizer=SGDOptimizerSpec(learning_rate=0.1), combiner="sum")
feature_specs = {"clicks": FeatureSpec(name="clicks", table_spec=clicks, input_shape=[64, 3],
                                       output_shape=[64, 8])}
"""

_SAME_MODEL_TF = """
from tpuemb_cfg.embedding import SGD, FeatureConfig, TableConfig
topology = "v6e:4"
clicks = TableConfig(vocabulary_size=1000, dim=8, optimizer=SGD(learning_rate=0.1),
                     name="clicks", combiner="sum")
feature_config = {"clicks": FeatureConfig(clicks, output_shape=[16])}
per_replica_input_shapes = {"clicks": [16, 3]}
"""


@pytest.mark.parametrize("source", [_SAME_MODEL_JAX, _SAME_MODEL_TF], ids=["jax", "tensorflow"])
def test_a_step_is_the_slices_batch_of_the_input_shapes_bags(tmp_path: Path,
                                                             source: str) -> None:
    """One model written for jax-tpu-embedding (global batch 64, dense [64, 3] ids) and for
    TensorFlow (4 replicas of 16 samples, build() given [16, 3]) on 4 v6e chips: a step is 64
    samples of 3 ids, 192 ids, in both. (Before: jax drew 4 x 64 bags, TensorFlow 4 x 16 bags,
    of 1 to 4 ids each.)"""
    spec = tmp_path / "spec.py"
    spec.write_text(source)
    code, output = run_simulate(str(spec), "--steps", "3", "--seed", "7", "--json",
                                "--out-dir", str(tmp_path / "run"))
    assert code == 0, output
    summary = json.loads(output)
    assert summary["ids_per_step"] == [64 * 3] * 3
    assert summary["drops"]["total"]["ids"] == 3 * 64 * 3
    code, text = run_simulate(str(spec), "--steps", "2", "--seed", "7",
                              "--out-dir", str(tmp_path / "text"))
    assert code == 0, text
    assert "ids per step (the slice's batch): 192 192" in text
    assert "v6e: 4 chips, 4 devices, 1 host, 8 SparseCores" in text


def test_ragged_bags_are_drawn_up_to_the_inputs_last_axis(tmp_path: Path) -> None:
    """--bag-sizes uniform: each of the 64 bags holds 1 to 3 ids, so a step has 64 to 192."""
    spec = tmp_path / "spec.py"
    spec.write_text(_SAME_MODEL_JAX)
    code, output = run_simulate(str(spec), "--steps", "3", "--json", "--bag-sizes", "uniform",
                                "--out-dir", str(tmp_path / "run"))
    assert code == 0, output
    per_step = json.loads(output)["ids_per_step"]
    assert all(64 <= n <= 192 for n in per_step) and per_step != [192] * 3


def test_a_jax_batch_that_does_not_split_over_the_devices_is_refused(tmp_path: Path) -> None:
    spec = tmp_path / "spec.py"
    spec.write_text(_SAME_MODEL_JAX.replace("[64, 3]", "[66, 3]").replace("[64, 8]", "[66, 8]"))
    with pytest.raises(InputError, match="global batch 66 .* over 4 devices"):
        prepare_sparsecore(spec)
