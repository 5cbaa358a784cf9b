"""Deprecated and unknown fields (``DEP``, ``validation-rules.md`` section 2.9)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tpuemb_cfg.algorithms import checked_by
from tpuemb_cfg.base.protoutil import is_repeated
from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.rules._registry import Context, rule
from tpuemb_cfg.rules.common import algorithm_tables

#: Reserved field numbers and what they used to be, by message name (``schema.md`` section 4).
RESERVED: dict[str, dict[int, str]] = {
    "AdagradParameters": {1: "initial_accumulator"},
    "FtrlParameters": {4: "initial_accum", 5: "initial_linear"},
    "AdamParameters": {6: "initial_m", 7: "initial_v"},
    "MomentumParameters": {3: "initial_accum"},
    "RmsPropParameters": {4: "initial_ms", 5: "initial_mom"},
    "CenteredRmsPropParameters": {4: "initial_ms", 5: "initial_mom", 6: "initial_mg"},
    "MdlAdagradLightParameters": {
        13: "initial_accumulator",
        14: "initial_weight",
        15: "initial_benefit",
    },
    "AdadeltaParameters": {3: "initial_accumulator", 4: "initial_update"},
    "ProximalAdagradParameters": {3: "initial_accumulator"},
    "OnlineYogiParameters": {6: "a removed activation choice", 7: "a removed activation choice"},
    "ProximalYogiParameters": {8: "a removed activation choice", 9: "a removed activation choice"},
    "UserDefinedProgramParameters": {2: "the removed padding values"},
    "OptimizationParameters": {1: "a removed field", 15: "a removed field"},
    "TPUEmbeddingConfiguration": {8: "output_layout"},
}

_WIRE_TYPES = {0: "varint", 1: "64-bit", 2: "length-delimited", 3: "group", 4: "group", 5: "32-bit"}


def _unknown_numbers(message: Any) -> list[tuple[int, int]]:
    """(field number, wire type) of the unknown fields of ``message`` (not of its children)."""
    try:
        from google.protobuf.unknown_fields import UnknownFieldSet

        fields = UnknownFieldSet(message)
        return [(fields[k].field_number, fields[k].wire_type) for k in range(len(fields))]
    except ImportError:  # pragma: no cover - protobuf runtimes before UnknownFieldSet
        return [(f.field_number, f.wire_type) for f in message.UnknownFields()]


def _has_unknown_fields(message: Any) -> bool:
    """Whether the tree holds any unknown field: the message's own, or a child's (computed in
    C: a child's stripped copy is smaller). A child at a time, so that the copies take what one
    table takes, not what the configuration does (which stayed in memory for the rest of the
    validation)."""
    if _unknown_numbers(message):
        return True
    for fd, value in message.ListFields():
        if fd.message_type is None:
            continue
        for child in value if is_repeated(fd) else (value,):
            stripped = type(child)()
            stripped.CopyFrom(child)
            stripped.DiscardUnknownFields()
            if stripped.ByteSize() != child.ByteSize():
                return True
    return False


def _walk(message: Any, path: str) -> Iterator[tuple[Any, str]]:
    """Every message of the tree with its field path, parents first.

    The XLA program of a user-defined optimizer is skipped: the project declares only part of
    ``HloModuleProto``, so its other fields (the computations) are expected to be unknown.
    """
    yield message, path
    for fd, value in message.ListFields():
        if fd.message_type is None:
            continue
        if fd.name == "program" and fd.containing_type.name == "UserDefinedProgramParameters":
            continue
        child = f"{path}.{fd.name}" if path else fd.name
        if is_repeated(fd):
            for k, item in enumerate(value):
                yield from _walk(item, f"{child}[{k}]")
        else:
            yield from _walk(value, child)


@rule("DEP001", "warning", "deprecated FTRL flag allow_zero_accumulator")
def allow_zero_accumulator(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports `ftrl.allow_zero_accumulator: true`.

    ## Why is this bad?
    The field is marked `[deprecated = true]` in the proto and TensorFlow ignores it: zero
    accumulators are always supported. Setting it suggests a behaviour change that does not
    happen.

    ## Example
    ```
    ftrl { l1: 0.01 lr_power: -0.5 allow_zero_accumulator: true }
    ```

    ## Use instead
    ```
    ftrl { l1: 0.01 lr_power: -0.5 }
    ```

    Spec: validation-rules.md section 2.9
    """
    for at in algorithm_tables(ctx, *checked_by("DEP001")):
        if at.params.allow_zero_accumulator:
            yield ctx.diag(
                f"{at.op_path}.{at.algorithm}.allow_zero_accumulator",
                f"{ctx.table_label(at.i)}: {at.algorithm}.allow_zero_accumulator is deprecated and "
                "ignored; zero accumulators are always supported",
                hint="remove allow_zero_accumulator",
            )


@rule("DEP002", "warning", "unknown fields")
def unknown_fields(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports fields the schema does not declare, with their numbers and, for a reserved number,
    the old field name. Only binary input (or JSON read with unknown fields ignored) can carry
    them; the text parser rejects unknown names. The computations inside a user-defined
    program are exempt (the project declares only the program's signature).

    ## Why is this bad?
    TensorFlow ignores these fields. A reserved number is a field TensorFlow removed, often an
    initial value that now belongs elsewhere (`AdagradParameters` field 1 was
    `initial_accumulator`, now the slot variable's initialiser): the writer expected an effect
    that no longer happens. Any other number usually means the file was written with a newer or
    different schema.

    ## Example
    A binary file whose `adagrad` message holds field 1 (`initial_accumulator: 0.1`).

    ## Use instead
    Remove the field, and set the value where the current API takes it (for Adagrad: the
    initial value of the accumulator slot, in the training code).

    Spec: validation-rules.md section 2.9
    """
    if not _has_unknown_fields(ctx.config):
        return
    for message, path in _walk(ctx.config, ""):
        found = list(dict.fromkeys(_unknown_numbers(message)))
        if not found:
            continue
        name = message.DESCRIPTOR.name
        reserved = RESERVED.get(name, {})
        parts = []
        for number, wire in found:
            part = f"{number} ({_WIRE_TYPES.get(wire, f'wire type {wire}')})"
            if number in reserved:
                part += f", reserved: was {reserved[number]}"
            parts.append(part)
        where = path or "the top-level message"
        yield ctx.diag(
            path,
            f"{where} ({name}) carries {len(found)} field(s) the schema does not declare: "
            f"{'; '.join(parts)}; TensorFlow ignores them",
            hint="remove them from the file; for a reserved field, set the value where the "
            "current API takes it",
        )
