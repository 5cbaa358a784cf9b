"""The model of examples/sparsecore/v6e_dcnv2.py, one change later: what `tpuemb diff` reviews.

Two edits: a `shop` table of width 32 (it joins the stack of `brand` and `category`, whose
stacked name changes), and `item_terms` grown from 5 to 6 million rows. Review them::

    tpuemb diff examples/sparsecore/v6e_dcnv2.py examples/diff/v6e_dcnv2_next.py
    tpuemb diff examples/sparsecore/v6e_dcnv2.py examples/diff/v6e_dcnv2_next.py --breaking
"""

from tpuemb_cfg.embedding import (
    Adagrad,
    FeatureConfig,
    SparseCoreEmbeddingConfig,
    TableConfig,
)

topology = "v6e-64"
BATCH = 512  # per replica: a multiple of the 2 SparseCores per v6e chip

# One optimizer object for every table: same width + same optimizer = one stack.
optimizer = Adagrad(learning_rate=0.01, initial_accumulator_value=0.1)

user_id = TableConfig(vocabulary_size=40_000_000, dim=128, name="user_id", combiner="sum")
item_id = TableConfig(vocabulary_size=20_000_000, dim=128, name="item_id", combiner="sum")
query_terms = TableConfig(vocabulary_size=5_000_000, dim=64, name="query_terms",
                          combiner="mean")
item_terms = TableConfig(vocabulary_size=6_000_000, dim=64, name="item_terms",
                         combiner="mean")
category = TableConfig(vocabulary_size=200_000, dim=32, name="category", combiner="sum")
brand = TableConfig(vocabulary_size=1_000_000, dim=32, name="brand", combiner="sum")
# NEW: a shop table of the brand's width, and a larger item_terms vocabulary
shop = TableConfig(vocabulary_size=300_000, dim=32, name="shop", combiner="sum")

feature_config = {
    "user_id": FeatureConfig(user_id, output_shape=[BATCH]),
    "item_id": FeatureConfig(item_id, output_shape=[BATCH]),
    "query_terms": FeatureConfig(query_terms, output_shape=[BATCH]),
    "item_terms": FeatureConfig(item_terms, output_shape=[BATCH]),
    "category": FeatureConfig(category, output_shape=[BATCH]),
    "brand": FeatureConfig(brand, output_shape=[BATCH]),
    "shop": FeatureConfig(shop, output_shape=[BATCH]),
}

# Keyed by stacked table name: the names of a stack's tables, sorted, joined with "_".
sparse_core_config = SparseCoreEmbeddingConfig(
    max_ids_per_table={
        "item_id_user_id": 512,
        "item_terms_query_terms": 2048,
        "brand_category": 512,
    },
    max_unique_ids_per_table={
        "item_id_user_id": 512,
        "item_terms_query_terms": 1024,
        "brand_category": 256,
    },
)
