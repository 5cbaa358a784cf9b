"""Validating and inspecting a spec (``.py``/``.toml``): compile it, then place each finding in it.

``tpuemb validate`` and ``tpuemb inspect`` take a spec as they take a configuration: the spec is
compiled as ``tpuemb compile`` compiles it (without ``build_config``'s own validation, so every
finding is reported, not the first error), the configuration is validated, and each finding is
placed at the spec's line for what it is about:

- a table's finding at the ``TableConfig(...)`` call (a Python spec) or ``[tables.NAME]`` entry
  (TOML); a finding about its optimizer (``optimization_parameters...``) at the call or entry of
  that optimizer (the global optimizer for a table that inherits it);
- a feature's finding at its ``FeatureConfig(...)`` call or ``[features.NAME]`` entry;
- ``num_hosts``, ``num_tensor_cores`` (``num_replicas``), ``pipeline_execution_with_tensor_core``
  and ``spmd_sharding`` (``num_cores_per_replica``) at the spec's assignment of that argument.

A finding with no such place (one about the whole configuration, or about objects the spec did not
build itself, such as keras-rs features converted by the compiler) keeps no line and says it is
in the configuration compiled from the spec, naming the field. ``# tpuemb: disable=ID`` on the
spec's line silences a finding placed there. A spec that cannot be compiled is one ``PARSE001``.
"""

from __future__ import annotations

import io
import os
import re
import tokenize
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.formats.locations import DISABLE, Locations, parent_path
from tpuemb_cfg.rules import Diagnostic
from tpuemb_cfg.rules.sparsecore import limit_key_renames
from tpuemb_cfg.sparsecore.checks import check_config
from tpuemb_cfg.sparsecore.feed import stack
from tpuemb_cfg.validation.fix import (
    KeyPlace,
    KeyRenameAt,
    SpecFix,
    locate_limit_key,
    rename_spec_keys,
)
from tpuemb_cfg.validation.validator import (
    parse_error,
    place,
    run_rules,
    run_sparsecore_rules,
    sort_key,
)

if TYPE_CHECKING:
    from tpuemb_cfg.embedding import CompiledConfig
    from tpuemb_cfg.rules import Rule, Severity
    from tpuemb_cfg.validation.fix import SpecFix

__all__ = ["SPEC_SUFFIXES", "CompiledSpec", "compile_spec", "fix_sparsecore_spec",
           "is_sparsecore_spec", "is_spec", "validate_sparsecore", "validate_sparsecore_spec",
           "validate_spec"]

SPEC_SUFFIXES = (".py", ".toml")

#: Top-level configuration fields and the spec's build argument that sets each.
_ARGUMENTS = {
    "num_hosts": "num_hosts",
    "num_tensor_cores": "num_replicas",
    "pipeline_execution_with_tensor_core": "pipeline_execution_with_tensor_core",
    "spmd_sharding": "num_cores_per_replica",
}


