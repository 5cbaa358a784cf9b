"""The text `tpuemb simulate` prints for a run summary: one table per run, columns aligned.

Both functions take the JSON-ready summaries of :meth:`~.synthetic.SyntheticRun.summary` and
:meth:`~.multiworker.MultiWorkerRun.summary` with the command's ``config`` and ``out_dir`` keys
added, so the text and ``summary.json`` always show the same numbers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tpuemb_cfg.base.errors import printable, printable_values
from tpuemb_cfg.base.units import format_size

__all__ = ["plan_text", "run_text", "workers_text"]


def _per_host(per_step: list[list[int]]) -> str:
    """Mean count per step for each host: ``h0 12.5, h1 11.0`` (just the number for one host)."""
    if not per_step:
        return "-"
    hosts = len(per_step[0])
    means = [sum(step[h] for step in per_step) / len(per_step) for h in range(hosts)]
    if hosts == 1:
        return f"{means[0]:.1f}"
    return ", ".join(f"h{h} {mean:.1f}" for h, mean in enumerate(means))


def run_text(summary: Mapping[str, Any], tables_path: str, plot: str | None = None) -> str:
    """The text of a single-worker run: loss, then one row per table; names the files written."""
    summary = printable_values(summary)  # table names are the configuration's, not commands
    tables_path, plot = printable(tables_path), None if plot is None else printable(plot)
    loss = summary["loss"]
    lines = [
        f"tpuemb simulate: {summary['steps']} steps of synthetic data on {summary['config']} "
        f"(seed {summary['seed']})",
    ]
    steps = summary.get("recorded_steps") or list(range(len(loss)))  # a long run: sampled
    if loss:
        lines.append(f"loss: {loss[0]:.4f} (step 0) -> {loss[-1]:.4f} (step {steps[-1]})")
    lines.extend(_rate_lines(summary.get("learning_rates", []), summary.get("recorded_steps")))
    header = ("table", "optimizer", "rows touched/step", "update norm first -> last",
              "ids/step per host", "unique ids/step per host")
    rows: list[tuple[str, ...]] = [header]
    for name, table in summary["tables"].items():
        touched = table["rows_touched"]
        norms = table["update_norm"]
        rows.append((
            name,
            table["optimizer"],
            f"{sum(touched) / max(len(touched), 1):.1f}",
            f"{_norm(norms[0])} -> {_norm(norms[-1])}" if norms else "-",
            _per_host(table["ids_per_host"]),
            _per_host(table["unique_ids_per_host"]),
        ))
    lines.extend(_table(rows))
    lines.append(_written(tables_path, summary))
    if plot is not None:
        lines.append(f"plot written to {plot}")
    return "\n".join(lines)


def _norm(value: float | None) -> str:
    """An update norm of the summary (None: not finite, as JSON holds it)."""
    return "not finite" if value is None else f"{value:.4g}"


def _rate_lines(tags: list[Mapping[str, Any]], recorded: list[int] | None = None
                ) -> list[str]:
    """Per dynamic tag: its first and last value, its range and where it comes from;
    ``recorded``: the step of each value (None: every step)."""
    lines = []
    for tag in tags:
        steps = recorded if recorded is not None else range(len(tag["per_step"]))
        values = [(step, v) for step, v in zip(steps, tag["per_step"], strict=True)
                  if v is not None]
        users = ", ".join(tag["used_by"])
        low = min((v for _, v in values), default=None)
        high = max((v for _, v in values), default=None)
        if low is None:
            shown = "no step recorded"
        elif low == high:
            shown = f"{low:.6g} at every step"
        else:
            shown = (f"{values[0][1]:.6g} (step {values[0][0]}) -> {values[-1][1]:.6g} "
                     f"(step {values[-1][0]}), min {low:.6g}, max {high:.6g}")
        lines.append(f"learning rate tag {tag['tag']} ({users}): {shown}; from {tag['source']}")
    return lines


def workers_text(summary: Mapping[str, Any]) -> str:
    """The text of a multi-worker run: counts, one row per table, one row per worker, hangs."""
    summary = printable_values(summary)  # table names are the configuration's, not commands
    if summary["mode"] == "sync_replicas":
        tokens = summary["init_tokens"]
        how = (f"sync replicas, R = {summary['replicas_to_aggregate']} of N = "
               f"{summary['workers']}, init tokens {'R' if tokens == -1 else tokens}")
    else:
        how = f"DropStale, max staleness {summary['max_staleness']}, N = {summary['workers']}"
    grads = summary["gradients"]
    lines = [
        f"tpuemb simulate: {summary['workers']} worker(s) x {summary['steps_per_worker']} "
        f"gradients on {summary.get('config', '<config>')} ({how}, delay {summary['delay']}, "
        f"seed {summary['seed']})",
        f"global step {summary['global_step']} after {summary['ticks']} ticks; gradients: "
        f"{grads['computed']} computed, {grads['applied']} applied, {grads['dropped_stale']} "
        f"dropped stale, {grads['pending']} pending",
        "staleness (updates behind at arrival): " + ", ".join(
            f"{k}: {v}" for k, v in summary["staleness_histogram"].items()),
    ]
    if summary["mode"] == "drop_stale":
        lines.append(f"stale_counter {summary['stale_counter']} (staleness percentage "
                     f"{summary['staleness_percentage']:.3f})")
    for line in summary.get("learning_rate_schedules", []):
        lines.append(f"learning rate {line}")
    loss = summary["loss"]
    if loss:
        lines.append(f"loss: {loss[0]:.4f} (first gradient) -> {loss[-1]:.4f} (last)")
    rows: list[tuple[str, ...]] = [(
        "table", "optimizer", "received", "applied", "dropped stale", "pending", "updates",
        "averaged/update", "update norm first -> last")]
    for name, table in summary["tables"].items():
        averaged = table["averaged_per_update"]
        norms = table["update_norm"]
        rows.append((
            name, table["optimizer"], str(table["received"]), str(table["applied"]),
            str(table["dropped_stale"]), str(table["pending"]), str(table["updates"]),
            f"{sum(averaged) / len(averaged):.2f}" if averaged else "-",
            f"{norms[0]:.4g} -> {norms[-1]:.4g}" if norms else "-",
        ))
    lines.extend(_table(rows))
    rows = [("worker", "computed", "applied", "dropped stale", "pending", "staleness", "at end")]
    for worker in summary["per_worker"]:
        rows.append((
            f"w{worker['worker']}", str(worker["computed"]), str(worker["applied"]),
            str(worker["dropped_stale"]), str(worker["pending"]),
            " ".join(f"{k}:{v}" for k, v in worker["staleness_histogram"].items()) or "-",
            "waiting for a token" if worker["waiting_for_token"] else "done",
        ))
    lines.extend(_table(rows))
    if summary["waiting_for_token"] or summary["chief_short"]:
        short = ", ".join(f"{name!r} holds {count}" for name, count in
                          summary["chief_short"].items())
        lines.append(
            "at the end: "
            + (f"worker(s) {', '.join(f'w{w}' for w in summary['waiting_for_token'])} wait for "
               "a token" if summary["waiting_for_token"] else "no worker waits")
            + (f"; the chief waits for {summary['replicas_to_aggregate']} gradients per table "
               f"({short})" if short else "")
            + " - TensorFlow would hang here"
        )
    if "out_dir" in summary:
        lines.append(_written(os.path.join(summary["out_dir"], "tables.npz"), summary))
    return "\n".join(lines)


def plan_text(info: Mapping[str, Any]) -> str:
    """The text of ``tpuemb simulate --dry-run``: the run, its tables and the memory estimate
    (``info``: what ``--dry-run --json`` prints, for a synthetic run, a multi-worker run - with
    ``workers`` - or a replay - with ``batches``)."""
    from tpuemb_cfg.executor.memory import describe_parts

    info = printable_values(info)
    memory = info["memory"]
    parts = memory["estimate"]
    how = f"seed {info['seed']}, engine {info['engine']}, backend {info['backend']}"
    if "batches" in info:
        lines = [
            f"tpuemb simulate --dry-run: replay of the {info['steps']} recorded steps of "
            f"{info['batches']} on {info['config']} ({how})",
            f"batches: {format_size(info['batches_bytes'])}"
            + (f"; initial tables and slots from {info['init']}" if info.get("init") else "")
            + "; the largest step's ids per table, every one counted as distinct",
        ]
    else:
        lines = [
            f"tpuemb simulate --dry-run: {info['steps']} steps"
            + (" per worker" if "workers" in info else "")
            + f" of synthetic data on {info['config']} ({how})",
        ]
        if "workers" in info:
            if info["mode"] == "sync_replicas":
                tokens = info["init_tokens"]
                lines.append(f"workers: {info['workers']}, sync replicas, R = "
                             f"{info['replicas_to_aggregate']}, init tokens "
                             f"{'R' if tokens == -1 else tokens}, delay {info['delay']}")
            else:
                lines.append(f"workers: {info['workers']}, DropStale, max staleness "
                             f"{info['max_staleness']}, delay {info['delay']}")
        lines.append(
            f"data: ids {info['ids']}, sequence lengths {info['sequence_lengths']}; tables.npz: "
            + {"all": "every table and slot", "touched": "the touched rows",
               "none": "not written"}[info["tables_written"]])
    rows: list[tuple[str, ...]] = [("table", "rows x dimension", "optimizer", "ids/step",
                                    "distinct ids/step", "table + slots")]
    for table in info["tables"]:
        rows.append((table["name"], f"{table['vocabulary']:,} x {table['dimension']}",
                     table["optimizer"], f"{table['ids_per_step']:,.1f}",
                     f"{table['unique_ids_per_step']:,.1f}", format_size(table["bytes"])))
    lines.extend(_table(rows))
    lines.append(f"memory: about {describe_parts(parts)} at the peak; the tables and slots in "
                 f"full: {format_size(parts['tables_and_slots_whole_bytes'])}")
    limit = memory["limit_bytes"]
    if limit is None:
        lines.append("limit: unknown here (no MemAvailable); the run would not be checked")
    else:
        which = ("--max-memory" if memory["limit"] != "default"
                 else "80% of the memory available, plus the process")
        lines.append(f"limit: {format_size(limit)} ({which}): "
                     + ("the run fits" if memory["fits"] else "the run would be refused"))
    if info.get("save_batches") is not None:
        lines.append(f"--save-batches {info['save_batches']}: about "
                     f"{format_size(info['save_batches_bytes'])}")
    lines.append("nothing was run or written (--dry-run)")
    return "\n".join(lines)


def _written(tables_path: str, summary: Mapping[str, Any]) -> str:
    """Which files the run wrote (``tables_written``: all, touched or none)."""
    tail = f"summary in {os.path.join(summary['out_dir'], 'summary.json')}"
    which = summary.get("tables_written", "all")
    if which == "none":
        return f"tables not written (--tables none); {tail}"
    if which == "touched":
        rows = sum(summary.get("rows_written", {}).values())
        return (f"the {rows:,} touched rows of the tables and slots written to {tables_path} "
                f"(every other row keeps its initial value); {tail}")
    return f"tables and slots written to {tables_path}; {tail}"


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    """Left-aligned columns two spaces apart, a dashed line under the header row."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines
