"""Write the small jax-tpu-embedding checkpoints of tests/data/checkpoints/orbax/ (on a CPU).

Run in a throwaway venv with jax-tpu-embedding 0.2.0, orbax-checkpoint and flax (not a tpuemb
dependency)::

    python tools/jax_reference/orbax_checkpoints.py tests/data/checkpoints/orbax

The checkpoint is laid out the way ``jax_tpu_embedding.sparsecore.lib.flax.nnx.checkpoint_utils
.save_checkpoint`` writes a SparseCore NNX model: one Orbax ``CheckpointManager`` step with the
items ``model`` (``StandardSave`` of ``nnx.state(model)``: the embedding layer's stacked tables at
``embedding_layer/embedding_table/value/<stack>/table`` and their optimizer slots at
``.../<stack>/slot/<slot name>``) and ``embedding_spec`` (``ProtoSave`` of
``create_proto_from_feature_specs``: the stacking layout). The stacking is jax-tpu-embedding's own
(``stack_tables`` for 2 devices x 4 SparseCores), the stacked variables are row-sharded over 2
CPU devices (one zarr chunk each) and the dense kernel is a plain NumPy array; the values are
not trained: every stored array is a seeded NumPy draw (``known_values`` below, which the tests
repeat).
"""

from __future__ import annotations

import sys
import zlib
from pathlib import Path

import numpy as np

STEP = 7
DEVICES = 2
SPARSECORES = 4


def known_values(key: str, shape: tuple[int, ...]) -> np.ndarray:
    """The value stored at ``key`` (the pytree path joined with "/", item first)."""
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    return rng.standard_normal(shape).astype(np.float32)


def main(out: str) -> None:
    import os

    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={DEVICES}"
    import jax
    import orbax.checkpoint as ocp
    from jax_tpu_embedding.sparsecore.lib.nn import embedding, embedding_spec, table_stacking
    from jax_tpu_embedding.sparsecore.lib.nn.embedding_proto_utils import (
        create_proto_from_feature_specs,
    )

    jax.config.update("jax_platforms", "cpu")
    opt = embedding_spec.AdagradOptimizerSpec(learning_rate=0.1)
    init = jax.nn.initializers.zeros

    def table(name: str, rows: int, dim: int) -> embedding_spec.TableSpec:
        return embedding_spec.TableSpec(
            name=name, vocabulary_size=rows, embedding_dim=dim, initializer=init,
            optimizer=opt, combiner="sum")

    tables = {"user": table("user", 200, 8), "item": table("item", 100, 8),
              "country": table("country", 50, 16)}
    features = {name: embedding_spec.FeatureSpec(
        name=f"{name}_feature", table_spec=spec, input_shape=[64, 1],
        output_shape=[64, spec.embedding_dim])
        for name, spec in tables.items()}
    table_stacking.stack_tables(features, ["user", "item"], global_device_count=DEVICES,
                                num_sc_per_device=SPARSECORES, stack_name="user_item")
    embedding.prepare_feature_specs_for_training(features, DEVICES, SPARSECORES)
    proto = create_proto_from_feature_specs(features, DEVICES, SPARSECORES)

    # Row-sharded over the devices, as a training job holds them (so the arrays are stored in
    # one zarr chunk per device).
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:DEVICES]), ("device",))
    rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("device", None))

    def known_values_sharded(key: str, shape: tuple[int, ...]) -> jax.Array:
        return jax.device_put(known_values(key, shape), rows)

    stacks = {}
    for spec in proto.stacked_table_specs:
        shape = (spec.stack_vocab_size, spec.stack_embedding_dim)
        prefix = f"model/embedding_layer/embedding_table/value/{spec.stack_name}"
        stacks[spec.stack_name] = {
            "table": known_values_sharded(f"{prefix}/table", shape),
            "slot": {"accumulator": known_values_sharded(f"{prefix}/slot/accumulator", shape)},
        }
    dense = {"kernel": {"value": known_values("model/dense/kernel/value", (16, 4))}}
    state = {"embedding_layer": {"embedding_table": {"value": stacks}}, "dense": dense}

    manager = ocp.CheckpointManager(Path(out).resolve() / "jte_adagrad")
    manager.save(STEP, args=ocp.args.Composite(model=ocp.args.StandardSave(state),
                                               embedding_spec=ocp.args.ProtoSave(proto)))
    manager.wait_until_finished()
    print(proto)


def main_zarr3_files(out: str) -> None:
    """``zarr3_files/3``: one ``PyTreeCheckpointHandler`` item ``model`` saved with zarr v3 and
    without OCDBT (one folder per array), the user_item stack's two arrays row-sharded over 2
    CPU devices: the other storage Orbax writes (``python ... OUT --zarr3-files``)."""
    import os

    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={DEVICES}"
    import jax
    import orbax.checkpoint as ocp

    jax.config.update("jax_platforms", "cpu")
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:DEVICES]), ("device",))
    rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("device", None))
    prefix = "model/embedding_layer/embedding_table/value/user_item"
    stack = {"table": jax.device_put(known_values(f"{prefix}/table", (64, 8)), rows),
             "slot": {"accumulator": jax.device_put(
                 known_values(f"{prefix}/slot/accumulator", (64, 8)), rows)}}
    state = {"embedding_layer": {"embedding_table": {"value": {"user_item": stack}}},
             "dense": {"kernel": {"value": known_values("model/dense/kernel/value", (16, 4))}}}
    handler = ocp.PyTreeCheckpointHandler(use_ocdbt=False, use_zarr3=True)
    manager = ocp.CheckpointManager(Path(out).resolve() / "zarr3_files",
                                    item_handlers={"model": handler})
    manager.save(3, args=ocp.args.Composite(model=ocp.args.PyTreeSave(state)))
    manager.wait_until_finished()


if __name__ == "__main__":
    if "--zarr3-files" in sys.argv:
        main_zarr3_files(sys.argv[1])
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/checkpoints/orbax")