def is_spec(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a spec (by its extension, as ``tpuemb compile`` tells them)."""
    return os.fspath(path).endswith(SPEC_SUFFIXES)


@dataclass
class CompiledSpec:
    """A compiled spec and where its configuration's fields come from in it."""

    path: str
    compiled: CompiledConfig
    locations: Locations


def compile_spec(path: str | os.PathLike[str]) -> CompiledSpec:
    """Compile the spec ``path`` without validating the result; raises :class:`InputError` (with
    the spec's line where known) when the spec cannot be read, run or compiled."""
    from tpuemb_cfg.embedding import keras_rs, origins
    from tpuemb_cfg.embedding.spec import load_spec, read_spec_text

    name = os.fspath(path)

    def foreign(obj: Any) -> bool:  # keras-rs objects, whose constructors tpuemb cannot hook
        return keras_rs.is_table(obj) or keras_rs.is_feature(obj)

    with origins.recording(name, foreign) as sites:
        spec = load_spec(name)
    arguments = {**spec.build_arguments, "validate": False}
    with origins.deriving(sites):  # keras-rs objects' conversions take their places
        compiled = replace(spec, build_arguments=arguments).compile()
    text = read_spec_text(name)
    if name.endswith(".toml"):
        locations = _toml_locations(name, text, compiled)
    else:
        locations = _python_locations(text, compiled, sites.place)
    return CompiledSpec(name, compiled, locations)


# -- where each field comes from ------------------------------------------------------------------


def _python_locations(text: str, compiled: CompiledConfig,
                      place: Callable[[Any], tuple[int, int] | None]) -> Locations:
    assignments: dict[str, tuple[int, int]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        match = re.match(r"(\w+)\s*(:[^=]*)?=(?!=)", line)
        if match:
            assignments[match.group(1)] = (number, 1)  # the last top-level assignment wins
    return _locations(compiled, place, assignments.get, _python_comments(text))


def _python_comments(text: str) -> dict[int, list[str]]:
    comments: dict[int, list[str]] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                comments.setdefault(token.start[0], []).append(token.string)
    except (tokenize.TokenError, SyntaxError):  # the spec ran, so this is not expected
        pass
    return comments


def _toml_locations(path: str, text: str, compiled: CompiledConfig) -> Locations:
    import tomllib

    from tpuemb_cfg.embedding.spec import toml_key_finder

    data = tomllib.loads(text)
    locate = toml_key_finder(path, text)
    where: dict[int, tuple[str, ...]] = {}
    tables = data.get("tables", {})
    by_name = {str(body.get("name", key)): key for key, body in tables.items()}

    def optimizer_key(owner: tuple[str, ...], value: Any) -> tuple[str, ...]:
        return ("optimizers", value) if isinstance(value, str) else owner

    for table in compiled.tables:
        key = by_name.get(str(table.name))
        if key is None:
            continue
        where[id(table)] = ("tables", key)
        if "optimizer" in tables[key]:
            where[id(table.optimizer)] = optimizer_key(("tables", key, "optimizer"),
                                                       tables[key]["optimizer"])
        elif "optimizer" in data:
            where[id(table.optimizer)] = optimizer_key(("optimizer",), data["optimizer"])
    for feature in compiled.features:
        if feature.path in data.get("features", {}):
            where[id(feature.config)] = ("features", feature.path)

    def place(obj: Any) -> tuple[int, int] | None:
        key = where.get(id(obj))
        return None if key is None else locate(key)

    def argument(name: str) -> tuple[int, int] | None:
        return locate((name,)) if name in data else None

    comments = {number: [line[line.index("#"):]]
                for number, line in enumerate(text.splitlines(), start=1)
                if "# tpuemb:" in line}
    return _locations(compiled, place, argument, comments)


def _locations(compiled: CompiledConfig, place: Callable[[Any], tuple[int, int] | None],
               argument: Callable[[str], tuple[int, int] | None],
               comments: dict[int, list[str]]) -> Locations:
    positions: dict[str, tuple[int, int]] = {}

    def put(field_path: str, position: tuple[int, int] | None) -> None:
        if position is not None:
            positions[field_path] = position

    for i, table in enumerate(compiled.tables):
        base = f"table_descriptor[{i}]"
        put(base, place(table))
        put(f"{base}.optimization_parameters", place(table.optimizer) or place(table))
        if table.quantization_config is not None:
            put(f"{base}.optimization_parameters.simulated_quantization", place(table))
    for j, feature in enumerate(compiled.features):
        put(f"feature_descriptor[{j}]", place(feature.config))
    for field_name, name in _ARGUMENTS.items():
        put(field_name, argument(name))
    return Locations(positions=positions, line_comments=comments,
                     order=sorted(positions, key=lambda p: positions[p]))


def _placed(locations: Locations, field_path: str) -> tuple[int, int] | None:
    """The position of ``field_path`` or of its nearest placed ancestor, or ``None``."""
    path = field_path
    while path:
        found = locations.get(path)
        if found is not None:
            return found
        path = parent_path(path)
    return None


def _elsewhere(field_path: str) -> str:
    """The note of a finding that no line of the spec builds."""
    if not field_path:
        return "about the whole configuration compiled from this spec"
    # Reports show the field path beside a finding without a line.
    return "in the configuration compiled from this spec; no line of the spec builds it"


# -- validating -----------------------------------------------------------------------------------


def validate_spec(
    path: str | os.PathLike[str],
    rules: Sequence[Rule],
    *,
    severity: Mapping[str, Severity] | None = None,
    options: Mapping[str, Any] | None = None,
    compiled: CompiledSpec | None = None,
) -> list[Diagnostic]:
    """Compile the spec ``path`` (unless ``compiled`` is given) and validate the configuration;
    findings are placed in the spec (see the module docstring). A spec that cannot be compiled
    gives one ``PARSE001`` diagnostic, as an unreadable configuration does."""
    name = os.fspath(path)
    if compiled is None and is_sparsecore_spec(name):
        return validate_sparsecore_spec(name, rules, severity=severity, options=options)
    if compiled is None:
        try:
            compiled = compile_spec(name)
        except InputError as exc:
            return [parse_error(exc)]
    found = run_rules(compiled.compiled.config, rules, options=options)
    locations = compiled.locations
    here = [d for d in found if _placed(locations, d.field_path) is not None]
    elsewhere = [replace(d, path=name, message=f"{d.message} ({_elsewhere(d.field_path)})")
                 for d in found if _placed(locations, d.field_path) is None]
    result = place(here, path=name, locations=locations) + elsewhere
    if severity:
        result = [replace(d, severity=severity[d.rule]) if d.rule in severity else d
                  for d in result]
    result.sort(key=sort_key)
    return result


# -- SparseCore specs -----------------------------------------------------------------------------
#
# A SparseCore spec (tpuemb_cfg.embedding.sparsecore: TPUEmbeddingV2, keras-rs or
# jax-tpu-embedding objects) becomes a SparseCoreConfig whose tables, features, optimizers and
# top-level settings carry the spec line that built them (Origin); the SC rules name their
# findings after the API (tables["user"].optimizer), and each is placed at that line.

_SC_HEAD = re.compile(r'^(tables|features)\[("(?:[^"\\]|\\.)*")\](.*)$')
_SC_KEY = re.compile(r'\[("(?:[^"\\]|\\.)*")\]$')
#: The spec names that may set the topology (a chip count alone, or jax's device counts).
_SC_ALIASES = {"topology": ("topology", "num_replicas", "global_device_count",
                            "num_sc_per_device"),
               # auto_stack_tables' limit callables: where the spec defines them, else its
               # features (what a spec without them would add them beside)
               "stack_to_max_ids_per_partition": ("stack_to_max_ids_per_partition",
                                                  "feature_specs"),
               "stack_to_max_unique_ids_per_partition": (
                   "stack_to_max_unique_ids_per_partition", "feature_specs")}


def is_sparsecore_spec(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a SparseCore spec (``tpuemb_cfg.embedding.sparsecore`` tells by the
    names the file assigns, without running it)."""
    from tpuemb_cfg.embedding.sparsecore import is_sparsecore_spec as detect

    return bool(detect(path))


def validate_sparsecore_spec(
    path: str | os.PathLike[str],
    rules: Sequence[Rule],
    *,
    severity: Mapping[str, Severity] | None = None,
    options: Mapping[str, Any] | None = None,
) -> list[Diagnostic]:
    """Load the SparseCore spec ``path``, run the SparseCore rules and place each finding at
    the spec line of the object it is about. A spec that cannot be loaded is one
    ``PARSE001``."""
    from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec

    name = os.fspath(path)
    try:
        spec = load_sparsecore_spec(name)
    except InputError as exc:
        return [parse_error(exc)]
    return _validate_checked(spec.config, rules, path=name, severity=severity,
                             options=options)


def validate_sparsecore(
    config: Any,
    rules: Sequence[Rule],
    *,
    path: str | None = None,
    severity: Mapping[str, Severity] | None = None,
    options: Mapping[str, Any] | None = None,
    stacking: Any = None,
) -> list[Diagnostic]:
    """The findings of the SparseCore rules on ``config`` (a ``SparseCoreConfig``), placed at
    the lines of ``path`` (default: the file its origins name) that built each object, with
    ``# tpuemb: disable=ID`` on those lines honoured. A finding with no line keeps its field
    path and says so. A configuration with a value the front door refuses
    (``sparsecore.checks.check_config``) is one ``PARSE001``, as a spec with one is."""
    try:
        config = check_config(config)
    except (ValueError, TypeError) as exc:
        origin = getattr(exc, "origin", None)
        where = path if path is not None else getattr(getattr(config, "origin", None), "path",
                                                       None)
        return [parse_error(InputError(" ".join(str(exc).split()), path=where,
                                       line=getattr(origin, "line", None)))]
    return _validate_checked(config, rules, path=path, severity=severity, options=options,
                             stacking=stacking)


def _validate_checked(  # noqa: PLR0913 - validate_sparsecore's arguments
    config: Any,
    rules: Sequence[Rule],
    *,
    path: str | None = None,
    severity: Mapping[str, Severity] | None = None,
    options: Mapping[str, Any] | None = None,
    stacking: Any = None,
) -> list[Diagnostic]:
    """:func:`validate_sparsecore` of a configuration the front door has checked."""
    found = run_sparsecore_rules(config, rules, options=options, stacking=stacking)
    name = path if path is not None else config.origin.path
    text = _spec_text(name)
    comments = _python_comments(text) if text is not None else {}
    result = []
    for d in found:
        place = (sparsecore_position(config, d.field_path, name, text)
                 if text is not None else None)
        if place is None:
            where = d.field_path or "the configuration"
            note = f" (at {where}; no line of the spec builds it)" if name is not None else ""
            result.append(replace(d, path=name, message=d.message + note))
            continue
        line, column = place
        if any(_sc_silenced(d.rule, comment) for comment in comments.get(line, ())):
            continue
        result.append(replace(d, path=name, line=line, column=column))
    if severity:
        result = [replace(d, severity=severity[d.rule]) if d.rule in severity else d
                  for d in result]
    result.sort(key=sort_key)
    return result


def _spec_text(name: str | None) -> str | None:
    from tpuemb_cfg.embedding.spec import read_spec_text

    if name is None:
        return None
    try:
        return read_spec_text(name)
    except OSError:
        return None


def _sc_silenced(rule_id: str, comment: str) -> bool:
    for match in DISABLE.finditer(comment):
        ids = {part.strip().upper() for part in match.group(1).split(",") if part.strip()}
        if "ALL" in ids or any(rule_id.startswith(i) for i in ids):
            return True
    return False


def _same_file(a: str | None, b: str | None) -> bool:
    return a is None or b is None or os.path.abspath(a) == os.path.abspath(b)


def _sparsecore_line(config: Any, field_path: str, name: str | None) -> int | None:
    """The spec line of the object ``field_path`` names: a table (its optimizer for
    ``.optimizer``), a feature, or a top-level setting (``sparse_core_config.X`` at X's origin,
    else the ``sparse_core_config`` assignment)."""
    origin = None
    head = _SC_HEAD.match(field_path)
    if head is not None:
        import json

        kind, key, rest = head.group(1), json.loads(head.group(2)), head.group(3)
        if kind == "tables":
            table = next((t for t in config.tables if t.name == key), None)
            if table is not None:
                origin = table.origin
                if rest.startswith(".optimizer") and table.optimizer.origin.line is not None:
                    origin = table.optimizer.origin
        else:
            origin = next((f.origin for f in config.features if f.name == key), None)
    else:
        settings = config.setting_origins
        parts = field_path.removeprefix("sparse_core_config.").split(".")[0]
        setting = _SC_KEY.sub("", parts)
        names = _SC_ALIASES.get(setting, (setting,))
        if field_path.startswith("sparse_core_config"):
            names = (*names, "sparse_core_config")
        origin = next((settings[n] for n in names if n in settings), None)
    if origin is None or origin.line is None or not _same_file(origin.path, name):
        return None
    return int(origin.line)


def sparsecore_position(config: Any, field_path: str, name: str | None,
                        text: str) -> tuple[int, int] | None:
    """Line and column in the spec ``text`` of the finding at ``field_path``: a limit key
    (``sparse_core_config.max_ids_per_table["user"]``) at its string literal in the dictionary
    the setting was given (``fix.locate_limit_key``), anything else (and a key that cannot be
    located for certain) at the line of its object (:func:`_sparsecore_line`) and that line's
    first character that is not a space."""
    line = _sparsecore_line(config, field_path, name)
    key = _SC_KEY.search(field_path)
    if key is not None and field_path.startswith("sparse_core_config."):
        import json

        setting = _SC_KEY.sub("", field_path.removeprefix("sparse_core_config."))
        place = locate_limit_key(text, line, setting, json.loads(key.group(1)),
                                 getattr(config, setting, None) or ())
        if isinstance(place, KeyPlace):
            return place.line, place.column
    if line is None:
        return None
    lines = re.split(r"\r\n|\r|\n", text)
    row_text = lines[line - 1] if 0 < line <= len(lines) else ""
    return line, len(row_text) - len(row_text.lstrip()) + 1


def fix_sparsecore_spec(path: str | os.PathLike[str]) -> SpecFix:
    """SC001's fix in the SparseCore spec ``path``: every limit key that names a table inside a
    stack is renamed to the stack's name where it is written (``fix.rename_spec_keys``: the
    new bytes are returned, not written). Raises :class:`InputError` when the spec cannot be
    loaded, :class:`OSError` when it cannot be read."""
    from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec

    name = os.fspath(path)
    config = load_sparsecore_spec(name, legacy=False).config
    with open(name, "rb") as handle:
        data = handle.read()
    try:
        stacking = stack(config)
    except (ValueError, ArithmeticError, KeyError) as exc:  # validation reports what is wrong
        return SpecFix(changed=False, data=data,
                       notes=[f"{name}: not fixed: the tables cannot be stacked ({exc})"])
    renames = []
    for rename in limit_key_renames(config, stacking):
        if rename.new is None:
            continue
        origin = config.setting_origins.get(rename.setting)
        line = (origin.line if origin is not None and _same_file(origin.path, name) else None)
        renames.append(KeyRenameAt(rename.setting, rename.old, rename.new, line,
                                   tuple(getattr(config, rename.setting) or ())))
    return rename_spec_keys(data, renames, name)
