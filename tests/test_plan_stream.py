"""``tpuemb plan`` in fixed memory and once per variant (issue 36 item 2).

- The limits pass reads the sample once: the drops at the suggested limits follow from the
  first pass's exact per-step statistics, and only the steps above the suggested limits (or
  above a SparseCore's share of the COO buffer) are preprocessed again. The drops are checked
  against the preprocessing run on every step at the suggested limits (what the limits pass did
  before: the reference).
- The state the plan keeps does not grow with the sample: 10x the steps, the same traced peak
  (``tracemalloc``; the 10x sample repeats the 1x sample's steps, so one step's working memory
  is the same and any growth would be state), for a two-table stack, for a 26-feature
  SparseCore model through the whole planner (from Parquet, whose reader keeps nothing per
  step; pyarrow's own buffers are not traced), and for the 26 tables of DLRM
  (examples/models/dlrm_criteo_1_16.pbtxt) per host.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_plan_load import _independent_maxima, _stacking, _zipf_batches

import tpuemb_cfg.planner.limits as limits_module
from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec
from tpuemb_cfg.planner.inputs import SampleSchema, legacy_schema, open_sample, sparsecore_schema
from tpuemb_cfg.planner.limits import LimitOptions, limits
from tpuemb_cfg.planner.load import sparsecore_counter
from tpuemb_cfg.planner.planning import plan
from tpuemb_cfg.session import prepare
from tpuemb_cfg.sparsecore.preprocessing import preprocess
from tpuemb_cfg.sparsecore.stacking import Stacking
from tpuemb_cfg.sparsecore.tf_preprocess import preprocess_tensorflow

Batch = dict[str, tuple[np.ndarray, np.ndarray, None]]


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the limits pass's calls of the preprocessing."""
    calls = [0]
    original = getattr(limits_module, "preprocess")  # noqa: B009 - the name limits calls

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(limits_module, "preprocess", counted)
    return calls


def _reference_drops(stacking: Stacking, batches: list[Batch],
                     pair: tuple[int, int]) -> tuple[dict[str, int], int]:
    """Dropped ids per table with every step preprocessed at ``pair`` (the second pass as the
    limits pass ran it before issue 36), and the steps that drop any."""
    (stack,) = stacking.stacks
    table_of = {f.name: f.table for f in stacking.features}
    out: dict[str, int] = {}
    dropping = 0
    for batch in batches:
        result = preprocess(stacking, {k: v[:2] for k, v in batch.items()},
                            local_devices=stacking.num_partitions, allow_id_dropping=True,
                            has_leading_dimension=False, limits={stack.name: pair})
        for name, mask in result.stacks[stack.name].dropped.items():
            out[table_of[name]] = out.get(table_of[name], 0) + int(mask.sum())
        dropping += result.id_drop_count > 0
    return out, dropping


def test_at_the_maximum_the_suggested_limits_need_no_second_pass(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Quantile 1: the suggested limits are at least every step's statistics (1.2 x the
    maximum, the theoretical buffer), so nothing is preprocessed twice and nothing drops."""
    calls = _counting(monkeypatch)
    batches = _zipf_batches(8, seed=5)
    report = limits(_stacking(), batches)
    assert calls[0] == 8
    (stack,) = report.stacks
    assert stack.current.dropped > 0  # the stack's own limits 6 / 4 drop
    assert stack.suggested is not None and stack.suggested.dropped == 0
    assert sum(d.ids for d in stack.suggested.drops) == sum(d.ids for d in stack.current.drops)


@pytest.mark.parametrize("exact_steps", [8192, 3])
def test_only_the_steps_above_the_suggested_limits_run_again(
        monkeypatch: pytest.MonkeyPatch, exact_steps: int) -> None:
    """Quantile 0.5, no headroom, no rounding: the suggested limits are the median step's
    maxima, so the steps above them drop; exactly those run again (past ``exact_steps`` steps
    which ones is not known: every step runs again), and the drops equal the reference's."""
    stacking = _stacking()
    batches = _zipf_batches(8, seed=5)
    calls = _counting(monkeypatch)
    report = limits(stacking, batches, options=LimitOptions(
        quantile=0.5, headroom=1.0, multiple=1, exact_steps=exact_steps))
    (stack,) = report.stacks
    assert stack.suggested is not None
    pair = (stack.suggested.max_ids_per_partition, stack.suggested.max_unique_ids_per_partition)
    above = sum(1 for b in batches
                if any(m > p for m, p in zip(_independent_maxima(stacking, b), pair,
                                             strict=True)))
    assert 0 < above < 8
    assert calls[0] == 8 + (above if exact_steps >= 8 else 8)
    expected, dropping = _reference_drops(stacking, batches, pair)
    assert {d.table: d.dropped for d in stack.suggested.drops} == expected
    assert stack.suggested.dropped > 0 and dropping == above


