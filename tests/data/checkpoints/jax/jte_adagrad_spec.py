"""The model of tests/data/checkpoints/orbax/jte_adagrad: jax-tpu-embedding's specs, 2 devices x
4 SparseCores (tools/jax_reference/orbax_checkpoints.py built the same tables)."""

from tpuemb_cfg.sparsecore.jte import AdagradOptimizerSpec, FeatureSpec, TableSpec

adagrad = AdagradOptimizerSpec(learning_rate=0.1)
user = TableSpec(name="user", vocabulary_size=200, embedding_dim=8, initializer=None,
                 optimizer=adagrad, combiner="sum")
item = TableSpec(name="item", vocabulary_size=100, embedding_dim=8, initializer=None,
                 optimizer=adagrad, combiner="sum")
country = TableSpec(name="country", vocabulary_size=50, embedding_dim=16, initializer=None,
                    optimizer=adagrad, combiner="sum")
feature_specs = {
    name: FeatureSpec(name=f"{name}_feature", table_spec=spec, input_shape=[64, 1],
                      output_shape=[64, spec.embedding_dim])
    for name, spec in (("user", user), ("item", item), ("country", country))
}
global_device_count = 2
num_sc_per_device = 4
