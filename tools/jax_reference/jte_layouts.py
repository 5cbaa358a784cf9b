"""Ground truth from jax-tpu-embedding itself: a checkpoint with known per-table values, and
jax-tpu-embedding's own cross-topology conversions of it (tests/data/checkpoints/orbax/).

Run in a throwaway venv with jax-tpu-embedding 0.2.0, flax, optax, orbax-checkpoint (not a tpuemb
dependency), from the repository root::

    python tools/jax_reference/jte_layouts.py tests/data/checkpoints/orbax

What it writes (see tests/data/checkpoints/orbax/README.md for the findings):

- ``jte_tables_values.npz``: the known per-table values, ``table/<name>`` and
  ``slot/<name>/<jte slot name>``, each of shape (vocab, dim), a seeded draw (``known_value``).
- ``jte_tables/7``: those values as a 2 devices x 4 SparseCores training job holds them, written
  by jax-tpu-embedding's NNX ``checkpoint_utils.save_checkpoint`` (items ``model``,
  ``optimizer``, ``embedding_spec``). The per-table values are laid out by
  ``table_stacking.stack_and_shard_tables`` (the function jax-tpu-embedding itself uses to put
  per-table values into the training layout, in ``restore_cross_topology_checkpoint``; it uses
  ``row_offset_in_shard`` and ``shard_rotation``), padding 0; the generator asserts the result
  equals ``compute_physical_row_ids`` (what the TPU lookups use) row by row.
- ``jte_tables_4x4/7``, ``jte_tables_1x4/7``, ``jte_tables_unstacked/7``: ``jte_tables``
  converted for 4 devices x 4 SparseCores, 1 device x 4 SparseCores and no target topology
  (unstacked) by ``convert_like_jte``: ``checkpoint_utils.convert_cross_topology_checkpoint``'s
  own steps, the slots restacked per optimizer (the converter itself refuses stacks with
  different optimizers). The tool checks the real converter writes the same arrays and stack
  protos for one-optimizer checkpoints holding each stack alone.
- ``jte_findings.json``: what jax-tpu-embedding's functions did (printed too).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from restore_check import check, restore, unstack_all  # noqa: E402  (this folder's checker)

STEP = 7
DEVICES = 2
SPARSECORES = 4
#: (table, vocabulary, dim), per stack in stack_tables order (= row-offset order).
STACKS: dict[str, list[tuple[str, int, int]]] = {
    # Adagrad; proto (feature-name) order alpha, mid, zeta differs from the offset order
    # zeta, alpha, mid; dims 10, 12, 16 all pad to 16; vocabularies pad to 128, 64, 64.
    "adagrad3": [("zeta", 70, 10), ("alpha", 30, 12), ("mid", 60, 16)],
    # Adam (momentum, velocity); proto order item, user; item dim 4 pads to 8.
    "adam2": [("user", 120, 8), ("item", 45, 4)],
    # FTRL (accumulator, linear), not stacked with anything: its own stack "country".
    "country": [("country", 50, 20)],
}
#: The feature sizes (batch) per table: input (BATCH, 1), output (BATCH, dim).
BATCH = 64
TARGETS = {"4x4": (4, 4), "1x4": (1, 4), "unstacked": None}


def known_value(key: str, shape: tuple[int, ...]) -> np.ndarray:
    """The known per-table value stored under ``key`` in jte_tables_values.npz."""
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    return rng.standard_normal(shape).astype(np.float32)


def optimizer(stack: str) -> Any:
    from jax_tpu_embedding.sparsecore.lib.nn import embedding_spec as es

    return {"adagrad3": es.AdagradOptimizerSpec(learning_rate=0.1),
            "adam2": es.AdamOptimizerSpec(learning_rate=0.01),
            "country": es.FTRLOptimizerSpec(learning_rate=0.05)}[stack]


def feature_specs() -> dict[str, Any]:
    """The features (one per table, keyed by table name) stacked for DEVICES x SPARSECORES."""
    import jax
    from jax_tpu_embedding.sparsecore.lib.nn import embedding, embedding_spec, table_stacking

    features = {}
    for stack, tables in STACKS.items():
        opt = optimizer(stack)
        for name, vocab, dim in tables:
            spec = embedding_spec.TableSpec(
                name=name, vocabulary_size=vocab, embedding_dim=dim,
                initializer=jax.nn.initializers.zeros, optimizer=opt, combiner="sum")
            features[name] = embedding_spec.FeatureSpec(
                name=f"{name}_feature", table_spec=spec, input_shape=[BATCH, 1],
                output_shape=[BATCH, dim])
    for stack, tables in STACKS.items():
        if len(tables) > 1:
            table_stacking.stack_tables(features, [t[0] for t in tables],
                                        global_device_count=DEVICES,
                                        num_sc_per_device=SPARSECORES, stack_name=stack)
    embedding.prepare_feature_specs_for_training(features, DEVICES, SPARSECORES)
    return features


def slot_names(stack: str) -> tuple[str, ...]:
    return tuple(optimizer(stack).slot_variables_initializers()._fields)


def per_table_values() -> dict[str, np.ndarray]:
    values = {}
    for stack, tables in STACKS.items():
        for name, vocab, dim in tables:
            values[f"table/{name}"] = known_value(f"table/{name}", (vocab, dim))
            for slot in slot_names(stack):
                key = f"slot/{name}/{slot}"
                values[key] = known_value(key, (vocab, dim))
    return values


def to_proto_text(proto: Any) -> str:
    from google.protobuf import text_format

    return text_format.MessageToString(proto)


def main(out_dir: str) -> None:
    """Write jte_tables_values.npz and jte_tables/ (2 CPU devices), then run ``convert``."""
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={DEVICES}"
    import jax

    jax.config.update("jax_platforms", "cpu")
    from jax_tpu_embedding.sparsecore.lib.nn import embedding, table_stacking

    out = Path(out_dir).resolve()
    features = feature_specs()
    proto = embedding.create_proto_from_feature_specs(features, DEVICES, SPARSECORES)
    values = per_table_values()
    np.savez_compressed(out / "jte_tables_values.npz", **values)

    # The per-table values laid out as the training job holds them (jte's own function).
    table_specs = {f.table_spec.name: f.table_spec for f in features.values()}
    per_table_trees = {
        name: {"table": values[f"table/{name}"],
               "slot": {s: values[f"slot/{name}/{s}"] for s in slot_names(stack)}}
        for stack, tables in STACKS.items() for name, _, _ in tables}
    stacked3d = table_stacking.stack_and_shard_tables(
        table_specs, per_table_trees, num_shards=DEVICES * SPARSECORES, pad_value=0.0)
    stacked = {stack: jax.tree.map(lambda a: np.asarray(a).reshape(-1, a.shape[-1]), tree)
               for stack, tree in stacked3d.items()}
    check_physical_rows(proto, stacked, values)
    write_checkpoint(out / "jte_tables", features, stacked)
    # Temporary single-optimizer checkpoints (same values) that jte's converter accepts.
    scratch = out / "_scratch"
    for stack in STACKS:
        names = {name for name, _, _ in STACKS[stack]}
        write_checkpoint(scratch / f"only_{stack}",
                         {k: f for k, f in features.items() if k in names}, {stack: stacked[stack]})

    # jte's unstack keeps the input's sharding (out_shardings = in_shardings): on arrays
    # row-sharded over 2 devices, as restored here, a table whose vocabulary the device
    # count does not divide cannot be unstacked.
    restored = restore(out / "jte_tables")
    emb = restored["model"]["embedding_layer"]["embedding_table"]["value"]
    try:
        unstack_all(emb, restored["embedding_spec"])
        two_devices = "ok"
    except Exception as exc:  # jax's IndivisibleError
        two_devices = f"{type(exc).__name__}: " + str(exc).split(" This error occurs")[0]
    (scratch / "two_devices.json").write_text(json.dumps(two_devices))
    # The checks and conversions run on one CPU device, as jte's converter means them to.
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1")
    subprocess.run([sys.executable, __file__, "--convert", str(out)], env=env, check=True)
    shutil.rmtree(scratch)


def write_checkpoint(manager_dir: Path, features: dict[str, Any],
                     stacked: dict[str, Any]) -> None:
    """jte's NNX save_checkpoint of a model holding ``stacked`` (rows sharded over DEVICES)."""
    import jax
    import optax
    import orbax.checkpoint as ocp
    from flax import nnx
    from jax_tpu_embedding.sparsecore.lib.flax.nnx import checkpoint_utils as cu
    from jax_tpu_embedding.sparsecore.lib.flax.nnx import embed
    from jax_tpu_embedding.sparsecore.lib.nn import embedding

    mesh = jax.sharding.Mesh(np.array(jax.devices()[:DEVICES]), ("device",))
    rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("device", None))
    embedding_tables = {
        stack: embedding.EmbeddingVariables(
            table=jax.device_put(tree["table"], rows),
            slot=type(optimizer(stack).slot_variables_initializers())(
                **{s: jax.device_put(a, rows) for s, a in tree["slot"].items()}))
        for stack, tree in stacked.items()}

    class EmbeddingLayer(nnx.Module):
        def __init__(self) -> None:
            self.embedding_table = embed.EmbeddingVariablesParam(
                embedding_tables, embedding_sharding=rows)

    class Model(nnx.Module):
        def __init__(self) -> None:
            self.embedding_layer = EmbeddingLayer()
            self.dense = nnx.Linear(8, 2, rngs=nnx.Rngs(0))

    model = Model()
    opt = nnx.Optimizer(model, optax.adam(1e-3), wrt=embed.is_non_embedding_variables)
    if manager_dir.exists():
        shutil.rmtree(manager_dir)
    manager = cu.create_checkpoint_manager(
        cp_path=manager_dir, cp_options=ocp.CheckpointManagerOptions(create=True))
    cu.save_checkpoint(cp_manager=manager, step=STEP, model=model, optimizer=opt,
                       feature_specs=features, num_global_devices=DEVICES,
                       num_sc_per_device=SPARSECORES)
    manager.wait_until_finished()
    manager.close()


