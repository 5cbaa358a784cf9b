"""The encoding of the TensorFlow-computed cases under ``tests/data/tf/`` and how to replay one.

A case lists the Python objects a user passes to ``tf.tpu.experimental.embedding`` (constructed in
order; later entries refer to earlier ones), the feature structure, the build arguments and the
outcome TensorFlow 2.21 produced. The same decoder runs on both sides: ``data/tf/generate.py``
gives it TensorFlow's classes (in a TensorFlow venv, once), the tests give it tpuemb's. The
encoding extends the one of the shared golden compile cases (``golden/compile/README.md``):

- scalars, lists and objects (dicts) are themselves; an integer literal is an ``int``, a literal
  with a point a ``float``;
- ``{"$ref": ID}`` is object ``ID``; ``{"$bound": [ID, "lr"]}`` the bound method ``lr`` of object
  ``ID`` (a new one at each reference);
- ``{"$tuple": [...]}`` a tuple; ``{"$shape": [...]}`` a shape (a list of ints and ``None`` here,
  a ``TensorShape`` for TensorFlow);
- ``{"$new": {"class": C, ...}}`` a new ``C(...)`` used in place;
- ``{"$float": "nan"}`` ``float("nan")`` (also ``"inf"``, ``"-inf"``); ``{"$np": ["float32",
  0.25]}`` a NumPy scalar of that type; ``{"$object": null}`` a new plain ``object()``.

Object entries: ``{"id", "class", "args", "kwargs"}``; ``{"id", "function": V}`` (a new
zero-argument function returning V); ``{"id", "schedule": V}`` (an object whose bound method
``lr`` returns V); ``{"id", "computation": NAME}`` (the computation NAME of a custom optimizer or
combiner; each side supplies its own implementation of the name).

Outcomes (``expect``): ``{"ok": true, "config": HEX, "dynamic_learning_rates": [ID, ...]}`` or
``{"ok": false, "stage": "construct" | "build", "object": ID, "exception": NAME,
"message": TEXT}`` (TensorFlow's message, for reading only).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data" / "tf"


class Schedule:
    """A learning-rate schedule object: its bound method ``lr`` is the dynamic learning rate."""

    def __init__(self, value: float) -> None:
        self.value = value

    def lr(self) -> float:
        return self.value


def constant_function(value: Any) -> Callable[[], Any]:
    def lr() -> Any:
        return value

    return lr


class Objects:
    """Rebuilds a case's objects with the classes in ``classes`` (name -> constructor)."""

    def __init__(
        self,
        classes: dict[str, Callable[..., Any]],
        computations: dict[str, Any] | None = None,
        shape: Callable[[list[Any]], Any] = list,
    ) -> None:
        self.classes = classes
        self.computations = computations or {}
        self.shape = shape
        self.by_id: dict[str, Any] = {}

    def value(self, v: Any) -> Any:
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if not isinstance(v, dict):
            return v
        if "$ref" in v:
            return self.by_id[v["$ref"]]
        if "$bound" in v:
            obj_id, attr = v["$bound"]
            return getattr(self.by_id[obj_id], attr)
        if "$tuple" in v:
            return tuple(self.value(x) for x in v["$tuple"])
        if "$shape" in v:
            return self.shape([self.value(d) for d in v["$shape"]])
        if "$new" in v:
            return self.construct(v["$new"])
        if "$float" in v:
            return math.nan if v["$float"] == "nan" else float(v["$float"])
        if "$np" in v:
            import numpy as np

            kind, number = v["$np"]
            return getattr(np, kind)(number)
        if "$object" in v:
            return object()
        return {k: self.value(x) for k, x in v.items()}

    def construct(self, entry: dict[str, Any]) -> Any:
        cls = self.classes[entry["class"]]
        args = [self.value(a) for a in entry.get("args", [])]
        kwargs = {k: self.value(x) for k, x in entry.get("kwargs", {}).items()}
        return cls(*args, **kwargs)

    def add(self, entry: dict[str, Any]) -> None:
        if "function" in entry:
            obj: Any = constant_function(entry["function"])
        elif "schedule" in entry:
            obj = Schedule(entry["schedule"])
        elif "computation" in entry:
            obj = self.computations[entry["computation"]]
        else:
            obj = self.construct(entry)
        self.by_id[entry["id"]] = obj

    def name_of(self, fn: Any) -> str:
        """The id of a learning-rate callable (``ID`` or ``ID.lr`` for a bound method)."""
        for key, obj in self.by_id.items():
            if fn is obj:
                return key
            if isinstance(obj, Schedule) and fn == obj.lr:
                return f"{key}.lr"
        raise KeyError(fn)


