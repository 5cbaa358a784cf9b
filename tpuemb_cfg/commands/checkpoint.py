"""``tpuemb checkpoint``: read, check, reshard and write real TensorFlow and JAX embedding
checkpoints.

Thin commands over ``formats.bundle`` (the file format), ``checkpoints`` (the embedding's
variables, verification, resharding, state) and ``review`` (a configuration as its checkpoint
view). CKPT is a checkpoint prefix (``ckpt/model-100``, the files ``.index`` and
``.data-*``) or its ``.index`` file. Outputs are checked before any work and written
atomically; exit status 0, 1 (``verify`` found a problem), 2 (bad input or options), 130.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from tpuemb_cfg.base.errors import InputError, UsageError, printable
from tpuemb_cfg.base.units import format_size, parse_size
from tpuemb_cfg.checkpoints.embedding import (
    JAX_KIND,
    EmbeddingCheckpoint,
    find_embedding,
    find_jax_embedding,
)
from tpuemb_cfg.checkpoints.reshard import KeyedSink, KeyedSource, execute_reshard, plan_reshard
from tpuemb_cfg.checkpoints.state import (
    checkpoint_files,
    checkpoint_prefix,
    checkpoint_variables,
)
from tpuemb_cfg.checkpoints.verify import VerifyReport, initial_values, verify
from tpuemb_cfg.commands.flags import LINES
from tpuemb_cfg.commands.flags import object_path as object_path_option
from tpuemb_cfg.formats.atomic import check_outputs
from tpuemb_cfg.formats.bundle import BundleReader, data_path, index_path, write_object_checkpoint
from tpuemb_cfg.formats.limits import default_memory_limit
from tpuemb_cfg.formats.npzio import read_npz
from tpuemb_cfg.formats.orbax import OrbaxReader, is_orbax_checkpoint
from tpuemb_cfg.formats.orbax_write import BUFFER_BYTES, CHUNK_BYTES, OrbaxStepWriter, step_target
from tpuemb_cfg.model.checkpoint import (
    DEFAULT_OBJECT_PATH,
    LAYOUTS_KEY,
    PARAMETERS,
    CheckpointView,
    saved_layouts,
)
from tpuemb_cfg.model.jax_checkpoint import (
    JAX_SPEC_FILE,
    jax_key,
    parse_embedding_spec,
    restacked_spec,
)
from tpuemb_cfg.review.checkpoints import view_of, why_not
from tpuemb_cfg.review.sides import Side, SideOptions, load_side

__all__ = ["checkpoint"]


def _side(config: str, topology: str | None, keras_backend: str | None,
          tf_version: str | None) -> Side:
    side = load_side(os.path.abspath(config), SideOptions(topology, keras_backend, tf_version),
                     label=config)
    return side


def _expected(side: Side, object_path: str) -> CheckpointView:
    """The checkpoint CONFIG's embedding saves (jax-tpu-embedding's for a JAX spec)."""
    view = view_of(side, object_path, jax=True)
    if view is None:
        raise UsageError(why_not(side))
    return view


@contextmanager
def _reading(ckpt: str, object_path: str | None, tables: Sequence[str] = ()
             ) -> Iterator[tuple[Any, EmbeddingCheckpoint]]:
    """(reader, the embedding found) of CKPT: a TensorFlow checkpoint (``BundleReader``) or a
    jax-tpu-embedding Orbax folder (``OrbaxReader``)."""
    if is_orbax_checkpoint(ckpt):
        with OrbaxReader(ckpt) as orbax_reader:
            yield orbax_reader, find_jax_embedding(orbax_reader, object_path=object_path,
                                                   label=ckpt)
        return
    with BundleReader(checkpoint_prefix(ckpt)) as reader:
        yield reader, find_embedding(reader, object_path=object_path, label=ckpt, tables=tables)


def _needs_layouts(found: EmbeddingCheckpoint, ckpt: str) -> None:
    if found.kind == JAX_KIND and not found.layouts_bytes:
        raise InputError(f"no {JAX_SPEC_FILE} in the checkpoint step: the stacking of its "
                         "tables is not known (jax-tpu-embedding's save_checkpoint stores it "
                         "as the item 'embedding_spec')", path=ckpt)


def _config_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed([
        click.option("--topology", metavar="KIND-N", help="The slice CONFIG runs on (a "
                     "SparseCore spec's own by default)."),
        click.option("--keras-backend", type=click.Choice(["jax", "tensorflow"]),
                     help="A keras-rs spec's Keras backend."),
        click.option("--tf-version", type=click.Choice(["2.20", "2.21"]),
                     help="The TensorFlow release whose stacking lays out CONFIG (2.21)."),
        click.option("--object-path", metavar="PATH", help="Where the embedding object sits in "
                     "the checkpoint (default: where its layouts are, else where variables "
                     "named after the tables are, else 'embedding')."),
    ]):
        command = option(command)
    return command


@click.group(name="checkpoint")
def checkpoint() -> None:
    """Read, check, reshard and write real TensorFlow and JAX embedding checkpoints
    (docs/checkpoints.md).

    CKPT is a TensorFlow checkpoint's prefix (ckpt/model-100: the files model-100.index and
    model-100.data-*) or its .index file, or a jax-tpu-embedding Orbax checkpoint folder (a
    CheckpointManager's folder: its last step; or a step folder), its stacking read from the
    embedding spec saved beside it (pip install 'tpuemb[orbax]'). TensorFlow and JAX are not
    needed: tpuemb reads and writes the formats itself.
    """


# ------------------------------------------------------------------------------------ inspect


def _describe(found: EmbeddingCheckpoint) -> list[str]:
    lines = [f"{found.kind} embedding at {found.object_path!r}: {len(found.variables)} "
             f"variable(s), {len(found.layouts)} table layout(s), "
             f"{len(found.other_keys)} other key(s)"]
    for v in found.variables:
        size = 4 * v.shape[0] * (v.shape[1] if len(v.shape) > 1 else 1)
        stored = (f" at {v.key[len(found.object_path) + 1:]}" if found.kind == JAX_KIND
                  else "")
        lines.append(f"  {v.name}: {v.dtype} {list(v.shape)} ({format_size(size)}){stored}")
    stacks: dict[str, list[Any]] = {}
    for layout in found.layouts:
        stacks.setdefault(layout.stacked_table_name, []).append(layout)
    for stack, layouts in stacks.items():
        first = layouts[0]
        partitions = (f" on {first.num_partitions} partition(s)" if first.num_partitions
                      else "")
        lines.append(f"  stack {stack!r}: {first.num_sparse_cores} SparseCores{partitions}, "
                     f"{first.total_rows_per_sparse_core_shard:,} rows per SparseCore")
        for t in sorted(layouts, key=lambda x: x.sparse_core_shard_row_offset):
            lines.append(f"    {t.table_name}: {t.unsharded_shape[0]:,} x {t.unsharded_shape[1]}"
                         f" (padded {t.unsharded_padded_shape[0]:,} x "
                         f"{t.unsharded_padded_shape[1]}), row offset "
                         f"{t.sparse_core_shard_row_offset:,}, rotation "
                         f"{t.sparse_core_shard_rotation}")
    return lines


def _found_json(found: EmbeddingCheckpoint) -> dict[str, Any]:
    return {"kind": found.kind, "object_path": found.object_path,
            "variables": [{"name": v.name, "key": v.key, "slot": v.slot,
                           "shape": list(v.shape), "dtype": v.dtype} for v in found.variables],
            "layouts": [{**layout.__dict__, "unsharded_shape": list(layout.unsharded_shape),
                         "unsharded_padded_shape": list(layout.unsharded_padded_shape)}
                        for layout in found.layouts],
            "other_keys": list(found.other_keys)}


@checkpoint.command(name="inspect")
@click.argument("ckpt")
@click.option("--object-path", metavar="PATH", help="Where the embedding object sits (default: "
              "found from the layouts, else 'embedding').")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on standard output.")
def inspect_command(ckpt: str, object_path: str | None, as_json: bool) -> None:
    """The embedding variables of CKPT: names, shapes, dtypes, and the SparseCore layouts.

    CKPT may also be a jax-tpu-embedding (Orbax) checkpoint folder: a CheckpointManager's folder
    (its last step), a step or an item (needs the extra: pip install 'tpuemb[orbax]')."""
    with _reading(ckpt, object_path_option(object_path)) as (_, found):
        pass
    if as_json:
        click.echo(json.dumps(_found_json(found), indent=2))
        return
    click.echo(printable("\n".join([f"{ckpt}:", *_describe(found)]), keep=LINES))


# ------------------------------------------------------------------------------------- verify


def _verify_lines(report: VerifyReport, ckpt: str, config: str) -> list[str]:
    lines = [f"{ckpt} against {config}: " + ("ok" if report.ok else "problems found")]
    for check in report.variables:
        if check.status == "ok":
            continue
        detail = {"missing": "expected, not in the checkpoint",
                  "extra": f"in the checkpoint ({list(check.found_shape or ())}), not expected",
                  "shape": f"shape {list(check.found_shape or ())}, expected "
                           f"{list(check.expected_shape or ())}",
                  "dtype": f"dtype {check.dtype}, expected float32"}[check.status]
        lines.append(f"  {check.status}: {check.name}: {detail}")
    if report.layouts_differ:
        lines.append(f"  layouts differ for {len(report.layouts_differ)} table(s): "
                     + ", ".join(report.layouts_differ))
    for state in report.states:
        parts = []
        if state.nonfinite:
            parts.append(f"{state.nonfinite:,} row(s) with NaN or infinity")
        if state.initial is not None:
            parts.append(f"{state.initial:,} of {state.rows:,} rows still at their initial "
                         f"value {state.initial_value:g}")
        if parts:
            lines.append(f"  {state.table} {state.slot}: {'; '.join(parts)}")
    restore = report.restore
    by = ("jax-tpu-embedding, Orbax" if report.checkpoint.kind == JAX_KIND
          else "TensorFlow 2.21")
    lines.append(f"  restore under {config} ({by}): {restore.outcome}"
                 + (f" - {restore.error}" if restore.error else ""))
    for verdict in restore.verdicts:
        if verdict.outcome != "restores":
            lines.append(f"    {verdict.outcome}: {verdict.variable}: {verdict.reason}")
    return lines


@checkpoint.command(name="verify")
@click.argument("ckpt")
@click.argument("config", type=click.Path(dir_okay=False))
@_config_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object on standard output.")
def verify_command(ckpt: str, config: str, topology: str | None, keras_backend: str | None,
                   tf_version: str | None, object_path: str | None, as_json: bool) -> None:
    """Check CKPT against CONFIG: every table and slot present with its shape, every tensor's
    CRC, the layouts, NaN/inf rows and rows still at their initial value, and whether
    TensorFlow 2.21 restores it under CONFIG (for a jax-tpu-embedding checkpoint: whether
    Orbax restores it into CONFIG's model, rows in place). Exit 1 when something is wrong."""
    side = _side(config, topology, keras_backend, tf_version)
    with _reading(ckpt, object_path_option(object_path), _table_names(side)) as (reader, found):
        _needs_layouts(found, ckpt)
        expected = _expected(side, found.object_path)
        if found.kind != JAX_KIND:  # Orbax's zarr chunks carry no checksum
            for variable in found.variables:
                reader.verify(variable.key)  # every byte's CRC, streaming
        initial = initial_values(side.config.tables) if side.config is not None else {}
        report = verify(reader, found, expected, initial=initial)
    if as_json:
        click.echo(json.dumps(_report_json(report), indent=2, default=str))
    else:
        click.echo(printable("\n".join(_verify_lines(report, ckpt, config)), keep=LINES))
    if not report.ok:
        click.get_current_context().exit(1)


def _table_names(side: Side) -> list[str]:
    if side.config is not None:
        return [t.name for t in side.config.tables]
    if side.message is not None:
        return [t.name for t in side.message.table_descriptor]
    return []


def _report_json(report: VerifyReport) -> dict[str, Any]:
    import dataclasses

    return {"ok": report.ok, "checkpoint": _found_json(report.checkpoint),
            "variables": [dataclasses.asdict(v) for v in report.variables],
            "layouts_differ": list(report.layouts_differ),
            "states": [dataclasses.asdict(s) for s in report.states],
            "restore": dataclasses.asdict(report.restore)}


# ------------------------------------------------------------------------------------- export


def _check_checkpoint_output(output: str, inputs: Sequence[tuple[str, str]], *,
                             inside: str | None = None) -> str:
    """The output prefix: its two files checked as outputs (not an input, writable; not in
    the Orbax checkpoint folder ``inside``)."""
    prefix = output[: -len(".index")] if output.endswith(".index") else output
    if not os.path.basename(prefix).strip():
        raise UsageError(f"-o {output!r}: expected a checkpoint prefix (a folder and a name, "
                         "such as ckpt/model-100: the files model-100.index and "
                         "model-100.data-*)")
    if inside is not None and is_orbax_checkpoint(inside) and _within(prefix, inside):
        raise UsageError(f"-o {output!r} is inside the checkpoint folder {inside!r}: write it "
                         "elsewhere")
    check_outputs([("-o", index_path(prefix)), ("-o", data_path(prefix))], list(inputs))
    return prefix


def _within(path: str, folder: str) -> bool:
    here, there = os.path.realpath(path), os.path.realpath(folder)
    return here == there or here.startswith(there.rstrip(os.sep) + os.sep)


def _key_of(found: EmbeddingCheckpoint) -> Callable[[str], str]:
    """A variable's checkpoint key by its name, as found (a JAX checkpoint's Orbax key)."""
    def key(name: str) -> str:
        variable = found.variable(name)
        if variable is None:
            raise InputError(f"the checkpoint has no variable {name!r} under "
                             f"{found.object_path!r}", path=found.source)
        return variable.key
    return key


@checkpoint.command(name="export")
@click.argument("state", type=click.Path(dir_okay=False))
@click.argument("config", type=click.Path(dir_okay=False))
@_config_options
@click.option("-o", "--output", required=True, metavar="PREFIX",
              help="The checkpoint to write (PREFIX.index and PREFIX.data-00000-of-00001).")
def export_command(state: str, config: str, topology: str | None, keras_backend: str | None,
                   tf_version: str | None, object_path: str | None, output: str) -> None:
    """Write STATE (tpuemb's tables and slots: tpuemb simulate's tables.npz or --out) as the
    checkpoint CONFIG's embedding saves: per table for a legacy configuration (the mid-level
    API), stacked with its layouts for TensorFlow's TPUEmbeddingV2. TensorFlow restores it
    under CONFIG with no reshard."""
    prefix = _check_checkpoint_output(output, [("STATE", state), ("CONFIG", config)])
    side = _side(config, topology, keras_backend, tf_version)
    view = _expected(side, object_path_option(object_path) or "embedding")
    arrays = read_npz(state)
    try:
        variables = checkpoint_variables(arrays, view)
    except InputError as exc:  # a state without a table or slot of CONFIG: name the file
        exc.path = exc.path or state
        raise
    strings = {}
    if view.kind == "sparsecore" and side.layouts is not None:
        strings[LAYOUTS_KEY] = saved_layouts(side.layouts).SerializeToString()
    write_object_checkpoint(prefix, variables, object_path=view.object_path, strings=strings,
                            inputs=[state, config])
    total = sum(v.nbytes for v in variables.values())
    click.echo(f"wrote {printable(prefix)}: {len(variables)} variable(s), {format_size(total)}"
               f" ({view.kind}, at {view.object_path!r})")


# ------------------------------------------------------------------------------------ reshard

#: Without a terminal, a progress line at most this often (seconds).
LINE_EVERY = 10.0


class _Collected:
    """A reshard sink that keeps each variable's chunk iterator (nothing is read until the
    writer pulls it): the checkpoint writer then streams them in order."""

    def __init__(self) -> None:
        self.variables: dict[str, Iterator[Any]] = {}
        self.shapes: dict[str, tuple[tuple[int, ...], Any]] = {}

    def add_rows(self, name: str, shape: tuple[int, int], dtype: Any,
                 chunks: Iterable[Any]) -> None:
        self.variables[name] = iter(chunks)
        self.shapes[name] = (tuple(shape), dtype)


def _slots_and_shapes(view: CheckpointView
                      ) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[int, int]]]:
    """table -> its slot names, and table -> (rows, dim), as CONFIG's checkpoint holds them."""
    slots: dict[str, tuple[str, ...]] = {}
    for variable in view.variables:
        for table in variable.tables:
            slots.setdefault(table, ())
            if variable.slot != PARAMETERS and variable.slot not in slots[table]:
                slots[table] += (variable.slot,)
    shapes = {table: shape for (table, slot), shape in view.table_shapes().items()
              if slot == PARAMETERS}
    return slots, shapes