def convert(out_dir: str) -> None:
    """Check jte_tables with jte's own functions and convert it (on one CPU device)."""
    import jax

    jax.config.update("jax_platforms", "cpu")
    from jax_tpu_embedding.sparsecore.lib.flax.nnx import checkpoint_utils as cu
    from jax_tpu_embedding.sparsecore.lib.nn import table_stacking

    out = Path(out_dir).resolve()
    scratch = out / "_scratch"
    manager_dir = out / "jte_tables"
    findings: dict[str, Any] = {"unstack_on_2_device_row_sharded_restore": json.loads(
        (scratch / "two_devices.json").read_text())}
    with np.load(out / "jte_tables_values.npz") as npz:
        values = {k: npz[k] for k in npz.files}

    # (a) read back as jte's restore does, unstack with jte, compare with the known values.
    restored = restore(manager_dir)
    proto = restored["embedding_spec"]
    emb = restored["model"]["embedding_layer"]["embedding_table"]["value"]
    unstacked = unstack_all(emb, proto)
    mismatched = sorted(k for k, v in values.items() if not np.array_equal(unstacked[k], v))
    assert not mismatched and unstacked.keys() == values.keys(), mismatched
    findings["unstack_of_checkpoint_equals_known_values"] = True

    # (b) jte's stack_and_shard_feature_tables on the known values, with the same proto.
    feature_tables = {k.split("/", 1)[1]: jax.device_put(v, jax.devices()[0])
                      for k, v in values.items() if k.startswith("table/")}
    restacked = table_stacking.stack_and_shard_feature_tables(feature_tables, proto)
    findings["stack_and_shard_feature_tables_equals_checkpoint"] = {
        stack: bool(np.array_equal(np.asarray(restacked[stack]), np.asarray(emb[stack]["table"])))
        for stack in emb}
    findings["stack_and_shard_feature_tables_then_unstack_round_trips"] = {
        name: bool(np.array_equal(np.asarray(arr), values[f"table/{name}"]))
        for name, arr in table_stacking.unstack_and_unshard_stacked_tables(
            restacked, proto).items()}

    # The real converter on the mixed-optimizer checkpoint.
    try:
        cu.convert_cross_topology_checkpoint(
            input_checkpoint_path=manager_dir, output_checkpoint_path=scratch / "mixed",
            target_topology=cu.TargetTopology(num_global_devices=4, num_sc_per_device=4))
        findings["convert_cross_topology_checkpoint_mixed_optimizers"] = "ok"
    except Exception as exc:
        findings["convert_cross_topology_checkpoint_mixed_optimizers"] = (
            f"{type(exc).__name__}: "
            + " ".join(str(exc).split()).split(" so the symmetric difference")[0])

    # 2. Conversions: the converter's own steps, slots restacked per optimizer.
    for target, topology in TARGETS.items():
        target_dir = out / f"jte_tables_{target}"
        convert_like_jte(manager_dir, target_dir, topology)
        converted = restore(target_dir)
        cproto = converted["embedding_spec"]
        cemb = converted["model"]["embedding_layer"]["embedding_table"]["value"]
        info: dict[str, Any] = {
            "arrays": {f"{name}/{path}": list(np.shape(a))
                       for name, tree in cemb.items() for path, a in flatten(tree).items()},
            "proto (stack: table, row_offset_in_shard, shard_rotation, padded_vocab_size)": {
                s.stack_name: [[t.table_name, t.row_offset_in_shard, t.shard_rotation,
                                t.padded_vocab_size] for t in s.table_specs]
                for s in cproto.stacked_table_specs},
        }
        if topology is not None:
            got = unstack_all(cemb, cproto)
            info["unstack_equals_known_values"] = got.keys() == values.keys() and all(
                np.array_equal(got[k], v) for k, v in values.items())
            info["padding"] = padding_summary(cemb, cproto)
        else:
            info["arrays_equal_known_values"] = all(
                np.array_equal(np.asarray(a), values[f"table/{name}" if path == "table"
                                                     else f"slot/{name}/{path[5:]}"])
                for name, tree in cemb.items() for path, a in flatten(tree).items())
        # The real converter on each single-optimizer checkpoint gives the same arrays.
        same = {}
        for stack in STACKS:
            real_dir = scratch / f"converted_{stack}_{target}"
            kwargs = {} if topology is None else {"target_topology": cu.TargetTopology(
                num_global_devices=topology[0], num_sc_per_device=topology[1])}
            cu.convert_cross_topology_checkpoint(
                input_checkpoint_path=scratch / f"only_{stack}",
                output_checkpoint_path=real_dir, **kwargs)
            real = restore(real_dir)
            remb = real["model"]["embedding_layer"]["embedding_table"]["value"]
            same[stack] = all(
                np.array_equal(np.asarray(a), np.asarray(flatten(cemb[name])[path]),
                               equal_nan=True)
                for name, tree in remb.items() for path, a in flatten(tree).items())
            if topology is not None:
                rspecs = {s.stack_name: s for s in real["embedding_spec"].stacked_table_specs}
                cspecs = {s.stack_name: s for s in cproto.stacked_table_specs}
                same[stack] = same[stack] and all(spec == cspecs[name]
                                                  for name, spec in rspecs.items())
        info["equals_real_converter_per_single_optimizer_checkpoint"] = same
        findings[f"convert_{target}"] = info
    # 3. restore_check.py on each stored checkpoint.
    for name in ["jte_tables", *(f"jte_tables_{t}" for t in TARGETS)]:
        result = check(str(out / name), str(out / "jte_tables_values.npz"))
        findings[f"restore_check {name}"] = {
            "restored": result["restored"], "layout": result.get("layout"),
            "all_equal": bool(result["tables_equal"]) and all(result["tables_equal"].values()),
            "error": result["error"]}
    text = "{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}"
                               for k, v in findings.items()) + "\n}\n"
    (out / "jte_findings.json").write_text(text)
    print(text)


