"""Embedding specs: the input of ``tpuemb compile``, as a Python file or a TOML file.

**Python spec**: a file run in a fresh namespace (``runpy``) that defines ``feature_config`` and
optionally ``optimizer``, ``num_hosts``, ``num_replicas``, ``num_cores_per_replica``,
``pipeline_execution_with_tensor_core``, ``per_replica_input_shapes`` and
``per_replica_batch_size`` - the arguments of :func:`build_config`. It imports the classes from
``tpuemb_cfg.embedding``. Whatever the file does becomes one error naming it: an exception of any
kind (``sys.exit``, a ``BaseException`` subclass of its own; Ctrl-C still interrupts) and a call
of ``os._exit``, which would otherwise end tpuemb at once with nothing written and nothing said
(:mod:`tpuemb_cfg.base.usercode`).

**TOML spec**: the same content declared as data (``docs/compile.md`` has the full reference)::

    num_hosts = 4
    per_replica_batch_size = 256

    [schedules.warmup]                  # a named learning-rate schedule -> one dynamic tag
    kind = "warmup_cosine"
    peak = 0.05
    warmup_steps = 1000
    decay_steps = 100000

    [optimizers.sparse]                 # a named optimizer, shared by the tables naming it
    type = "Adagrad"
    learning_rate = "warmup"            # a string names a schedule

    [tables.user]                       # the table name defaults to the key
    vocabulary_size = 1000000
    dim = 64
    optimizer = "sparse"                # or an inline table: {type = "SGD", learning_rate = 0.1}

    [features.user_id]                  # the feature name defaults to the key
    table = "user"

Errors become :class:`~tpuemb_cfg.base.errors.InputError` with the spec's path and, where it can be
found, the line and column of the offending entry.
"""

from __future__ import annotations

import inspect
import os
import re
import runpy
import sys
import tomllib
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.base.usercode import ExitCalled, exit_guard
from tpuemb_cfg.embedding import optimizers as opt
from tpuemb_cfg.embedding.build import CompiledConfig, build_config
from tpuemb_cfg.embedding.errors import ConfigValidationError
from tpuemb_cfg.embedding.extra_optimizers import BY_ALGORITHM
from tpuemb_cfg.embedding.schedules import Schedule, schedule_from_mapping
from tpuemb_cfg.embedding.tables import (
    ConstantInitializer,
    FeatureConfig,
    QuantizationConfig,
    RowIdInitializer,
    TableConfig,
    TruncatedNormalInitializer,
)
from tpuemb_cfg.formats.limits import max_input_bytes, too_large

_T = TypeVar("_T")

#: The names a spec may define, i.e. :func:`build_config`'s arguments.
BUILD_ARGUMENTS = (
    "optimizer",
    "num_hosts",
    "num_replicas",
    "num_cores_per_replica",
    "pipeline_execution_with_tensor_core",
    "per_replica_input_shapes",
    "per_replica_batch_size",
)


@dataclass
class Spec:
    """A loaded spec: ``build_config``'s arguments, plus where they came from."""

    path: str
    feature_config: Any
    build_arguments: dict[str, Any] = field(default_factory=dict)

    def compile(self) -> CompiledConfig:
        """``build_config`` on the spec; errors name the spec file."""
        try:
            return build_config(self.feature_config, **self.build_arguments)
        except ConfigValidationError as e:
            details = "; ".join(
                f"{d.rule} at {d.field_path or 'top level'}: {d.message}" for d in e.diagnostics
            )
            raise InputError(
                f"the compiled configuration does not validate: {details}", path=self.path
            ) from None
        except (ValueError, TypeError) as e:
            raise InputError(_one_line(str(e)), path=self.path) from None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def load_spec(path: str | os.PathLike[str]) -> Spec:
    """Read a ``.py`` or ``.toml`` spec (by extension), within the input size limit
    (:func:`tpuemb_cfg.formats.limits.max_input_bytes`)."""
    name = check_spec_file(path)
    if name.endswith(".toml"):
        return _load_toml(name)
    if name.endswith(".py"):
        return _load_python(name)
    raise InputError(
        "cannot tell the spec type from the file name: use a .py (Python) or .toml spec",
        path=name,
    )