def test_a_short_buffer_runs_the_steps_that_overflow_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A suggested COO buffer of 96 entries a device (24 a SparseCore: three partitions' runs of
    up to 8) below what most steps need (a SparseCore sending to all 4 partitions needs 32):
    exactly the steps that lose ids to the buffer run again at the suggested limits, and their
    drops are the reference preprocessing's."""
    base = _stacking()
    stacking = replace(base, stacks=(replace(base.stacks[0],
                                             suggested_coo_buffer_size_per_device=96),))
    batches = _zipf_batches(8, seed=5)
    calls = _counting(monkeypatch)
    report = limits(stacking, batches)
    (stack,) = report.stacks
    assert stack.suggested is not None and stack.suggested.coo_buffer_size_per_device == 96
    pair = (stack.suggested.max_ids_per_partition, stack.suggested.max_unique_ids_per_partition)
    expected, dropping = _reference_drops(stacking, batches, pair)
    assert {d.table: d.dropped for d in stack.suggested.drops} == expected
    assert 0 < dropping < 8 and calls[0] == 8 + dropping


def test_tensorflow_mode_counts_failed_steps_at_the_suggested_limits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorFlow's rules: the run is the limit-free one at every limit set, so a step within
    the suggested limits drops what pass 1's run dropped (the buffer's), and a step above them
    fails; the reference fails or keeps each step by its own statistics."""
    stacking = replace(_stacking(), mode="tensorflow")
    batches = _zipf_batches(8, seed=5)
    report = limits(stacking, batches, options=LimitOptions(
        quantile=0.5, headroom=1.0, multiple=1, max_ids_per_chip_per_sample=2))
    (stack,) = report.stacks
    assert stack.suggested is not None
    pair = (stack.suggested.max_ids_per_partition, stack.suggested.max_unique_ids_per_partition)
    table_of = {f.name: f.table for f in stacking.features}
    dropped: dict[str, int] = {}
    failed = 0
    for batch in batches:
        result = preprocess_tensorflow(
            stacking, {k: v[:2] for k, v in batch.items()}, local_devices=1,
            allow_id_dropping=True, has_leading_dimension=False,
            limits={stack.stack: (1 << 30, 1 << 30)}, max_ids_per_chip_per_sample=2).stacks[
                stack.stack]
        fails = (int(result.max_ids_per_partition.max()) > pair[0]
                 or int(result.max_unique_ids_per_partition.max()) > pair[1])
        failed += fails
        for name, mask in result.dropped.items():
            lost = mask.shape[0] if fails else int(mask.sum())
            dropped[table_of[name]] = dropped.get(table_of[name], 0) + lost
    assert 0 < failed < 8 and stack.suggested.failed_steps == failed
    assert {d.table: d.dropped for d in stack.suggested.drops} == dropped
    assert sum(1 for b in batches for m in b.values() if m[0].size) > 0


# ---------------------------------------------------------------- fixed memory


def _traced_peak(work: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


#: What 10x the steps may add to the traced peak: Python's own small objects (dict growth,
#: interned ints), far below one step's arrays; state kept per step would add a multiple of it.
_SLACK = 64 * 1024


def test_limits_and_load_state_do_not_grow_with_the_sample() -> None:
    stacking = _stacking()
    steps = _zipf_batches(4, seed=11)

    def run(repeats: int) -> None:
        counter = sparsecore_counter(stacking)

        def sample() -> Iterator[Batch]:
            for _ in range(repeats):
                for batch in steps:
                    counter.update(batch)
                    yield batch

        limits(stacking, sample, options=LimitOptions(quantile=0.5, headroom=1.0, multiple=1))
        counter.reports()

    run(1)  # caches and lazy imports out of the measurement
    once, tenfold = _traced_peak(lambda: run(1)), _traced_peak(lambda: run(10))
    assert tenfold <= once + _SLACK, (once, tenfold)


def _spec_26(tmp_path: Path) -> Path:
    """26 jax-tpu-embedding tables like DLRM's Criteo features (two widths: two stacks), one id
    per sample, on a v5p-8 (4 chips x 4 SparseCores), global batch 64."""
    spec = tmp_path / "criteo26.py"
    spec.write_text('''
from tpuemb_cfg.sparsecore.jte import FeatureSpec, SGDOptimizerSpec, TableSpec

topology = "v5p-8"
sgd = SGDOptimizerSpec(learning_rate=0.1)
VOCAB = [3988, 3904, 1728, 742, 2026, 3, 712, 154, 63, 3853, 2953, 4033, 10, 2208, 1193, 155,
         4, 976, 14, 3997, 2564, 3966, 585, 1297, 108, 36]
feature_specs = {}
for i, v in enumerate(VOCAB):
    dim = 16 if i % 2 else 32
    table = TableSpec(name=f"t{i}", vocabulary_size=v, embedding_dim=dim, initializer=None,
                      optimizer=sgd, combiner="sum", max_ids_per_partition=16,
                      max_unique_ids_per_partition=16)
    feature_specs[f"f{i}"] = FeatureSpec(name=f"f{i}", table_spec=table, input_shape=[64, 1],
                                         output_shape=[64, dim])
''', encoding="utf-8")
    return spec


def _write_parquet(path: Path, schema: SampleSchema, steps: int, repeats: int) -> None:
    """``steps`` Zipf steps of the configured batch (one id a row), the whole written
    ``repeats`` times, as Parquet: a column per feature, a row group per step."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rng = np.random.default_rng(3)
    features = schema.features
    one = [pa.table({f.name: pa.ListArray.from_arrays(
        np.arange(f.bags + 1, dtype=np.int32),
        np.minimum(rng.zipf(1.3, f.bags) - 1, f.vocabulary - 1).astype(np.int64))
        for f in features}) for _ in range(steps)]
    with pq.ParquetWriter(path, one[0].schema) as writer:
        for s in range(steps * repeats):
            writer.write_table(one[s % steps])


