"""The text of a SparseCore run's summary (``SparseCoreRun.summary``) and of its plan."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tpuemb_cfg.base.errors import printable, printable_values
from tpuemb_cfg.base.units import format_size

__all__ = ["plan_text", "run_text"]


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return out


def _percent(share: float) -> str:
    return f"{100.0 * share:.3g}%"


def _per_step(values: Sequence[int]) -> str:
    if len(values) <= 6:
        return " ".join(str(v) for v in values)
    return f"{' '.join(str(v) for v in values[:3])} ... {' '.join(str(v) for v in values[-2:])}"


def run_text(summary: Mapping[str, Any], header: str) -> str:
    """The report of a run: ``header``, the ids dropped per stack and per table (total, share,
    per step), the notes, and with ``compare`` the drift."""
    summary, header = printable_values(summary), printable(header)  # the spec's names
    drops = summary["drops"]
    lines = [header]
    stacks = {s["name"]: s for s in summary["stacks"]}
    lines += _table(
        ["stack", "tables", "max ids", "max unique", "ids", "dropped", "share", "counter"],
        [[name, ",".join(stacks[name]["tables"]), str(stacks[name]["max_ids_per_partition"]),
          str(stacks[name]["max_unique_ids_per_partition"]), str(d["ids"]), str(d["dropped"]),
          _percent(d["share"]), str(d.get("id_drop_counter", 0))]
         for name, d in drops["stacks"].items()])
    lines.append("")
    lines += _table(
        ["table", "ids", "dropped", "share", "dropped per step"],
        [[name, str(d["ids"]), str(d["dropped"]), _percent(d["share"]),
          _per_step(d["dropped_per_step"])] for name, d in drops["tables"].items()])
    total = drops["total"]
    per_step = summary.get("ids_per_step")
    if per_step:
        lines.append(f"ids per step (the slice's batch): {_per_step(per_step)}")
    lines.append(f"total: {total['dropped']} of {total['ids']} ids dropped "
                 f"({_percent(total['share'])}); id dropping "
                 f"{'on' if summary['allow_id_dropping'] else 'off'}")
    losses = summary.get("loss")
    if losses:
        lines.append(f"loss: {losses[0]:.5g} (step 0) -> {losses[-1]:.5g} "
                     f"(step {len(losses) - 1})")
    lines += [f"note: {note}" for note in summary.get("notes", ())]
    compare = summary.get("compare")
    if compare is not None:
        lines += ["", "drift against the same batches without dropping (no limits):"]
        rows = []
        for name, entry in compare["tables"].items():
            rows.append([name, "table", f"{entry['table']['frobenius']:.6g}",
                         f"{entry['table']['max_abs']:.6g}"])
            rows += [[name, slot, f"{d['frobenius']:.6g}", f"{d['max_abs']:.6g}"]
                     for slot, d in entry["slots"].items()]
        lines += _table(["table", "array", "frobenius", "max abs"], rows)
        steps = compare["activations"]
        if steps:
            worst = max(steps, key=lambda s: s["max_abs"])
            lines.append(
                f"activations: max abs difference {worst['max_abs']:.6g} (step "
                f"{worst['step']}); RMS {steps[0]['rms']:.6g} (step 0) -> "
                f"{steps[-1]['rms']:.6g} (step {steps[-1]['step']})")
    return "\n".join(lines)


def plan_text(info: Mapping[str, Any]) -> str:
    """A ``--dry-run``: the stacks with their limits, the tables, the run."""
    info = printable_values(info)  # the spec's names and paths, not the terminal's
    lines = [f"tpuemb simulate --dry-run: {info['run']} on {info['config']} (SparseCore, "
             f"{info['api']}; {info['slice']}); id dropping "
             f"{'on' if info['allow_id_dropping'] else 'off'}"
             f"{'; compared with no dropping' if info['compare_dropping'] else ''}"]
    lines += _table(["stack", "tables", "max ids", "max unique"],
                    [[s["name"], ",".join(s["tables"]), str(s["max_ids_per_partition"]),
                      str(s["max_unique_ids_per_partition"])] for s in info["stacks"]])
    lines.append("")
    lines += _table(["table", "vocabulary", "dimension", "optimizer", "combiner"],
                    [[t["name"], str(t["vocabulary"]), str(t["dimension"]), t["optimizer"],
                      t["combiner"]] for t in info["tables"]])
    memory = info["memory"]
    lines.append(f"memory: about {format_size(memory['total_bytes'])} (the tables, slots and a "
                 f"step's working arrays of {memory['executors']} executor(s))")
    lines += [f"note: {note}" for note in info.get("notes", ())]
    return "\n".join(lines)