def read_spec_text(path: str | os.PathLike[str]) -> str:
    """The text of the spec ``path`` as Python reads its source: UTF-8 with or without a byte
    order mark (the mark is not part of the text), undecodable bytes replaced. Every reader of
    a spec's text (its assignments, lines and comments) reads it here."""
    with open(path, encoding="utf-8-sig", errors="replace") as handle:
        return handle.read()


def check_spec_file(path: str | os.PathLike[str]) -> str:
    """``path`` as a string, once it is known to be a file within the input size limit
    (:func:`tpuemb_cfg.formats.limits.max_input_bytes`); :class:`InputError` otherwise."""
    name = os.fspath(path)
    if not Path(name).is_file():
        raise InputError("no such spec file", path=name)
    limit = max_input_bytes()
    size = os.stat(name).st_size
    if size > limit:
        raise too_large(name, limit, size, subject="the spec", what="a spec")
    return name


# -- Python --------------------------------------------------------------------------------------


def _load_python(path: str) -> Spec:
    """Run the spec (:func:`run_python_spec`) and take ``build_config``'s arguments from it."""
    namespace = run_python_spec(path)
    if "feature_config" not in namespace:
        raise InputError(
            "the spec defines no `feature_config` (a FeatureConfig, or dicts/lists of them)",
            path=path,
        )
    build_arguments = {k: namespace[k] for k in BUILD_ARGUMENTS if k in namespace}
    return Spec(path, namespace["feature_config"], build_arguments)


def run_python_spec(path: str) -> dict[str, Any]:
    """Run the Python spec ``path`` in a fresh namespace, its folder first on ``sys.path``, and
    return the namespace; whatever the file does wrong is one :class:`InputError` naming it (and
    its line where known). The current folder is restored afterwards, so a spec that calls
    ``os.chdir`` cannot move the caller's relative paths (the output of ``tpuemb compile -o``,
    ``tpuemb simulate``'s ``tpuemb-out/``)."""
    folder = str(Path(path).resolve().parent)
    sys.path.insert(0, folder)
    try:
        with _current_folder_kept(), exit_guard() as exits:
            namespace = runpy.run_path(path, run_name="__tpuemb_spec__")
    except ExitCalled as e:
        raise _exit_called(path, e.code, _spec_line(e, path)) from None
    except SyntaxError as e:
        raise InputError(
            f"invalid Python: {e.msg}", path=path, line=e.lineno, column=e.offset
        ) from None
    except SystemExit as e:
        raise InputError(
            f"the spec called sys.exit({e.code!r}) instead of defining feature_config", path=path
        ) from None
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - any failure of user code becomes one line
        kind = "" if isinstance(e, Exception) else " (a BaseException subclass)"
        raise InputError(
            f"{type(e).__name__}{kind}: {_one_line(str(e))}", path=path,
            line=_spec_line(e, path)
        ) from None
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:
            pass
    if exits:  # the spec caught the ExitCalled of its own os._exit
        raise _exit_called(path, exits[0], None)
    return namespace


@contextmanager
def _current_folder_kept() -> Iterator[None]:
    """Return to the current folder after the block, whatever the block did to it (held open
    by descriptor, so a folder renamed meanwhile is still found)."""
    try:
        handle: int | None = os.open(".", os.O_RDONLY)
    except OSError:  # an unreadable or deleted current folder: remember its name
        handle = None
    before = None
    if handle is None:
        try:
            before = os.getcwd()
        except OSError:  # deleted: nowhere to return to
            pass
    try:
        yield
    finally:
        try:
            if handle is not None:
                os.fchdir(handle)
            elif before is not None:
                os.chdir(before)
        except OSError:
            pass
        finally:
            if handle is not None:
                os.close(handle)


