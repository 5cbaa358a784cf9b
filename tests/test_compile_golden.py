"""build_config against the configurations TensorFlow 2.21 built (golden/compile, 26 cases).

Each case JSON lists the Python objects a user passed to TensorFlow's embedding API; the loader
below rebuilds them with tpuemb's classes (README.md of the golden folder describes the encoding)
and the test compares the serialized configuration byte for byte and the learning-rate order.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import GOLDEN, golden

from tpuemb_cfg import embedding as emb

CASES_DIR = GOLDEN / "compile"


def _case_names() -> list[str]:
    manifest = CASES_DIR / "cases.json"
    if not manifest.exists():
        return []
    return [c["name"] for c in json.loads(manifest.read_text())["cases"]]


class _ScheduleObject:
    """The golden data's "schedule": an object whose bound method ``lr`` is the learning rate."""

    def __init__(self, value: float) -> None:
        self.value = value

    def lr(self) -> float:
        return self.value


def _function(value: float) -> Callable[[], float]:
    def lr() -> float:
        return value

    return lr


CLASSES: dict[str, Callable[..., Any]] = {
    name: getattr(emb, name)
    for name in (
        "TableConfig", "FeatureConfig", "QuantizationConfig", "RowIdInitializer",
        "SGD", "Adagrad", "AdagradMomentum", "Adam", "FTRL",
    )
}


class Loader:
    """Rebuilds a case's objects; ``failed`` records the entry whose construction raised."""

    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}

    def value(self, v: Any) -> Any:
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, dict):
            if "$ref" in v:
                return self.objects[v["$ref"]]
            if "$bound" in v:
                obj_id, attr = v["$bound"]
                return getattr(self.objects[obj_id], attr)
            if "$tuple" in v:
                return tuple(self.value(x) for x in v["$tuple"])
            if "$shape" in v:
                return list(v["$shape"])
            if "$new" in v:
                return self.construct(v["$new"])
            return {k: self.value(x) for k, x in v.items()}
        return v

    def construct(self, entry: dict[str, Any]) -> Any:
        cls = CLASSES[entry["class"]]
        args = [self.value(a) for a in entry.get("args", [])]
        kwargs = {k: self.value(x) for k, x in entry.get("kwargs", {}).items()}
        return cls(*args, **kwargs)

    def add(self, entry: dict[str, Any]) -> None:
        if "function" in entry:
            self.objects[entry["id"]] = _function(entry["function"])
        elif "schedule" in entry:
            self.objects[entry["id"]] = _ScheduleObject(entry["schedule"])
        else:
            self.objects[entry["id"]] = self.construct(entry)

    def resolve_lr(self, name: str) -> Any:
        if name.endswith(".lr"):
            return self.objects[name[:-3]].lr
        return self.objects[name]


def _load(name: str) -> dict[str, Any]:
    return json.loads(golden("compile", f"{name}.json").read_text(encoding="utf-8"))


def _build(case: dict[str, Any], loader: Loader) -> emb.CompiledConfig:
    features = loader.value(case["feature_config"])
    kwargs = {k: loader.value(v) for k, v in case["build"].items()}
    return emb.build_config(features, **kwargs)


@pytest.mark.parametrize("name", [n for n in _case_names() if "_ok_" in n])
def test_golden_case_compiles_to_tensorflows_bytes(name: str) -> None:
    case = _load(name)
    expect = case["expect"]
    loader = Loader()
    for entry in case["objects"]:
        loader.add(entry)
    compiled = _build(case, loader)
    want = Path(golden("compile", expect["config"])).read_bytes()
    got = compiled.config.SerializeToString()
    assert got == want, f"{name}: bytes differ\n got  {got.hex()}\n want {want.hex()}"
    assert len(got) == expect["bytes"]
    lrs = [loader.resolve_lr(n) for n in expect["dynamic_learning_rates"]]
    assert len(compiled.dynamic_learning_rates) == len(lrs)
    for got_fn, want_fn in zip(compiled.dynamic_learning_rates, lrs, strict=True):
        assert got_fn is want_fn or got_fn == want_fn
    assert [t.name for t in compiled.tables] == expect["table_order"]


#: What a correct, complete message must also say (argument, value received, what is allowed),
#: written from the cases' inputs. Values TensorFlow prints wrongly must not appear.
MESSAGE_DETAILS: dict[str, tuple[list[str], list[str]]] = {
    "c03_error_adagrad_acc": (["Adagrad", "0.0", "> 0"], []),
    "c05_error_clip_no_acc": (["FTRL", "(None, None)", "use_gradient_accumulation=True"], []),
    "c06_error_shape_undefined": (["'a'", "<unknown>", "not fully defined"], []),
    "c07_error_combiner": (["'max'", "'mean', 'sum', 'sqrtn'"], []),
    "c13_error_feature_table": (["TableConfig", "FTRL"], []),
    "c16_error_dup_names": (["tables 0 and 1", "unique"], []),
    "c17_error_adam_beta2": (["Adam", "1.5", ">= 0 and < 1"], ["0.8"]),
    "c18_error_vocab_zero": (["0", ">= 1"], []),
    "c26_error_no_optimizer": (["table 1", "no optimizer"], []),
}


@pytest.mark.parametrize("name", [n for n in _case_names() if "_error_" in n])
def test_golden_error_case_raises_a_clear_error(name: str) -> None:
    case = _load(name)
    expect = case["expect"]
    exc_type = {"ValueError": ValueError, "TypeError": TypeError}[expect["exception"]]
    loader = Loader()
    with pytest.raises(exc_type) as info:
        for entry in case["objects"]:
            if expect["stage"] == "construct" and entry.get("id") == expect["object"]:
                loader.add(entry)
                pytest.fail(f"{name}: constructing {entry['id']} did not raise")
            loader.add(entry)
        assert expect["stage"] == "build", f"{name}: expected to fail while constructing"
        _build(case, loader)
    message = str(info.value)
    for word in expect["message_should_name"]:
        assert word in message, f"{name}: message does not name {word!r}: {message}"
    present, absent = MESSAGE_DETAILS[name]
    for word in present:
        assert word in message, f"{name}: message does not say {word!r}: {message}"
    for word in absent:
        assert word not in message, f"{name}: message shows {word!r}: {message}"
    # TensorFlow's wrong wordings must not be copied.
    assert "founded" not in message
    assert "Set `use_gradient_accumulation` to False" not in message


def test_golden_cases_are_present() -> None:
    assert len(_case_names()) == 26 or not CASES_DIR.exists()
