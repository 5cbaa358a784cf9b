"""Sizing (``SIZE``, ``validation-rules.md`` section 2.8 with the quantities of section 1.6).

All state is float32. With V = ``vocabulary_size``, D = ``dimension``, S = the number of state
variables (parameters, slots, and the hidden gradient accumulator when accumulation is effective)
and N = ``num_hosts``, host h holds ``floor(V / N) + (1 if h < V mod N else 0)`` rows of a table:

- logical bytes: ``rows * D * 4 * S``;
- memory estimate: rows padded to a multiple of 8 floats, ``rows * ceil(D / 8) * 8 * 4 * S``, or
  with effective low-dimensional packing ``ceil(rows * D / 8) * 8 * 4 * S``.

Per TPU device (what ``num_tensor_cores`` counts), the fullest host's estimate is split over the
host's ``num_tensor_cores / num_hosts`` devices and compared with the high-bandwidth memory of a
device of each known TPU generation (``derived.TPU_DEVICE_MEMORY``). SIZE004 does this by
default: with no generation chosen (``tpu = "v4"`` under ``[tool.tpuemb]``, or ``--tpu``) the
budget is the largest device memory of any generation, so it warns exactly when the tables fit on
no TPU at all, and never about a configuration some TPU can hold.

The numbers come from :mod:`tpuemb_cfg.model.derived`; these rules only present them.
"""

from __future__ import annotations

from collections.abc import Iterator

from tpuemb_cfg.base.units import format_size
from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.model.derived import TPU_DEVICE_MEMORY, HostRange, device_share, host_sizes
from tpuemb_cfg.rules._facts import platform_doc
from tpuemb_cfg.rules._registry import Context, rule


def human_bytes(n: int) -> str:
    """``"12,582,912 bytes (12 MiB)"`` (``units.format_size`` in brackets); plain bytes below
    1 KiB."""
    return f"{n:,} bytes ({format_size(n)})" if n >= 1024 else f"{n:,} bytes"


def _hosts(r: HostRange) -> str:
    return f"host {r.first}" if r.first == r.last else f"hosts {r.first}-{r.last}"


def _unknown_tables(ctx: Context) -> list[str]:
    sizes = ctx.derived.table_sizes
    return [ctx.table_label(i) for i, _, _ in ctx.tables() if i >= len(sizes) or sizes[i] is None]