def _exit_called(path: str, code: object, line: int | None) -> InputError:
    return InputError(
        f"the spec called os._exit({code!r}), which would end tpuemb at once, with nothing "
        "written and nothing said; a spec only defines feature_config (and build arguments)",
        path=path, line=line)


def _spec_line(exc: BaseException, path: str) -> int | None:
    """The line of the innermost traceback frame that is in the spec file."""
    target = os.path.realpath(path)
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if os.path.realpath(frame.filename) == target:
            line = frame.lineno
    return line


# -- TOML ----------------------------------------------------------------------------------------

_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)")

#: Optimizer classes by the names a TOML spec may use (class names and oneof names).
_OPTIMIZERS: dict[str, type[opt.Optimizer]] = {}
for _cls in BY_ALGORITHM.values():
    _OPTIMIZERS[_cls.__name__.lower()] = _cls
    _OPTIMIZERS[_cls.algorithm] = _cls

_TOP_LEVEL = {"schedules", "optimizers", "optimizer", "tables", "features", *BUILD_ARGUMENTS}
_TABLE_KEYS = {"vocabulary_size", "dim", "optimizer", "combiner", "name", "quantization",
               "initializer"}
_FEATURE_KEYS = {"table", "max_sequence_length", "validate_weights_and_indices", "output_shape",
                 "name", "input_shape"}


class _Toml:
    """Builds the objects of a TOML spec; every error carries the key path and, when found, the
    line of that key in the file."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

    # errors with positions

    def error(self, key: tuple[str, ...], message: str) -> InputError:
        line = self._locate(key)
        dotted = ".".join(key)
        if line is None:
            return InputError(message, path=self.path, key=dotted)
        return InputError(f"{dotted}: {message}" if dotted else message, path=self.path,
                          line=line[0], column=line[1])

    def _locate(self, key: tuple[str, ...]) -> tuple[int, int] | None:
        """Line and column of ``key``: its ``[a.b]`` header, or else the ``name =`` line of its
        first missing part below the longest header that exists (the parent's line for entries
        of inline tables); ``None`` when nothing matches."""
        full = self._header(key)
        if full is not None:
            return full + 1, 1
        for depth in range(len(key) - 1, -1, -1):
            start = self._header(key[:depth]) if depth else -1
            if start is None:
                continue
            assignment = re.compile(rf"^\s*(\"?){re.escape(key[depth])}\1\s*=")
            for i in range(start + 1, len(self.lines)):
                text = self.lines[i]
                if text.lstrip().startswith("["):
                    break
                if assignment.match(text):
                    return i + 1, len(text) - len(text.lstrip()) + 1
            return (start + 1, 1) if depth else None
        return None

    def _header(self, key: tuple[str, ...]) -> int | None:
        if not key:
            return None
        pattern = re.compile(
            r"^\s*\[\s*" + r"\s*\.\s*".join(rf"(\"?){re.escape(k)}\{i + 1}" for i, k in
                                           enumerate(key)) + r"\s*\]\s*(#.*)?$"
        )
        for i, text in enumerate(self.lines):
            if pattern.match(text):
                return i
        return None

    # building

    def construct(self, key: tuple[str, ...], make: Callable[[], _T],
                  body: Mapping[str, Any] | None = None) -> _T:
        """``make()``; an error is placed at the argument it names (`name`) when ``body`` has
        that key, else at ``key``."""
        try:
            return make()
        except (ValueError, TypeError) as e:
            message = _one_line(str(e))
            named = re.search(r"`(\w+)`", message)
            if body is not None and named and named.group(1) in body:
                key = (*key, named.group(1))
            raise self.error(key, message) from None

    def table_of(self, key: tuple[str, ...], value: Any) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise self.error(key, f"must be a table ([{'.'.join(key)}] or {{...}}); "
                             f"received {value!r}")
        return dict(value)

    def declared(self, key: tuple[str, ...], what: str, section: str,
                 declared: Mapping[str, _T], name: str) -> _T:
        """The entry ``name`` of the ``[section]`` table ``declared``, which ``key`` refers to."""
        if name not in declared:
            known = ", ".join(sorted(declared)) or "none are declared"
            raise self.error(key, f"names the {what} {name!r}, which [{section}] does not "
                             f"declare (declared: {known})")
        return declared[name]

    def check_keys(self, key: tuple[str, ...], value: Mapping[str, Any],
                   allowed: set[str]) -> None:
        unknown = sorted(set(value) - allowed)
        if unknown:
            raise self.error(
                (*key, unknown[0]),
                f"unknown key {unknown[0]!r}; allowed here: {', '.join(sorted(allowed))}",
            )


def toml_key_finder(path: str, text: str) -> Callable[[tuple[str, ...]], tuple[int, int] | None]:
    """The line and column of a key path of the TOML spec ``text`` (its ``[a.b]`` header, or
    the ``name =`` line of its first missing part; ``None`` when nothing matches), as the
    spec's own errors are placed."""
    return _Toml(path, text)._locate


