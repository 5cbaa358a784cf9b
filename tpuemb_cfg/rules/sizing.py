"""Sizing (``SIZE``, ``validation-rules.md`` section 2.8 with the quantities of section 1.6).

All state is float32. With V = ``vocabulary_size``, D = ``dimension``, S = the number of state
variables (parameters, slots, and the hidden gradient accumulator when accumulation is effective)
and N = ``num_hosts``, host h holds ``floor(V / N) + (1 if h < V mod N else 0)`` rows of a table:

- logical bytes: ``rows * D * 4 * S``;
- memory estimate: rows padded to a multiple of 8 floats, ``rows * ceil(D / 8) * 8 * 4 * S``, or
  with effective low-dimensional packing ``ceil(rows * D / 8) * 8 * 4 * S``.

The numbers come from :mod:`tpuemb_cfg.derived`; these rules only present them.
"""

from __future__ import annotations

from collections.abc import Iterator

from tpuemb_cfg.derived import HostRange, host_sizes
from tpuemb_cfg.rules._registry import Context, Diagnostic, rule

_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def human_bytes(n: int) -> str:
    """``"12,582,912 bytes (12.0 MiB)"``; plain bytes below 1 KiB."""
    for unit, size in _UNITS:
        if n >= size:
            return f"{n:,} bytes ({n / size:.1f} {unit})"
    return f"{n:,} bytes"


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
