"""2,800 random constructor and build argument combinations, built by TensorFlow 2.21 and tpuemb.

``data/tf/generate.py`` drew the combinations (fixed seeds: optimizers with numbers, bools, ints,
None, NaN, strings and other objects for their arguments; tables; features; shapes; flags; build
arguments) and stored what TensorFlow made of each: the configuration bytes or the exception.
``random_cases.json`` holds 1,200 (seed 2026); ``random_cases_2.json`` 1,600 more (seed 2027) from
larger pools of odd values: NumPy arrays, ints beyond float's range, dtype spellings, float
dimensions, empty and nested feature structures.
tpuemb must produce the same bytes wherever TensorFlow builds, and accept and reject the same
combinations, except for the deliberate differences below, which docs/compatibility.md
lists with their reasons.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import tfcases
from conftest import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

#: file -> (seed, number of cases)
ROUNDS = {"random_cases.json": (2026, 1200), "random_cases_2.json": (2027, 1600)}
DATA = {name: tfcases.load(name) for name in ROUNDS}
CASES: list[dict[str, Any]] = [case for data in DATA.values() for case in data["cases"]]
SIDE = tfcases.tpuemb_side()


def _refs(value: Any) -> set[str]:
    if isinstance(value, list):
        return set().union(*(_refs(v) for v in value)) if value else set()
    if isinstance(value, dict):
        if "$ref" in value:
            return {value["$ref"]}
        return set().union(*(_refs(v) for v in value.values())) if value else set()
    return set()


def used_objects(case: dict[str, Any]) -> set[str]:
    """The objects the configuration reads: the features, their tables, the tables' optimizers
    (or the global one for a table without), their learning-rate callables."""
    entries = {e["id"]: e for e in case["objects"]}
    used: set[str] = set()
    todo = _refs(case["feature_config"])
    tables_without_optimizer = False
    while todo:
        oid = todo.pop()
        if oid in used:
            continue
        used.add(oid)
        entry = entries[oid]
        if entry.get("class") == "TableConfig" and "optimizer" not in entry.get("kwargs", {}):
            tables_without_optimizer = True
        todo |= _refs(entry.get("args", [])) | _refs(entry.get("kwargs", {}))
    if tables_without_optimizer:
        for oid in _refs(case.get("optimizer")):
            used.add(oid)
            used |= _refs(entries[oid].get("kwargs", {})) if oid in entries else set()
    return used


def _has_nan(entry: dict[str, Any]) -> bool:
    return '"nan"' in repr(entry).replace("'", '"')


#: The deliberate differences (docs/compatibility.md): name -> why.
DELIBERATE = {
    "unused object": "tpuemb checks every argument when the object is constructed; TensorFlow "
    "checks most of them only when it writes the configuration, so a wrong value in an object "
    "no table uses never fails there",
    "NaN": "tpuemb refuses NaN where TensorFlow's comparisons (x <= 0, 0 <= x < 1) let it "
    "through",
    "TensorFlow crash": "where TensorFlow fails with an internal AttributeError, tpuemb raises "
    "a TypeError naming the argument",
    "two errors": "a case with two wrong values: tpuemb reports the one it checks at "
    "construction, TensorFlow another one it meets first (it checks the first only when writing "
    "the configuration), so the exception classes can differ; both refuse the case",
}


def deliberate(case: dict[str, Any], want: dict[str, Any], got: dict[str, Any]) -> str | None:
    """The deliberate difference explaining a mismatch, or ``None``."""
    if want.get("exception") == "AttributeError" and not got["ok"]:
        return "TensorFlow crash"
    if got["ok"] or got["stage"] != "construct":
        return None
    entry = next(e for e in case["objects"] if e["id"] == got["object"])
    if got["object"] not in used_objects(case):
        return "unused object"
    if _has_nan(entry) and "nan" in got["message"]:
        return "NaN"
    if not want["ok"] and _other_error_matches(case, want, got):
        return "two errors"
    return None


def _other_error_matches(case: dict[str, Any], want: dict[str, Any], got: dict[str, Any],
                         depth: int = 3) -> bool:
    """Whether tpuemb, once the argument it reported is left out, fails as TensorFlow failed:
    then TensorFlow's error is another value's, one tpuemb checks later than this one. The
    argument is the first one tpuemb's message names in backquotes, or the object built in
    place (``$new``) whose class the message starts with (``QuantizationConfig: ...``)."""
    entry = next(e for e in case["objects"] if e["id"] == got["object"])
    kwargs = entry.get("kwargs", {})
    match = re.search(r"`(\w+)`", got["message"])
    owner = got["message"].split(":", 1)[0]
    argument = match.group(1) if match and match.group(1) in kwargs else next(
        (k for k, v in kwargs.items()
         if isinstance(v, dict) and v.get("$new", {}).get("class") == owner), None)
    if depth == 0 or argument is None:
        return False
    reduced = copy.deepcopy(case)
    del next(e for e in reduced["objects"] if e["id"] == got["object"])["kwargs"][argument]
    again = tfcases.run(reduced, SIDE)
    if tfcases.same_outcome(want, again) is None:
        return True
    return (not again["ok"] and again["stage"] == "construct"
            and _other_error_matches(reduced, want, again, depth - 1))


def _compare(case: dict[str, Any]) -> tuple[str | None, str | None]:
    """(difference, deliberate reason) for one case."""
    got = tfcases.run(case, SIDE)
    difference = tfcases.same_outcome(case["expect"], got)
    if difference is None:
        return None, None
    return difference, deliberate(case, case["expect"], got)


@pytest.mark.parametrize("name", sorted(ROUNDS))
def test_the_stored_outcomes_are_tensorflows(name: str) -> None:
    data = DATA[name]
    assert data["tensorflow"].startswith("2.21.") and data["protobuf"] == "6.31.1"
    assert (data["seed"], len(data["cases"])) == ROUNDS[name]
    accepted = sum(c["expect"]["ok"] for c in data["cases"])
    assert accepted >= 450 and len(data["cases"]) - accepted >= 500  # both outcomes covered


@pytest.mark.parametrize("name", sorted(ROUNDS))
def test_every_random_case_matches_tensorflow(name: str) -> None:
    cases = DATA[name]["cases"]
    unexplained = []
    explained: dict[str, int] = {}
    byte_comparisons = 0
    for case in cases:
        difference, reason = _compare(case)
        if difference is None:
            byte_comparisons += case["expect"]["ok"]
        elif reason is None:
            unexplained.append(f"{case['name']}: {difference}")
        else:
            explained[reason] = explained.get(reason, 0) + 1
    assert not unexplained, "\n".join(unexplained)
    assert byte_comparisons >= 450
    # Deliberate differences stay rare (odd values in unused objects, NaNs, two errors in a case).
    assert sum(explained.values()) <= len(cases) // 20, explained


@settings(max_examples=examples(200), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CASES))
def test_random_case_hypothesis(case: dict[str, Any]) -> None:
    """The same comparison, drawn by hypothesis from the stored TensorFlow outcomes; a drawn
    case also gives the same result when built twice (no state leaks between builds)."""
    difference, reason = _compare(case)
    assert difference is None or reason is not None, (case["name"], difference)
    assert tfcases.run(case, SIDE) == tfcases.run(case, SIDE)


@pytest.mark.parametrize("reason", sorted(DELIBERATE))
def test_each_deliberate_difference_is_documented(reason: str) -> None:
    from conftest import ROOT

    page = (ROOT / "docs" / "compatibility.md").read_text(encoding="utf-8")
    section = page.split("deliberately different", 1)[1]
    assert reason in section


def _tensorflow_built_configs() -> list[tuple[str, bytes]]:
    built = []
    for name in ("random_cases.json", "random_cases_2.json", "tpu_cases.json",
                 "utils_cases.json", "coercion_cases.json"):
        for case in tfcases.load(name)["cases"]:
            if case["expect"].get("config"):
                built.append((case["name"], bytes.fromhex(case["expect"]["config"])))
    return built


def test_tensorflow_built_configs_fail_validation_only_where_tensorflow_cpp_does() -> None:
    """An error of the validator on a configuration TensorFlow's Python API builds must be one
    the TPU runtime would raise too: its rule's explanation (``tpuemb explain``) names the
    TensorFlow C++ source that rejects it. Everything else TensorFlow builds is at most a
    warning."""
    from tpuemb_cfg import validate
    from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration
    from tpuemb_cfg.rules._registry import RULES

    uncited: dict[str, str] = {}
    for name, data in _tensorflow_built_configs():
        for d in validate(TPUEmbeddingConfiguration.FromString(data)):
            if str(getattr(d.severity, "value", d.severity)) != "error":
                continue
            if "tensorflow/core/" not in RULES[d.rule].explanation:
                uncited.setdefault(d.rule, name)
    assert not uncited, f"error rules without a TensorFlow C++ source (rule: case): {uncited}"