def _load_toml(path: str) -> Spec:
    text, data = _read_toml(path)
    t = _Toml(path, text)
    t.check_keys((), data, _TOP_LEVEL)
    refs = _References(t, _schedules(t, data))
    for name, value in t.table_of(("optimizers",), data.get("optimizers", {})).items():
        refs.optimizers[name] = refs.make_optimizer(("optimizers", name), value)
    build: dict[str, Any] = {k: data[k] for k in BUILD_ARGUMENTS if k in data and k != "optimizer"}
    if "optimizer" in data:
        build["optimizer"] = refs.optimizer_ref(("optimizer",), data["optimizer"])
    tables: dict[str, TableConfig] = {}
    for name, value in t.table_of(("tables",), data.get("tables", {})).items():
        tables[name] = _table(t, refs, name, value)
    features, input_shapes = _features(t, data, tables)
    if input_shapes:
        missing = sorted(set(features) - set(input_shapes))
        if missing:
            raise t.error(("features", missing[0]), "has no `input_shape` while other features "
                          "have one: give every feature an input_shape, or none")
        if "per_replica_input_shapes" in build:
            raise t.error(("per_replica_input_shapes",), "give the input shapes either per "
                          "feature (input_shape) or here, not both")
        build["per_replica_input_shapes"] = input_shapes
    return Spec(path, features, build)


def _read_toml(path: str) -> tuple[str, dict[str, Any]]:
    """The text of the TOML file ``path`` and what it holds."""
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8-sig")  # a byte order mark is not part of the text
        return text, tomllib.loads(text)
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text: {e.reason}", path=path, offset=e.start) from None
    except tomllib.TOMLDecodeError as e:
        message = str(e)
        match = _TOML_POSITION.search(message)
        if match:
            message = _TOML_POSITION.sub("", message)
            raise InputError(f"invalid TOML: {message}", path=path, line=int(match.group(1)),
                             column=int(match.group(2))) from None
        raise InputError(f"invalid TOML: {message}", path=path) from None


def _schedules(t: _Toml, data: Mapping[str, Any]) -> dict[str, Schedule]:
    """The ``[schedules]`` of the spec, by name."""
    schedules: dict[str, Schedule] = {}
    for name, value in t.table_of(("schedules",), data.get("schedules", {})).items():
        key = ("schedules", name)
        body = t.table_of(key, value)
        schedules[name] = t.construct(key, partial(schedule_from_mapping, name, body), body)
    return schedules