def _peaks_over_repeats(tmp_path: Path, schema: Any, steps: int,
                        planned: Any) -> tuple[list[int], list[Any]]:
    """The traced peak of ``planned(sample)`` over a sample of ``steps`` steps written once,
    once again (the first run warms the caches) and ten times; with the three results."""
    peaks, results = [], []
    for k, repeats in enumerate((1, 1, 10)):
        path = tmp_path / f"sample_{k}_{repeats}.parquet"
        _write_parquet(path, schema, steps, repeats)
        result: list[Any] = []

        def run(path: Path = path, result: list[Any] = result) -> None:
            result.append(planned(open_sample(str(path), schema)))

        peaks.append(_traced_peak(run))
        results.append(result[0])
    return peaks, results


def test_a_26_feature_plan_keeps_its_memory_over_10x_the_steps(tmp_path: Path) -> None:
    config = load_sparsecore_spec(str(_spec_26(tmp_path))).config
    schema = sparsecore_schema(config)
    assert len(schema.features) == 26
    peaks, results = _peaks_over_repeats(tmp_path, schema, 4, lambda s: plan(config, s))
    assert [r.limits.steps for r in results] == [4, 4, 40]
    assert peaks[2] <= peaks[1] + _SLACK, peaks


def test_dlrm_26_tables_per_host_keep_their_memory_over_10x_the_steps(tmp_path: Path) -> None:
    """examples/models/dlrm_criteo_1_16.pbtxt (DLRM on Criteo Kaggle at 1/16 of its
    vocabularies: 26 tables, 32,768 bags a feature a step) through the whole legacy planner."""
    prepared = prepare(str(Path(__file__).parents[1] / "examples" / "models" /
                           "dlrm_criteo_1_16.pbtxt"))
    schema = legacy_schema(prepared.plan)
    assert len(schema.features) == 26
    peaks, results = _peaks_over_repeats(tmp_path, schema, 2, lambda s: plan(prepared, s))
    assert [r.load["MOD"].steps for r in results] == [2, 2, 20]
    assert peaks[2] <= peaks[1] + _SLACK, peaks
