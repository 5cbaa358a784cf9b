"""The whole plan of a configuration from a sample of its ids: memory, load and limits, the
what-if comparisons side by side, the findings and the gate (docs/plan.md).

:class:`Planner` composes the three parts: ``memory`` (:func:`planner.memory.legacy_memory`
per host, :func:`planner.memory.sparsecore_memory` per chip and SparseCore), ``load``
(:mod:`planner.load`: per host under MOD and DIV_DEFAULT, per SparseCore after stacking) and,
for a SparseCore configuration, ``limits`` (:func:`planner.limits.limits`: observed maxima,
suggested limits and the drops the exact preprocessing counts at both). Everything streams
over the sample (:mod:`planner.inputs`); the sample is read

- once for a legacy configuration: every host count and strategy is counted in that pass;
- for a SparseCore configuration, once for the configuration as given (the load counters and
  the preprocessing at the current limits in one pass; the drops at the suggested limits follow
  from that pass's statistics, and only the steps above the suggested limits, when some are, are
  read and preprocessed again: :func:`planner.limits.limits`) and once more per what-if variant
  with its own stacking (``stacking``, ``topology=``; a TensorFlow spec on another chip count
  also has its own global batch); a ``hosts=`` variant changes only the hosts' memory and
  reuses the load and limits of the configuration as given.

Memory: the counters and the limits' state are fixed by the configuration (units x
``exact_steps``, tables x units, the heavy-hitter counts, stacks x partitions), never by the
sample's length; on top of them one step's batch and its preprocessing
(docs/plan/load-and-limits.md, "Memory").

**What-if variants** (:func:`parse_compare`): ``hosts=N[,M...]`` (legacy: each host count under
both strategies; SparseCore: the hosts' memory), ``topology=KIND-N[,...]`` (SparseCore:
restacked on that slice; legacy: its host count), ``stacking`` (SparseCore: stacking turned
off, or on when the spec turns it off). Under a legacy configuration both sharding strategies
are always compared.

**The gate** (:func:`parse_gate`): ``oom`` fails when a unit is over its memory (a host over
``host_memory_bytes``, a chip over its HBM), ``drops`` when a stacked table drops ids at its
current limits (a legacy configuration has no limits and never drops), ``imbalance>X`` when the
configured layout's max/mean load (the hottest unit's ids over the mean unit's) exceeds X.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.base.schema import ShardingStrategy
from tpuemb_cfg.base.units import format_size
from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.planner.checks import (
    check_legacy_hosts,
    check_plan_options,
    check_sparsecore_variants,
    plan_options,
)
from tpuemb_cfg.planner.inputs import (
    FeatureBatch,
    Sample,
    SampleSchema,
    SampleStats,
    legacy_schema,
    sparsecore_schema,
)
from tpuemb_cfg.planner.limits import LimitOptions, LimitsReport, limits, spans
from tpuemb_cfg.planner.limits import findings as limit_findings
from tpuemb_cfg.planner.load import (
    STRATEGIES,
    LoadCounter,
    LoadOptions,
    LoadReport,
    host_counter,
    legacy_tables,
    sparsecore_counter,
)
from tpuemb_cfg.planner.memory import (
    MemoryReport,
    legacy_memory,
    memory_findings,
    sparsecore_memory,
    with_hosts,
)
from tpuemb_cfg.rules import RULES
from tpuemb_cfg.rules.plan import LoadImbalance, plan_findings
from tpuemb_cfg.sparsecore.feed import stack
from tpuemb_cfg.sparsecore.topology import parse_topology
from tpuemb_cfg.validation.validator import run_rules

if TYPE_CHECKING:
    from tpuemb_cfg.executor.prepared import Prepared
    from tpuemb_cfg.sparsecore.config import SparseCoreConfig
    from tpuemb_cfg.sparsecore.stacking import Stacking

__all__ = ["Compare", "Gate", "Plan", "PlanOptions", "Planner", "Variant",
           "format_text", "parse_compare", "parse_gate", "plan"]

#: The max/mean load above which an imbalance is a finding when the gate sets no threshold.
DEFAULT_IMBALANCE = 1.5


# --- the gate -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Gate:
    """What fails a run (exit status 1): ``oom``, ``drops``, ``imbalance`` > the threshold."""

    oom: bool = False
    drops: bool = False
    imbalance: float | None = None

    def __str__(self) -> str:
        parts = (["oom"] if self.oom else []) + (["drops"] if self.drops else []) + (
            [f"imbalance>{self.imbalance:g}"] if self.imbalance is not None else [])
        return ",".join(parts) or "nothing"


_IMBALANCE = re.compile(r"^imbalance\s*>\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)$")


def parse_gate(values: Iterable[str] | str) -> Gate:
    """``--fail-on`` values (each one condition or several separated by commas): ``oom``,
    ``drops``, ``imbalance>X`` with X >= 1 (the max/mean of equal units is 1)."""
    oom = drops = False
    imbalance: float | None = None
    for value in [values] if isinstance(values, str) else values:
        for part in (p.strip().lower() for p in str(value).split(",")):
            if part == "oom":
                oom = True
            elif part == "drops":
                drops = True
            elif (match := _IMBALANCE.match(part)) is not None:
                imbalance = float(match.group(1))
                if not 1.0 <= imbalance < float("inf"):
                    raise UsageError(f"--fail-on {value!r}: the threshold of {part!r} is a "
                                     "max/mean ratio, at least 1 (equal units give 1); e.g. "
                                     "imbalance>1.3")
            else:
                raise UsageError(f"--fail-on {value!r}: expected oom, drops or imbalance>X, "
                                 "comma-separated (e.g. --fail-on oom,drops,imbalance>1.3); "
                                 f"{part!r} is none of them")
    return Gate(oom, drops, imbalance)


# --- what-if ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Compare:
    """The what-if axes: host counts, topologies, and stacking toggled."""

    hosts: tuple[int, ...] = ()
    topologies: tuple[str, ...] = ()
    stacking: bool = False


def parse_compare(values: Iterable[str] | str) -> Compare:
    """``--compare`` values: ``hosts=4,8``, ``topology=v5p-64,v6e-64``, ``stacking``,
    ``strategy`` (legacy: always compared; accepted for clarity)."""
    hosts: list[int] = []
    topologies: list[str] = []
    stacking = False
    for value in [values] if isinstance(values, str) else values:
        key, _, rest = str(value).strip().partition("=")
        key = key.strip().lower()
        items = [v.strip() for v in rest.split(",") if v.strip()]
        if key == "hosts" and items:
            for item in items:
                if not item.isdigit() or int(item) < 1:
                    raise UsageError(f"--compare hosts={rest}: {item!r} is not a host count "
                                     "(a whole number >= 1)")
                hosts.append(int(item))
        elif key == "topology" and items:
            topologies.extend(items)
        elif key == "stacking" and not rest:
            stacking = True
        elif key == "strategy" and not rest:
            continue
        else:
            raise UsageError(f"--compare {value!r}: expected hosts=N[,M...], "
                             "topology=KIND-N[,...], stacking or strategy")
    return Compare(tuple(dict.fromkeys(hosts)), tuple(dict.fromkeys(topologies)), stacking)


# --- options and results ------------------------------------------------------------------------

@dataclass(frozen=True)
class PlanOptions:
    """``topology`` (``"v5p-64"``: a Cloud TPU accelerator type, ``"v5p:32"``: chips; a legacy
    configuration takes its host count), ``hosts`` (overrides the configuration's or the
    topology's host count), ``host_memory_bytes`` (each host's memory; None: unknown, no
    finding), ``hbm_bytes`` (each chip's HBM; None: the chip kind's), ``quantile``/``headroom``
    of the suggested limits, ``compare`` (:func:`parse_compare`), ``gate`` (:func:`parse_gate`),
    ``load`` (how exact the load summaries are)."""

    topology: str | None = None
    hosts: int | None = None
    host_memory_bytes: int | None = None
    hbm_bytes: int | None = None
    quantile: float = 1.0
    headroom: float = 1.2
    compare: Compare = Compare()
    gate: Gate = Gate()
    load: LoadOptions = field(default_factory=LoadOptions)
    #: plan one host of a multi-host SparseCore slice: the sample is that host's input (the
    #: configured batch / hosts), preprocessed with its chips as the local devices
    host_index: int | None = None

    def __post_init__(self) -> None:

        check_plan_options(self, {"compare": (Compare, parse_compare),  # types and ranges
                                  "gate": (Gate, parse_gate)})


@dataclass
class Variant:
    """One column of the what-if table: a name, its memory, its load (the configured strategy
    or the stacking) and, for SparseCore, its limits (the primary's with suggestions)."""

    name: str
    memory: MemoryReport
    load: LoadReport
    limits: LimitsReport | None = None
    #: the slice of a SparseCore variant (a ``sparsecore.topology.Topology``)
    topology: Any = None

    def row(self) -> dict[str, Any]:
        """The numbers the what-if table shows."""
        fullest = self.memory.fullest
        hottest = self.load.units[self.load.imbalance.hottest] if self.load.units else None
        out: dict[str, Any] = {
            "name": self.name,
            "memory_level": self.memory.level,
            "memory_fullest_bytes": fullest.total if fullest else 0,
            "memory_capacity_bytes": self.memory.capacity_bytes,
            "fits": self.memory.fits,
            "load_level": self.load.level,
            "units": len(self.load.units),
            "max_over_mean": self.load.imbalance.max_over_mean,
            "total_variation": self.load.imbalance.total_variation,
            "hottest_p99_ids": hottest.ids.p99 if hottest else 0,
        }
        if self.topology is not None:
            out["slice"] = self.topology.as_json()
        if self.limits is not None:
            out["dropped_at_current_limits"] = sum(s.current.dropped for s in self.limits.stacks)
            out["failed_steps_at_current_limits"] = self.limits.failed_steps
            out["stacks"] = len(self.limits.stacks)
        return out


@dataclass
class Plan:
    """The result: the sample read, the configuration's memory, load and limits, the what-if
    variants (the first is the configuration as given), the findings (not yet placed at lines:
    ``session.plan`` does that) and the gate's verdict (``failed``: the reasons)."""

    kind: Literal["legacy", "sparsecore"]
    sample: SampleStats
    memory: MemoryReport
    load: dict[str, LoadReport]
    primary: str
    limits: LimitsReport | None
    variants: list[Variant]
    findings: list[Diagnostic]
    gate: Gate
    failed: list[str]
    memory_at_suggested: MemoryReport | None = None
    #: the bags of one configured batch per feature
    configured_bags: dict[str, int] = field(default_factory=dict)

    @property
    def topology(self) -> Any:
        """The slice the plan used (SparseCore), else None."""
        return self.variants[0].topology if self.variants else None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "sample": self.sample.as_dict(),
            "topology": self.topology.as_json() if self.topology is not None else None,
            "memory": self.memory.to_json(),
            "memory_at_suggested_limits": (self.memory_at_suggested.to_json()
                                           if self.memory_at_suggested else None),
            "load": {name: r.to_json() for name, r in self.load.items()},
            "primary_layout": self.primary,
            "limits": self.limits.to_json() if self.limits else None,
            "what_if": [v.row() for v in self.variants],
            "findings": [d.to_dict() for d in self.findings],
            "gate": {"fail_on": str(self.gate), "failed": list(self.failed)},
            "configured_bags": dict(self.configured_bags),
        }