class _References:
    """The optimizers of a TOML spec: inline tables, or names of ``[optimizers]`` entries whose
    learning rates may name ``[schedules]`` entries."""

    def __init__(self, t: _Toml, schedules: dict[str, Schedule]) -> None:
        self.t = t
        self.schedules = schedules
        self.optimizers: dict[str, opt.Optimizer] = {}

    def dynamic(self, key: tuple[str, ...], value: Any) -> Any:
        if isinstance(value, str):
            return self.t.declared(key, "schedule", "schedules", self.schedules, value)
        return value

    def make_optimizer(self, key: tuple[str, ...], value: Any) -> opt.Optimizer:
        t = self.t
        body = t.table_of(key, value)
        kind = body.pop("type", None)
        cls = _OPTIMIZERS.get(str(kind).lower()) if isinstance(kind, str) else None
        if cls is None:
            names = ", ".join(c.__name__ for c in BY_ALGORITHM.values())
            raise t.error((*key, "type"), f"`type` must name an optimizer ({names}); "
                          f"received {kind!r}")
        t.check_keys(key, body, {"type", *inspect.signature(cls).parameters})
        for arg in ("learning_rate", "step_counter"):
            if arg in body:
                body[arg] = self.dynamic((*key, arg), body[arg])
        if "clipvalue" in body:
            body["clipvalue"] = _clipvalue(t, (*key, "clipvalue"), body["clipvalue"])
        made: opt.Optimizer = t.construct(key, lambda: cls(**body), body)
        return made

    def optimizer_ref(self, key: tuple[str, ...], value: Any) -> opt.Optimizer:
        if isinstance(value, str):
            return self.t.declared(key, "optimizer", "optimizers", self.optimizers, value)
        return self.make_optimizer(key, value)


def _table(t: _Toml, refs: _References, name: str, value: Any) -> TableConfig:
    """The table ``[tables.name]``."""
    key = ("tables", name)
    body = t.table_of(key, value)
    t.check_keys(key, body, _TABLE_KEYS)
    kwargs: dict[str, Any] = {k: body[k] for k in ("vocabulary_size", "dim", "combiner")
                              if k in body}
    kwargs["name"] = body.get("name", name)
    if "optimizer" in body:
        kwargs["optimizer"] = refs.optimizer_ref((*key, "optimizer"), body["optimizer"])
    if "quantization" in body:
        q = t.table_of((*key, "quantization"), body["quantization"])
        t.check_keys((*key, "quantization"), q, {"num_buckets", "lower", "upper"})
        kwargs["quantization_config"] = t.construct(
            (*key, "quantization"), partial(QuantizationConfig, **q), q
        )
    initializer = (_initializer(t, (*key, "initializer"), body["initializer"])
                   if "initializer" in body else None)
    if callable(initializer):
        kwargs["initializer"] = initializer
    for required in ("vocabulary_size", "dim"):
        if required not in kwargs:
            raise t.error(key, f"needs `{required}`")
    table: TableConfig = t.construct(key, partial(TableConfig, **kwargs), body)
    if isinstance(initializer, dict):  # Keras' serialized form, resolved by the executor
        table.initializer = initializer
    return table


def _features(t: _Toml, data: Mapping[str, Any], tables: Mapping[str, TableConfig]
              ) -> tuple[dict[str, FeatureConfig], dict[str, Any]]:
    """The ``[features]`` of the spec and the input shapes some of them give, by name; every
    table must be used."""
    features: dict[str, FeatureConfig] = {}
    input_shapes: dict[str, Any] = {}
    used: set[str] = set()
    for name, value in t.table_of(("features",), data.get("features", {})).items():
        key = ("features", name)
        body = t.table_of(key, value)
        t.check_keys(key, body, _FEATURE_KEYS)
        table_name = body.get("table")
        if table_name is None or table_name not in tables:
            known = ", ".join(sorted(tables)) or "none are declared"
            raise t.error((*key, "table"), f"`table` must name a table of [tables] (declared: "
                          f"{known}); received {table_name!r}")
        used.add(table_name)
        kwargs: dict[str, Any] = {k: body[k] for k in (
            "max_sequence_length", "validate_weights_and_indices", "output_shape") if k in body}
        kwargs["name"] = body.get("name", name)
        features[name] = t.construct(
            key, partial(FeatureConfig, tables[table_name], **kwargs), body
        )
        if "input_shape" in body:
            input_shapes[name] = body["input_shape"]
    if not features:
        raise t.error(("features",), "the spec declares no [features.NAME] entries")
    unused = sorted(set(tables) - used)
    if unused:
        raise t.error(("tables", unused[0]), "no feature uses this table; remove it or add a "
                      "[features.NAME] entry with table = " + repr(unused[0]))
    return features, input_shapes