class Side:
    """What one implementation supplies to replay cases: its classes, its custom computations,
    how it builds a configuration and how it answers a check (see :func:`run`)."""

    def __init__(
        self,
        classes: dict[str, Callable[..., Any]],
        build: Callable[..., tuple[bytes, list[Any]]],
        probe: Callable[[str, Any, Any], Any],
        computations: dict[str, Any] | None = None,
        shape: Callable[[list[Any]], Any] = list,
    ) -> None:
        self.classes = classes
        self.build = build
        self.probe = probe
        self.computations = computations or {}
        self.shape = shape


def _failure(e: BaseException, stage: str, current: str | None) -> dict[str, Any]:
    return {
        "ok": False,
        "stage": stage,
        "object": current,
        "exception": type(e).__name__,
        "builtin_classes": [
            c.__name__ for c in type(e).__mro__
            if c.__module__ == "builtins" and c not in (BaseException, Exception, object)
        ],
        "message": str(e)[:300],
    }


def run(case: dict[str, Any], side: Side) -> dict[str, Any]:
    """Replay ``case``; return its outcome in the ``expect`` form.

    ``side.build(feature_config, optimizer, **build_arguments)`` returns the serialized
    configuration and the learning-rate callables in tag order; it runs only when the case has a
    ``feature_config``. Each entry of ``case["checks"]`` (``{"kind", "object", "other"}``) is
    answered by ``side.probe(kind, object, other)`` after the objects are built; the answers
    (JSON values, or ``{"raises": NAME}``) are returned under ``"checks"``.
    """
    objects = Objects(side.classes, side.computations, side.shape)
    current = None
    try:
        for entry in case["objects"]:
            current = entry["id"]
            objects.add(entry)
    except Exception as e:  # noqa: BLE001 - the outcome is the exception's class
        return _failure(e, "construct", current)
    outcome: dict[str, Any] = {"ok": True}
    if "checks" in case:
        answers = []
        for check in case["checks"]:
            obj = objects.by_id[check["object"]]
            other = objects.by_id.get(check.get("other", ""))
            try:
                answers.append(side.probe(check["kind"], obj, other))
            except Exception as e:  # noqa: BLE001
                answers.append({"raises": type(e).__name__})
        outcome["checks"] = answers
    if "feature_config" in case:
        try:
            features = objects.value(case["feature_config"])
            optimizer = objects.value(case.get("optimizer"))
            kwargs = {k: objects.value(v) for k, v in case.get("build", {}).items()}
            config, rates = side.build(features, optimizer, **kwargs)
        except Exception as e:  # noqa: BLE001
            return _failure(e, "build", None)
        outcome["config"] = config.hex()
        outcome["dynamic_learning_rates"] = [objects.name_of(fn) for fn in rates]
    return outcome


def load(name: str) -> Any:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


# -- tpuemb's side -------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if callable(value):
        return "<callable>"
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": str(value)}
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    return value