# --- the planner --------------------------------------------------------------------------------

Progress = Callable[[int], None]


class Planner:
    """The plan of one configuration and sample. ``passes``: how often :meth:`run` reads the
    whole sample (for a progress bar: ``passes x sample.progress_total``; the steps above the
    suggested limits read again, if any, are not counted)."""

    def __init__(self, config: Prepared | SparseCoreConfig, sample: Sample,
                 options: PlanOptions | None = None) -> None:

        self.options = plan_options(options, PlanOptions)
        self.sample = sample
        self.config = config
        self.kind: Literal["legacy", "sparsecore"] = (
            "sparsecore" if hasattr(config, "topology") else "legacy")
        self.passes = 1
        if self.kind == "legacy" and self.options.host_index is not None:
            raise UsageError(f"--host-index {self.options.host_index}: only a SparseCore slice "
                             "is planned per host (a legacy configuration's hosts are counted "
                             "together); leave it out")
        if self.kind == "sparsecore":
            self._sc = self._sparsecore_variants()
            self._stackings = check_sparsecore_variants(self._sc, self.options, _stack)
            self.passes = sum(1 for *_, same in self._sc if not same)
        else:
            self._legacy_counts()

    # -- SparseCore variants

    def _sparsecore_variants(self) -> list[tuple[str, SparseCoreConfig, bool]]:
        """(name, configuration, whether its stacking and batches are the first's: only the
        hosts differ, so its load and limits are the first's too) per variant."""
        config: SparseCoreConfig = self.config  # type: ignore[assignment]
        opts = self.options
        if opts.topology is not None:
            config = replace(config, topology=_topology(opts.topology, opts.hosts))
        elif opts.hosts is not None:
            config = replace(config, topology=replace(config.topology, hosts=opts.hosts))
        out = [("as configured", config, False)]
        if opts.compare.stacking:
            toggled = not config.disable_table_stacking
            out.append((f"stacking {'off' if toggled else 'on'}",
                        replace(config, disable_table_stacking=toggled), False))
        for text in opts.compare.topologies:
            out.append((text, replace(config, topology=_topology(text, None,
                                                                 f"--compare topology={text}")),
                        False))
        for hosts in opts.compare.hosts:  # one host's batch changes with the host count
            out.append((f"hosts={hosts}",
                        replace(config, topology=replace(config.topology, hosts=hosts)),
                        opts.host_index is None))
        for name, variant, _ in out:
            _local_devices(variant, opts.host_index, name)
        return out

    def run(self) -> Plan:
        return self._run_legacy() if self.kind == "legacy" else self._run_sparsecore()

    # -- legacy

    def _legacy_hosts(self) -> int:
        prepared: Prepared = self.config  # type: ignore[assignment]
        if self.options.hosts is not None:
            return self.options.hosts
        if self.options.topology is not None:
            hosts: int = _topology(self.options.topology, None).hosts
            return hosts
        return max(int(prepared.config.num_hosts), 1)

    def _device_memory(self) -> int | None:
        """A legacy configuration's TPU device memory: ``hbm_bytes``, else the topology's chip
        kind's HBM, else unknown."""
        if self.options.hbm_bytes is not None:
            return self.options.hbm_bytes
        if self.options.topology is not None:
            kind = _topology(self.options.topology, None).kind
            return int(kind.hbm_bytes) if kind is not None else None
        return None

    def _legacy_counts(self) -> list[int]:
        """The host counts a legacy plan counts (the configured first), each checked against
        the memory before the sample is read (``planner.checks``)."""
        prepared: Prepared = self.config  # type: ignore[assignment]
        opts = self.options
        hosts = self._legacy_hosts()
        label = (f"--hosts {opts.hosts}" if opts.hosts is not None
                 else f"--topology {opts.topology}" if opts.topology is not None
                 else f"num_hosts {hosts} of the configuration")
        labelled = [(label, hosts), *((f"--compare hosts={h}", h) for h in opts.compare.hosts)]
        labelled += [(f"--compare topology={text}",
                      _topology(text, None, f"--compare topology={text}").hosts)
                     for text in opts.compare.topologies]
        check_legacy_hosts(labelled, opts, len(legacy_tables(prepared.plan)))
        return list(dict.fromkeys(h for _, h in labelled))

    def _run_legacy(self) -> Plan:

        prepared: Prepared = self.config  # type: ignore[assignment]
        opts = self.options
        _same_schema(self.sample.schema, legacy_schema(prepared.plan))
        hosts = self._legacy_hosts()
        counts = self._legacy_counts()
        # one column pair per variant asked for, even one equal to the configuration (shown,
        # not folded into it); one counter per distinct host count
        columns = [(hosts, ""), *((h, f"hosts={h}") for h in opts.compare.hosts),
                   *((_topology(text, None, f"--compare topology={text}").hosts, text)
                     for text in opts.compare.topologies)]
        tables = legacy_tables(prepared.plan)
        counters = {h: host_counter(tables, hosts=h, options=opts.load) for h in counts}
        for batch in self.sample:
            for counter in counters.values():
                counter.update(batch)
        configured = ("MOD" if int(prepared.config.sharding_strategy) == ShardingStrategy.MOD
                      else "DIV_DEFAULT")
        variants = []
        reports = {h: counter.reports() for h, counter in counters.items()}
        loads = reports[hosts]
        for h, label in columns:
            for strategy in (configured, *(s for s in STRATEGIES if s != configured)):
                name = (f"{label} {strategy}" if label else f"as configured ({strategy})"
                        if strategy == configured else strategy)
                memory = legacy_memory(prepared.config, hosts=h, strategy=strategy,
                                       host_memory_bytes=opts.host_memory_bytes,
                                       device_memory_bytes=self._device_memory())
                variants.append(Variant(name, memory, reports[h][strategy]))
        memory = variants[0].memory
        findings = memory_findings(memory) + _cores_left_out(prepared, hosts)
        load = loads[configured]
        threshold = opts.gate.imbalance if opts.gate.imbalance is not None else DEFAULT_IMBALANCE
        findings += _host_imbalance(load, threshold, hosts)
        failed = _verdict(opts.gate, memory, load, None)
        return Plan("legacy", self.sample.stats, memory, loads, configured, None, variants,
                    findings, opts.gate, failed,
                    configured_bags={f.name: f.bags for f in self.sample.schema.features})

    # -- SparseCore

    def _run_sparsecore(self) -> Plan:

        opts = self.options
        variants: list[Variant] = []
        primary_limits: LimitsReport | None = None
        primary_stacking: Stacking | None = None
        stats = self.sample.stats
        for k, (name, config, same) in enumerate(self._sc):
            stacking = self._stackings[k]
            if same:  # only the hosts differ: the host memory changes, nothing else
                first = variants[0]
                memory = sparsecore_memory(config, stacking, hbm_bytes=opts.hbm_bytes,
                                           host_memory_bytes=opts.host_memory_bytes)
                variants.append(Variant(name, memory, first.load, first.limits,
                                        config.topology))
                continue
            counter = sparsecore_counter(stacking, options=opts.load)
            stream = _Stream(self.sample, _schema(config, opts.host_index), counter)
            report = limits(stacking, stream, options=LimitOptions(
                quantile=opts.quantile, headroom=opts.headroom, suggest=k == 0,
                max_ids_per_chip_per_sample=config.max_ids_per_chip_per_sample,
                local_devices=_local_devices(config, opts.host_index, name),
                host_index=opts.host_index))
            memory = sparsecore_memory(config, stacking, hbm_bytes=opts.hbm_bytes,
                                       host_memory_bytes=opts.host_memory_bytes)
            variants.append(Variant(name, memory, counter.reports()["stacked"], report,
                                    config.topology))
            if k == 0:
                primary_limits, primary_stacking = report, stacking
                stats = stream.stats
        assert primary_limits is not None and primary_stacking is not None
        first = variants[0]
        config = self._sc[0][1]
        threshold = opts.gate.imbalance if opts.gate.imbalance is not None else DEFAULT_IMBALANCE
        findings = memory_findings(first.memory) + limit_findings(
            primary_limits, config, load=first.load, imbalance_threshold=threshold)
        suggested = {s.stack: (s.suggested.max_ids_per_partition,
                               s.suggested.max_unique_ids_per_partition)
                     for s in primary_limits.stacks if s.suggested is not None}
        at_suggested = sparsecore_memory(config, primary_stacking, limits=suggested,
                                         hbm_bytes=opts.hbm_bytes,
                                         host_memory_bytes=opts.host_memory_bytes)
        failed = _verdict(opts.gate, first.memory, first.load, primary_limits)
        return Plan("sparsecore", stats, first.memory, {"stacked": first.load}, "stacked",
                    primary_limits, variants, findings, opts.gate, failed, at_suggested,
                    {f.name: f.bags for f in _schema(config, opts.host_index).features})


