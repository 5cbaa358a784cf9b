"""``examples/plan/zipf_sample.py``: the columns are named as ``tpuemb plan`` reads them for the
chosen Keras backend, ``--fixed-bags`` gives each bag the spec's ids per sample (MLPerf's
multi-hot lengths), and a sample written chunk by chunk reads back as the rows drawn."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES, zipf_sample

from tpuemb_cfg.planner.inputs import SampleError, SampleFeature, SampleSchema, open_sample

ZIPF = zipf_sample()
MLPERF = str(EXAMPLES / "sparsecore" / "keras_rs_dcnv2_v6e32.py")
# the spec's LARGE list: FeatureConfig.name -> feature_list_length (MLPerf's multi-hot Criteo)
LENGTHS = {"0": 3, "1": 2, "9": 7, "10": 3, "11": 8, "19": 12, "20": 100, "21": 27, "22": 10}


def test_columns_follow_the_keras_backend() -> None:
    jax = ZIPF.schema_of(MLPERF, "jax")
    tensorflow = ZIPF.schema_of(MLPERF, "tensorflow")
    assert sorted(jax.names) == sorted(LENGTHS)  # keras-rs on JAX: FeatureConfig.name
    assert sorted(tensorflow.names) == sorted(f"{n}_id" for n in LENGTHS)  # the dict keys
    assert {f.name: f.ids_per_bag for f in jax.features} == LENGTHS


def test_fixed_bags_hold_the_specs_ids_per_sample() -> None:
    schema = ZIPF.schema_of(MLPERF, "jax")
    columns = ZIPF.zipf_columns(schema, 5, max_bag=50, fixed_bags=True, seed=1)
    for name, (ids, splits) in columns.items():
        assert np.diff(splits).tolist() == [LENGTHS[name]] * 5
        assert ids.shape == (5 * LENGTHS[name],)
    ragged = ZIPF.zipf_columns(schema, 200, max_bag=50, seed=1)
    assert len(set(np.diff(ragged["20"][1]).tolist())) > 10  # without: 1 to 50 ids
    assert ZIPF.zipf_columns(schema, 5, max_bag=50, fixed_bags=True, seed=1)["21"][0].tolist() \
        == columns["21"][0].tolist()  # the same seed, the same batch


def test_a_jax_sample_opens_against_the_jax_schema_only(tmp_path: Path) -> None:
    jax = ZIPF.schema_of(MLPERF, "jax")
    path = tmp_path / "mlperf.parquet"
    ZIPF.write(str(path), ZIPF.zipf_columns(jax, 4, fixed_bags=True), 2)
    from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec
    from tpuemb_cfg.planner.inputs import sparsecore_schema

    # what tpuemb plan --keras-backend jax reads: the columns are found (probed when opened)
    plan_schema = sparsecore_schema(load_sparsecore_spec(MLPERF, keras_backend="jax").config)
    assert open_sample(str(path), plan_schema).progress_total == 4
    with pytest.raises(SampleError, match="no column '0_id'"):
        open_sample(str(path), ZIPF.schema_of(MLPERF, "tensorflow"))


@pytest.mark.parametrize("ext", ["parquet", "tfrecord", "npz"])
def test_chunks_are_written_one_after_the_other(tmp_path: Path, ext: str) -> None:
    schema = SampleSchema((SampleFeature("a", "t", 50, 2, 3), SampleFeature("b", "u", 7, 2)))
    whole = ZIPF.zipf_columns(schema, 12, max_bag=4, fixed_bags=True, seed=5)
    assert ZIPF.zipf_columns(schema, 12, max_bag=4, seed=5)["a"][1].tolist() != \
        whole["a"][1].tolist()  # 'a' fixed at 3 ids per bag only with fixed_bags
    assert np.diff(whole["a"][1]).tolist() == [3] * 12
    chunks = list(ZIPF.zipf_chunks(schema, 12, 4, max_bag=4, fixed_bags=True, seed=5))
    assert [len(c["b"][1]) - 1 for c in chunks] == [4, 4, 4]
    path = tmp_path / f"s.{ext}"
    ZIPF.write_chunks(str(path), chunks, 2)
    sample = open_sample(str(path), schema)
    batches = list(sample)
    assert len(batches) == 6
    for name in ("a", "b"):
        expected = np.concatenate([c[name][0] for c in chunks])
        assert np.concatenate([b[name].values for b in batches]).tolist() == expected.tolist()
    if ext == "parquet":
        import pyarrow.parquet as pq

        assert pq.ParquetFile(path).metadata.num_row_groups == 3