def probe(kind: str, obj: Any, other: Any, *, jsonable: Callable[[Any], Any],
          slot_names: Callable[[Any], Any], slot_initializers: Callable[[Any], Any]) -> Any:
    """The checks of the cases, answered by one side's objects (both sides call it; tfside.py
    imports this module): ``jsonable`` makes an attribute JSON, ``slot_names`` and
    ``slot_initializers`` read an optimizer's slots."""
    if kind.startswith("attr:"):
        return jsonable(getattr(obj, kind[5:]))
    if kind == "eq":
        return bool(obj == other)
    if kind == "hash_eq":
        return hash(obj) == hash(other)
    if kind == "repr":
        return repr(obj)
    if kind == "slot_names":
        return list(slot_names(obj))
    if kind == "slot_count":
        return len(slot_initializers(obj))
    if kind == "combiner_name":  # "custom_combiner_<hash of the computation>"
        return str(obj).rsplit("_", 1)[0]
    raise KeyError(kind)


def tpuemb_probe(kind: str, obj: Any, other: Any) -> Any:
    """:func:`probe` on tpuemb's objects (TensorFlow's private ``_slot_names()``/
    ``_slot_initializers()`` are ``slot_names``/``slot_initializers`` here)."""
    return probe(kind, obj, other, jsonable=_jsonable, slot_names=lambda o: o.slot_names,
                 slot_initializers=lambda o: o.slot_initializers)


def tpuemb_side(validate: bool = False) -> Side:
    """tpuemb's classes and ``build_config``; ``validate`` runs the validator too."""
    import numpy as np

    from tpuemb_cfg import embedding as emb

    def build(feature_config: Any, optimizer: Any = None, **kwargs: Any) -> tuple[bytes, list]:
        compiled = emb.build_config(feature_config, optimizer, validate=validate, **kwargs)
        return compiled.config.SerializeToString(), compiled.dynamic_learning_rates

    def sgd(gradient: Any, table: Any, slots: Any, lr: Any, hyper: Any) -> Any:
        return table - lr * gradient

    def adagrad(gradient: Any, table: Any, slots: Any, lr: Any, hyper: Any) -> Any:
        accumulator = slots[0] + gradient * gradient
        return table - lr * gradient / np.sqrt(accumulator), accumulator

    def total(valency: Any, vectors: Any) -> Any:
        return vectors[:valency].sum(axis=0)

    def weighted_total(valency: Any, vectors: Any, weights: Any) -> Any:
        return (vectors[:valency] * weights[:valency, None]).sum(axis=0)

    names = (
        "TableConfig", "FeatureConfig", "QuantizationConfig", "RowIdInitializer", "SGD",
        "Adagrad", "AdagradMomentum", "Adam", "FTRL", "CustomOptimizer", "CustomCombiner",
    )
    return Side(
        classes={n: getattr(emb, n) for n in names} | {"Constant": emb.ConstantInitializer},
        build=build,
        probe=tpuemb_probe,
        computations={"sgd": sgd, "adagrad": adagrad, "sum": total,
                      "weighted_sum": weighted_total},
    )


def same_outcome(want: dict[str, Any], got: dict[str, Any]) -> str | None:
    """``None`` when tpuemb's outcome matches TensorFlow's, else what differs.

    Matching: both accept with the same bytes, learning-rate order and check answers; or both
    reject, tpuemb's exception being an instance of TensorFlow's class (tpuemb's
    ``EmbeddingTypeError`` is both a ``TypeError`` and a ``ValueError``). Where and with which
    words each rejects may differ.
    """
    if want["ok"] != got["ok"]:
        return "TensorFlow accepts, tpuemb rejects" if want["ok"] else (
            "TensorFlow rejects, tpuemb accepts")
    if not want["ok"]:
        if want["exception"] not in got["builtin_classes"] + [got["exception"]]:
            return f"TensorFlow raises {want['exception']}, tpuemb {got['exception']}"
        return None
    for key in ("checks", "config", "dynamic_learning_rates"):
        if want.get(key) != got.get(key):
            return f"different {key}: TensorFlow {want.get(key)!r}, tpuemb {got.get(key)!r}"
    return None