class _Stream:
    """The sample as ``limits`` reads it: a callable giving a fresh pass; the first pass also
    feeds the load counter (one read for both). ``schema``: the variant's (its global batch)."""

    def __init__(self, sample: Sample, schema: SampleSchema, counter: LoadCounter) -> None:
        # the sample's own schema: a copy of it (the files were probed when it was opened)
        self.sample = copy.copy(sample) if schema == sample.schema else Sample(
            sample.paths, schema, sample.format)
        self.sample.on_progress = sample.on_progress
        self.counter = counter
        self.calls = 0
        self.stats = self.sample.stats

    def __call__(self) -> Iterator[Mapping[str, FeatureBatch]]:
        self.calls += 1
        if self.calls > 1:  # the steps above the suggested limits: beyond the progress bar
            self.sample.on_progress = None
            yield from self.sample
            return
        for batch in self.sample:
            self.counter.update(batch)
            yield batch
        self.stats = self.sample.stats


def _local_devices(config: SparseCoreConfig, host_index: int | None, name: str) -> int | None:
    """The chips of host ``host_index`` (``chips / hosts``: jax-tpu-embedding's
    ``local_device_count``), None for the whole slice; a host the slice does not have, or hosts
    that do not divide the chips, are a UsageError naming the variant."""
    if host_index is None:
        return None
    topology = config.topology
    where = "" if name == "as configured" else f" (--compare {name})"
    if not 0 <= host_index < topology.hosts:
        raise UsageError(f"--host-index {host_index}: the slice{where} has {topology.hosts} "
                         f"host(s), so the index is 0 to {topology.hosts - 1}")
    if topology.chips % topology.hosts:
        raise UsageError(f"--host-index {host_index}: {topology.chips} chips do not divide into "
                         f"{topology.hosts} hosts{where}; give --hosts a divisor of the chips")
    return int(topology.chips // topology.hosts)


def _schema(config: SparseCoreConfig, host_index: int | None) -> SampleSchema:
    """The sample's features: one configured batch is the global batch, or with ``host_index``
    one host's share of it (the global batch / hosts, as each host's input pipeline reads)."""
    schema = sparsecore_schema(config)
    hosts = config.topology.hosts
    if host_index is None or hosts == 1:
        return schema
    odd = [f.name for f in schema.features if f.bags % hosts]
    if odd:
        bags = next(f.bags for f in schema.features if f.name == odd[0])
        raise UsageError(f"--host-index {host_index}: the global batch of feature {odd[0]!r} "
                         f"({bags} bags) does not divide into {hosts} hosts")
    return SampleSchema(tuple(replace(f, bags=f.bags // hosts) for f in schema.features))


def _stack(config: SparseCoreConfig, label: str | None = None) -> Stacking:

    try:
        return stack(config)
    except ValueError as exc:
        raise UsageError(f"{label + ': ' if label else ''}cannot stack the tables on "
                         f"{config.topology.describe()}: {' '.join(str(exc).split())}") from None


def _topology(text: str, hosts: int | None, label: str | None = None) -> Any:

    try:
        return parse_topology(text, hosts=hosts)
    except ValueError as exc:
        said = str(exc)
        if label is None and said.startswith(f"{text}: "):  # the message names the value
            raise UsageError(f"--topology {said}") from None
        raise UsageError(f"{label or f'--topology {text!r}'}: {said}") from None


def _same_schema(given: SampleSchema, expected: SampleSchema) -> None:
    if given != expected:
        raise UsageError("the sample was opened for other features than the configuration's; "
                         "open it with planner.inputs.legacy_schema(prepared.plan)")


def _verdict(gate: Gate, memory: MemoryReport, load: LoadReport,
             limits: LimitsReport | None) -> list[str]:
    """The gate's reasons to fail, empty when it passes."""
    failed = []
    if gate.oom and not memory.fits:
        fullest = memory.fullest
        failed.append(f"oom: {memory.level} {fullest.index if fullest else '?'} needs "
                      f"{format_size(fullest.total if fullest else 0)}, more than "
                      f"{format_size(memory.capacity_bytes or 0)}" if memory.capacity_bytes
                      else "oom: a unit is over its memory")
    if gate.drops and limits is not None:
        dropped = sum(s.current.dropped for s in limits.stacks)
        failing = limits.failed_steps
        if dropped or failing:
            failed.append(f"drops: {dropped} ids dropped at the current limits"
                          + (f", {failing} step(s) failed" if failing else ""))
    if gate.imbalance is not None and load.imbalance.max_over_mean > gate.imbalance:
        failed.append(f"imbalance: {load.level} {load.imbalance.hottest} serves "
                      f"{load.imbalance.max_over_mean:.3f}x the mean, above {gate.imbalance:g}")
    return failed


#: validate's rule for tensor cores that are not a multiple of the hosts, which plan also reports.
RULE_CORES_PER_HOST = "TBL010"


def _cores_left_out(prepared: Prepared, hosts: int) -> list[Diagnostic]:
    """Validate's TBL010 on the configuration with the plan's host count (``--hosts`` or the
    topology may differ from ``num_hosts``): the per-chip memory spreads a host's rows over
    ``num_tensor_cores // hosts`` devices, so the cores beyond ``hosts`` times that are left
    out; the hint says how many."""
    config = prepared.config
    if hosts != config.num_hosts:
        config = with_hosts(config, hosts)
    cores = int(config.num_tensor_cores)
    counted = cores // hosts * hosts
    hint = (f"the memory per chip counts {counted} of the {cores} TensorCores "
            f"({cores // hosts} per host): {cores - counted} left out" if counted else
            f"fewer TensorCores ({cores}) than hosts ({hosts}): no memory per chip")
    return [replace(d, hint=hint) for d in run_rules(config, [RULES[RULE_CORES_PER_HOST]])]


def _host_imbalance(load: LoadReport, threshold: float, hosts: int) -> list[Diagnostic]:
    """PLAN021 when the hottest host serves more than ``threshold`` times the mean."""
    return plan_findings([LoadImbalance(
        level="host", hottest=load.imbalance.hottest, units=hosts,
        max_over_mean=load.imbalance.max_over_mean,
        total_variation=load.imbalance.total_variation, threshold=threshold,
        top=load.top_tables[0].table if load.top_tables else None, strategy=load.strategy,
        path="sharding_strategy")])


def plan(config: Prepared | SparseCoreConfig, sample: Sample, *,
         options: PlanOptions | None = None, progress: Progress | None = None) -> Plan:
    """The plan of ``config`` (a ``Prepared`` legacy configuration, ``session.prepare``, or a
    ``SparseCoreConfig``) from ``sample`` (``planner.inputs.open_sample`` with the
    configuration's schema); ``progress(n)`` is called as the files are read (over
    ``Planner(...).passes`` passes)."""
    if progress is not None:
        sample.on_progress = progress
    return Planner(config, sample, options).run()


# --- text ---------------------------------------------------------------------------------------

def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()
            for r in rows]


def _sample_text(plan: Plan) -> list[str]:
    s = plan.sample
    ids = sum(s.ids_read.values())
    out = [f"sample: {len(s.files)} {s.format} file(s), {s.batches} step(s) of the configured "
           f"batch, {ids:,} ids"]
    if s.rescaled:
        name, sizes = next(iter(s.sample_batch_bags.items()))
        out.append(f"  rescaled: the sample's batches of {', '.join(map(str, sorted(sizes)))} "
                   f"bag(s) of {name} were merged or split into the configured "
                   f"{plan.configured_bags.get(name, '?')}")
    if s.ignored:
        what = {"parquet": "column(s)", "tfrecord": "feature(s)"}.get(s.format, "feature index(es)")
        out.append(f"  ignored: {what} {', '.join(sorted(s.ignored))} (no configured feature)")
    left = {k: v for k, v in s.leftover_bags.items() if v}
    if left:
        out.append(f"  not used: {', '.join(f'{v} bag(s) of {k}' for k, v in left.items())} at "
                   "the end (less than one configured batch)")
    return out


def _memory_text(title: str, memory: MemoryReport) -> list[str]:
    fullest = memory.fullest
    cap = (format_size(memory.capacity_bytes) if memory.capacity_bytes
           else "its chip's HBM (shared)" if memory.level == "sparsecore"
           else "unknown (--host-memory)" if memory.level == "host" else "unknown (--hbm)")
    out = [f"{title}: {len(memory.units)} {memory.level}(s), fullest {memory.level} "
           f"{fullest.index if fullest else '-'}: "
           f"{format_size(fullest.total) if fullest else '0 bytes'} of {cap}"
           f"{'' if memory.fits else '  OUT OF MEMORY'}"]
    if fullest is not None:
        out.append("  " + ", ".join(f"{k} {format_size(v)}" for k, v in fullest.parts.items()))
    if memory.dominant:
        out.append("  largest tables there: " + ", ".join(
            f"{name} {format_size(size)}" for name, size in memory.dominant))
    return out


def _load_text(report: LoadReport, limit: int = 8) -> list[str]:
    im = report.imbalance
    out = [f"load per {report.level} ({report.strategy}): {report.total_ids:,} ids over "
           f"{report.steps} step(s); max/mean {im.max_over_mean:.3f}, total variation "
           f"{im.total_variation:.3f}, mean step max/mean {im.step_max_over_mean:.3f}, hottest "
           f"{report.level} {im.hottest}"]
    rows = [("unit", "ids mean", "p50", "p99", "max", "unique mean", "p99", "share")]
    shown = sorted(report.units, key=lambda u: -u.total_ids)[:limit]
    for u in sorted(shown, key=lambda u: u.index):
        rows.append((str(u.index), f"{u.ids.mean:.1f}", str(u.ids.p50), str(u.ids.p99),
                     str(u.ids.max), f"{u.unique.mean:.1f}", str(u.unique.p99), _pct(u.share)))
    out += _table(rows)
    if len(report.units) > limit:
        out.append(f"  ({limit} busiest of {len(report.units)} shown; --format json has all)")
    if report.top_tables:
        out.append("  tables on the hottest unit: " + ", ".join(
            f"{t.table} {_pct(t.share_of_hottest)}" for t in report.top_tables[:5]))
    if report.top_ids:
        out.append("  top ids: " + ", ".join(
            f"{h.table}[{h.id}] x{h.count}{'' if h.exact else '+'} (unit {h.unit})"
            for h in report.top_ids[:5]))
    return out


def _limits_text(report: LimitsReport) -> list[str]:
    one = (f", host {report.host_index}: its {report.local_devices} chip(s)"
           if report.host_index is not None else "")
    out = [f"limits per stacked table (quantile {report.quantile:g}, headroom "
           f"{report.headroom:g}, {report.steps} step(s){one}):"]
    rows = [("stack", "observed ids/unique", "current", "dropped", "suggested", "dropped",
             "coo buffer/device")]
    for s in report.stacks:
        now, later = s.current, s.suggested
        total = sum(d.ids for d in now.drops) or 1
        rows.append((
            s.stack, f"{s.observed_max_ids}/{s.observed_max_unique_ids}",
            f"{now.max_ids_per_partition}/{now.max_unique_ids_per_partition}",
            f"{now.dropped} ({_pct(now.dropped / total)})",
            f"{later.max_ids_per_partition}/{later.max_unique_ids_per_partition}"
            if later else "-",
            f"{later.dropped} ({_pct(later.dropped / total)})" if later else "-",
            f"{later.coo_buffer_size_per_device if later else now.coo_buffer_size_per_device}"))
    out += _table(rows)
    if report.failed_steps:
        out.append(f"  failed steps: {report.failed_steps} of {report.steps} at the current limits "
                   f"(TensorFlow stops a step over a limit; {report.ids_in_failed_steps:,} ids in "
                   "them): " + ", ".join(
                       f"{s.stack} {s.current.failed_steps} (SparseCore(s) "
                       f"{spans(s.current.over_limit_sparse_cores)})"
                       for s in report.stacks if s.current.failed_steps))
    return out


def _what_if_text(variants: Sequence[Variant]) -> list[str]:
    rows = [["", *(v.name for v in variants)]]
    data = [v.row() for v in variants]

    def line(label: str, get: Callable[[dict[str, Any]], str]) -> None:
        rows.append([label, *(get(d) for d in data)])

    if "slice" in data[0]:
        for key, label in (("chips", "chips"), ("devices", "devices"), ("hosts", "hosts"),
                           ("sparse_cores", "SparseCores")):
            rows.append([label, *(str(d["slice"][key]) for d in data)])
    line("fullest unit", lambda d: format_size(d["memory_fullest_bytes"]))
    line("fits", lambda d: "yes" if d["fits"] else "NO")
    line("load units", lambda d: str(d["units"]))
    line("max/mean", lambda d: f"{d['max_over_mean']:.3f}")
    line("total variation", lambda d: f"{d['total_variation']:.3f}")
    line("hottest p99 ids", lambda d: str(d["hottest_p99_ids"]))
    if "dropped_at_current_limits" in data[0]:
        line("stacks", lambda d: str(d["stacks"]))
        line("dropped (current)", lambda d: str(d["dropped_at_current_limits"]))
        if any(v.limits is not None and v.limits.mode == "tensorflow" for v in variants):
            # only TensorFlow fails a step over a limit (jax-tpu-embedding drops instead)
            line("failed steps (current)", lambda d: str(d["failed_steps_at_current_limits"]))
    return ["what-if:", *_table(rows)]


def format_text(plan: Plan) -> str:
    """The plan for a terminal: sample, memory, load, limits, what-if, findings, gate."""
    out = _sample_text(plan)
    if plan.topology is not None:
        out.append(f"slice: {plan.topology.describe()}")
    out += [""] + _memory_text("memory", plan.memory)
    for sub in plan.memory.breakdown:
        out += _memory_text(f"memory per {sub.level}", sub)
    if plan.memory_at_suggested is not None:
        fullest = plan.memory_at_suggested.fullest
        out.append(f"  at the suggested limits: fullest {plan.memory_at_suggested.level} "
                   f"{format_size(fullest.total) if fullest else '0 bytes'}")
    for report in plan.load.values():
        out += [""] + _load_text(report)
    if plan.limits is not None:
        out += [""] + _limits_text(plan.limits)
    if len(plan.variants) > 1:
        out += [""] + _what_if_text(plan.variants)
    out.append("")
    for d in plan.findings:
        where = (f"{d.path}:{d.line}:{d.column}: " if d.path and d.line
                 else f"{d.path}: " if d.path else "")
        out.append(f"{where}{d.severity}[{d.rule}] {d.message}")
        if d.hint:
            out.append(f"  hint: {d.hint}")
    verdict = ("gate: passed" if not plan.failed
               else "gate: FAILED - " + "; ".join(plan.failed))
    out.append(f"{verdict} (--fail-on {plan.gate})")
    return "\n".join(out) + "\n"