def _clipvalue(t: _Toml, key: tuple[str, ...], value: Any) -> Any:
    """TOML has no None: ``[min, max]`` or ``{min = .., max = ..}`` (either may be left out)."""
    if isinstance(value, list):
        if len(value) != 2:
            raise t.error(key, f"must be a number v, [min, max] or {{min = .., max = ..}}; "
                          f"received {value!r}")
        return tuple(value)
    if isinstance(value, Mapping):
        t.check_keys(key, value, {"min", "max"})
        return (value.get("min"), value.get("max"))
    return value


#: The Keras initializers a TOML spec names by ``kind`` (Keras' own names): their class names
#: and parameters (``executor.initializers`` reads Keras' serialized form).
_KERAS_INITIALIZERS: dict[str, tuple[str, frozenset[str]]] = {
    "zeros": ("Zeros", frozenset()),
    "ones": ("Ones", frozenset()),
    "random_uniform": ("RandomUniform", frozenset({"minval", "maxval", "seed"})),
    "random_normal": ("RandomNormal", frozenset({"mean", "stddev", "seed"})),
    "variance_scaling": ("VarianceScaling", frozenset({"scale", "mode", "distribution",
                                                       "seed"})),
    "glorot_uniform": ("GlorotUniform", frozenset({"seed"})),
    "glorot_normal": ("GlorotNormal", frozenset({"seed"})),
    "he_uniform": ("HeUniform", frozenset({"seed"})),
    "he_normal": ("HeNormal", frozenset({"seed"})),
    "lecun_uniform": ("LecunUniform", frozenset({"seed"})),
    "lecun_normal": ("LecunNormal", frozenset({"seed"})),
    "identity": ("Identity", frozenset({"gain"})),
}
#: tpuemb's own initializers: their parameters.
_OWN_INITIALIZERS = {"row_id": {"offset"}, "constant": {"value"},
                     "truncated_normal": {"mean", "stddev", "seed"}}
_CHOICES = {"mode": ("fan_in", "fan_out", "fan_avg"),
            "distribution": ("truncated_normal", "untruncated_normal", "uniform")}


def _initializer(t: _Toml, key: tuple[str, ...], value: Any) -> Any:
    """A table's ``initializer = {kind = ..., ...}``: tpuemb's ``RowIdInitializer``,
    ``ConstantInitializer`` or ``TruncatedNormalInitializer``, or Keras' serialized form of the
    Keras initializer ``kind`` names (docs/compile.md)."""
    body = t.table_of(key, value)
    kind = body.pop("kind", None)
    for name, parameter in body.items():
        where = (*key, name)
        if name in _CHOICES:
            if parameter not in _CHOICES[name]:
                raise t.error(where, f"must be one of {', '.join(_CHOICES[name])}; received "
                              f"{parameter!r}")
        elif name == "seed":
            if isinstance(parameter, bool) or not isinstance(parameter, int):
                raise t.error(where, f"must be an integer; received {parameter!r}")
        elif isinstance(parameter, bool) or not isinstance(parameter, int | float) or (
                parameter != parameter or parameter in (float("inf"), float("-inf"))):
            raise t.error(where, f"must be a finite number; received {parameter!r}")
    if kind in _OWN_INITIALIZERS:
        t.check_keys(key, body, _OWN_INITIALIZERS[kind])
        if kind == "row_id":
            return RowIdInitializer(**body)
        if kind == "constant":
            return ConstantInitializer(**body)
        return TruncatedNormalInitializer(**body)
    if kind in _KERAS_INITIALIZERS:
        class_name, allowed = _KERAS_INITIALIZERS[kind]
        t.check_keys(key, body, set(allowed))
        return {"class_name": class_name, "config": body}
    kinds = ", ".join(repr(k) for k in (*_OWN_INITIALIZERS, *_KERAS_INITIALIZERS))
    raise t.error((*key, "kind"), f"`kind` must be one of {kinds}; received {kind!r}")
