"""`tpuemb simulate` without --batches: the example, reproducibility, checkpoints, limits."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import ADAM_AND_MOMENTUM_TABLES, run_simulate

from tpuemb_cfg.commands.simulate import available_memory, parse_size
from tpuemb_cfg.sim.synthetic import SyntheticRun

PIPELINED = ADAM_AND_MOMENTUM_TABLES + """\
mode: TRAINING num_hosts: 2 num_tensor_cores: 2 sharding_strategy: MOD
pipeline_execution_with_tensor_core: true
feature_descriptor { name: "x" input_shape: 8 }
feature_descriptor { name: "y" table_id: 1 input_shape: 4 input_shape: 2 }
"""


def test_no_arguments_runs_the_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, output = run_simulate()
    assert code == 0, output
    assert "100 steps" in output and "loss:" in output
    for name in ("user", "item", "category"):
        assert name in output
    summary = json.loads((tmp_path / "tpuemb-out" / "summary.json").read_text())
    loss = summary["loss"]
    assert len(loss) == 100
    # The regression loss visibly falls: the last ten steps average well below the first ten.
    assert np.mean(loss[-10:]) < 0.75 * np.mean(loss[:10])
    with np.load(tmp_path / "tpuemb-out" / "tables.npz") as tables:  # --tables touched
        assert sorted(tables.files) == [
            "slot/item/momenta/values", "slot/item/velocities/values",
            "slot/user/accumulators/values", "table/category/rows", "table/category/values",
            "table/item/rows", "table/item/values", "table/user/rows", "table/user/values",
        ]
        rows = tables["table/item/rows"]
        assert 0 < rows.size < 50000 and (np.diff(rows) > 0).all()
        assert tables["table/item/values"].shape == (rows.size, 16)
    assert summary["rows_written"]["item"] == rows.size


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    outputs = []
    for folder, seed in (("a", "1"), ("b", "1"), ("c", "2")):
        code, output = run_simulate("--steps", "5", "--seed", seed, "--out-dir",
                                    str(tmp_path / folder))
        assert code == 0, output
        outputs.append((tmp_path / folder / "tables.npz").read_bytes())
    assert outputs[0] == outputs[1]
    assert outputs[0] != outputs[2]
    summary_a = json.loads((tmp_path / "a" / "summary.json").read_text())
    summary_b = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary_a["loss"] == summary_b["loss"]


def test_json_summary_reports_hosts(tmp_path: Path) -> None:
    (tmp_path / "c.pbtxt").write_text(PIPELINED)
    code, output = run_simulate(str(tmp_path / "c.pbtxt"), "--steps", "3", "--json",
                                "--out-dir", str(tmp_path / "out"))
    assert code == 0, output
    summary = json.loads(output)
    assert summary["steps"] == 3 and len(summary["loss"]) == 3
    table = summary["tables"]["a"]
    assert table["optimizer"] == "adam"
    assert table["rows_updated"] == [300, 300, 300]  # non-lazy Adam steps every row
    # Two hosts, MOD sharding: the occurrences of a step split over both, and add up.
    for ids, unique, touched in zip(table["ids_per_host"], table["unique_ids_per_host"],
                                    table["rows_touched"], strict=True):
        assert len(ids) == 2 and min(ids) > 0
        assert sum(unique) == touched


@pytest.mark.parametrize("config", ["example", "pipelined"])
def test_interrupted_and_resumed_run_is_bit_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str
) -> None:
    arguments: list[str] = []
    if config == "pipelined":
        (tmp_path / "c.pbtxt").write_text(PIPELINED)
        arguments = [str(tmp_path / "c.pbtxt")]
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    code, output = run_simulate(*arguments, "--steps", "10", "--checkpoint-every", "3",
                                "--out-dir", str(whole))
    assert code == 0, output

    real_step = SyntheticRun.run_step

    def interrupted(self: SyntheticRun, *args: object) -> dict[str, object]:
        if self.step == 7:
            raise KeyboardInterrupt
        return real_step(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(SyntheticRun, "run_step", interrupted)
    code, output = run_simulate(*arguments, "--steps", "10", "--checkpoint-every", "3",
                                "--out-dir", str(broken))
    assert code == 130
    assert not (broken / "tables.npz").exists()
    with np.load(broken / "checkpoint.npz") as checkpoint:
        assert int(checkpoint["executor/step"]) == 6
    monkeypatch.setattr(SyntheticRun, "run_step", real_step)

    code, output = run_simulate(*arguments, "--steps", "10", "--checkpoint-every", "3", "--resume",
                                "--out-dir", str(broken))
    assert code == 0, output
    assert (broken / "tables.npz").read_bytes() == (whole / "tables.npz").read_bytes()
    resumed = json.loads((broken / "summary.json").read_text())
    uninterrupted = json.loads((whole / "summary.json").read_text())
    assert resumed.pop("out_dir") != uninterrupted.pop("out_dir")
    assert resumed == uninterrupted


@pytest.mark.parametrize("workers", [(), ("--workers", "2")])
def test_config_is_parsed_validated_and_planned_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: tuple[str, ...]
) -> None:
    import tpuemb_cfg.executor.plan as plan_module
    import tpuemb_cfg.formats.io as io_module
    import tpuemb_cfg.validation.validator as validator_module

    calls: dict[str, int] = {}

    def counted(module: object, name: str) -> None:
        real = getattr(module, name)

        def wrapper(*args: object, **kwargs: object) -> object:
            calls[name] = calls.get(name, 0) + 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counted(io_module, "read_source")
    counted(validator_module, "validate_source")
    counted(plan_module, "build_plan")
    (tmp_path / "c.pbtxt").write_text(PIPELINED)
    code, output = run_simulate(str(tmp_path / "c.pbtxt"), "--steps", "2", "--combiner", "sum",
                                "-q", "--out-dir", str(tmp_path / "out"), *workers)
    assert code == 0, output
    assert calls == {"read_source": 1, "validate_source": 1, "build_plan": 1}


def test_resume_refuses_another_run(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    assert run_simulate("--steps", "2", "--checkpoint-every", "1", "--out-dir", out)[0] == 0
    code, output = run_simulate("--steps", "4", "--resume", "--seed", "9", "--out-dir", out)
    assert code == 2
    assert "another configuration, seed" in output
    code, output = run_simulate("--resume", "--out-dir", str(tmp_path / "empty"))
    assert code == 2 and "no checkpoint" in output


def test_memory_limit_refuses_before_allocating(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, output = run_simulate("--max-memory", "1M", "--out-dir", str(out))
    assert code == 2
    assert "more than the memory limit of 1 MiB" in output and "--max-memory" in output
    assert not out.exists()


def test_plot(tmp_path: Path) -> None:
    png = tmp_path / "run.png"
    code, output = run_simulate("--steps", "2", "--plot", str(png), "--out-dir",
                                str(tmp_path / "o"))
    if importlib.util.find_spec("matplotlib") is None:
        assert code == 2
        assert "--plot needs matplotlib" in output and "pip install" in output
        assert not (tmp_path / "o").exists()
    else:
        assert code == 0, output
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        (["--out", "o.npz"], "--out needs --batches"),
        (["c.pbtxt", "--batches", "b.npz", "--out", "o.npz", "--steps", "3"],
         "--steps applies to synthetic runs only"),
        (["--batches", "b.npz", "--out", "o.npz"], "--batches needs CONFIG"),
        (["c.pbtxt", "--batches", "b.npz"], "--batches needs --out"),
        (["--max-memory", "lots"], "--max-memory lots: not a size; expected bytes or a number"),
    ],
)
def test_usage_errors(arguments: list[str], words: str) -> None:
    code, output = run_simulate(*arguments)
    assert code == 2
    assert words in output


def test_parse_size_and_meminfo(tmp_path: Path) -> None:
    assert parse_size("123") == 123
    assert parse_size("2k") == 2048  # one grammar: binary units everywhere (units.py)
    assert parse_size("1.5GiB") == 1.5 * 1024**3
    assert parse_size("512M") == parse_size("512MB") == 512 * 1024**2
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       100 kB\nMemAvailable:    2048 kB\n")
    assert available_memory(str(meminfo)) == 2048 * 1024
    assert available_memory(str(tmp_path / "missing")) is None


def test_replay_json_report(tmp_path: Path) -> None:
    (tmp_path / "c.pbtxt").write_text(PIPELINED.replace("use_non_lazy_adam: true", ""))
    batches = {
        "s0/f0/ids": np.array([0, 1, 1, 2, 5, 5, 5, 7], dtype=np.int64),
        "s0/f0/row_splits": np.array([0, 1, 3, 4, 4, 5, 6, 7, 8] + [8] * 8, dtype=np.int64),
        "s0/f0/grad": np.ones((16, 4), dtype=np.float32),
        "s0/f1/ids": np.arange(16, dtype=np.int64),
        "s0/f1/grad": np.ones((16, 2), dtype=np.float32),
        "s0/learning_rates": np.array([0.1], dtype=np.float32),
    }
    np.savez(tmp_path / "b.npz", **batches)  # type: ignore[arg-type]
    code, output = run_simulate(str(tmp_path / "c.pbtxt"), "--batches", str(tmp_path / "b.npz"),
                                "--out", str(tmp_path / "o.npz"), "--json")
    assert code == 0, output
    report = json.loads(output)
    assert report["steps"] == 1
    table = report["tables"]["a"]
    assert table["rows_touched"] == [5]  # ids 0, 1, 2, 5, 7
    # MOD over 2 hosts: even ids 0, 2 (2 occurrences), odd ids 1, 1, 5, 5, 5, 7 (6).
    assert table["ids_per_host"] == [[2, 6]]
    assert table["unique_ids_per_host"] == [[2, 3]]


def test_plot_draws_each_dynamic_rate_per_step(tmp_path: Path) -> None:
    """A run with dynamic learning rates gets a third panel, one line per tag, its values the
    summary's; a run without them keeps the two panels."""
    import re

    from tpuemb_cfg.commands._outputs import rate_series

    pytest.importorskip("matplotlib")
    svg = tmp_path / "run.svg"
    code, output = run_simulate("--steps", "3", "--plot", str(svg), "--out-dir",
                                str(tmp_path / "o"), "-q")
    assert code == 0, output
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    # The built-in example: tag 0 feeds 'user' (0.1 every step), tag 1 'item' (Adam's rate
    # bias-corrected: 0.1 * sqrt(1 - 0.999^t) / (1 - 0.9^t) at step t - 1; computed in float32,
    # where 1 - 0.999 keeps 4 significant digits).
    series = rate_series(summary)
    assert [label for label, _ in series] == ["tag 0 (table 'user')", "tag 1 (table 'item')"]
    assert series[0][1] == [pytest.approx(0.1)] * 3
    assert series[1][1] == [pytest.approx(0.1 * math.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t),
                                          rel=1e-4) for t in (1, 2, 3)]
    drawn = svg.read_text()
    assert len(re.findall(r'<g id="axes_\d+">', drawn)) == 3
    constant = tmp_path / "c.pbtxt"
    constant.write_text(
        'table_descriptor { name: "t" vocabulary_size: 100 dimension: 4\n'
        '  optimization_parameters { adagrad { } learning_rate { constant: 0.1 } } }\n'
        "mode: TRAINING num_hosts: 1 num_tensor_cores: 1\n"
        "feature_descriptor { table_id: 0 input_shape: 8 }\n")
    code, output = run_simulate(str(constant), "--steps", "2", "--plot", str(svg),
                                "--out-dir", str(tmp_path / "p"), "-q")
    assert code == 0, output
    assert rate_series(json.loads((tmp_path / "p" / "summary.json").read_text())) == []
    assert len(re.findall(r'<g id="axes_\d+">', svg.read_text())) == 2


def test_rate_series_skips_steps_without_rates() -> None:
    from tpuemb_cfg.commands._outputs import rate_series

    summary = {"learning_rates": [
        {"tag": 0, "used_by": ["a", "b"], "per_step": [None, 0.5]},
        {"tag": 1, "used_by": [], "per_step": [None, None]},
    ]}
    (label, values), = rate_series(summary)
    assert label == "tag 0 (a, b)" and math.isnan(values[0]) and values[1] == 0.5
