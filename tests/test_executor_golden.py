"""Every golden optimizer case, replayed through the library and through `tpuemb simulate`.

The expectations were written by TensorFlow 2.21's CPU kernels (``tf/``) or from the spec's
equations (``spec/``); see ``shared/golden/optimizers/README.md``.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import OPTIMIZER_CASES, optimizer_case_names, require_data

import tpuemb_cfg
from tpuemb_cfg.cli import main
from tpuemb_cfg.executor import parse_combiners
from tpuemb_cfg.formats.npzio import read_npz
from tpuemb_cfg.simulate import replay

CASES_ROOT = OPTIMIZER_CASES
CASES = optimizer_case_names()


def _case(name: str) -> Path:
    return require_data(CASES_ROOT / name)


def _compare(out: dict[str, np.ndarray], case: Path) -> None:
    tolerance = json.loads((case / "case.json").read_text())["tolerance"]["max_abs"]
    expected = read_npz(case / "expected.npz")
    assert expected, "expected.npz is empty"
    for key, want in expected.items():
        assert key in out, f"{key} missing from the output"
        got = out[key]
        assert got.dtype == np.float32, key
        assert got.shape == want.shape, key
        worst = float(np.max(np.abs(got - want))) if want.size else 0.0
        assert worst <= tolerance, f"{key}: max |out - expected| = {worst} > {tolerance}"


def test_golden_cases_present() -> None:
    require_data(CASES_ROOT)
    assert len(CASES) >= 21


@pytest.mark.parametrize("name", CASES)
def test_golden_library(name: str) -> None:
    case = _case(name)
    config = tpuemb_cfg.load(str(case / "config.pbtxt"))
    arguments = shlex.split((case / "combiner.txt").read_text())
    combiners = parse_combiners(arguments[1::2], len(config.feature_descriptor))
    out = replay(
        config,
        read_npz(case / "batches.npz"),
        read_npz(case / "init.npz"),
        combiners=combiners,
    )
    _compare(out, case)


@pytest.mark.parametrize("name", CASES)
def test_golden_cli(name: str, tmp_path: Path) -> None:
    case = _case(name)
    out = tmp_path / "out.npz"
    arguments = [
        "simulate", str(case / "config.pbtxt"),
        "--batches", str(case / "batches.npz"),
        "--init", str(case / "init.npz"),
        "--out", str(out),
        *shlex.split((case / "combiner.txt").read_text()),
    ]
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 0, result.output + str(result.exception)
    _compare(read_npz(out), case)
