"""Named learning-rate schedules (tpuemb_cfg.embedding.schedules): values and checks."""

from __future__ import annotations

import math

import pytest

from tpuemb_cfg.embedding import Schedule
from tpuemb_cfg.embedding.schedules import schedule_from_mapping


def test_constant_and_global_step() -> None:
    assert Schedule("c", "constant", value=0.25).value(1000) == 0.25
    assert Schedule("s", "global_step").value(42) == 42.0


def test_exponential_decay() -> None:
    s = Schedule("e", "exponential_decay", initial=0.2, decay_rate=0.5, decay_steps=100)
    assert s.value(0) == pytest.approx(0.2)
    assert s.value(100) == pytest.approx(0.1)
    assert s.value(150) == pytest.approx(0.2 * 0.5**1.5)
    stairs = Schedule("e", "exponential_decay", initial=0.2, decay_rate=0.5, decay_steps=100,
                      staircase=True)
    assert stairs.value(199) == pytest.approx(0.1)


def test_warmup_cosine() -> None:
    s = Schedule("w", "warmup_cosine", peak=1.0, warmup_steps=4, decay_steps=10, final=0.1)
    assert [s.value(i) for i in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert s.value(4) == pytest.approx(1.0)
    assert s.value(9) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert s.value(14) == pytest.approx(0.1) and s.value(10**6) == pytest.approx(0.1)


def test_piecewise_constant() -> None:
    s = Schedule("p", "piecewise_constant", boundaries=[10, 20], values=[1.0, 0.5, 0.1])
    assert [s.value(i) for i in (0, 9, 10, 19, 20, 99)] == [1.0, 1.0, 0.5, 0.5, 0.1, 0.1]


def test_adam_bias_correction() -> None:
    s = Schedule("a", "adam_bias_correction", learning_rate=0.001)
    # t = 1: sqrt(1 - 0.999) / (1 - 0.9) = 0.0316227... / 0.1
    assert s.value(0) == pytest.approx(0.001 * math.sqrt(0.001) / 0.1)


def test_call_reads_the_step_attribute_and_identity_equality() -> None:
    s = Schedule("c", "exponential_decay", initial=1.0, decay_rate=0.5, decay_steps=1)
    assert s() == 1.0
    s.step = 2
    assert s() == 0.25
    twin = Schedule("c", "exponential_decay", initial=1.0, decay_rate=0.5, decay_steps=1)
    assert s != twin and s == s


@pytest.mark.parametrize(
    ("kind", "params", "words"),
    [
        ("linear", {}, ["unknown kind 'linear'", "warmup_cosine"]),
        ("constant", {}, ["needs", "value"]),
        ("constant", {"value": 1, "peak": 2}, ["unknown parameter", "peak"]),
        ("constant", {"value": "x"}, ["`value`", "'x'"]),
        ("exponential_decay", {"initial": 1, "decay_rate": 0.5, "decay_steps": 0},
         ["decay_steps", ">= 1"]),
        ("piecewise_constant", {"boundaries": [10], "values": [1.0]}, ["one entry more"]),
        ("piecewise_constant", {"boundaries": [20, 10], "values": [1, 2, 3]}, ["ascending"]),
    ],
)
def test_schedule_errors(kind: str, params: dict[str, object], words: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        Schedule("x", kind, **params)
    for word in words:
        assert word in str(info.value)
    assert "schedule 'x'" in str(info.value)


def test_from_mapping_needs_a_kind() -> None:
    with pytest.raises(ValueError, match="needs `kind`"):
        schedule_from_mapping("x", {"value": 1})
    assert schedule_from_mapping("x", {"kind": "constant", "value": 2}).value(0) == 2.0
