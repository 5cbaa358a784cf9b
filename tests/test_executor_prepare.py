"""Prepare once (issue 11, item 3): one parse, one validation and one plan per configuration.

``tpuemb_cfg.session.prepare`` parses a file once and validates the parsed message together with
its text (positions, ``# tpuemb: disable=ID``); ``Executor``, ``replay`` and ``tpuemb simulate
--batches`` take its result without parsing or planning again. The plan holds no protobuf, so a
step never reads it.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ROOT, golden, run_cli
from google.protobuf.message import Message

import tpuemb_cfg
from tpuemb_cfg.base.errors import InputError, UsageError
from tpuemb_cfg.executor import plan
from tpuemb_cfg.formats import io
from tpuemb_cfg.formats.npzio import read_npz
from tpuemb_cfg.session import Prepared, prepare
from tpuemb_cfg.simulate import Executor, replay

TEXT = """table_descriptor {
  name: "t"
  vocabulary_size: 6
  dimension: 2
  optimization_parameters {
    adagrad { }
    learning_rate { constant: 0.5 }
  }
}
table_descriptor {
  name: "u"
  vocabulary_size: 4
  dimension: 1
  optimization_parameters {
    frequency_aware_adagrad {
      initial_accumulator_value: 0.25 probability_exponent: 0.5 max_lr_multiplier: 2
      accumulator_decay: 0.5 step_counter { tag: 1 }
    }
    learning_rate { dynamic { tag: 0 } }
  }
}
feature_descriptor { name: "a" table_id: 0 input_shape: 2 }
feature_descriptor { name: "b" table_id: 1 input_shape: 2 }
mode: TRAINING
num_hosts: 1
num_tensor_cores: 1
"""


def _counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    """Replace ``module.name`` by a wrapper counting its calls; return the counter."""
    calls: list[int] = []
    original: Callable[..., Any] = getattr(module, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return calls


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "config.pbtxt"
    path.write_text(TEXT)
    return path


def test_prepare_a_file_parses_it_once(
    config_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parses = _counting(monkeypatch, io, "parse_bytes")
    plans = _counting(monkeypatch, plan, "build_plan")
    prepared = prepare(str(config_path), combiners="sum")
    assert (len(parses), len(plans)) == (1, 1)
    assert prepared.path == str(config_path)
    assert [t.name for t in prepared.config.table_descriptor] == ["t", "u"]
    assert [f.combiner for f in prepared.plan.features] == ["sum", "sum"]
    executor = Executor(prepared)
    assert executor.plan is prepared.plan and executor.config is prepared.config
    assert (len(parses), len(plans)) == (1, 1)


def test_prepare_a_prepared_configuration(config_path: Path) -> None:
    prepared = prepare(config_path)
    assert prepare(prepared) is prepared
    other = prepare(prepared, combiners={1: "sqrtn"})
    assert other.config is prepared.config and other.diagnostics == prepared.diagnostics
    assert [f.combiner for f in other.plan.features] == ["mean", "sqrtn"]
    assert other.plan.tables == prepared.plan.tables
    with pytest.raises(UsageError, match="unknown combiner 'max'"):
        prepare(prepared, combiners="max")


def test_prepare_bytes_and_messages(config_path: Path) -> None:
    message = tpuemb_cfg.load(str(config_path))
    for source in (message, message.SerializeToString()):
        prepared = prepare(source)
        assert prepared.path is None
        assert prepared.config == message
        assert [t.name for t in prepared.plan.tables] == ["t", "u"]


def _invalid(tmp_path: Path, suppress: bool = False) -> tuple[Path, Any]:
    """TEXT with a second table named "t": the validator's first error and the file."""
    text = TEXT.replace('name: "u"', 'name: "t"')
    path = tmp_path / "invalid.pbtxt"
    path.write_text(text)
    first = next(d for d in tpuemb_cfg.validate(str(path)) if d.severity == "error")
    if suppress:
        lines = text.split("\n")
        lines[first.line - 1] += f"  # tpuemb: disable={first.rule}"
        path.write_text("\n".join(lines))
    return path, first


