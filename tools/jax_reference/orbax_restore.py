"""Restore an Orbax checkpoint step with Orbax itself and print what it restored (on a CPU).

The ground truth that Orbax (and so jax-tpu-embedding's ``checkpoint_utils.restore_checkpoint``,
which restores the same items the same way) accepts a step tpuemb wrote
(``tpuemb_cfg.formats.orbax_write.OrbaxStepWriter``). Run in the jax-tpu-embedding venv::

    python tools/jax_reference/orbax_restore.py MANAGER_FOLDER STEP [--devices N]

``CheckpointManager(MANAGER_FOLDER).restore(STEP, args=Composite(model=StandardRestore(),
embedding_spec=ProtoRestore(EmbeddingSpecProto)))`` (``PyTreeRestore()`` for an item a
``PyTreeCheckpointHandler`` saved; no ``embedding_spec`` when the step has none): the arrays
restored with the shardings the step's ``_sharding`` names (so jax needs as many devices:
``--devices``, CPU devices by ``XLA_FLAGS``). Prints one JSON object: for each restored array
(the pytree path joined with "/", item first) its shape, dtype and ``zlib.crc32`` of its bytes
(C order, little-endian); the restored EmbeddingSpecProto's stacks (name, vocabulary size, dim,
SparseCores); and whether a second restore into a target (jax-tpu-embedding's way:
``StandardRestore(state)``, the jax arrays row-sharded over the devices) gives the same arrays.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import zlib


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manager")
    parser.add_argument("step", type=int)
    parser.add_argument("--devices", type=int, default=2)
    args = parser.parse_args(argv)
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"
    import jax
    import numpy as np
    import orbax.checkpoint as ocp
    from jax_tpu_embedding.sparsecore.lib.proto import embedding_spec_pb2

    jax.config.update("jax_platforms", "cpu")
    manager = ocp.CheckpointManager(os.path.abspath(args.manager),
                                    options=ocp.CheckpointManagerOptions(read_only=True))
    step_metadata = os.path.join(os.path.abspath(args.manager), str(args.step),
                                 "_CHECKPOINT_METADATA")
    with open(step_metadata, encoding="utf-8") as handle:
        handlers = json.load(handle)["item_handlers"]
    pytree = handlers["model"].endswith("PyTreeCheckpointHandler")

    def model_args(target: object = None) -> object:
        if not pytree:
            return ocp.args.StandardRestore(target)
        if target is None:
            return ocp.args.PyTreeRestore()
        return ocp.args.PyTreeRestore(
            target, restore_args=ocp.checkpoint_utils.construct_restore_args(target))

    items = {"model": model_args()}
    if "embedding_spec" in handlers:
        items["embedding_spec"] = ocp.args.ProtoRestore(embedding_spec_pb2.EmbeddingSpecProto)
    restored = manager.restore(args.step, args=ocp.args.Composite(**items))
    # Restored again as jax-tpu-embedding's restore_checkpoint does: into a target of the
    # shapes expected (here: those restored), the 2-D jax arrays row-sharded over the devices (the
    # others replicated).
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:args.devices]), ("device",))
    rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("device", None))

    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

    def abstract(value: object) -> object:
        if isinstance(value, jax.Array):
            split = value.ndim == 2 and value.shape[0] % args.devices == 0
            return jax.ShapeDtypeStruct(value.shape, value.dtype,
                                        sharding=rows if split else replicated)
        return np.zeros_like(value)

    target = jax.tree.map(abstract, restored["model"])
    again = manager.restore(args.step, args=ocp.args.Composite(model=model_args(target)))["model"]
    same = jax.tree.all(jax.tree.map(lambda a, b: bool(np.array_equal(a, b)),
                                     restored["model"], again))
    arrays = {}
    leaves = jax.tree_util.tree_flatten_with_path(restored["model"])[0]
    for path, value in leaves:
        key = "/".join(["model", *(str(getattr(p, "key", p)) for p in path)])
        array = np.ascontiguousarray(np.asarray(value))
        little = array.astype(array.dtype.newbyteorder("<"), copy=False)
        arrays[key] = {"shape": list(array.shape), "dtype": str(array.dtype),
                       "crc32": zlib.crc32(little.tobytes()),
                       "type": type(value).__name__}
    spec = restored.get("embedding_spec")
    stacks = [{"name": s.stack_name, "vocab": s.stack_vocab_size, "dim": s.stack_embedding_dim,
               "sparsecores": s.num_sparsecores}
              for s in (spec.stacked_table_specs if spec is not None else ())]
    versions = {"orbax-checkpoint": ocp.__version__, "jax": jax.__version__}
    json.dump({"versions": versions, "arrays": dict(sorted(arrays.items())),
               "embedding_spec": stacks, "restored_into_a_target_equal": same},
              sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main(sys.argv[1:])
