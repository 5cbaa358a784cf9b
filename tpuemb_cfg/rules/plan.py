"""``tpuemb plan``'s findings (PLAN): rules of the one registry, run on the planner's facts.

The planner (``tpuemb_cfg.planner``, a higher layer) measures; it hands each measurement here as
a plain fact record (:class:`OverMemory`, :class:`LimitDrops`, :class:`SuggestedDrops`,
:class:`LoadImbalance`), and :func:`plan_findings` runs every ``target="plan"`` rule on each
fact in turn, so the findings come out in the order of the facts. A rule decides whether the
fact is a finding (a unit over its capacity, a stack that drops, a load above the threshold),
and words it. This module never imports the planner.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from tpuemb_cfg.base.units import format_size
from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.rules._registry import RULES, PlanContext, Rule, rule, run_on_facts

__all__ = ["LimitDrops", "LoadImbalance", "OverMemory", "PlanFact", "SuggestedDrops",
           "plan_findings", "plan_rules"]


# --- the facts ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class OverMemory:
    """The fullest unit of one memory level (``planner.memory.MemoryReport``) with a capacity:
    ``level`` ("host", "chip", "device"), the unit's ``index``, its ``total`` bytes and
    ``parts`` (name, bytes) in report order, the ``capacity``, how many of the ``units`` are
    ``over`` it, the ``largest`` tables (name, bytes; the bytes are shown when ``sized``), the
    field of the largest table (``table_path``) and the fix (``hint``)."""

    level: str
    index: int
    total: int
    parts: tuple[tuple[str, int], ...]
    capacity: int
    over: int
    units: int
    largest: tuple[tuple[str, int], ...]
    sized: bool
    table_path: str
    hint: str | None


@dataclass(frozen=True)
class LimitDrops:
    """One stacked table at its current limits: ``dropped`` of the sample's ``total`` ids
    (``worst_table`` with ``worst_share`` of them), ``failed_steps`` of ``steps`` (the
    SparseCores ``over_cores`` got more than a limit), the limits, what the sample needs, the
    limit's field (``path``) and the suggested pair in a setting the API reads (``hint``)."""

    stack: str
    dropped: int
    total: int
    worst_table: str
    worst_share: float
    failed_steps: int
    steps: int
    over_cores: str
    max_ids: int
    max_unique_ids: int
    observed_ids: int
    observed_unique_ids: int
    path: str
    hint: str | None


@dataclass(frozen=True)
class SuggestedDrops:
    """One stacked table at its suggested limits (``max_ids`` / ``max_unique_ids``, at
    ``quantile`` of the per-step maxima): ``dropped`` ids, ``failed_steps``, the sample's
    largest steps, the COO buffer per device and the one a device needed, the limit's field and
    the two fixes (``limits_hint``: the sample's maxima; ``buffer_hint``: a larger buffer)."""

    stack: str
    dropped: int
    failed_steps: int
    max_ids: int
    max_unique_ids: int
    quantile: float
    observed_ids: int
    observed_unique_ids: int
    buffer: int
    required_buffer: int
    path: str
    limits_hint: str | None
    buffer_hint: str | None


@dataclass(frozen=True)
class LoadImbalance:
    """The load of the configured layout: ``level`` ("host" or "sparsecore"), the ``hottest``
    unit of ``units`` at ``max_over_mean`` times the mean (``total_variation``), the
    ``threshold``, the largest table on the hottest unit (``top``), the host ``strategy``
    (legacy) and the field to point at (``path``)."""

    level: str
    hottest: int
    units: int
    max_over_mean: float
    total_variation: float
    threshold: float
    top: str | None
    strategy: str
    path: str


PlanFact = OverMemory | LimitDrops | SuggestedDrops | LoadImbalance


def plan_rules() -> list[Rule]:
    """The registered ``target="plan"`` rules, in id order."""
    return [RULES[rule_id] for rule_id in sorted(RULES) if RULES[rule_id].target == "plan"]


def plan_findings(facts: Iterable[PlanFact], *, options: dict[str, object] | None = None,
                  ) -> list[Diagnostic]:
    """Every plan rule on each fact in turn: the findings in the order of the facts."""
    return run_on_facts(plan_rules(), facts, PlanContext, options=options)


# --- memory -------------------------------------------------------------------------------------

