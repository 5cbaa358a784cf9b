"""What a synthetic run writes: ``--save-batches`` (replayed to the same bytes), ``--tables
all|touched|none`` and the partial state format ``--init`` reads (``executor.partial``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import run_simulate

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.executor.initial import initial_state
from tpuemb_cfg.session import prepare
from tpuemb_cfg.simulate import Executor

F32 = np.float32

# Lazy Adam (bias-corrected rates on tag 0, changing every step), Adagrad with accumulation
# DISABLED on two cores, non-lazy Adam, pipelining, a sequence feature, three hosts.
CONFIG = """
table_descriptor { name: "ads" vocabulary_size: 3000 dimension: 8
  optimization_parameters { adam { beta1: 0.9 beta2: 0.999 epsilon: 1e-7 }
    learning_rate { dynamic { tag: 0 } } } }
table_descriptor { name: "users" vocabulary_size: 500 dimension: 4
  optimization_parameters { adagrad { }
    learning_rate { constant: 0.2 } gradient_accumulation_status: DISABLED } }
table_descriptor { name: "dense" vocabulary_size: 40 dimension: 4
  optimization_parameters { adam { beta1: 0.9 beta2: 0.999 epsilon: 1e-7
    use_non_lazy_adam: true } learning_rate { constant: 0.01 } } }
