"""The model of tests/data/checkpoints/orbax/jte_tables as tpuemb reads jax-tpu-embedding's specs,
on 4 devices x 4 SparseCores: auto-stacked, it is the layout jax-tpu-embedding's cross-topology
converter gives that checkpoint for 4 x 4 (jte_tables_4x4: stacks alpha_mid_zeta, item_user,
country); with ``--topology v5p:1`` (1 device x 4 SparseCores), the converter's 1 x 4
(jte_tables_1x4). tools/jax_reference/jte_layouts.py built the same tables."""

from tpuemb_cfg.sparsecore.jte import (
    AdagradOptimizerSpec,
    AdamOptimizerSpec,
    FeatureSpec,
    FTRLOptimizerSpec,
    TableSpec,
)

adagrad = AdagradOptimizerSpec(learning_rate=0.1)
adam = AdamOptimizerSpec(learning_rate=0.01)
ftrl = FTRLOptimizerSpec(learning_rate=0.05)
TABLES = (("alpha", 30, 12, adagrad), ("mid", 60, 16, adagrad), ("zeta", 70, 10, adagrad),
          ("item", 45, 4, adam), ("user", 120, 8, adam), ("country", 50, 20, ftrl))
feature_specs = {
    name: FeatureSpec(name=f"{name}_feature",
                      table_spec=TableSpec(name=name, vocabulary_size=vocab, embedding_dim=dim,
                                           initializer=None, optimizer=optimizer,
                                           combiner="sum"),
                      input_shape=[64, 1], output_shape=[64, dim])
    for name, vocab, dim, optimizer in TABLES
}
global_device_count = 4
num_sc_per_device = 4
