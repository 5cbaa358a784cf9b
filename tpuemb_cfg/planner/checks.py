"""The checks of ``tpuemb plan``'s options, made before any work (docs/plan.md, "Options").

- **Numbers**: ``quantile`` is in (0, 1] and ``headroom`` in [1, :data:`MAX_HEADROOM`]
  (:data:`RANGES`); NaN and infinities are refused.
- **Counts**: hosts, chips and SparseCores size the per-unit arrays of the load counters
  (:class:`planner.load.StepCounts`: a row of ``exact_steps`` counts per unit, then a
  histogram). :func:`check_units` refuses a count whose arrays would take more than the memory a
  plan may use (``limits.default_memory_limit``, 80% of the memory available), naming the
  option that gave it.
- **PlanOptions** (:func:`check_plan_options`, from its ``__post_init__``): every field's type
  and range, naming the field; sizes may be given as ``"8G"`` (``units.parse_size``), the gate
  and the what-if axes as the strings ``--fail-on`` and ``--compare`` take.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from tpuemb_cfg.base.errors import InputError, UsageError, shown
from tpuemb_cfg.base.units import format_size, size_argument
from tpuemb_cfg.formats.limits import default_memory_limit

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from tpuemb_cfg.planner.load import LoadOptions

__all__ = ["MAX_HEADROOM", "RANGES", "check_plan_options", "check_units", "number_problem",
           "plan_options", "unit_bytes"]



class PlanOptions(Protocol):
    """What these checks read of ``planner.planning.PlanOptions`` (the rest by field name): the
    planner passes its options and its class in, so this module, which the planner imports,
    does not import it back."""

    @property
    def topology(self) -> object: ...

    @property
    def hosts(self) -> object: ...

    @property
    def load(self) -> LoadOptions: ...


_Options = TypeVar("_Options", bound="DataclassInstance")

#: The largest headroom: beyond it a suggested limit no longer follows the sample.
MAX_HEADROOM = 10.0
#: field -> (low, high, low excluded) of the numbers of :class:`PlanOptions`.
RANGES: dict[str, tuple[float, float, bool]] = {
    "quantile": (0.0, 1.0, True),
    "headroom": (1.0, MAX_HEADROOM, False),
}
#: Histogram buckets a unit's per-step counts may take once past ``exact_steps``
#: (``StepCounts``: ~4,500 for counts below 2^40).
_HISTOGRAM_BUCKETS = 4608


def number_problem(field: str, value: object) -> str | None:
    """What is wrong with ``value`` as the number ``field`` of :data:`RANGES`, or None."""
    low, high, low_open = RANGES[field]
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"expected a number in {interval}, got {type(value).__name__} {shown(value)}"
    number = float(value)
    if math.isnan(number) or not (low < number if low_open else low <= number) or number > high:
        return f"{shown(value)} is not in {interval}"
    return None


def unit_bytes(load: LoadOptions, tables: int = 1) -> int:
    """The bytes one unit (host or SparseCore) of one layout takes in a load counter: two
    ``StepCounts`` (ids, unique ids) of ``exact_steps`` int32 rows and a histogram each, and
    a count per table."""
    return 2 * (4 * load.exact_steps + 8 * _HISTOGRAM_BUCKETS) + 8 * tables


def check_units(label: str, units: int, *, what: str, layouts: int, load: LoadOptions,
                tables: int = 1) -> None:
    """Refuse ``units`` (hosts or SparseCores, from ``label``: an option and its value) whose
    load counters (``layouts`` of them) would take more than the memory a plan may use."""
    limit = default_memory_limit()
    if limit is None:
        return
    per_unit = unit_bytes(load, tables) * layouts
    if units * per_unit <= limit:
        return
    raise UsageError(
        f"{label}: {units:,} {what} would need about {format_size(units * per_unit)} for their "
        f"counts, more than the {format_size(limit)} a plan may use here (80% of the memory "
        f"available); at most {limit // per_unit:,} {what} can be planned on this machine")


def check_plan_options(options: PlanOptions, parsers: Mapping[str, tuple[type, Any]]) -> None:
    """Check and normalise the fields of ``options`` (a frozen dataclass: fields are set with
    ``object.__setattr__``): ``TypeError``/``ValueError`` naming the field. ``parsers``:
    ``compare`` and ``gate`` -> (their class, the parser of their strings)."""
    from tpuemb_cfg.planner.load import LoadOptions

    def put(name: str, value: Any) -> None:
        object.__setattr__(options, name, value)

    if options.topology is not None and not isinstance(options.topology, str):
        raise TypeError(f"PlanOptions.topology: expected a string such as 'v5p-64' or None, got "
                        f"{type(options.topology).__name__} {shown(options.topology)}")
    for name, what, low, unit in (("hosts", "a whole number of hosts", 1, " host"),
                                  ("host_index", "a whole number (a host of the slice)", 0, "")):
        _whole(options, name, what, low, unit)
    for name in ("host_memory_bytes", "hbm_bytes"):
        put(name, size_argument(getattr(options, name), f"PlanOptions.{name}"))
    for name in RANGES:
        problem = number_problem(name, getattr(options, name))
        if problem is not None:
            error = TypeError if problem.startswith("expected") else ValueError
            raise error(f"PlanOptions.{name}: {problem}")
        put(name, float(getattr(options, name)))
    for name, grammar in (("compare", "'hosts=4,8', 'topology=v5p-64' or 'stacking'"),
                          ("gate", "'oom', 'drops' or 'imbalance>1.3'")):
        kind, parse = parsers[name]
        value = getattr(options, name)
        if isinstance(value, kind):
            continue
        if isinstance(value, str) or (isinstance(value, list | tuple)
                                      and all(isinstance(v, str) for v in value)):
            put(name, parse(value))
            continue
        raise TypeError(f"PlanOptions.{name}: expected a {kind.__name__}, or strings such as "
                        f"{grammar}, got {type(value).__name__} {shown(value)}")
    if not isinstance(options.load, LoadOptions):
        raise TypeError(f"PlanOptions.load: expected a planner.load.LoadOptions, got "
                        f"{type(options.load).__name__} {shown(options.load)}")


def _whole(options: PlanOptions, name: str, what: str, low: int, unit: str) -> None:
    """The optional whole number ``name`` of ``options``, at least ``low`` (normalised to int;
    ``unit`` follows ``low`` in the message)."""
    value = getattr(options, name)
    if value is None:
        return
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"PlanOptions.{name}: expected {what} or None, got "
                        f"{type(value).__name__} {shown(value)}")
    object.__setattr__(options, name, operator.index(value))
    if value < low:
        raise ValueError(f"PlanOptions.{name}: expected at least {low}{unit}, got {value}")


def plan_options(value: object, PlanOptions: type[_Options]) -> _Options:  # noqa: N803
    """``options`` of ``session.plan``/``open_plan`` and ``Planner``: a ``PlanOptions``, None
    (the defaults) or a mapping of its fields (``{"hosts": 4, "gate": "oom"}``)."""
    from dataclasses import fields

    if value is None:
        return PlanOptions()
    if isinstance(value, PlanOptions):
        return value
    if isinstance(value, Mapping):
        known = {f.name for f in fields(PlanOptions)}
        unknown = sorted(str(k) for k in value if k not in known)
        if unknown:
            raise TypeError(f"options: unknown field(s) {', '.join(unknown)}; PlanOptions has "
                            f"{', '.join(sorted(known))}")
        return PlanOptions(**value)
    raise TypeError(f"options: expected a planner.planning.PlanOptions, a dict of its fields or "
                    f"None, got {type(value).__name__}")


def variant_label(name: str, options: PlanOptions, config: Any) -> str:
    """The option (and value) a what-if variant of ``Planner._sparsecore_variants`` comes from,
    for errors about it: ``--compare topology=v5p-3``, ``--topology v5p-8``, or the spec."""
    if name == "as configured":
        if options.topology is not None:
            return f"--topology {options.topology}"
        if options.hosts is not None:
            return f"--hosts {options.hosts}"
        kind = getattr(config.topology.kind, "name", None)
        return (f"the spec's topology ({f'{kind}-' if kind else ''}{config.topology.chips} "
                "chips)")
    if name.startswith("stacking"):
        return "--compare stacking"
    if name.startswith("hosts="):
        return f"--compare {name}"
    return f"--compare topology={name}"


def check_sparsecore_variants(variants: list[tuple[str, Any, bool]], options: PlanOptions,
                              stack: Callable[[Any, str], Any]) -> list[Any]:
    """Before the sample is read, every variant (name, ``SparseCoreConfig``, only its hosts
    differ) of a SparseCore plan: its hosts and SparseCores within memory, a power-of-two
    SparseCore count, every feature's global batch divisible by the SparseCores, and its
    tables stacked (``stack(config, label)``). ``UsageError`` naming the option of the variant;
    returns the stackings."""
    from tpuemb_cfg.planner.inputs import sparsecore_schema

    out = []
    for name, config, same in variants:
        label = variant_label(name, options, config)
        topology = config.topology
        n = topology.num_sparse_cores
        check_units(label, n, what="SparseCores", layouts=1, load=options.load)
        check_units(label, topology.hosts, what="hosts", layouts=1, load=options.load)
        spec = label.startswith("the spec's")  # no option: the spec's line is to blame
        if not same and n & (n - 1):
            _refuse(label, f"the slice has {n} SparseCores ({topology.chips} chips x "
                    f"{topology.sparse_cores_per_chip}); the preprocessing spreads ids by id mod "
                    "N and needs a power of two - use a power-of-two chip count",
                    config.setting_origins.get("topology") if spec else None)
        for feature in () if same else sparsecore_schema(config).features:
            if feature.bags % n:
                origin = next((f.origin for f in config.features if f.name == feature.name),
                              None)
                _refuse(label, f"feature {feature.name!r} has a global batch of {feature.bags} "
                        f"bags, which does not divide by the {n} SparseCores ({topology.chips} "
                        f"chips x {topology.sparse_cores_per_chip}): each SparseCore takes an "
                        f"equal slice of the batch - use a batch that is a multiple of {n}, or "
                        "another slice", origin if spec else None)
        out.append(stack(config, label))
    return out


def _refuse(label: str, message: str, origin: Any) -> None:
    """An error about a variant: at the spec's line (``origin``, when it has one), else naming
    the option (``label``)."""
    if origin is not None and getattr(origin, "line", None) is not None:
        raise InputError(message, path=origin.path, line=origin.line)
    raise UsageError(f"{label}: {message}")


def check_legacy_hosts(counts: list[tuple[str, int]], options: PlanOptions, tables: int) -> None:
    """Before the sample is read, each host count of a legacy plan (the option that gives it,
    the count): its load counters (both strategies) within memory."""
    for label, hosts in counts:
        check_units(label, hosts, what="hosts", layouts=2, load=options.load, tables=tables)