def test_validation_errors_carry_line_and_column(tmp_path: Path) -> None:
    path, first = _invalid(tmp_path)
    with pytest.raises(InputError) as info:
        prepare(str(path))
    assert (info.value.line, info.value.column) == (first.line, first.column)
    assert f"{first.rule} at {first.field_path}" in info.value.message
    assert "run `tpuemb validate`" in info.value.message
    unchecked = prepare(str(path), check=False)
    assert unchecked.diagnostics == ()


def test_disable_comments_are_honoured(tmp_path: Path) -> None:
    path, first = _invalid(tmp_path, suppress=True)
    prepared = prepare(str(path))
    assert all(d.rule != first.rule for d in prepared.diagnostics)


def test_the_plan_holds_no_protobuf(config_path: Path) -> None:
    """Hyper-parameters are bound to float32 once; nothing a step reads is a proto message."""

    def no_message(value: Any, where: str) -> None:
        assert not isinstance(value, Message), where
        if isinstance(value, tuple | list):
            for i, item in enumerate(value):
                no_message(item, f"{where}[{i}]")

    prepared = prepare(config_path)
    for table in prepared.plan.tables:
        for name in table.__dataclass_fields__:
            no_message(getattr(table, name), f"{table.name}.{name}")
    hyper = prepared.plan.tables[1].hyper
    assert hyper.step_counter_tag == 1 and hyper.initial_accumulator_value == np.float32(0.25)
    assert prepared.plan.tables[1].slot_defaults == (np.float32(0.25), np.float32(0.0))


def test_a_step_never_reads_the_message(config_path: Path) -> None:
    executor = Executor(prepare(config_path), combiners="sum")
    executor.config = executor.prepared = None  # type: ignore[assignment]
    batch = [
        {"ids": [1, 1, 5], "row_splits": [0, 2, 3], "grad": np.ones((2, 2), np.float32)},
        {"ids": [0, 3], "grad": np.ones((2, 1), np.float32)},
    ]
    before = executor.state_arrays()["table/t"].copy()
    executor.step(batch, [0.1, 3.0])
    assert executor.step_index == 1
    assert not np.array_equal(executor.state_arrays()["table/t"], before)


def test_importing_prepare_loads_no_numpy() -> None:
    code = "import sys, tpuemb_cfg.session\nassert 'numpy' not in sys.modules, 'numpy imported'\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def test_replay_takes_a_prepared_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    case = golden("optimizers", "tf", "13_three_tables_shared_tags")
    arguments = shlex.split((case / "combiner.txt").read_text())
    prepared = prepare(str(case / "config.pbtxt"))
    prepared = prepare(prepared, combiners=plan.parse_combiners(
        arguments[1::2], len(prepared.plan.features)
    ))
    plans = _counting(monkeypatch, plan, "build_plan")
    out = replay(prepared, read_npz(case / "batches.npz"), read_npz(case / "init.npz"),
                 max_memory=1 << 30)
    assert plans == []
    for key, want in read_npz(case / "expected.npz").items():
        assert float(np.max(np.abs(out[key] - want))) <= 1e-5, key


def test_cli_replay_parses_the_configuration_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tpuemb simulate CONFIG --batches B.npz --out O.npz``: one parse, one plan."""
    case = golden("optimizers", "tf", "13_three_tables_shared_tags")
    parses = _counting(monkeypatch, io, "parse_bytes")
    plans = _counting(monkeypatch, plan, "build_plan")
    out = tmp_path / "out.npz"
    result = run_cli(
        "simulate", str(case / "config.pbtxt"), "--batches", str(case / "batches.npz"),
        "--init", str(case / "init.npz"), "--out", str(out),
        *shlex.split((case / "combiner.txt").read_text()),
    )
    assert result.exit_code == 0, result.output
    assert len(parses) == 1
    assert len(plans) == 1
    for key, want in read_npz(case / "expected.npz").items():
        assert float(np.max(np.abs(read_npz(out)[key] - want))) <= 1e-5, key


def test_executor_still_takes_what_it_took(config_path: Path) -> None:
    """A path, bytes and a message, as before; a Prepared is one more."""
    message = tpuemb_cfg.load(str(config_path))
    for source in (str(config_path), config_path, message, message.SerializeToString()):
        executor = Executor(source, combiners="mean")
        assert isinstance(executor.prepared, Prepared)
        assert [t.name for t in executor.plan.tables] == ["t", "u"]
