"""Prepare a configuration for simulation once: parse, validate, plan.

Every simulation entry point (``Executor``, ``replay``, the synthetic and multi-worker runs,
``tpuemb simulate``) starts from the same three stages, file -> message -> diagnostics -> plan.
:func:`prepare` runs each exactly once and returns them together as a :class:`Prepared`, which
every entry point accepts in place of a configuration, so a file is read and parsed once however
many of them a command uses::

    prepared = prepare("config.pbtxt")            # one parse, one validation, one plan
    executor = Executor(prepared)                 # no second parse or plan
    out = replay(prepared, batches)

A compiled spec carries what the proto cannot hold: each feature's combiner (its table's), how
many ids a bag holds, each table's initializer and the learning-rate callable of every dynamic
tag (run every step: ``executor.rates``). ``prepare`` therefore also takes the compiler's result
(``build_config(...)``, a ``CompiledConfig``) and spec files (``.py``, ``.toml``), which it
compiles; a plain configuration gets TensorFlow's default combiner, ``mean``, and says so
(:attr:`Prepared.combiner_note`).

The module imports nothing heavy at import time (no protobuf, no NumPy): ``tpuemb validate``
shares the CLI process and must never load NumPy.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.base.tf_versions import DEFAULT_TF_VERSION, tensorflow_version
from tpuemb_cfg.formats.locations import scan_locations, wanted_paths
from tpuemb_cfg.model.derived import derive
from tpuemb_cfg.validation import validator

from .executor.prepared import Prepared
from .sparsecore.checks import check_config
from .sparsecore.feed import stack
from .spec_check import is_spec, sparsecore_position, validate_sparsecore, validate_spec

if TYPE_CHECKING:
    from tpuemb_cfg.model.derived import Derived

    from .executor.plan import Plan
    from .proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration
    from .rules import Diagnostic, Severity
    from .sim.sparsecore import SparseCoreSetup
    from .sparsecore.stacking import Stacking

__all__ = ["Prepared", "is_sparsecore_spec", "open_plan", "place_plan_findings", "plan",
           "prepare", "prepare_sparsecore", "refuse_errors", "source_kind", "validate",
           "with_combiner_arguments"]

Combiners = str | Sequence[str] | Mapping[int, str] | None


def prepare(source: Any, *, combiners: Combiners = None, check: bool = True) -> Prepared:
    """Parse, validate and plan ``source`` once.

    ``source``: a path (text, binary or JSON by extension; ``-`` for stdin; a ``.py`` or
    ``.toml`` spec, compiled), binary bytes, a ``TPUEmbeddingConfiguration`` (tpuemb's or
    TensorFlow's), the ``CompiledConfig`` ``build_config`` returns, or a :class:`Prepared`
    (returned as is when ``combiners`` is None, else re-planned with them: the message is not
    parsed or validated again). ``combiners``: one name for every feature, one per feature, or
    ``{feature_index: name}``; default: a compiled spec's (each feature's table's combiner),
    else ``mean``. A compiled spec also gives each feature's ids per bag (``executor.bags``).

    A file is validated from its parsed message and text together, so findings carry line and
    column and honour ``# tpuemb: disable=ID`` comments. With ``check`` (the default) error
    findings raise ``InputError`` (the first one's line and column, the first five listed);
    ``check=False`` skips validation. Raises ``InputError`` for a file that cannot be read or
    parsed and for what the executor cannot run (``build_plan``), ``UsageError`` for bad
    combiners.
    """
    from .executor.plan import build_plan

    if isinstance(source, Prepared):
        if combiners is None:
            return source
        return replace(
            source, plan=source.plan.with_combiners(combiners), combiners_source="given"
        )
    path: str | None = None
    diagnostics: tuple[Diagnostic, ...] = ()
    if isinstance(source, str | os.PathLike) and os.fspath(source).endswith((".py", ".toml")):
        from .embedding.spec import load_spec

        path = os.fspath(source)
        spec = load_spec(path)
        # Validated once, below (with ``check``): there a CustomOptimizer's table, which holds
        # no algorithm as TensorFlow writes it (OPT001), is let through.
        source = replace(spec, build_arguments={**spec.build_arguments, "validate": False}
                         ).compile()
    if _is_compiled(source):
        return _prepare_compiled(source, path, combiners, check)
    if isinstance(source, str | os.PathLike):
        from tpuemb_cfg.formats.io import read_source

        parsed = read_source(source)
        config = parsed.message
        path = parsed.path
        derived = derive(config)
        if check:
            diagnostics = tuple(validator.validate_source(parsed, validator.selected_rules(),
                                                          derived=derived))
    else:
        from tpuemb_cfg.formats.io import as_config

        config = as_config(source)
        derived = derive(config)
        if check:
            diagnostics = _validated(config, derived)
    if check:
        refuse_errors(diagnostics)
    source_of = "default" if combiners is None else "given"
    plan = build_plan(config, combiners, derived=derived)
    return Prepared(config, plan, path, diagnostics, source_of)


def _validated(config: TPUEmbeddingConfiguration, derived: Derived) -> tuple[Diagnostic, ...]:
    """The findings of the default rules on the message ``config`` (``validator.validate``'s),
    from the quantities ``derived`` from it, which the plan is built from too."""
    found = validator.run_rules(config, validator.selected_rules(), derived=derived)
    return tuple(sorted(found, key=validator.sort_key))


def _is_compiled(source: Any) -> bool:
    """Whether ``source`` is what ``build_config`` returns (read by its attributes, so this
    module need not import the compiler)."""
    return all(hasattr(source, name) for name in ("config", "features", "combiners"))


def _prepare_compiled(
    compiled: Any, path: str | None, combiners: Combiners, check: bool
) -> Prepared:
    """A ``CompiledConfig``: its message, validated, planned with its combiners, bag sizes and
    custom optimizers and combiners (whose Python callables the executor runs,
    ``executor.custom``) unless ``combiners`` overrides the combiners."""
    from .embedding.custom import CustomOptimizer
    from .executor.plan import build_plan

    config = compiled.config
    derived = derive(config)
    optimizers = {t.name: t.optimizer for t in compiled.tables
                  if isinstance(t.optimizer, CustomOptimizer)}
    diagnostics: tuple[Diagnostic, ...] = ()
    if check:
        # The tables with a CustomOptimizer hold no algorithm (what TensorFlow writes, OPT001):
        # the executor runs their computation instead.
        custom = {
            f"table_descriptor[{t}]" for t, td in enumerate(config.table_descriptor)
            if td.name in optimizers
        }
        diagnostics = tuple(
            d for d in _validated(config, derived)
            if not (d.rule == "OPT001" and (d.field_path or "").split(".")[0] in custom)
        )
        refuse_errors(diagnostics)
    source_of = "given"
    custom_combiners: dict[int, Any] = {}
    if combiners is None:
        source_of = "spec"
        combiners = []
        for index, combiner in enumerate(compiled.combiners):
            if not isinstance(combiner, str):  # a CustomCombiner: its callable runs
                custom_combiners[index] = combiner
                combiner = "sum"  # not used
            combiners.append(combiner)
    try:
        plan = build_plan(config, combiners, derived=derived, custom_optimizers=optimizers,
                          custom_combiners=custom_combiners)
    except InputError as exc:
        if path is not None and exc.path is None:
            exc.path = path
        raise
    plan = plan.with_bags([feature.ids_per_bag for feature in compiled.features])
    plan = _with_spec_values(plan, compiled, path)
    return Prepared(config, plan, path, diagnostics, source_of)


def _with_spec_values(plan: Plan, compiled: Any, path: str | None) -> Plan:
    """``plan`` with what TensorFlow takes from the spec's Python objects at run time: each
    table's initializer (``embedding.initializers``) and the learning-rate callable of every
    dynamic tag (``executor.rates``)."""
    from .embedding.initializers import resolve
    from .embedding.tag_table import describe_callable
    from .executor.rates import tag_rates

    by_name = {table.name: table for table in compiled.tables}
    try:
        tables = tuple(
            replace(t, initializer=resolve(by_name[t.name].initializer, t.name,
                                           by_name[t.name].vocabulary_size, by_name[t.name].dim))
            if t.name in by_name else t
            for t in plan.tables
        )
    except InputError as exc:
        if path is not None and exc.path is None:
            exc.path = path
        raise
    callables = list(compiled.dynamic_learning_rates)
    rates = (tag_rates(callables, [describe_callable(fn) for fn in callables])
             if len(callables) == plan.num_learning_rates else ())
    return replace(plan, tables=tables, tag_rates=rates)


def with_combiner_arguments(prepared: Prepared, values: Sequence[str]) -> Prepared:
    """``prepared`` with ``--combiner NAME`` / ``--combiner F=NAME`` applied on top of its own
    combiners (a compiled spec's, else ``mean``); unchanged when ``values`` is empty."""
    from .executor.plan import parse_combiners

    if not values:
        return prepared
    features = prepared.plan.features
    names = parse_combiners(list(values), len(features), [f.combiner for f in features])
    return prepare(prepared, combiners=names)


def refuse_errors(diagnostics: Iterable[Diagnostic]) -> None:
    """Raise ``InputError`` listing the error diagnostics among ``diagnostics``, if any.

    The simulator never runs a configuration TensorFlow would reject. The message names the
    first five errors (rule, field path, message); the exception carries the first one's line
    and column.
    """
    errors = [d for d in diagnostics if getattr(d, "severity", "") == "error"]
    if not errors:
        return
    shown = "; ".join(f"{d.rule} at {d.field_path or '(config)'}: {d.message}" for d in errors[:5])
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    first = errors[0]
    raise InputError(
        f"the configuration has {len(errors)} validation error(s): {shown}{more}; "
        "run `tpuemb validate` for details and fix them before simulating",
        line=getattr(first, "line", None),
        column=getattr(first, "column", None),
    )


def validate(
    config_or_path: Any,
    *,
    select: Iterable[str] | str | None = None,
    ignore: Iterable[str] | str | None = None,
    show_derived: bool = False,
    severity: Mapping[str, Severity] | None = None,
    options: Mapping[str, Any] | None = None,
) -> list[Diagnostic]:
    """``tpuemb_cfg.validate``: every finding of a configuration, sorted by file, line, column
    and rule.

    Takes what :func:`tpuemb_cfg.validation.validator.validate` takes (the arguments are its) and a
    path to a ``.py``/``.toml`` spec, which is compiled and its findings placed in the spec
    (:mod:`tpuemb_cfg.spec_check`); a SparseCore spec or ``SparseCoreConfig`` is checked by the
    SparseCore rules (``SC``).
    """
    if type(config_or_path).__name__ == "SparseCoreConfig":  # the SC rules, at its spec lines
        rules = validator.selected_rules(select, ignore, show_derived=show_derived)
        return validate_sparsecore(config_or_path, rules, severity=severity, options=options)
    if isinstance(config_or_path, str | os.PathLike):
        if is_spec(config_or_path):  # compiled; findings placed in the spec
            rules = validator.selected_rules(select, ignore, show_derived=show_derived)
            return validate_spec(config_or_path, rules, severity=severity, options=options)
    return validator.validate(config_or_path, select=select, ignore=ignore,
                              show_derived=show_derived, severity=severity, options=options)


# -- tpuemb plan -----------------------------------------------------------------------------------


def open_plan(source: Any, ids: str | Sequence[str], *, options: Any = None,
              fmt: str | None = None) -> Any:
    """A ``planner.planning.Planner`` for ``source`` and the sample in ``ids``, with everything
    checked before any work: ``source`` is a SparseCore spec (``.py``: its ``SparseCoreConfig``,
    not validated here: ``tpuemb validate`` does that) or anything :func:`prepare` takes
    (validated; errors refused); the sample's files are opened against the configuration's
    features (``planner.inputs.open_sample``; ``fmt`` from the extension by default).
    ``options``: a ``planner.planning.PlanOptions``, a dict of its fields, or None."""
    from .planner.inputs import legacy_schema, open_sample, sparsecore_schema
    from .planner.planning import Planner

    config: Any
    kind = source_kind(source)
    if kind == "sparsecore" and isinstance(source, str | os.PathLike):
        from .embedding.sparsecore import load_sparsecore_spec

        config = load_sparsecore_spec(os.fspath(source), legacy=False).config
        schema = sparsecore_schema(config)
    elif kind == "sparsecore":
        config = source
        schema = sparsecore_schema(config)
    else:
        config = prepare(source)
        schema = legacy_schema(config.plan)
    return Planner(config, open_sample(ids, schema, fmt=fmt), options)


def place_plan_findings(planner: Any, findings: Sequence[Diagnostic],
                        path: str | None) -> list[Diagnostic]:
    """The plan's findings at the lines of ``path`` that set their fields: a text
    configuration's field (``validator.place``), a SparseCore spec's object or limit key
    (``spec_check.sparsecore_position``); binary and JSON files keep the field path only."""
    if path is None:
        return list(findings)
    if planner.kind == "sparsecore":
        from .embedding.spec import read_spec_text

        try:
            text = read_spec_text(path)
        except OSError:
            return [replace(d, path=path) for d in findings]
        out = []
        for d in findings:
            found = sparsecore_position(planner.config, d.field_path, path, text)
            out.append(replace(d, path=path) if found is None
                       else replace(d, path=path, line=found[0], column=found[1]))
        return out
    from tpuemb_cfg.formats.io import TEXT_SUFFIXES

    if not path.lower().endswith(TEXT_SUFFIXES):
        return [replace(d, path=path) for d in findings]
    with open(path, encoding="utf-8-sig", errors="replace") as handle:
        text = handle.read()
    from .proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration

    locations = scan_locations(text, TPUEmbeddingConfiguration.DESCRIPTOR,
                               wanted=wanted_paths(d.field_path for d in findings))
    return validator.place(findings, path=path, locations=locations)


def plan(source: Any, ids: str | Sequence[str], *, options: Any = None, fmt: str | None = None,
         progress: Any = None) -> Any:
    """``tpuemb plan`` as a library call: the ``planner.planning.Plan`` of ``source`` (a
    configuration file or message, a SparseCore spec or ``SparseCoreConfig``) from the sample
    in ``ids``, its findings placed at the configuration's lines. ``progress(n)``: called as
    the sample's files are read."""
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be None or a function called with the files read; "
                        f"received {type(progress).__name__}")
    planner = open_plan(source, ids, options=options, fmt=fmt)
    if progress is not None:
        planner.sample.on_progress = progress
    result = planner.run()
    path = (os.fspath(source) if isinstance(source, str | os.PathLike)
            else source.origin.path if planner.kind == "sparsecore"
            else getattr(source, "path", None))
    result.findings = place_plan_findings(planner, result.findings, path)
    return result


def source_kind(source: Any) -> str:
    """``sparsecore`` for a SparseCore spec file or ``SparseCoreConfig`` (run by
    :func:`prepare_sparsecore`), else ``legacy`` (run by :func:`prepare`): the one place that
    tells them apart; everything after dispatches on this kind."""
    if isinstance(source, str | os.PathLike):
        return "sparsecore" if is_sparsecore_spec(source) else "legacy"
    return "sparsecore" if type(source).__name__ == "SparseCoreConfig" else "legacy"


def is_sparsecore_spec(path: str | os.PathLike[str]) -> bool:
    """Whether the file ``path`` is a SparseCore spec, as the spec loader decides
    (``embedding.sparsecore.is_sparsecore_spec``: a Python spec assigning
    ``sparse_core_config``, ``feature_specs`` or ``topology``)."""
    if not os.fspath(path).endswith(".py"):  # only Python specs: nothing else is imported
        return False
    from .embedding.sparsecore import is_sparsecore_spec as detect

    return bool(detect(path))


def prepare_sparsecore(source: Any, *, stacking: Stacking | None = None,
                       check: bool = True, tf_version: str = DEFAULT_TF_VERSION
                       ) -> SparseCoreSetup:
    """A SparseCore configuration ready for ``sim.sparsecore.SparseCoreRun``.

    ``source``: a spec file (``embedding.sparsecore.load_sparsecore_spec``), what that loader
    returns (``config`` and ``compiled``), or a ``SparseCoreConfig`` (jax-tpu-embedding's,
    which compiles to no legacy message). ``stacking``: the stacks (default: the
    configuration's own, ``sparsecore.feed.stack`` with ``tf_version``: TensorFlow ``"2.21"``
    by default or ``"2.20"``, ``tpuemb_cfg.base.tf_versions``). The legacy configuration the
    executor runs is the spec's compiled message (TensorFlow, keras-rs) or one built from the
    configuration (jax), with SparseCore semantics (``sim.sparsecore.legacy``), validated
    (``check``) and planned with the ``sum`` combiner; each feature's own combiner goes to the
    gains. ``InputError`` for what cannot be simulated.
    """
    from .sim.sparsecore.legacy import jax_message, sparsecore_message, with_spec_values
    from .sim.sparsecore.run import SparseCoreSetup

    try:
        tensorflow_version(tf_version)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    path: str | None = None
    if isinstance(source, str | os.PathLike):
        from .embedding.sparsecore import load_sparsecore_spec

        path = os.fspath(source)
        source = load_sparsecore_spec(path)
    config, compiled = (source.config, source.compiled) if hasattr(source, "compiled") else (
        source, None)
    if path is None:  # a configuration the library was given: the spec loader's checks
        try:
            config = check_config(config)
        except (ValueError, TypeError) as exc:
            origin = getattr(exc, "origin", None)
            raise InputError(" ".join(str(exc).split()), path=getattr(origin, "path", None),
                             line=getattr(origin, "line", None)) from None
    combiners = []
    tables = {t.name: t for t in config.tables}
    for feature in config.features:
        combiner = tables[feature.table].combiner if feature.table in tables else "?"
        if combiner not in ("sum", "mean", "sqrtn"):
            raise InputError(f"feature {feature.name!r}: combiner {combiner!r} found, expected "
                             "sum, mean or sqrtn (a custom combiner is not simulated on "
                             "SparseCores)", path=path)
        combiners.append(combiner)
    try:
        if compiled is None:
            record = jax_message(config)
            prepared = prepare(record.message, combiners="sum", check=check)
        else:
            message = compiled.config if _is_compiled(compiled) else compiled
            record = sparsecore_message(message, config)
            for table in getattr(compiled, "tables", ()):
                # TensorFlow's optimizers start their slots at slot_initial_values() (an
                # Adagrad's initial_accumulator_value), which the message cannot hold.
                initial = getattr(table.optimizer, "slot_initial_values", None)
                if initial is not None:
                    record.slot_values[table.name] = dict(initial())
            prepared = prepare(replace(compiled, config=record.message)
                               if _is_compiled(compiled) else record.message,
                               combiners="sum", check=check)
        prepared = with_spec_values(prepared, record)
    except InputError as exc:
        if exc.path is None:
            exc.path = path
        raise
    # the bags' ids as the spec's input shapes give them (a dense [batch, 26] input: 26 each)
    plan = prepared.plan
    counts = [f.ids_per_bag if f.ids_per_bag is not None else p.ids_per_bag
              for f, p in zip(config.features, plan.features, strict=True)]
    prepared = replace(prepared, plan=plan.with_bags(counts))
    if stacking is None:
        stacking = stack(config, tf_version=tf_version)
    return SparseCoreSetup(config, stacking, replace(prepared, path=path), tuple(combiners),
                           tuple(record.notes), path)
