"""What ``tpuemb inspect`` shows: a configuration as tables, features, tags and bytes.

The derived numbers (slots, state variables, tag uses, bytes per table and per host) come from
:mod:`tpuemb_cfg.model.derived`, the validator's single source for ``validation-rules.md`` section
1; this module only arranges them, as a JSON-ready dict (:func:`summarize`) and as text
(:func:`format_summary`). Floats are shown as the float32 values the file holds, in their shortest
round-trip form (``0.1``, not ``0.10000000149011612``).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from tpuemb_cfg.algorithms import ALGORITHMS
from tpuemb_cfg.base.errors import printable, printable_values
from tpuemb_cfg.base.schema import ACCUMULATION_NAMES, MODE_NAMES, SHARDING_NAMES, PackingStatus
from tpuemb_cfg.base.units import format_size
from tpuemb_cfg.formats.io import as_config
from tpuemb_cfg.model.derived import derive, host_sizes

if TYPE_CHECKING:
    from tpuemb_cfg.proto.optimization_parameters_pb2 import OptimizationParameters
    from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration


def f32(value: float) -> float:
    """The shortest decimal that reads back as the same float32 (``0.1`` for 0.1f)."""
    if value != value or value in (float("inf"), float("-inf")):
        return value
    bits = struct.pack("<f", value)
    for digits in range(1, 10):
        candidate = float(f"{value:.{digits}g}")
        try:
            if struct.pack("<f", candidate) == bits:
                return candidate
        except OverflowError:  # rounded past the largest float32
            continue
    return value


def _limits(message: Any, field: str) -> list[float | None] | None:
    if not message.HasField(field):
        return None
    limits = getattr(message, field)
    return [
        f32(limits.lower.value) if limits.HasField("lower") else None,
        f32(limits.upper.value) if limits.HasField("upper") else None,
    ]


def _hyper_parameters(params: OptimizationParameters, algorithm: str | None) -> dict[str, Any]:
    if algorithm is None or ALGORITHMS[algorithm].slots_from_program:
        return {}
    out: dict[str, Any] = {}
    for fd, value in getattr(params, algorithm).ListFields():
        if fd.message_type is not None:
            out[fd.name] = {"tag": value.tag}  # frequency_aware_adagrad.step_counter
        elif isinstance(value, float):
            out[fd.name] = f32(value)
        else:
            out[fd.name] = value
    return out


def _learning_rate(params: OptimizationParameters) -> dict[str, Any] | None:
    lr = params.learning_rate
    kind = lr.WhichOneof("learning_rate") if params.HasField("learning_rate") else None
    if kind == "constant":
        return {"constant": f32(lr.constant)}
    if kind == "dynamic":
        return {"tag": lr.dynamic.tag}
    return None


def summarize(config: TPUEmbeddingConfiguration | Any) -> dict[str, Any]:
    """Tables, features, tags and sizes of ``config`` (a message, TensorFlow's message, a path
    or bytes) as plain JSON-ready data."""
    config = as_config(config)
    d = derive(config)
    tables: list[dict[str, Any]] = []
    for t, td in enumerate(config.table_descriptor):
        params = td.optimization_parameters
        size = d.table_sizes[t] if t < len(d.table_sizes) else None
        decay = None
        if params.weight_decay_factor:
            decay = {
                "factor": f32(params.weight_decay_factor),
                "multiply_by_learning_rate": params.multiply_weight_decay_factor_by_learning_rate,
            }
        quant = None
        if params.HasField("simulated_quantization"):
            sq = params.simulated_quantization
            quant = {
                "enabled": sq.enabled,
                "num_buckets": sq.num_buckets,
                "limits": _limits(sq, "clipping_limits"),
            }
        status = params.gradient_accumulation_status
        packed = params.low_dimensional_packing_status == PackingStatus.ENABLED
        slots, states = d.slots[t], d.state_variables[t]
        tables.append({
            "index": t,
            "name": td.name,
            "vocabulary_size": td.vocabulary_size,
            "dimension": td.dimension,
            "optimizer": d.algorithms[t],
            "hyper_parameters": _hyper_parameters(params, d.algorithms[t]),
            "learning_rate": _learning_rate(params),
            "weight_clipping": _limits(params, "clipping_limits"),
            "gradient_clipping": _limits(params, "gradient_clipping_limits"),
            "weight_decay": decay,
            "gradient_accumulation": ACCUMULATION_NAMES.get(status, str(status)),
            "accumulation_effective": d.accumulation[t],
            "low_dimensional_packing": packed,
            "simulated_quantization": quant,
            "features": d.features_per_table[t] if d.style == "feature" else td.num_features,
            "slots": list(slots) if slots is not None else None,
            "state_variables": list(states) if states is not None else None,
            "bytes": size.logical_bytes if size is not None else None,
            "bytes_estimate": size.estimate_bytes if size is not None else None,
        })

    names = [td.name for td in config.table_descriptor]
    shapes = dict(d.activation_shapes)
    features: list[dict[str, Any]] = []
    left_out: list[dict[str, Any]] = []
    if d.style == "feature":
        for j, fd in enumerate(config.feature_descriptor):
            in_range = 0 <= fd.table_id < len(names)
            shape = shapes.get(f"feature_descriptor[{j}]")
            features.append({
                "index": j,
                "name": fd.name,
                "table_id": fd.table_id,
                "table": names[fd.table_id] if in_range else None,
                "input_shape": list(fd.input_shape),
                "activation_shape": list(shape) if shape is not None else None,
            })
            reason = _left_out_reason(fd, len(names))
            if reason is not None:
                left_out.append({"index": j, "reason": reason})
        feature_count = len(features)
    else:
        # TensorFlow's own conversion: one feature of [B * num_features] per table.
        for f in d.features:
            shape = shapes.get(f"table_descriptor[{f.table_id}]")
            features.append({
                "index": None,
                "name": "",
                "table_id": f.table_id,
                "table": names[f.table_id],
                "num_features": config.table_descriptor[f.table_id].num_features,
                "input_shape": list(f.input_shape),
                "activation_shape": list(shape) if shape is not None else None,
            })
        feature_count = sum(max(n, 0) for n in d.num_features)

    tags = [
        {
            "tag": tag,
            "uses": [
                {
                    "table": names[u.table],
                    "argument": u.kind,
                }
                for u in d.tag_uses
                if u.tag == tag
            ],
        }
        for tag in d.tags_sorted()
    ]
    hosts = [
        {"first": r.first, "last": r.last, "bytes": r.logical_bytes,
         "bytes_estimate": r.estimate_bytes}
        for r in host_sizes(config, d)
    ]
    known = [s for s in d.table_sizes if s is not None]
    return {
        "style": d.style,
        "feature_count": feature_count,
        "left_out_features": left_out,
        "mode": MODE_NAMES.get(config.mode, str(config.mode)),
        "num_hosts": config.num_hosts,
        "num_tensor_cores": config.num_tensor_cores,
        "sharding_strategy": SHARDING_NAMES.get(
            config.sharding_strategy, str(config.sharding_strategy)),
        "pipeline_execution_with_tensor_core": config.pipeline_execution_with_tensor_core,
        "spmd_cores_per_replica": (
            config.spmd_sharding.num_cores_per_replica
            if config.HasField("spmd_sharding") and config.spmd_sharding.enabled
            else None
        ),
        "batch_size_per_tensor_core": d.batch_size,
        "num_dynamic_learning_rates": d.k,
        "tables": tables,
        "features": features,
        "tags": tags,
        "hosts": hosts,
        "total_bytes": sum(s.logical_bytes for s in known),
        "total_bytes_estimate": sum(s.estimate_bytes for s in known),
    }


def _left_out_reason(fd: Any, num_tables: int) -> str | None:
    """Why a feature descriptor does not count towards the derived batch size (section 1.2)."""
    if not 0 <= fd.table_id < num_tables:
        return f"table_id {fd.table_id} is out of range ({num_tables} table(s))"
    if not fd.input_shape:
        return "input_shape is empty"
    bad = [d for d in fd.input_shape if d <= 0]
    if bad:
        return f"input_shape {list(fd.input_shape)} has a dimension <= 0"
    return None


# -- text ----------------------------------------------------------------------------------------


def human_bytes(n: int | None) -> str:
    """``1.5 MiB`` style (``units.format_size``); ``unknown`` for ``None``."""
    return "unknown" if n is None else format_size(n)


def _fmt_limits(limits: list[float | None] | None) -> str:
    if limits is None:
        return "-"
    lo, hi = limits
    return f"[{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]"


def _fmt_lr(lr: dict[str, Any] | None) -> str:
    if lr is None:
        return "(none)"
    return f"tag {lr['tag']}" if "tag" in lr else str(lr["constant"])


def _fmt_optimizer(table: dict[str, Any]) -> str:
    name = table["optimizer"] or "(none)"
    hp = table["hyper_parameters"]
    if not hp:
        return name
    parts = [f"{k}={v['tag'] if isinstance(v, dict) else v}" for k, v in hp.items()]
    return f"{name}({', '.join(parts)})"


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    out = ["  " + "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    for r in rows:
        out.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return out


def format_summary(summary: dict[str, Any], title: str = "") -> str:
    """The text form of :func:`summarize`'s result (names escaped for the terminal:
    :func:`~tpuemb_cfg.base.errors.printable`)."""
    s = printable_values(summary)
    title = printable(title)
    lines: list[str] = []
    head = f"{title}: " if title else ""
    count = s["feature_count"]
    lines.append(
        f"{head}{len(s['tables'])} tables, {count} feature{'' if count == 1 else 's'}, "
        f"{s['num_hosts']} hosts, {s['num_tensor_cores']} tensor cores, mode {s['mode']}, "
        f"sharding {s['sharding_strategy']}"
        + (", pipelined" if s["pipeline_execution_with_tensor_core"] else "")
        + (f", SPMD {s['spmd_cores_per_replica']} cores/replica"
           if s["spmd_cores_per_replica"] else "")
    )
    lines.append(
        f"batch size per tensor core {s['batch_size_per_tensor_core']}"
        + (" (derived from the features)" if s["style"] == "feature" else " (legacy style)")
        + f"; K = {s['num_dynamic_learning_rates']} dynamic learning rate(s)"
    )
    for skipped in s["left_out_features"]:
        lines.append(
            f"note: feature_descriptor[{skipped['index']}] is left out of the derived batch size "
            f"and feature counts: {skipped['reason']}"
        )
    lines.append("")
    lines.append("tables:")
    rows = []
    for t in s["tables"]:
        decay = "-"
        if t["weight_decay"]:
            decay = str(t["weight_decay"]["factor"])
            if t["weight_decay"]["multiply_by_learning_rate"]:
                decay += " x lr"
        acc = t["gradient_accumulation"]
        if acc == "UNSPECIFIED":
            acc += " (on)"
        extras = []
        if t["low_dimensional_packing"]:
            extras.append("packed")
        q = t["simulated_quantization"]
        if q and q["enabled"]:
            extras.append(f"quantized {q['num_buckets']} in {_fmt_limits(q['limits'])}")
        rows.append([
            str(t["index"]), t["name"], str(t["vocabulary_size"]), str(t["dimension"]),
            _fmt_optimizer(t) + (" " + ", ".join(extras) if extras else ""),
            _fmt_lr(t["learning_rate"]), _fmt_limits(t["weight_clipping"]),
            _fmt_limits(t["gradient_clipping"]), decay, acc,
            "?" if t["slots"] is None else str(len(t["slots"])),
            human_bytes(t["bytes"]),
        ])
    lines += _table(rows, ["#", "name", "vocab", "dim", "optimizer", "learning rate",
                           "weight clip", "gradient clip", "decay", "accumulation", "slots",
                           "bytes"])
    if s["features"] and s["style"] == "legacy":
        lines.append("")
        lines.append(
            "features (legacy style: TensorFlow turns each table's num_features into one "
            "feature of [batch size * num_features]):"
        )
        lrows = [
            [str(f["table_id"]), f["table"], str(f["num_features"]), str(f["input_shape"]),
             str(f["activation_shape"]) if f["activation_shape"] is not None else "-"]
            for f in s["features"]
        ]
        lines += _table(lrows, ["table", "name", "num_features", "input shape", "activations"])
    elif s["features"]:
        lines.append("")
        lines.append("features:")
        frows = [
            [str(f["index"]), f["name"] or "-",
             f"{f['table_id']} ({f['table']})" if f["table"] is not None else str(f["table_id"]),
             str(f["input_shape"]),
             str(f["activation_shape"]) if f["activation_shape"] is not None else "-"]
            for f in s["features"]
        ]
        lines += _table(frows, ["#", "name", "table", "input shape", "activations"])
    lines.append("")
    if s["tags"]:
        k = s["num_dynamic_learning_rates"]
        lines.append(
            f"dynamic learning rates (the list sent every step has {k} "
            f"entr{'y' if k == 1 else 'ies'}; position k feeds tag k):"
        )
        for tag in s["tags"]:
            uses = ", ".join(
                u["table"] + (" (step counter)" if u["argument"] == "step_counter" else "")
                for u in tag["uses"]
            )
            lines.append(f"  tag {tag['tag']}: {uses}")
    else:
        lines.append("dynamic learning rates: none (every table has a constant learning rate)")
    lines.append("")
    lines.append(
        "memory (float32 parameters + slots + hidden gradient accumulator; estimate pads rows "
        "to 8 floats):"
    )
    for t in s["tables"]:
        states = t["state_variables"]
        lines.append(
            f"  table {t['name']}: {human_bytes(t['bytes'])} "
            f"(estimate {human_bytes(t['bytes_estimate'])}); "
            + ("state unknown" if states is None else f"{len(states)} x {t['vocabulary_size']}"
               f" x {t['dimension']}: {', '.join(states)}")
        )
    lines.append(
        f"  all tables: {human_bytes(s['total_bytes'])} "
        f"(estimate {human_bytes(s['total_bytes_estimate'])})"
    )
    for first, last, text in _host_lines(s["hosts"]):
        which = f"host {first}" if first == last else f"hosts {first}-{last}"
        lines.append(f"  {which}: {text}" + (" each" if first != last else ""))
    return "\n".join(lines) + "\n"


def _host_lines(hosts: list[dict[str, Any]]) -> list[tuple[int, int, str]]:
    """One line per run of consecutive hosts whose rounded sizes read the same.

    Hosts differ by the odd row of each table (``V mod N``), often by a few KiB: printed at
    0.1 precision, such ranges would repeat the same line. The JSON keeps the exact ranges.
    """
    out: list[tuple[int, int, str]] = []
    for h in hosts:
        text = f"{human_bytes(h['bytes'])} (estimate {human_bytes(h['bytes_estimate'])})"
        if out and out[-1][2] == text and out[-1][1] + 1 == h["first"]:
            out[-1] = (out[-1][0], h["last"], text)
        else:
            out.append((h["first"], h["last"], text))
    return out