@rule("SIZE001", "info", "bytes per table", on_request=True)
def bytes_per_table(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    States the memory of each table: the logical size `V * D * 4 * S` bytes (V rows, D columns,
    float32, S state variables: parameters, slots and the hidden gradient accumulator) and an
    estimate of what the TPU allocates (rows padded to a multiple of 8 floats, or packed when
    low-dimensional packing is effective). Reported only on request.

    ## Why is this bad?
    It is a derived fact: it shows which tables dominate memory. The estimate is an estimate;
    the runtime's real layout is not public.

    ## Example
    An `adam` table of 1,000,000 rows and dimension 64 with accumulation has 4 state variables:
    1,000,000 * 64 * 4 * 4 = 1,024,000,000 bytes.

    ## Use instead
    Nothing to change.

    Spec: validation-rules.md section 2.8
    """
    sizes = ctx.derived.table_sizes
    for i, _, path in ctx.tables():
        size = sizes[i] if i < len(sizes) else None
        label = ctx.table_label(i)
        if size is None:
            yield ctx.diag(
                path,
                f"{label}: size unknown (the state variables are unknown: no algorithm, or a "
                "user program without a usable output count)",
            )
            continue
        states = size.state_variables
        layout = "packed rows" if size.packed else "rows padded to 8 floats"
        yield ctx.diag(
            path,
            f"{label}: {human_bytes(size.logical_bytes)} logical, about "
            f"{human_bytes(size.estimate_bytes)} on the TPU (estimate, {layout}); "
            f"{len(states)} state variable(s): {', '.join(states)}",
        )


@rule("SIZE002", "info", "bytes per host", on_request=True)
def bytes_per_host(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    States the memory each host holds, summed over the tables (each table is sharded row-wise
    over `num_hosts` hosts; the first `V mod N` hosts hold one row more), logical bytes and the
    padded estimate, largest host first. Hosts holding the same amount are grouped. Reported
    only on request.

    ## Why is this bad?
    It is a derived fact: it shows whether the tables fit the memory of one host. Tables whose
    state variables are unknown are left out and named.

    ## Example
    Two hosts and one SGD table of 3 rows and dimension 8 with accumulation (S = 2: parameters
    and gradient_accumulators): host 0 holds 2 rows (2 * 8 * 4 * 2 = 128 bytes), host 1 holds
    1 row (64 bytes).

    ## Use instead
    Nothing to change; compare with SIZE003's budget.

    Spec: validation-rules.md section 2.8
    """
    if ctx.derived.num_hosts is None:
        yield ctx.diag(
            "",
            f"per-host sizes unknown: num_hosts is {ctx.config.num_hosts}, expected >= 1",
        )
        return
    ranges = host_sizes(ctx.config, ctx.derived)
    parts = [
        f"{_hosts(r)}: {human_bytes(r.logical_bytes)} logical, about "
        f"{human_bytes(r.estimate_bytes)} estimated"
        for r in ranges
    ]
    message = f"bytes per host ({ctx.derived.num_hosts} host(s), largest first): " + "; ".join(
        parts
    )
    unknown = _unknown_tables(ctx)
    if unknown:
        message += f"; not counted (size unknown): {', '.join(unknown)}"
    share = device_share(ctx.config, ctx.derived)
    if share is not None:
        fits = [g for g, size in TPU_DEVICE_MEMORY.items() if share.bytes <= size]
        short = [g for g in TPU_DEVICE_MEMORY if g not in fits]
        message += (
            f"; per TPU device ({share.devices_per_host} per host): about "
            f"{human_bytes(share.bytes)} of tables, "
            + (f"fits {', '.join(fits)}" if fits else "fits no known TPU generation")
            + (f", too large for {', '.join(short)}" if short and fits else "")
        )
    yield ctx.diag("", message)


@rule("SIZE003", "warning", "host over the memory budget")
def over_budget(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Only when a per-host memory budget is configured (off by default; e.g.
    `memory-budget = "16GiB"` under `[tool.tpuemb]` in pyproject.toml): reports the hosts whose
    estimated memory (SIZE002) exceeds it.

    ## Why is this bad?
    A host whose tables do not fit fails when the TPU system is initialised, after the job has
    been scheduled. The estimate pads rows like the TPU does, but the runtime's exact layout is
    not public: treat the result as a warning, not a proof.

    ## Example
    A budget of 16 GiB and two hosts that must hold 40 GiB of tables.

    ## Use instead
    More hosts (`num_hosts`), smaller tables, or an optimizer with fewer slots.

    Spec: validation-rules.md section 2.8
    """
    budget = ctx.options.get("memory_budget_bytes")
    if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
        return
    over = [r for r in host_sizes(ctx.config, ctx.derived) if r.estimate_bytes > budget]
    if not over:
        return
    worst = over[0]
    count = sum(r.last - r.first + 1 for r in over)
    listing = "; ".join(f"{_hosts(r)}: about {human_bytes(r.estimate_bytes)}" for r in over)
    yield ctx.diag(
        "",
        f"{count} host(s) exceed the per-host memory budget of {human_bytes(budget)} "
        f"(estimate, largest {human_bytes(worst.estimate_bytes)}): {listing}",
        hint="add hosts (num_hosts), shrink the largest tables, or use an optimizer with fewer "
        "slots",
    )


def _budget(ctx: Context) -> tuple[int, str]:
    """The per-device budget and what it is: the chosen generation's, else the largest."""
    generation = ctx.options.get("tpu_generation")
    if isinstance(generation, str) and generation in TPU_DEVICE_MEMORY:
        return TPU_DEVICE_MEMORY[generation], f"a TPU {generation} device"
    largest = max(TPU_DEVICE_MEMORY, key=TPU_DEVICE_MEMORY.__getitem__)
    return TPU_DEVICE_MEMORY[largest], (
        f"the largest TPU device ({largest}; no known generation has more)"
    )


@rule("SIZE004", "warning", "tables larger than a TPU device's memory")
@platform_doc
def over_device_memory(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Splits the estimated bytes of the fullest host (SIZE002) over the TPU devices attached to
    it (`num_tensor_cores / num_hosts`; a device is what `num_tensor_cores` counts) and warns
    when one device's share exceeds its high-bandwidth memory. The memory is that of the TPU
    generation named by `tpu = "v4"` under `[tool.tpuemb]` in pyproject.toml or by
    `tpuemb validate --tpu v4`, in GiB as Google's Cloud TPU pages give it:
    $size004_generations.
    Without a generation the budget is the largest of them, so the rule then reports only
    tables that fit on no TPU.

    ## Why is this bad?
    The tables, their slots and the gradient accumulators live in the devices' memory; a share
    that does not fit fails when the TPU system is initialised, after the job was scheduled.
    The estimate pads rows as the TPU does but leaves out the dense model and the runtime's
    buffers: the real need is higher, never lower.

    ## Example
    `num_hosts: 4`, `num_tensor_cores: 32` (8 devices per host) and 1 TiB of Adagrad tables
    with accumulation: each device must hold about 32 GiB, more than a v5e device's $hbm_v5e.

    ## Use instead
    More hosts and cores (`num_hosts`, `num_tensor_cores`), a generation with more memory per
    device, smaller tables, or an optimizer with fewer slots; `tpuemb validate --show-derived`
    shows every device's share and which generations hold it.

    Spec: validation-rules.md section 2.8
    """
    share = device_share(ctx.config, ctx.derived)
    if share is None:
        return
    budget, what = _budget(ctx)
    if share.bytes <= budget:
        return
    fits = [g for g, size in TPU_DEVICE_MEMORY.items() if share.bytes <= size]
    yield ctx.diag(
        "num_tensor_cores",
        f"each TPU device must hold about {human_bytes(share.bytes)} of tables (estimate: the "
        f"fullest host's tables over its {share.devices_per_host} device(s)), more than the "
        f"{human_bytes(budget)} of {what}",
        hint=(
            f"fits {', '.join(fits)}; " if fits else ""
        ) + "add hosts and cores (num_hosts, num_tensor_cores), shrink the largest tables, or "
        "use an optimizer with fewer slots",
    )

