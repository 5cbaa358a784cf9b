"""Combiners and bag sizes travel with a compiled spec: ``Executor``, ``prepare`` and
``tpuemb simulate`` take the compiler's result or a spec file, and a plain configuration says
which combiner it was given."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES, run_cli

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.embedding import (
    SGD,
    CustomCombiner,
    FeatureConfig,
    TableConfig,
    build_config,
)
from tpuemb_cfg.executor import FeatureInput
from tpuemb_cfg.formats.io import serialize
from tpuemb_cfg.session import prepare, with_combiner_arguments
from tpuemb_cfg.simulate import Executor

SPEC = """\
from tpuemb_cfg.embedding import SGD, FeatureConfig, TableConfig

clicks = TableConfig(vocabulary_size=64, dim=4, combiner="sum", name="clicks")
words = TableConfig(vocabulary_size=32, dim=4, combiner="sqrtn", name="words")
feature_config = {
    "clicks": FeatureConfig(clicks, name="clicks"),
    "history": FeatureConfig(clicks, max_sequence_length=3, name="history"),
    "words": FeatureConfig(words, name="words"),
}
optimizer = SGD(learning_rate=0.1)
per_replica_input_shapes = {"clicks": [8, 5], "history": [8, 3], "words": [8]}
"""


def compiled_sum() -> object:
    table = TableConfig(vocabulary_size=16, dim=2, combiner="sum", name="t")
    return build_config({"f": FeatureConfig(table)}, SGD(0.1), per_replica_input_shapes=[[4, 3]])


def test_executor_takes_the_compiled_result_and_sums() -> None:
    compiled = compiled_sum()
    executor = Executor(compiled)
    assert executor.prepared.combiners_source == "spec"
    assert [f.combiner for f in executor.plan.features] == ["sum"]
    ids = np.array([1, 2, 3, 3, 4, 5], dtype=np.int64)
    batch = [FeatureInput(ids=ids, row_splits=np.array([0, 2, 4, 6, 6]))]
    activations, _ = executor.recv_activations(batch)
    table = executor.state_arrays()["table/t"]
    np.testing.assert_allclose(activations[0][:3], table[[1, 3, 4]] + table[[2, 3, 5]],
                               rtol=1e-6)
    np.testing.assert_array_equal(activations[0][3], [0, 0])
    # The proto alone gives mean: what the compiled result adds is the combiner.
    mean = Executor(compiled.config).recv_activations(batch)[0][0]  # type: ignore[attr-defined]
    np.testing.assert_allclose(mean[:3], activations[0][:3] / 2, rtol=1e-6)


def test_spec_files_are_compiled(tmp_path: Path) -> None:
    spec = tmp_path / "model.py"
    spec.write_text(SPEC)
    prepared = prepare(str(spec))
    assert prepared.path == str(spec) and prepared.combiners_source == "spec"
    features = prepared.plan.features
    assert [(f.name, f.combiner, f.ids_per_bag) for f in features] == [
        ("clicks", "sum", 5), ("history", "sum", 1), ("words", "sqrtn", 1)]
    assert prepared.combiner_note is None
    toml = prepare(str(EXAMPLES / "specs" / "video_retrieval.toml"))
    assert toml.combiners_source == "spec"
    # --combiner F=NAME changes one feature and keeps the spec's others.
    changed = with_combiner_arguments(prepared, ("2=mean",))
    assert [f.combiner for f in changed.plan.features] == ["sum", "sum", "mean"]
    assert changed.combiners_source == "given"


def test_a_plain_configuration_says_which_combiner_it_got(tmp_path: Path) -> None:
    path = tmp_path / "c.pbtxt"
    path.write_bytes(serialize(compiled_sum().config, "text"))  # type: ignore[attr-defined]
    prepared = prepare(str(path))
    assert [f.combiner for f in prepared.plan.features] == ["mean"]
    assert prepared.combiners_source == "default"
    assert prepared.combiner_note is not None
    assert "records no combiners" in prepared.combiner_note
    assert "every feature uses mean, TensorFlow's default" in prepared.combiner_note
    assert prepare(prepared, combiners="sum").combiner_note is None


def test_a_custom_combiner_returning_nothing_is_refused_when_prepared() -> None:
    # The combiner is probed with one id per bag while the plan is built (executor/custom.py);
    # a callable that returns None is refused there, and --combiner replaces it.
    table = TableConfig(vocabulary_size=16, dim=2, name="t",
                        combiner=CustomCombiner(lambda *a: None, max_valency=2))
    compiled = build_config({"f": FeatureConfig(table)}, SGD(0.1), per_replica_batch_size=4)
    with pytest.raises(InputError, match="CustomCombiner"):
        prepare(compiled)
    assert [f.combiner for f in prepare(compiled, combiners="sum").plan.features] == ["sum"]


def test_simulate_runs_a_spec_with_its_combiners(tmp_path: Path) -> None:
    spec = tmp_path / "model.py"
    spec.write_text(SPEC)
    result = run_cli("simulate", str(spec), "--steps", "2", "--out-dir", str(tmp_path / "o"))
    assert result.exit_code == 0, result.output
    assert "records no combiners" not in result.output
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["steps"] == 2
    plain = tmp_path / "model.pbtxt"
    assert run_cli("compile", str(spec), "-o", str(plain)).exit_code == 0
    result = run_cli("simulate", str(plain), "--steps", "1", "--out-dir", str(tmp_path / "p"))
    assert result.exit_code == 0, result.output
    assert result.stderr.strip().splitlines()[-1].startswith(f"note: {plain} records no combiners")
    quiet = run_cli("simulate", str(plain), "--steps", "1", "--out-dir", str(tmp_path / "q"),
                    "-q", "--json")
    assert "note:" not in quiet.output


def test_bag_sizes_is_a_synthetic_option(tmp_path: Path) -> None:
    path = tmp_path / "c.pbtxt"
    path.write_bytes(serialize(compiled_sum().config, "text"))  # type: ignore[attr-defined]
    result = run_cli("simulate", str(path), "--batches", "b.npz", "--out", "o.npz",
                     "--bag-sizes", "fixed")
    assert result.exit_code == 2 and "--bag-sizes applies to synthetic runs only" in result.output
