"""Bad replay input, one test per kind, through `tpuemb simulate`: exit 2, key named, no output.

The base case is valid: table "t" (8 rows x 2, Adagrad on dynamic tag 0), two features, two steps.
Each test breaks one thing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tpuemb_cfg.cli import main

F32 = np.float32

CONFIG = """
table_descriptor {
  name: "t" vocabulary_size: 8 dimension: 2
  optimization_parameters { adagrad { } learning_rate { dynamic { } } }
}
mode: TRAINING num_hosts: 1 num_tensor_cores: 1
feature_descriptor { name: "a" input_shape: 2 }
feature_descriptor { name: "b" input_shape: 3 }
"""

CONSTANT_CONFIG = CONFIG.replace("dynamic { }", "constant: 0.1")

Arrays = dict[str, np.ndarray]


def base_batches() -> Arrays:
    batches: Arrays = {}
    for s in range(2):
        batches[f"s{s}/f0/ids"] = np.array([1, 2, 2], dtype=np.int64)
        batches[f"s{s}/f0/row_splits"] = np.array([0, 1, 3], dtype=np.int64)
        batches[f"s{s}/f0/weights"] = np.array([1.0, 0.5, 2.0], dtype=F32)
        batches[f"s{s}/f0/grad"] = np.ones((2, 2), dtype=F32)
        batches[f"s{s}/f1/ids"] = np.array([0, 7, 2], dtype=np.int64)
        batches[f"s{s}/f1/grad"] = np.full((3, 2), 0.5, dtype=F32)
        batches[f"s{s}/learning_rates"] = np.array([0.1], dtype=F32)
    return batches


def run_replay(
    tmp_path: Path,
    change: Callable[[Arrays], None] | None = None,
    config: str = CONFIG,
    init: Arrays | None = None,
) -> tuple[int, str, Path]:
    (tmp_path / "c.pbtxt").write_text(config)
    batches = base_batches()
    if change is not None:
        change(batches)
    np.savez(tmp_path / "b.npz", **batches)  # type: ignore[arg-type]
    arguments = ["simulate", str(tmp_path / "c.pbtxt"), "--batches", str(tmp_path / "b.npz"),
                 "--out", str(tmp_path / "o.npz"), "--combiner", "sum"]
    if init is not None:
        np.savez(tmp_path / "i.npz", **init)  # type: ignore[arg-type]
        arguments += ["--init", str(tmp_path / "i.npz")]
    result = CliRunner().invoke(main, arguments)
    return result.exit_code, result.output, tmp_path / "o.npz"


def assert_refused(tmp_path: Path, key: str, *words: str, **kwargs: object) -> str:
    code, output, out = run_replay(tmp_path, **kwargs)  # type: ignore[arg-type]
    assert code == 2, output
    assert f"key {key}: error:" in output, output
    for word in words:
        assert word in output, output
    assert not out.exists()
    assert "Traceback" not in output
    return output


def test_base_case_runs(tmp_path: Path) -> None:
    code, output, out = run_replay(tmp_path)
    assert code == 0, output
    with np.load(out) as archive:
        assert sorted(archive.files) == [
            "s0/f0/activations", "s0/f1/activations", "s1/f0/activations", "s1/f1/activations",
            "slot/t/accumulators", "table/t",
        ]


def test_step_skipping_a_feature(tmp_path: Path) -> None:
    def change(b: Arrays) -> None:
        for name in ("ids", "grad"):
            del b[f"s1/f1/{name}"]

    assert_refused(tmp_path, "s1/f1/ids", "skips feature 1", change=change)


def test_missing_grad(tmp_path: Path) -> None:
    assert_refused(tmp_path, "s0/f1/grad", "missing", change=lambda b: b.pop("s0/f1/grad"))


def test_missing_learning_rates(tmp_path: Path) -> None:
    assert_refused(tmp_path, "s1/learning_rates", "K = 1",
                   change=lambda b: b.pop("s1/learning_rates"))


def test_wrong_learning_rates_length(tmp_path: Path) -> None:
    def change(b: Arrays) -> None:
        b["s0/learning_rates"] = np.array([0.1, 0.2], dtype=F32)

    assert_refused(tmp_path, "s0/learning_rates", "expected K = 1", "tag 0: table 't'",
                   change=change)


def test_learning_rates_when_k_is_zero(tmp_path: Path) -> None:
    assert_refused(tmp_path, "s0/learning_rates", "K = 0", config=CONSTANT_CONFIG)


def test_ids_wrong_dtype(tmp_path: Path) -> None:
    def change(b: Arrays) -> None:
        b["s0/f0/ids"] = b["s0/f0/ids"].astype(np.float64)

    assert_refused(tmp_path, "s0/f0/ids", "float64", "int64", change=change)


def test_weights_wrong_dtype(tmp_path: Path) -> None:
    def change(b: Arrays) -> None:
        b["s1/f0/weights"] = b["s1/f0/weights"].astype(np.float64)

    assert_refused(tmp_path, "s1/f0/weights", "float64", "float32", change=change)


def test_weights_wrong_shape(tmp_path: Path) -> None:
    def change(b: Arrays) -> None:
        b["s0/f0/weights"] = np.ones(2, dtype=F32)

    assert_refused(tmp_path, "s0/f0/weights", "(3,)", change=change)


def test_grad_wrong_shape(tmp_path: Path) -> None:
    def change(b: Arrays) -> None:
        b["s0/f1/grad"] = np.ones((3, 4), dtype=F32)

    assert_refused(tmp_path, "s0/f1/grad", "(3, 4)", "(3, 2)", change=change)


@pytest.mark.parametrize("bad", [8, -1])
def test_id_out_of_range(tmp_path: Path, bad: int) -> None:
    def change(b: Arrays) -> None:
        b["s1/f1/ids"] = np.array([0, bad, 2], dtype=np.int64)

    assert_refused(tmp_path, "s1/f1/ids", f"id {bad} at index 1", "[0, 8)", change=change)


def test_nan_gradient(tmp_path: Path) -> None:
    def change(b: Arrays) -> None:
        b["s1/f0/grad"][1, 0] = np.nan

    assert_refused(tmp_path, "s1/f0/grad", "finite", "nan", change=change)


def test_infinite_weight(tmp_path: Path) -> None:
    def change(b: Arrays) -> None:
        b["s0/f0/weights"][2] = np.inf

    assert_refused(tmp_path, "s0/f0/weights", "finite", change=change)


def test_bad_row_splits(tmp_path: Path) -> None:
    def change(b: Arrays) -> None:
        b["s0/f0/row_splits"] = np.array([0, 2, 1, 3], dtype=np.int64)

    assert_refused(tmp_path, "s0/f0/row_splits", "non-decreasing", change=change)


def test_row_splits_not_ending_at_nnz(tmp_path: Path) -> None:
    def change(b: Arrays) -> None:
        b["s0/f0/row_splits"] = np.array([0, 1, 2], dtype=np.int64)

    assert_refused(tmp_path, "s0/f0/row_splits", "end at the number of ids (3)", change=change)


def test_unexpected_key(tmp_path: Path) -> None:
    def change(b: Arrays) -> None:
        b["s0/f0/idz"] = np.zeros(1, dtype=np.int64)

    assert_refused(tmp_path, "s0/f0/idz", "unexpected key", change=change)


def test_feature_index_out_of_range(tmp_path: Path) -> None:
    def change(b: Arrays) -> None:
        b["s0/f2/ids"] = np.zeros(1, dtype=np.int64)

    assert_refused(tmp_path, "s0/f2/ids", "2 feature(s)", change=change)


def test_gap_in_steps(tmp_path: Path) -> None:
    def change(b: Arrays) -> None:
        for name in list(b):
            if name.startswith("s1/"):
                b["s2/" + name[3:]] = b.pop(name)

    assert_refused(tmp_path, "s1/f0/ids", "step 1 is absent", change=change)


def test_init_wrong_shape(tmp_path: Path) -> None:
    init = {"table/t": np.zeros((8, 3), dtype=F32)}
    output = assert_refused(tmp_path, "table/t", "(8, 3)", "(8, 2)", init=init)
    assert "i.npz: key table/t" in output


def test_init_unknown_slot(tmp_path: Path) -> None:
    init = {"slot/t/momenta": np.zeros((8, 2), dtype=F32)}
    assert_refused(tmp_path, "slot/t/momenta", "its slots are: accumulators", init=init)


def test_invalid_config_is_refused(tmp_path: Path) -> None:
    (tmp_path / "c.pbtxt").write_text(CONFIG.replace("vocabulary_size: 8", "vocabulary_size: 0"))
    np.savez(tmp_path / "b.npz", **base_batches())  # type: ignore[arg-type]
    result = CliRunner().invoke(main, [
        "simulate", str(tmp_path / "c.pbtxt"), "--batches", str(tmp_path / "b.npz"),
        "--out", str(tmp_path / "o.npz"),
    ])
    assert result.exit_code == 2
    assert "c.pbtxt:" in result.output and "TBL004" in result.output
    assert not (tmp_path / "o.npz").exists()


def test_unknown_combiner_and_feature(tmp_path: Path) -> None:
    (tmp_path / "c.pbtxt").write_text(CONFIG)
    np.savez(tmp_path / "b.npz", **base_batches())  # type: ignore[arg-type]
    for combiner, words in (("max", "unknown combiner 'max'"), ("5=sum", "out of range")):
        result = CliRunner().invoke(main, [
            "simulate", str(tmp_path / "c.pbtxt"), "--batches", str(tmp_path / "b.npz"),
            "--out", str(tmp_path / "o.npz"), "--combiner", combiner,
        ])
        assert result.exit_code == 2
        assert words in result.output


def test_missing_batches_file(tmp_path: Path) -> None:
    (tmp_path / "c.pbtxt").write_text(CONFIG)
    result = CliRunner().invoke(main, [
        "simulate", str(tmp_path / "c.pbtxt"), "--batches", str(tmp_path / "nope.npz"),
        "--out", str(tmp_path / "o.npz"),
    ])
    assert result.exit_code == 2
    assert "nope.npz: error: file not found" in result.output
