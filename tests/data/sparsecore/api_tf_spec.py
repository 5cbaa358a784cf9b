"""A TensorFlow SparseCore spec (tests/test_sparsecore_api.py derives its numbers by hand)."""
from tpuemb_cfg.embedding import SGD, Adagrad, FeatureConfig, SparseCoreEmbeddingConfig, TableConfig

optimizer = Adagrad(learning_rate=0.1)
user = TableConfig(vocabulary_size=1000, dim=20, name="user")
item = TableConfig(vocabulary_size=500, dim=24, optimizer=Adagrad(learning_rate=0.1), name="item")
ctx = TableConfig(vocabulary_size=7, dim=8, optimizer=SGD(learning_rate=0.05), name="ctx")
feature_config = {
    "user_id": FeatureConfig(user, output_shape=[32, 2]),
    "item_id": FeatureConfig(item, output_shape=[32]),
    "ctx": FeatureConfig(ctx, output_shape=[32]),
}
sparse_core_config = SparseCoreEmbeddingConfig(
    max_ids_per_table={"item_user": 64}, max_unique_ids_per_table={"ctx": 16})
topology = "v6e-4"