mode: TRAINING num_hosts: 3 num_tensor_cores: 2
feature_descriptor { table_id: 0 input_shape: 16 }
feature_descriptor { table_id: 1 input_shape: 8 input_shape: 5 }
feature_descriptor { table_id: 2 input_shape: 4 }
"""
PIPELINED = CONFIG + "pipeline_execution_with_tensor_core: true\n"


def state_of(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as arrays:
        return {key: arrays[key] for key in arrays.files}


@pytest.mark.parametrize("config", [CONFIG, PIPELINED], ids=["plain", "pipelined"])
@pytest.mark.parametrize("data", [(), ("--ids", "uniform", "--sequence-lengths", "uniform:2")],
                         ids=["default", "uniform"])
def test_saved_batches_replay_to_the_same_bytes(tmp_path: Path, config: str,
                                                data: tuple[str, ...]) -> None:
    (tmp_path / "c.pbtxt").write_text(config)
    code, output = run_simulate(str(tmp_path / "c.pbtxt"), "--steps", "6", "--seed", "11",
                                "--tables", "all", "--save-batches", str(tmp_path / "b.npz"),
                                "--out-dir", str(tmp_path / "run"), "-q", *data)
    assert code == 0, output
    code, output = run_simulate(str(tmp_path / "c.pbtxt"), "--batches", str(tmp_path / "b.npz"),
                                "--seed", "11", "--out", str(tmp_path / "o.npz"), "-q")
    assert code == 0, output
    synthetic, replayed = state_of(tmp_path / "run" / "tables.npz"), state_of(tmp_path / "o.npz")
    assert sorted(synthetic) == ["slot/ads/momenta", "slot/ads/velocities",
                                 "slot/dense/momenta", "slot/dense/velocities",
                                 "slot/users/accumulators", "table/ads", "table/dense",
                                 "table/users"]
    for key, value in synthetic.items():
        assert replayed[key].tobytes() == value.tobytes(), key
    assert not np.array_equal(synthetic["table/ads"], initial_state(
        prepare(str(tmp_path / "c.pbtxt")).plan, seed=11)["table/ads"])  # it trained


def test_saved_batches_hold_each_steps_learning_rates(tmp_path: Path) -> None:
    (tmp_path / "c.pbtxt").write_text(CONFIG)
    code, output = run_simulate(str(tmp_path / "c.pbtxt"), "--steps", "3", "--learning-rate",
                                "0.05", "--save-batches", str(tmp_path / "b.npz"), "--out-dir",
                                str(tmp_path / "run"), "-q")
    assert code == 0, output
    batches = state_of(tmp_path / "b.npz")
    assert sorted(batches) == sorted(
        [f"s{s}/learning_rates" for s in range(3)]
        + [f"s{s}/f{f}/{k}" for s in range(3) for f in range(3)
           for k in ("grad", "ids", "row_splits")])
    beta1, beta2 = float(F32(0.9)), float(F32(0.999))  # the configuration's float32 values
    for step in range(3):  # Adam's bias correction, n = step + 1, sent in float32
        n = step + 1
        expected = F32(0.05 * math.sqrt(1 - beta2**n) / (1 - beta1**n))
        assert batches[f"s{step}/learning_rates"].tolist() == pytest.approx([expected],
                                                                             rel=1e-7)
        assert batches[f"s{step}/f1/grad"].shape == (2 * 8 * 5, 4)  # every position a bag
        assert batches[f"s{step}/f0/ids"].dtype == np.int64
    # A gradient is (activation - teacher) / bags: the same steps' files differ step to step.
    assert not np.array_equal(batches["s0/f0/grad"], batches["s1/f0/grad"])


def test_touched_rows_are_the_ids_the_steps_sent(tmp_path: Path) -> None:
    (tmp_path / "c.pbtxt").write_text(CONFIG)
    for tables in ("touched", "all"):
        code, output = run_simulate(str(tmp_path / "c.pbtxt"), "--steps", "4", "--tables",
                                    tables, "--save-batches", str(tmp_path / f"{tables}.npz"),
                                    "--out-dir", str(tmp_path / tables), "-q")
        assert code == 0, output
    batches = state_of(tmp_path / "touched.npz")
    partial = state_of(tmp_path / "touched" / "tables.npz")
    whole = state_of(tmp_path / "all" / "tables.npz")
    for feature, table in ((0, "ads"), (1, "users")):  # lazy: the ids of every step
        sent = np.unique(np.concatenate([batches[f"s{s}/f{feature}/ids"] for s in range(4)]))
        np.testing.assert_array_equal(partial[f"table/{table}/rows"], sent)
        np.testing.assert_array_equal(partial[f"table/{table}/values"],
                                      whole[f"table/{table}"][sent])
    np.testing.assert_array_equal(partial["slot/ads/velocities/values"],
                                  whole["slot/ads/velocities"][partial["table/ads/rows"]])
    # Non-lazy Adam steps every row.
    np.testing.assert_array_equal(partial["table/dense/rows"], np.arange(40))
    # The partial file and the seed are the whole state, lazily or not.
    plan = prepare(str(tmp_path / "c.pbtxt")).plan
    for lazy in (False, True):
        rebuilt = initial_state(plan, partial, seed=0, lazy=lazy)
        executor = Executor(prepare(str(tmp_path / "c.pbtxt")), initial_state=partial, seed=0)
        for key, value in whole.items():
            if not lazy:
                assert rebuilt[key].tobytes() == value.tobytes(), key
            assert np.asarray(executor.state_arrays()[key]).tobytes() == value.tobytes(), key
    summary = json.loads((tmp_path / "touched" / "summary.json").read_text())
    assert summary["tables_written"] == "touched"
    assert summary["rows_written"] == {name: int(partial[f"table/{name}/rows"].size)
                                       for name in ("ads", "users", "dense")}


def test_init_reads_a_partial_file(tmp_path: Path) -> None:
    """A replay from a touched-rows file ends where one from the whole tables does."""
    (tmp_path / "c.pbtxt").write_text(CONFIG)
    for tables in ("touched", "all"):
        code, output = run_simulate(str(tmp_path / "c.pbtxt"), "--steps", "3", "--seed", "4",
                                    "--tables", tables, "--out-dir", str(tmp_path / tables),
                                    "-q")
        assert code == 0, output
    code, output = run_simulate(str(tmp_path / "c.pbtxt"), "--steps", "2", "--seed", "9",
                                "--save-batches", str(tmp_path / "more.npz"), "--out-dir",
                                str(tmp_path / "more"), "-q", "--tables", "none")
    assert code == 0, output
    results = []
    for tables in ("touched", "all"):
        code, output = run_simulate(
            str(tmp_path / "c.pbtxt"), "--batches", str(tmp_path / "more.npz"), "--init",
            str(tmp_path / tables / "tables.npz"), "--seed", "4", "--out",
            str(tmp_path / f"o-{tables}.npz"), "-q")
        assert code == 0, output
        results.append((tmp_path / f"o-{tables}.npz").read_bytes())
    assert results[0] == results[1]


def test_tables_none_writes_the_summary_only(tmp_path: Path) -> None:
    code, output = run_simulate("--steps", "2", "--tables", "none", "--out-dir",
                                str(tmp_path / "o"))
    assert code == 0, output
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["summary.json"]
    assert "tables not written (--tables none)" in output
    code, output = run_simulate("--steps", "2", "--out-dir", str(tmp_path / "t"))
    assert code == 0, output
    assert "touched rows of the tables and slots written to" in output


def test_the_touched_rows_survive_a_resume(tmp_path: Path) -> None:
    (tmp_path / "c.pbtxt").write_text(CONFIG)
    whole = run_simulate(str(tmp_path / "c.pbtxt"), "--steps", "6", "--out-dir",
                         str(tmp_path / "whole"), "-q")
    assert whole[0] == 0, whole[1]
    first = run_simulate(str(tmp_path / "c.pbtxt"), "--steps", "3", "--checkpoint-every", "3",
                         "--out-dir", str(tmp_path / "parts"), "-q")
    assert first[0] == 0, first[1]
    second = run_simulate(str(tmp_path / "c.pbtxt"), "--steps", "6", "--resume", "--out-dir",
                          str(tmp_path / "parts"), "-q")
    assert second[0] == 0, second[1]
    assert ((tmp_path / "parts" / "tables.npz").read_bytes()
            == (tmp_path / "whole" / "tables.npz").read_bytes())


def test_multi_worker_runs_write_touched_rows(tmp_path: Path) -> None:
    (tmp_path / "c.pbtxt").write_text(CONFIG)
    for tables in ("touched", "all"):
        code, output = run_simulate(str(tmp_path / "c.pbtxt"), "--workers", "2", "--steps", "3",
                                    "--tables", tables, "--out-dir", str(tmp_path / tables),
                                    "-q")
        assert code == 0, output
    partial = state_of(tmp_path / "touched" / "tables.npz")
    whole = state_of(tmp_path / "all" / "tables.npz")
    rebuilt = initial_state(prepare(str(tmp_path / "c.pbtxt")).plan, partial, seed=0)
    for key, value in whole.items():
        assert rebuilt[key].tobytes() == value.tobytes(), key
    assert 0 < partial["table/ads/rows"].size < 3000


@pytest.mark.parametrize(("args", "message"), [
    (("--resume",), "--save-batches cannot be combined with --resume"),
    (("--workers", "2"), "--save-batches cannot be combined with a multi-worker run"),
])
def test_save_batches_refusals(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    code, output = run_simulate("--steps", "2", "--save-batches", str(tmp_path / "b.npz"),
                                "--out-dir", str(tmp_path / "o"), *args)
    assert code == 2 and message in output, output
    assert not (tmp_path / "b.npz").exists() and not (tmp_path / "o").exists()


@pytest.mark.parametrize(("name", "message"), [
    ("b.txt", "b.txt: cannot write .txt files; use one of the extensions .npz"),
    ("missing/b.npz", "--save-batches"),
    ("-", "--save-batches -: the batches are an .npz archive"),
])
def test_save_batches_path_is_checked_first(tmp_path: Path, name: str, message: str) -> None:
    code, output = run_simulate("--steps", "2", "--save-batches",
                                name if name == "-" else str(tmp_path / name),
                                "--out-dir", str(tmp_path / "o"))
    assert code == 2 and message in output, output
    assert len(output.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_save_batches_refuses_an_input(tmp_path: Path) -> None:
    (tmp_path / "c.pbtxt").write_text(CONFIG)
    code, output = run_simulate(str(tmp_path / "c.pbtxt"), "--save-batches",
                                str(tmp_path / "c.pbtxt"), "--out-dir", str(tmp_path / "o"))
    assert code == 2 and "refusing to write --save-batches" in output, output


def test_a_failed_run_leaves_no_batches(tmp_path: Path) -> None:
    (tmp_path / "c.pbtxt").write_text(CONFIG)
    code, output = run_simulate(str(tmp_path / "c.pbtxt"), "--steps", "5", "--learning-rate",
                                "1e38", "--save-batches", str(tmp_path / "b.npz"), "--out-dir",
                                str(tmp_path / "o"))
    # the run stops when the activations read the overflowed rows, naming the first cause
    assert code == 2 and "overflowed" in output and "not finite" in output, output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pbtxt"]


def test_save_batches_needs_the_disk_space(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**6, 10**6 - 1000, 1000))
    code, output = run_simulate("--steps", "50", "--save-batches", str(tmp_path / "b.npz"),
                                "--out-dir", str(tmp_path / "o"))
    assert code == 2, output
    assert "the file would take about" in output and "its disk has 1000 bytes free" in output
    assert not (tmp_path / "b.npz").exists()


@pytest.mark.parametrize(("arrays", "key", "message"), [
    ({"table/ads/rows": np.array([3, 1])}, "table/ads/rows",
     "row ids must be distinct, increasing and in [0, 3000)"),
    ({"table/ads/rows": np.array([2, 3000])}, "table/ads/rows", "in [0, 3000)"),
    ({"table/ads/rows": np.array([1.0])}, "table/ads/rows", "expected a 1-D array of integer"),
    ({"table/ads/rows": np.array([1, 2]), "table/ads/values": np.zeros((3, 8), F32)},
     "table/ads/values", "shape (3, 8) found, expected (2, 8)"),
    ({"slot/ads/momenta/values": np.zeros((1, 8), F32)}, "slot/ads/momenta/values",
     "partial values need the rows they belong to: add table/ads/rows"),
    ({"table/ads/rows": np.array([1]), "table/ads/values": np.zeros((1, 8), F32),
      "table/ads": np.zeros((3000, 8), F32)}, "table/ads/values", "is given whole and in part"),
    ({"table/ads/rows": np.array([1]), "table/ads/values": np.zeros((1, 8))},
     "table/ads/values", "dtype float64 found, expected float32"),
])
def test_bad_partial_files_name_the_key(tmp_path: Path, arrays: dict[str, np.ndarray], key: str,
                                        message: str) -> None:
    (tmp_path / "c.pbtxt").write_text(CONFIG)
    plan = prepare(str(tmp_path / "c.pbtxt")).plan
    with pytest.raises(InputError) as raised:
        initial_state(plan, arrays, source="I.npz", strict=True)
    assert raised.value.key == key and message in str(raised.value)
    np.savez(tmp_path / "i.npz", **arrays)
    np.savez(tmp_path / "b.npz", **{"s0/f0/ids": np.array([1]), "s0/f0/grad": np.zeros((1, 8), F32),
                                    "s0/f1/ids": np.array([1]), "s0/f1/grad": np.zeros((1, 4), F32),
                                    "s0/f2/ids": np.array([1]), "s0/f2/grad": np.zeros((1, 4), F32),
                                    "s0/learning_rates": np.ones(1, F32)})
    code, output = run_simulate(str(tmp_path / "c.pbtxt"), "--batches", str(tmp_path / "b.npz"),
                                "--init", str(tmp_path / "i.npz"), "--out",
                                str(tmp_path / "o.npz"))
    assert code == 2 and f"key {key}" in output and message in output, output
    assert len(output.strip().splitlines()) == 1


def test_a_simulation_spec_carries_the_data_and_output_options(tmp_path: Path) -> None:
    (tmp_path / "c.pbtxt").write_text(CONFIG)
    (tmp_path / "sim.pbtxt").write_text(
        'steps: 4\nseed: 3\nout_dir: "from-spec"\n'
        'workload { synthetic { ids: "uniform" sequence_lengths: "fixed:2" tables: "all"\n'
        '  save_batches: "b.npz" } }\n')
    code, output = run_simulate(str(tmp_path / "c.pbtxt"), "--spec", str(tmp_path / "sim.pbtxt"),
                                "-q")
    assert code == 0, output
    batches = state_of(tmp_path / "b.npz")  # relative to the spec file
    lengths = np.diff(batches["s0/f1/row_splits"]).reshape(16, 5)  # 2 cores x 8 samples
    np.testing.assert_array_equal(lengths, np.tile([1, 1, 0, 0, 0], (16, 1)))
    # The same run from the options: the same bytes.
    code, output = run_simulate(str(tmp_path / "c.pbtxt"), "--steps", "4", "--seed", "3",
                                "--ids", "uniform", "--sequence-lengths", "fixed:2",
                                "--tables", "all", "--out-dir", str(tmp_path / "options"), "-q")
    assert code == 0, output
    assert ((tmp_path / "from-spec" / "tables.npz").read_bytes()
            == (tmp_path / "options" / "tables.npz").read_bytes())


@pytest.mark.parametrize(("field", "message"), [
    ('ids: "zipf:-1"', "workload.synthetic.ids: zipf:-1: the Zipf exponent must be"),
    ('sequence_lengths: "half"', "workload.synthetic.sequence_lengths: half: unknown sequence"),
    ('tables: "some"', "workload.synthetic.tables: 'some' found, expected one of touched, all, "
                       "none"),
    ('bag_sizes: "many"', "workload.synthetic.bag_sizes: 'many' found, expected one of auto"),
])
def test_bad_spec_fields_point_at_their_line(tmp_path: Path, field: str, message: str) -> None:
    (tmp_path / "sim.pbtxt").write_text(f"steps: 2\nworkload {{\n  synthetic {{ {field} }}\n}}\n")
    code, output = run_simulate("--spec", str(tmp_path / "sim.pbtxt"), "--out-dir",
                                str(tmp_path / "o"))
    assert code == 2 and f"sim.pbtxt:3:15: error: {message}" in output, output
    assert not (tmp_path / "o").exists()


def test_partial_tables_expand_block_by_block(tmp_path: Path) -> None:
    """What the Ray backend's hosts receive from a partial file: whole arrays read by blocks of
    rows, the seed's defaults with the given rows over them."""
    from tpuemb_cfg.executor.partial import expand_partial

    (tmp_path / "c.pbtxt").write_text(CONFIG)
    code, output = run_simulate(str(tmp_path / "c.pbtxt"), "--steps", "3", "--seed", "5",
                                "--out-dir", str(tmp_path / "t"), "-q")
    assert code == 0, output
    code, output = run_simulate(str(tmp_path / "c.pbtxt"), "--steps", "3", "--seed", "5",
                                "--tables", "all", "--out-dir", str(tmp_path / "a"), "-q")
    assert code == 0, output
    whole = state_of(tmp_path / "a" / "tables.npz")
    plan = prepare(str(tmp_path / "c.pbtxt")).plan
    expanded = expand_partial(plan, state_of(tmp_path / "t" / "tables.npz"), seed=5)
    assert sorted(expanded) == sorted(whole)
    for key, value in whole.items():
        assert expanded[key].shape == value.shape
        blocks = [np.asarray(expanded[key][start:start + 700])
                  for start in range(0, value.shape[0], 700)]
        assert np.concatenate(blocks).tobytes() == value.tobytes(), key