def convert_like_jte(source: Path, target_dir: Path, topology: tuple[int, int] | None) -> None:
    """checkpoint_utils.convert_cross_topology_checkpoint's steps, but with the slot variables
    unstacked/restacked per group of stacks with the same slots (the converter maps over all
    stacks' slot trees at once, so it needs one optimizer for all stacks)."""
    import jax
    import orbax.checkpoint as ocp
    from jax_tpu_embedding.sparsecore.lib.flax.nnx import checkpoint_utils as cu
    from jax_tpu_embedding.sparsecore.lib.nn import table_stacking
    from jax_tpu_embedding.sparsecore.lib.proto import embedding_spec_pb2

    restored = restore(source)
    proto = restored["embedding_spec"]
    model_state, optimizer_state = restored["model"], restored["optimizer"]
    holder = cu._find_embedding_table_in_dict(model_state)
    stacks = holder["value"]
    tables = table_stacking.unstack_and_unshard_stacked_tables(
        {k: ev["table"] for k, ev in stacks.items()}, proto, donate=False)
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, ev in stacks.items():
        groups.setdefault(tuple(sorted(ev["slot"])), []).append(name)

    def sub_proto(names: list[str]) -> Any:
        sub = embedding_spec_pb2.EmbeddingSpecProto()
        sub.stacked_table_specs.extend(
            s for s in proto.stacked_table_specs if s.stack_name in names)
        return sub

    if topology is not None:
        target_proto, logical = cu._recompute_target_specs(proto, *topology)
        num_shards = topology[0] * topology[1]
        stacked_tables = table_stacking.stack_and_shard_tables(
            logical, tables, num_shards=num_shards)
        stacked_slots = {}
        for names in groups.values():
            sub = sub_proto(names)
            in_group = {t.table_name for s in sub.stacked_table_specs for t in s.table_specs}
            stacked_slots.update(cu._unstack_and_restack_slots(
                {k: stacks[k] for k in names}, sub,
                {k: v for k, v in logical.items() if k in in_group}, num_shards))
        new = {name: {"table": table.reshape((-1, table.shape[-1])),
                      "slot": jax.tree.map(lambda a: a.reshape((-1, a.shape[-1])),
                                           stacked_slots[name])}
               for name, table in stacked_tables.items()}
    else:
        target_proto = proto
        slots = {}
        for names in groups.values():
            slots.update(cu._unstack_slots({k: stacks[k] for k in names}, sub_proto(names)))
        new = {name: {"table": table, "slot": slots.get(name, ())}
               for name, table in tables.items()}
    holder["value"] = new
    if target_dir.exists():
        shutil.rmtree(target_dir)
    manager = cu.create_checkpoint_manager(
        cp_path=target_dir, cp_options=ocp.CheckpointManagerOptions(create=True))
    manager.save(STEP, args=ocp.args.Composite(
        model=ocp.args.StandardSave(model_state),
        optimizer=ocp.args.StandardSave(optimizer_state),
        embedding_spec=ocp.args.ProtoSave(target_proto)))
    manager.wait_until_finished()
    manager.close()


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        flat = {}
        for k, v in tree.items():
            flat.update(flatten(v, f"{prefix}{k}/"))
        return flat
    return {prefix.rstrip("/"): tree}