def _progress(quiet: bool) -> Callable[[str, int, int], None] | None:
    if quiet:
        return None
    last = [0.0]

    def line(name: str, done: int, rows: int) -> None:
        now = time.monotonic()
        if now - last[0] >= (0.5 if sys.stderr.isatty() else LINE_EVERY) or done >= rows:
            last[0] = now
            click.echo(f"reshard: {printable(name)}: {100 * done / max(rows, 1):.0f}% "
                       f"({done:,} of {rows:,} rows)", err=True)

    return line


def _check_orbax_output(output: str, reader: Any, inputs: Sequence[str]) -> Path:
    """The step folder a JAX reshard writes: ``OUTPUT/<step>`` (a manager folder; the step
    keeps its number), checked before any work (nothing there, not inside an input)."""
    step = getattr(reader, "step", None)
    if step is None or "" in getattr(reader, "items", {}):
        where = f" ({step})" if step is not None else ""
        raise UsageError("CKPT is an item folder: give its step folder" + where + " or its "
                         "manager folder; the new step is written from the whole step")
    if not output.strip():
        raise UsageError("-o is empty: give the manager folder of the new step")
    target = step_target(step, output)
    if os.path.lexists(target):
        raise UsageError(f"-o {output!r}: {target} exists; tpuemb writes a new step and never "
                         "over anything: choose another output folder")
    for item in inputs:
        if _within(str(target), item):
            raise UsageError(f"-o {output!r} is inside the input {item!r}: write it elsewhere")
    return target