#: Rule id of an out-of-memory finding, by (level, the part that tells the memory apart); the
#: first match wins, else a host is PLAN001 and any other level PLAN002.
_MEMORY_RULES = (
    ("host", "tables", "PLAN001"),
    ("chip", "tables", "PLAN002"),
    ("host", "host_tables", "PLAN003"),
    ("chip", "state", "PLAN004"),
    ("device", "tables", "PLAN002"),
)
_MEMORY = {"PLAN001": "host memory", "PLAN002": "HBM", "PLAN003": "host memory",
           "PLAN004": "HBM"}
_INIT_ON_HOST = "sparse_core_config.initialize_tables_on_host"


def _memory_rule(fact: OverMemory) -> str:
    names = {name for name, _ in fact.parts}
    fallback = "PLAN001" if fact.level == "host" else "PLAN002"
    return next((rule_id for level, part, rule_id in _MEMORY_RULES
                 if level == fact.level and part in names), fallback)


def _over_memory(ctx: PlanContext, rule_id: str) -> Iterator[Diagnostic]:
    fact = ctx.fact
    if (not isinstance(fact, OverMemory) or fact.total <= fact.capacity
            or _memory_rule(fact) != rule_id):
        return
    parts = ", ".join(f"{name} {format_size(size)}" for name, size in fact.parts if size)
    top = ", ".join(f"{name!r} {format_size(size)}" if fact.sized else repr(name)
                    for name, size in fact.largest[:3])
    largest = f"; largest: {top}" if top else ""
    path = _INIT_ON_HOST if rule_id == "PLAN003" else fact.table_path
    yield ctx.diag(
        path,
        f"{fact.level} {fact.index} needs {format_size(fact.total)} ({fact.total} bytes: "
        f"{parts}), more than its {format_size(fact.capacity)} of {_MEMORY[rule_id]} "
        f"({fact.over} of {fact.units} {fact.level}s over){largest}",
        hint=fact.hint or None)


@rule("PLAN001", "error", "a host is over its memory (legacy tables, slots, snapshots)",
      target="plan")