def padding_summary(emb: dict[str, Any], proto: Any) -> dict[str, Any]:
    """Per stack and variable: the values stored in rows/columns no table uses (NaN, 0)."""
    summary = {}
    for spec in proto.stacked_table_specs:
        used = np.zeros((spec.stack_vocab_size, spec.stack_embedding_dim), bool)
        for t in spec.table_specs:
            rows = physical_rows(spec, t, np.arange(t.vocab_size))
            used[np.ix_(rows, np.arange(t.embedding_dim))] = True
        for path, arr in flatten(emb[spec.stack_name]).items():
            pad = np.asarray(arr)[~used]
            summary[f"{spec.stack_name}/{path}"] = {
                "padding_values": int(pad.size), "nan": int(np.isnan(pad).sum()),
                "zero": int((pad == 0).sum())}
    return summary


def physical_rows(stack_spec: Any, table_spec: Any, rows: np.ndarray) -> np.ndarray:
    from jax_tpu_embedding.sparsecore.lib.nn import table_stacking

    return table_stacking.compute_physical_row_ids(
        stack_spec.num_sparsecores, stack_spec.stack_vocab_size, table_spec.shard_rotation,
        table_spec.row_offset_in_shard, rows)


def check_physical_rows(proto: Any, stacked: dict[str, Any],
                        values: dict[str, np.ndarray]) -> None:
    """stack_and_shard_tables' layout is compute_physical_row_ids' (padding zero)."""
    for spec in proto.stacked_table_specs:
        tree = flatten(stacked[spec.stack_name])
        for path, arr in tree.items():
            expected = np.zeros_like(arr)
            for t in spec.table_specs:
                key = ("table/" + t.table_name if path == "table"
                       else f"slot/{t.table_name}/{path.split('/', 1)[1]}")
                rows = physical_rows(spec, t, np.arange(t.vocab_size))
                expected[rows, :t.embedding_dim] = values[key]
            assert np.array_equal(arr, expected), (spec.stack_name, path)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--convert"]:
        convert(sys.argv[2])
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/checkpoints/orbax")
