from tpuemb_cfg.sparsecore.jte import AdagradOptimizerSpec, FeatureSpec, TableSpec

topology = "v5p-64"
adagrad = AdagradOptimizerSpec(learning_rate=0.1, initial_accumulator_value=0.1)
user = TableSpec(name="user", vocabulary_size=1000, embedding_dim=16, initializer=None,
                 optimizer=adagrad, combiner="sum")
feature_specs = {"user_id": FeatureSpec(name="user_id", table_spec=user,
                                        input_shape=[4096, 1], output_shape=[4096, 16])}
