"""Issue 33 ("Safety, round three"), ``tpuemb plan``: each defect as the user met it.

Outputs onto files inside an --ids folder, corrupt Parquet, out-of-range options, ``--plot
.png``, empty SparseCore batches, sizes past C++ ints, unbounded samples and counts, TFRecord
lengths that look like gzip, compare variants checked before the sample is read, errors at the
user's row or record, ``PlanOptions`` checked when made, and extra sample columns.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = str(ROOT / "examples" / "quickstart.pbtxt")


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("zipf_sample",
                                                  ROOT / "examples" / "plan" / "zipf_sample.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ZIPF = _generator()


def _sample(path: Path, rows: int = 256, batch: int = 64) -> dict[str, Any]:
    """A Zipf sample of the quickstart configuration's features written to ``path``."""
    columns = ZIPF.zipf_columns(ZIPF.schema_of(QUICKSTART), rows, exponent=1.3, max_bag=2)
    ZIPF.write(str(path), columns, batch)
    return dict(columns)


def _one_line_exit_2(result: Any) -> str:
    """The error of a refused run: exit 2, one line on stderr, nothing on stdout."""
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and result.stderr.count("\n") == 1, result.output
    assert "Traceback" not in result.output
    return str(result.stderr)


# --------------------------------------------------------------------------------------------
# 1. -o naming a sample file inside the --ids folder


def test_output_onto_a_file_inside_the_ids_folder_is_refused(tmp_path: Path) -> None:
    day = tmp_path / "day"
    day.mkdir()
    part = day / "part-1.parquet"
    _sample(part)
    before = part.read_bytes()
    result = run_cli("plan", QUICKSTART, "--ids", str(day), "-o", str(part))
    error = _one_line_exit_2(result)
    assert error.startswith(f"refusing to write -o {part}: it is the same file as the input --ids")
    assert part.read_bytes() == before
    result = run_cli("plan", QUICKSTART, "--ids", str(day), "-o", str(day / "plan.txt"))
    assert result.exit_code == 0, result.output  # a new file in the folder is no sample file
    assert (day / "plan.txt").read_text().startswith("sample: 1 parquet file(s), 2 step(s)")


# --------------------------------------------------------------------------------------------
# 4. --plot .png refused before the sample is read


def test_plot_without_a_name_is_refused_before_reading(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _sample(tmp_path / "day.parquet")
    from tpuemb_cfg.planner import inputs

    def never(*args: object) -> None:
        raise AssertionError("the sample was read")

    monkeypatch.setitem(inputs._READERS, "parquet", never)
    error = _one_line_exit_2(run_cli("plan", QUICKSTART, "--ids", "day.parquet", "--plot", ".png"))
    assert "'.png' is a file name without an extension" in error
