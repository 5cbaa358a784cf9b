"""Simulation-spec files: loading, checks with positions, schedules, and --spec on the CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import run_simulate

from tpuemb_cfg.base.errors import InputError, UsageError
from tpuemb_cfg.sim.schedules import Schedule
from tpuemb_cfg.sim.spec import load_spec
from tpuemb_cfg.simulate import SyntheticRun

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "multiworker"
TINY = str(DATA / "tiny.pbtxt")
TWO = str(DATA / "two_tables.pbtxt")


def write(tmp_path: Path, text: str, name: str = "sim.pbtxt") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_every_field_becomes_an_option(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, """
        steps: 7  seed: 3  combiner: "sum"  combiner: "1=sqrtn"  learning_rate: 0.25
        out_dir: "runs/a"  max_memory: "2G"
        workers { count: 4 replicas_to_aggregate: 3 init_tokens: 5 delay { geometric: 0.5 } }
        learning_rate_schedule { tag: 1 constant: 0.5 }
    """))
    assert spec.options == {
        "steps": 7, "seed": 3, "combiners": ("sum", "1=sqrtn"), "learning_rate": 0.25,
        "out_dir": str(tmp_path / "runs" / "a"), "max_memory": "2G", "workers": 4,
        "replicas_to_aggregate": 3, "init_tokens": 5, "delay": "geometric:0.5",
    }
    assert spec.schedules == (Schedule(1, "constant", (0.5,)),)


def test_replay_paths_are_relative_to_the_spec(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, 'workload { replay { batches: "b.npz" out: "/x/o.npz" } }'))
    assert spec.options == {"batches_path": str(tmp_path / "b.npz"), "out_path": "/x/o.npz"}
    empty = load_spec(write(tmp_path, "workers { max_staleness: 0 delay { fixed: 2 } }"))
    assert empty.options == {"max_staleness": 0, "delay": "fixed:2", "workers": 1}


@pytest.mark.parametrize(
    ("text", "position", "message"),
    [
        ("steps: 0", "1:1", "steps: 0 found, expected at least 1"),
        ("seed: 1\nworkers {\n  count: 0 }", "3:3", "workers.count: 0 found"),
        ("workers { delay { geometric: 1.5 } }", "1:19", "expected a probability 0 < p <= 1"),
        ("workers { max_staleness: -1 }", "1:11",
         "workers.max_staleness: -1 found, expected 0 or more"),
        ("workers { count: 100000 }", "1:11", "100000 found, expected at most 1024"),
        ("workers { max_staleness: 1 replicas_to_aggregate: 2 }", "1:28",
         "max_staleness selects DropStale mode"),
        ("learning_rate_schedule { tag: 0 constant: 1 }\n"
         "learning_rate_schedule { tag: 0 constant: 2 }", "2:26",
         "tag 0 already has a schedule (learning_rate_schedule[0])"),
        ("learning_rate_schedule { tag: 0 piecewise_constant { boundaries: 5 values: 1 } }",
         "1:68", "1 value(s) for 1 boundary; give one value more"),
        ("learning_rate_schedule { tag: 0 piecewise_constant { boundaries: [5, 5] "
         "values: [1, 2, 3] } }", "1:54", "boundaries[1] is 5 after 5"),
        ("learning_rate_schedule { tag: 2 exponential_decay { decay_steps: 0 } }", "1:53",
         "decay_steps: 0 found"),
        ("learning_rate_schedule { tag: 2 }", "1:1", "no schedule"),
        ('workload { replay { batches: "b.npz" } }', "1:12", "a replay needs both"),
        ('workload { replay { batches: "b" out: "o" } } workers { count: 2 }', "1:47",
         "applies to synthetic runs only"),
        ("steps: 2 bogus: 1", "1:10", 'no field named "bogus"'),
    ],
)
def test_errors_point_at_the_field(tmp_path: Path, text: str, position: str,
                                   message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_spec(path)
    assert str(info.value).startswith(f"{path}:{position}: error: ")
    assert message in str(info.value)


def test_schedule_values() -> None:
    decay = Schedule(0, "exponential_decay", (0.1,), decay_steps=2, decay_rate=0.5)
    assert [decay(g) for g in (0, 2, 4)] == [np.float32(0.1), np.float32(0.05),
                                             np.float32(0.025)]
    assert decay(3) == pytest.approx(0.1 * 0.5**1.5, rel=1e-6)
    stairs = Schedule(0, "exponential_decay", (0.1,), decay_steps=2, decay_rate=0.5,
                      staircase=True)
    assert [stairs(g) for g in (0, 1, 2, 3)] == [np.float32(v) for v in (0.1, 0.1, 0.05, 0.05)]
    pieces = Schedule(0, "piecewise_constant", (1.0, 0.5, 0.25), boundaries=(2, 4))
    assert [float(pieces(g)) for g in range(6)] == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]
    assert all(isinstance(s(1), np.float32) for s in (decay, stairs, pieces))


def test_scheduled_run_replaces_only_its_tags() -> None:
    schedule = Schedule(1, "piecewise_constant", (0.5, 0.125), boundaries=(1,))
    run = SyntheticRun(TWO, learning_rate=0.1, schedules=[schedule])
    assert run.data.learning_rates(0).tolist() == [np.float32(0.1), 0.5]
    assert run.data.learning_rates(3).tolist() == [np.float32(0.1), 0.125]
    with pytest.raises(UsageError, match="schedule for tag 2, but the configuration has tags "
                                         "0..1"):
        SyntheticRun(TWO, schedules=[Schedule(2, "constant", (1.0,))], spec_path="s.pbtxt")


def test_spec_run_equals_the_flags(tmp_path: Path) -> None:
    spec = write(tmp_path, """
        steps: 3 seed: 9 combiner: "sqrtn"
        workers { count: 3 replicas_to_aggregate: 2 delay { fixed: 1 } }
    """)
    flags = ("--steps", "3", "--seed", "9", "--combiner", "sqrtn", "--workers", "3",
             "--replicas-to-aggregate", "2", "--delay", "fixed:1")
    outputs = []
    for arguments in (("--spec", str(spec)), flags):
        code, output = run_simulate(TWO, *arguments, "--json", "-q", "--out-dir",
                                    str(tmp_path / "o"))
        assert code == 0, output
        outputs.append((output, (tmp_path / "o" / "tables.npz").read_bytes()))
    assert outputs[0] == outputs[1]


def test_flags_override_the_spec(tmp_path: Path) -> None:
    spec = write(tmp_path, "steps: 3 workers { count: 3 max_staleness: 0 }")
    code, output = run_simulate(TINY, "--spec", str(spec), "--steps", "2", "--max-staleness", "1",
                                "--json", "-q", "--out-dir", str(tmp_path / "o"))
    assert code == 0, output
    summary = json.loads(output)
    assert (summary["steps_per_worker"], summary["workers"]) == (2, 3)
    assert (summary["mode"], summary["max_staleness"]) == ("drop_stale", 1)


def test_single_worker_spec_uses_the_schedules(tmp_path: Path) -> None:
    # A constant schedule per tag sends the same values as --learning-rate: same bytes.
    spec = write(tmp_path, "steps: 3\nlearning_rate_schedule { tag: 0 constant: 0.25 }\n"
                           "learning_rate_schedule { tag: 1 constant: 0.25 }\n")
    tables = []
    for arguments in (("--spec", str(spec)), ("--steps", "3", "--learning-rate", "0.25"),
                      ("--steps", "3")):
        code, output = run_simulate(TWO, *arguments, "-q", "--out-dir", str(tmp_path / "o"))
        assert code == 0, output
        tables.append((tmp_path / "o" / "tables.npz").read_bytes())
    assert tables[0] == tables[1] != tables[2]
    bad = write(tmp_path, "learning_rate_schedule { tag: 5 constant: 1 }", "bad.pbtxt")
    code, output = run_simulate(TWO, "--spec", str(bad), "-q", "--out-dir", str(tmp_path / "o"))
    assert code == 2
    assert f"{bad}: learning_rate_schedule for tag 5" in output


def test_spec_errors_exit_2(tmp_path: Path) -> None:
    spec = write(tmp_path, "workers { count: -2 }")
    code, output = run_simulate(TINY, "--spec", str(spec))
    assert code == 2
    assert output.startswith(f"{spec}:1:11: error: workers.count: -2 found")


def test_example_spec_runs(tmp_path: Path) -> None:
    example = ROOT / "examples" / "sim" / "backup_workers.pbtxt"
    spec = load_spec(example)
    assert spec.options["workers"] == 4 and spec.options["replicas_to_aggregate"] == 3
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        code, output = run_simulate(str(ROOT / "examples" / "quickstart.pbtxt"), "--spec",
                                    str(example), "--steps", "4", "--json", "-q")
    finally:
        os.chdir(old)
    assert code == 0, output
    summary = json.loads(output)
    assert summary["learning_rate_schedules"] == [
        "tag 0: exponential_decay(0.2, rate 0.5 every 20 steps)",
        "tag 1: piecewise_constant(0.001, from 10: 0.01)",
    ]
    assert summary["gradients"]["computed"] == 16
    assert (tmp_path / "tpuemb-out" / "summary.json").exists()


def test_replay_workload_from_the_spec(tmp_path: Path) -> None:
    batches = {
        "s0/f0/ids": np.array([1, 3, 3], np.int64),
        "s0/f0/grad": np.array([[1, 2], [3, 4], [5, 6]], np.float32),
        "s1/f0/ids": np.array([2], np.int64),
        "s1/f0/grad": np.array([[1, 1]], np.float32),
    }
    np.savez(tmp_path / "b.npz", **batches)
    (tmp_path / "specs").mkdir()
    spec = write(tmp_path / "specs", 'seed: 2 workload { replay { batches: "../b.npz" '
                                     'out: "../o1.npz" } }')
    code, output = run_simulate(TINY, "--spec", str(spec), "-q")
    assert code == 0, output
    code, output = run_simulate(TINY, "--batches", str(tmp_path / "b.npz"), "--seed", "2", "--out",
                                str(tmp_path / "o2.npz"), "-q")
    assert code == 0, output
    assert (tmp_path / "o1.npz").read_bytes() == (tmp_path / "o2.npz").read_bytes()
    with np.load(tmp_path / "o1.npz") as out:
        assert out["s1/f0/activations"].shape == (1, 2)