def host_over_memory(ctx: PlanContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports the fullest host of a legacy configuration when its share of the tables, their
    optimizer slots and snapshots needs more than `--host-memory` (under the configured
    `sharding_strategy` and host count), with its bytes by part, how many hosts are over and
    the largest tables. Only reported when `--host-memory` is given.

    ## Why is this bad?
    Each host keeps its rows of every table in memory; a host over its memory is killed (or
    swaps) when the tables are built, before the first step.

    ## Example
    ```
    tpuemb plan config.pbtxt --ids batches.npz --host-memory 1G
    config.pbtxt:36:1: error[PLAN001] host 0 needs 1.5G (...), more than its 1G of host memory
    ```

    ## Use instead
    Use the fewest hosts the hint names (`num_hosts`, `--compare hosts=N`), an optimizer with
    fewer slots, a smaller table, or hosts with more memory.

    Spec: plan.md section gate
    """
    return _over_memory(ctx, "PLAN001")


@rule("PLAN002", "error", "a chip is over its HBM (SparseCore tables, slots, buffers, "
      "activations)", target="plan")
def chip_over_hbm(ctx: PlanContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports the fullest chip of a SparseCore configuration when its stacked tables, their
    optimizer slots, the preprocessing buffers and the activations need more than its HBM
    (`--hbm`, else the chip kind's), with its bytes by part, how many chips are over and the
    largest tables.

    ## Why is this bad?
    The tables are placed in HBM when the model is built; a chip over its HBM fails there with
    an out-of-memory error, before the first step.

    ## Example
    ```
    tpuemb plan spec.py --ids batches.npz --topology v5p-8
    spec.py:12:1: error[PLAN002] chip 0 needs 120G (...), more than its 95G of HBM
    ```

    ## Use instead
    Use more chips (`--compare topology=...` shows how many fit), an optimizer with fewer
    slots, a smaller table, or lower `max_ids_per_partition` (smaller buffers).

    Spec: plan.md section gate
    """
    return _over_memory(ctx, "PLAN002")


@rule("PLAN003", "error", "a host is over its memory building the tables "
      "(initialize_tables_on_host)", target="plan")
def host_over_memory_building(ctx: PlanContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports the fullest host of a TensorFlow SparseCore configuration with
    `initialize_tables_on_host` when the tables it builds before sharding them need more than
    `--host-memory`, at the setting.

    ## Why is this bad?
    With `initialize_tables_on_host` TensorFlow materializes each table on the host and only
    then copies it to the chips: the host needs the whole tables at once and runs out of memory
    while the model is built.

    ## Example
    ```
    sparse_core_config = SparseCoreEmbeddingConfig(initialize_tables_on_host=True)
    ```

    ## Use instead
    ```
    sparse_core_config = SparseCoreEmbeddingConfig(initialize_tables_on_host=False)
    ```
    or hosts with more memory.

    Spec: plan.md section gate
    """
    return _over_memory(ctx, "PLAN003")


@rule("PLAN004", "error", "a TPU device is over its HBM (legacy tables, slots, padding)",
      target="plan")
def device_over_hbm(ctx: PlanContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports the fullest TPU device of a legacy configuration when its share of its host's
    state variables (tables, slots and gradient accumulators) with the rows padded as
    TensorFlow pads them needs more than the device's HBM, with how many devices are over.

    ## Why is this bad?
    A host's rows are spread over its `num_tensor_cores / num_hosts` devices; a device over its
    HBM fails when TensorFlow places the embedding variables, before the first step.

    ## Example
    ```
    num_hosts: 1
    num_tensor_cores: 1
    ```
    with tables larger than one device's HBM.

    ## Use instead
    ```
    num_hosts: 4
    num_tensor_cores: 16
    ```
    More hosts or tensor cores, an optimizer with fewer slots, or smaller tables.

    Spec: plan.md section gate
    """
    return _over_memory(ctx, "PLAN004")


# --- limits -------------------------------------------------------------------------------------

@rule("PLAN010", "error", "a stacked table drops ids (or, on TensorFlow, fails steps) at its "
      "current limits", target="plan")
def drops_at_limits(ctx: PlanContext) -> Iterator[Diagnostic]:
    """## What it does
    Runs the SparseCore preprocessing on the sample at each stacked table's current
    `max_ids_per_partition` / `max_unique_ids_per_partition` and reports a stack that drops
    ids, or (TensorFlow) a step that fails because a SparseCore received more than a limit,
    with the share of the sample dropped, the table that loses most, and what the sample needs.
    The hint gives the suggested pair in a setting the spec's API reads.

    ## Why is this bad?
    A dropped id contributes nothing to the activation and gets no gradient: training silently
    ignores part of the input. TensorFlow stops the step instead, whatever `allow_id_dropping`
    says.

    ## Example
    ```
    max_ids_per_partition=64, max_unique_ids_per_partition=64
    ```
    while the sample's steps need 180 / 120.

    ## Use instead
    ```
    max_ids_per_partition=216, max_unique_ids_per_partition=144
    ```
    (the suggested pair: the sample's per-step maxima at `--quantile`, times `--headroom`).

    Spec: plan.md section gate
    """
    fact = ctx.fact
    if not isinstance(fact, LimitDrops) or not (fact.dropped or fact.failed_steps):
        return
    failed = (f"fails {fact.failed_steps} of {fact.steps} step(s) (TensorFlow stops the step "
              "whatever allow_id_dropping says; SparseCore(s) "
              f"{fact.over_cores} received more than a limit from one SparseCore) and so "
              if fact.failed_steps else "")
    yield ctx.diag(
        fact.path,
        f"stacked table {fact.stack!r} {failed}drops {fact.dropped} of {fact.total} ids of the "
        f"sample ({fact.dropped / fact.total:.2%}; most in table {fact.worst_table!r}, "
        f"{fact.worst_share:.2%}) at max_ids_per_partition {fact.max_ids} / "
        f"max_unique_ids_per_partition {fact.max_unique_ids}; the sample needs "
        f"{fact.observed_ids} / {fact.observed_unique_ids}",
        hint=fact.hint)


@rule("PLAN011", "warning", "a stacked table still drops ids at the suggested limits (the "
      "quantile left larger steps over them, or the COO buffer is short)", target="plan")
def drops_at_suggested(ctx: PlanContext) -> Iterator[Diagnostic]:
    """## What it does
    Runs the preprocessing again at the suggested limits and reports a stacked table that
    still drops ids there: either `--quantile` below 1 left the sample's largest steps over the
    suggested limits (the hint gives the sample's maxima), or the limits cover every step but
    the COO buffer per device is too short for them (the hint gives the buffer it needs).

    ## Why is this bad?
    Raising the limits to the suggested pair would not stop the drops: the ids of the largest
    steps, or those past the end of the buffer, are still dropped.

    ## Example
    ```
    tpuemb plan spec.py --ids batches.npz --quantile 0.9
    ```
    with a few steps far above the 90th percentile.

    ## Use instead
    ```
    tpuemb plan spec.py --ids batches.npz --quantile 1
    ```
    or set the COO buffer size the hint names.

    Spec: plan.md section gate
    """
    fact = ctx.fact
    if not isinstance(fact, SuggestedDrops) or not fact.dropped:
        return
    pair = f"{fact.max_ids} / {fact.max_unique_ids}"
    failed = f" and fails {fact.failed_steps} step(s)" if fact.failed_steps else ""
    if fact.max_ids < fact.observed_ids or fact.max_unique_ids < fact.observed_unique_ids:
        yield ctx.diag(
            fact.path,
            f"stacked table {fact.stack!r} still drops {fact.dropped} ids{failed} at the "
            f"suggested limits {pair}: they cover quantile {fact.quantile:g} of the per-step "
            f"maxima, below the sample's largest steps ({fact.observed_ids} / "
            f"{fact.observed_unique_ids})", hint=fact.limits_hint)
        return
    yield ctx.diag(
        fact.path,
        f"stacked table {fact.stack!r} still drops {fact.dropped} ids{failed} at the suggested "
        f"limits {pair}: the COO buffer of {fact.buffer} ids per device is short (a device "
        f"needed {fact.required_buffer})", hint=fact.buffer_hint)


# --- load ---------------------------------------------------------------------------------------

@rule("PLAN020", "warning", "a SparseCore serves more than the threshold times the mean load",
      target="plan")
def sparsecore_imbalance(ctx: PlanContext) -> Iterator[Diagnostic]:
    """## What it does
    Counts the ids each SparseCore receives over the sample after stacking and reports the
    hottest one when it serves more than the threshold (the `--fail-on imbalance>X` gate's X,
    else 1.5) times the mean, with the largest table it serves.

    ## Why is this bad?
    Every SparseCore waits for the slowest at each step: the hottest one sets the step time,
    and its limits and buffers must be sized for its load.

    ## Example
    ```
    tpuemb plan spec.py --ids batches.npz --fail-on 'imbalance>1.3'
    ```
    with one table whose few hot ids all land on one SparseCore.

    ## Use instead
    Spread the hot table's ids (hash them, or split the table), or change the stacking
    (`--compare stacking` shows the load without it).

    Spec: plan.md section gate
    """
    fact = ctx.fact
    if (not isinstance(fact, LoadImbalance) or fact.level == "host"
            or not fact.max_over_mean > fact.threshold):
        return
    yield ctx.diag(
        fact.path,
        f"{fact.level} {fact.hottest} serves {fact.max_over_mean:.2f}x the mean load, above the "
        f"threshold {fact.threshold} (total variation {fact.total_variation:.3f}); its largest "
        f"table there is {fact.top!r}",
        hint="spread the hot table's ids (hash them, or split the table) or change the "
             "stacking")


@rule("PLAN021", "warning", "a host serves more than the threshold times the mean load",
      target="plan")
def host_imbalance(ctx: PlanContext) -> Iterator[Diagnostic]:
    """## What it does
    Counts the ids each host of a legacy configuration receives over the sample under the
    configured `sharding_strategy` and reports the hottest host when it serves more than the
    threshold (the `--fail-on imbalance>X` gate's X, else 1.5) times the mean.

    ## Why is this bad?
    Every host waits for the slowest at each step: the hottest host sets the step time.

    ## Example
    ```
    sharding_strategy: DIV_DEFAULT
    ```
    with ids that are sequential and hot at the start of a table.

    ## Use instead
    ```
    sharding_strategy: MOD
    ```
    (`tpuemb plan` shows both strategies side by side), or hash the hot table's ids.

    Spec: plan.md section gate
    """
    fact = ctx.fact
    if (not isinstance(fact, LoadImbalance) or fact.level != "host"
            or not fact.max_over_mean > fact.threshold):
        return
    other = "DIV_DEFAULT" if fact.strategy == "MOD" else "MOD"
    yield ctx.diag(
        fact.path,
        f"host {fact.hottest} of {fact.units} serves {fact.max_over_mean:.2f}x the mean load "
        f"under {fact.strategy} sharding, above {fact.threshold:g} (total variation "
        f"{fact.total_variation:.3f}); its largest table there is {fact.top!r}",
        hint=f"compare sharding_strategy {other} (tpuemb plan shows both), or hash the hot "
             "table's ids")