def _reshard_to_orbax(plan: Any, reader: Any, found: EmbeddingCheckpoint, side: Side,
                      target: Path, inputs: Sequence[str], cap: int,
                      progress: Any) -> tuple[Any, int]:
    """Write the resharded step: the source step copied, the embedding's arrays replaced by
    NEW's (the stacks NEW does not have dropped), its spec restacked."""
    from google.protobuf import text_format

    assert side.config is not None and side.stacking is not None
    spec = restacked_spec(parse_embedding_spec(found.layouts_bytes, path=found.source),
                          side.stacking)
    algorithms = {t.name: t.optimizer.algorithm for t in side.config.tables}
    by_stack = {s.name: algorithms.get(s.tables[0].name) for s in side.stacking.stacks}
    new_names = {v.name for v in plan.variables}
    # a quarter of the memory cap for each of the writer's two buffers, at most 128 MiB
    buffer = max(1 << 20, min(BUFFER_BYTES, cap // 4))
    with OrbaxStepWriter(reader.step, target, inputs=inputs, make_dirs=True,
                         chunk_bytes=min(CHUNK_BYTES, buffer),
                         buffer_bytes=buffer) as writer:
        for variable in found.variables:
            if variable.name not in new_names:
                writer.drop(variable.key)
        sink = KeyedSink(writer, key_of=lambda name: jax_key(
            found.object_path, name, by_stack.get(name.partition("/")[0])))
        source = KeyedSource(reader, found.object_path, key_of=_key_of(found))
        stats = execute_reshard(plan, source, sink, memory_cap=max(1 << 20, cap - 2 * buffer),
                                progress=progress)
        writer.replace_file(JAX_SPEC_FILE, text_format.MessageToString(spec).encode())
        writer.finish()
    return stats, len(plan.variables)


@checkpoint.command(name="reshard")
@click.argument("ckpt")
@click.argument("config", type=click.Path(dir_okay=False))
@_config_options
@click.option("-o", "--output", required=True, metavar="PREFIX | DIR",
              help="The checkpoint to write (PREFIX.index and PREFIX.data-00000-of-00001; for "
                   "a jax-tpu-embedding model, the manager folder DIR of the new step).")
@click.option("--unstack", is_flag=True, help="Write per-table variables (the mid-level API's "
              "and TPUEmbeddingForServing's), whatever CONFIG stacks.")
@click.option("--resize", is_flag=True, help="A table whose shape changed: copy the rows and "
              "columns both have, zeros elsewhere (default: refuse it).")
@click.option("--max-memory", metavar="SIZE", help="Memory the reshard may use (default: 80% "
              "of the memory available); the checkpoint may be far larger.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def reshard_command(ckpt: str, config: str, topology: str | None,  # noqa: PLR0913
                    keras_backend: str | None, tf_version: str | None,
                    object_path: str | None, output: str, unstack: bool, resize: bool,
                    max_memory: str | None, quiet: bool) -> None:
    """Reshard CKPT to the layout CONFIG gives (another slice or SparseCore count, another
    stacking or TensorFlow version), or to per-table variables (--unstack), in bounded memory.
    The result restores under CONFIG with no adapter, slots included (TensorFlow's adapter
    leaves them at their initial values). A TensorFlow output holds the embedding only; a
    jax-tpu-embedding checkpoint resharded for a jax-tpu-embedding CONFIG is a new Orbax step
    (DIR/<step>) with the rest of the model copied and the spec restacked."""
    inputs = checkpoint_files(ckpt if is_orbax_checkpoint(ckpt) else checkpoint_prefix(ckpt))
    try:
        cap = parse_size(max_memory) if max_memory is not None else default_memory_limit()
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--max-memory {max_memory!r}: {exc}") from None
    side = _side(config, topology, keras_backend, tf_version)
    with _reading(ckpt, object_path_option(object_path), _table_names(side)) as (reader, found):
        _needs_layouts(found, ckpt)
        from_jax = found.kind == JAX_KIND
        view = _expected(side, found.object_path)
        to_jax = view.kind == "jax" and not unstack
        if to_jax and not from_jax:
            raise UsageError(f"{config} is a jax-tpu-embedding model: tpuemb writes its Orbax "
                             "checkpoints from one of its own (CKPT is TensorFlow's); --unstack "
                             "writes per-table variables")
        target = _check_orbax_output(output, reader, [ckpt, config]) if to_jax else None
        out = str(target) if target is not None else _check_checkpoint_output(
            output, [("CKPT", f) for f in inputs] + [("CONFIG", config)], inside=ckpt)
        old: Any = (found.layouts if found.stacked else
                    {v.owner: (int(v.shape[0]), int(v.shape[1])) for v in found.variables
                     if v.slot == PARAMETERS})
        stacked = not unstack and side.kind == "sparsecore" and side.layouts is not None
        if side.kind == "sparsecore" and side.layouts is None and not unstack:
            raise UsageError(f"{config}: its tables cannot be stacked ({side.stacking_error}); "
                             "--unstack writes per-table variables")
        slots, shapes = _slots_and_shapes(view)
        new: Any = (view.layouts if to_jax else side.layouts) if stacked else shapes
        try:
            plan = plan_reshard(old, new, slots=slots, resize=resize)
        except InputError as exc:  # the layouts and shapes of CKPT against CONFIG's
            exc.path = exc.path or ckpt
            raise
        if not from_jax:
            # read_rows cannot check a part of a tensor: every input's CRC first, streaming (one
            # more read of the checkpoint, against a corrupt file written out as good)
            for name in plan.inputs():
                variable = found.variable(name)
                if variable is not None:
                    reader.verify(variable.key)
        progress = _progress(quiet)
        limit = cap if cap is not None else 1 << 62
        if target is not None:
            stats, written = _reshard_to_orbax(plan, reader, found, side, target,
                                               [ckpt, config], limit, progress)
        else:
            source = KeyedSource(reader, found.object_path, key_of=_key_of(found))
            sink = _Collected()
            stats = execute_reshard(plan, source, sink, memory_cap=limit, progress=progress)
            strings = ({LAYOUTS_KEY: saved_layouts(side.layouts).SerializeToString()}
                       if stacked and side.layouts is not None else {})
            write_object_checkpoint(out, sink.variables,
                                    object_path=DEFAULT_OBJECT_PATH if from_jax
                                    else found.object_path,
                                    strings=strings, shapes=sink.shapes, inputs=inputs)
            written = len(sink.variables)
    kind = "stacked for " + config if stacked else "per table"
    dropped = f"; left out (not in {config}): {', '.join(plan.dropped)}" if plan.dropped else ""
    how = "resharded" if plan.adapter else "copied (the layouts are equal)"
    click.echo(f"wrote {printable(out)}: {written} variable(s) {kind}, {how}; "
               f"{format_size(stats.bytes_written)} written, {format_size(stats.bytes_read)} "
               f"read{dropped}")
