"""keras-rs as each Keras backend runs it: JAX stacking, limits and drops against keras-rs 0.4.0.

``tests/data/keras_rs/jax_cases.json.gz`` holds what keras-rs 0.4.0's JAX ``DistributedEmbedding``
(with jax-tpu-embedding 0.2.0) made of 41 configurations (``generate_jax.py`` there; provenance
in ``PROVENANCE-JAX.md``): keras-rs' MLPerf DLRM-DCNv2 on a v6e-32 and 40 random table sets.
Per case: the stacks, their limits, each feature's offsets, and one host's batch preprocessed
by keras-rs' own ``stack_and_shard_samples`` (statistics and drops). The objects here are the
keras-rs stand-ins of ``test_embedding_keras_rs``.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_cli
from test_embedding_keras_rs import FeatureConfig, TableConfig

from tpuemb_cfg.embedding.errors import EmbeddingConfigError
from tpuemb_cfg.embedding.keras_rs_jax import choose_backend, using_keras_backend
from tpuemb_cfg.embedding.sparsecore import keras_rs_config, load_sparsecore_spec
from tpuemb_cfg.sparsecore.feed import stack
from tpuemb_cfg.sparsecore.preprocessing import preprocess
from tpuemb_cfg.sparsecore.topology import Topology

DATA = Path(__file__).parent / "data" / "keras_rs"
sys.path.insert(0, str(DATA))

from batch_recipe import batch_ids  # noqa: E402


@functools.cache
def _document() -> dict[str, Any]:
    with gzip.open(DATA / "jax_cases.json.gz", "rt") as fh:
        document: dict[str, Any] = json.load(fh)
    return document


def _cases() -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in _document()["cases"]}


def _features(case: dict[str, Any]) -> dict[str, FeatureConfig]:
    optimizers = {oid: {"class_name": o["class_name"], "config": o["config"]}
                  for oid, o in case["optimizers"].items()}
    tables = {tid: TableConfig(
        t["name"], t["vocabulary_size"], t["embedding_dim"], optimizer=optimizers[t["optimizer"]],
        combiner=t["combiner"], placement="sparsecore",
        max_ids_per_partition=t["max_ids_per_partition"],
        max_unique_ids_per_partition=t["max_unique_ids_per_partition"])
        for tid, t in case["tables"].items()}
    return {path: FeatureConfig(f["name"], tables[f["table"]], tuple(f["input_shape"]),
                                tuple(f["output_shape"]))
            for path, f in case["features"].items()}


def _config(case: dict[str, Any], backend: str = "jax") -> Any:
    topology = Topology(chips=case["global_devices"],
                        sparse_cores_per_chip=case["sparse_cores_per_device"])
    return keras_rs_config(_features(case), topology=topology,
                           table_stacking=case["table_stacking"], keras_backend=backend)


def _batch(case: dict[str, Any]) -> tuple[dict[str, np.ndarray], str]:
    """One host's ids by feature name, and their sha256 (the generator's order: sorted paths)."""
    hosts = case["global_devices"] // case["local_devices"]
    digest = hashlib.sha256()
    out = {}
    for index, (_, f) in enumerate(sorted(case["features"].items())):
        ids = batch_ids(f["input_shape"][0] // hosts, f["ids_per_row"], index,
                        case["tables"][f["table"]]["vocabulary_size"], case["span"],
                        case["spread"], case["salt"])
        digest.update(ids.tobytes())
        out[f["name"]] = ids
    return out, digest.hexdigest()


@pytest.mark.parametrize("name", sorted(_cases()))
def test_stacks_and_limits_equal_keras_rs_on_jax(name: str) -> None:
    """Stack names and order, tables in row order, limits (each the largest of the stack's
    tables' own), suggested buffer, total samples, and every feature's row offset, column
    offset and shift."""
    case = _cases()[name]
    config = _config(case)
    assert (config.mode, config.api, config.keras_backend) == ("jax", "keras_rs", "jax")
    assert config.allow_id_dropping  # keras-rs preprocesses with allow_id_dropping=True
    stacking = stack(config)
    expected = case["expect"]["stacks"]
    assert [s.name for s in stacking.stacks] == list(expected)
    for s in stacking.stacks:
        want = expected[s.name]
        assert [t.name for t in s.tables] == want["tables"]
        assert (s.max_ids_per_partition, s.max_unique_ids_per_partition,
                s.suggested_coo_buffer_size_per_device, s.total_sample_count) == (
            want["max_ids_per_partition"], want["max_unique_ids_per_partition"],
            want["suggested_coo_buffer_size_per_device"], want["total_sample_count"])
        for slot in stacking.features_of(s.name):
            assert {"row_offset": slot.row_offset, "col_offset": slot.col_offset,
                    "col_shift": slot.col_shift} == want["features"][slot.name]


@pytest.mark.parametrize("name", sorted(_cases()))
def test_one_batch_drops_equal_keras_rs_on_jax(name: str) -> None:
    """One host's batch: per stack the statistics keras-rs gets back and the ids it drops."""
    case = _cases()[name]
    config = _config(case)
    ids, digest = _batch(case)
    assert digest == case["expect"]["ids_sha256"]
    got = preprocess(stack(config), ids, local_devices=case["local_devices"],
                     allow_id_dropping=config.allow_id_dropping, has_leading_dimension=False)
    for stack_name, want in case["expect"]["batch"].items():
        result = got.stacks[stack_name]
        assert result.max_ids_per_partition.reshape(-1).tolist() == want["max_ids_per_partition"]
        assert result.max_unique_ids_per_partition.reshape(-1).tolist() == \
            want["max_unique_ids_per_partition"]
        assert result.required_buffer_size_per_sc.reshape(-1).tolist() == \
            want["required_buffer_size_per_sc"]
        assert result.id_drop_count == want["id_drop_counters"]


def test_mlperf_on_jax_is_one_stack_at_the_tables_limits() -> None:
    """The issue's case: MLPerf DLRM-DCNv2 on a v6e-32, 9 tables of 8192 / 4096. keras-rs on JAX
    stacks them into one, limited 8192 / 4096, and drops ids; on TensorFlow the same objects
    give TensorFlow's 2 stacks at 256 / 256 (the conversion drops the tables' limits)."""
    case = _cases()["mlperf_dlrm_dcnv2_v6e_32"]
    (only,) = case["expect"]["stacks"].values()
    assert (only["max_ids_per_partition"], only["max_unique_ids_per_partition"]) == (8192, 4096)
    assert len(only["tables"]) == 9
    assert sum(b["id_drop_counters"] for b in case["expect"]["batch"].values()) > 0
    jax_stacks = stack(_config(case)).stacks
    assert [(s.max_ids_per_partition, s.max_unique_ids_per_partition) for s in jax_stacks] == \
        [(8192, 4096)]
    tf = _config(case, "tensorflow")
    assert (tf.mode, tf.keras_backend, tf.allow_id_dropping) == ("tensorflow", "tensorflow", False)
    assert [(s.max_ids_per_partition, s.max_unique_ids_per_partition)
            for s in stack(tf).stacks] == [(256, 256), (256, 256)]


# -- which backend ----------------------------------------------------------------------------


def test_backend_is_chosen_as_keras_chooses_it(tmp_path: Path) -> None:
    """KERAS_BACKEND, else keras.json's "backend" in $KERAS_HOME, else "tensorflow" (Keras
    3.15's backend/config.py); an empty KERAS_BACKEND and a file that is not JSON are ignored."""
    home = tmp_path / "keras"
    home.mkdir()
    env = {"KERAS_HOME": str(home)}
    assert choose_backend(environ=env) == choose_backend(environ={**env, "KERAS_BACKEND": ""})
    assert choose_backend(environ=env).name == "tensorflow"
    assert choose_backend(environ=env).chosen_by == "Keras' default"
    (home / "keras.json").write_text('{"backend": "jax", "floatx": "float32"}')
    chosen = choose_backend(environ=env)
    assert (chosen.name, chosen.chosen_by) == ("jax", str(home / "keras.json"))
    assert choose_backend(environ={**env, "KERAS_BACKEND": "tensorflow"}).name == "tensorflow"
    (home / "keras.json").write_text("{not json")
    assert choose_backend(environ=env).name == "tensorflow"
    # the spec's keras_backend beats the environment, an override beats the spec
    assert choose_backend("jax", environ={"KERAS_BACKEND": "tensorflow"}).name == "jax"
    with using_keras_backend("tensorflow"):
        chosen = choose_backend("jax", environ={"KERAS_BACKEND": "jax"})
    assert (chosen.name, chosen.chosen_by) == ("tensorflow", "--keras-backend")


def test_a_backend_without_sparsecores_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingConfigError, match=r"'torch' \(from KERAS_BACKEND\).*'jax'"):
        choose_backend(environ={"KERAS_BACKEND": "torch", "KERAS_HOME": str(tmp_path)})
    with pytest.raises(EmbeddingConfigError, match="the spec's keras_backend"):
        choose_backend("numpy")


MLPERF_SPEC = '''
from test_embedding_keras_rs import FeatureConfig, TableConfig
{backend}
tables = [TableConfig(name, vocab, 128, optimizer="adagrad", combiner="sum",
                      placement="sparsecore", max_ids_per_partition=8192,
                      max_unique_ids_per_partition=4096)
          for name, vocab in (("0", 40000000), ("1", 39060), ("9", 40000000))]
feature_config = {{t.name + "_id": FeatureConfig(t.name, t, (16384, 1), (16384, 128))
                  for t in tables}}
topology = "v6e-32"
'''


def _spec(tmp_path: Path, backend: str = "") -> str:
    path = tmp_path / "spec.py"
    path.write_text(MLPERF_SPEC.format(backend=backend))
    return str(path)


def test_spec_names_its_backend_and_the_caller_overrides_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    spec = _spec(tmp_path, 'keras_backend = "jax"')
    config = load_sparsecore_spec(spec).config
    assert (config.keras_backend, config.keras_backend_chosen_by, config.mode) == (
        "jax", "the spec's keras_backend", "jax")
    assert [s.max_ids_per_partition for s in stack(config).stacks] == [8192]
    config = load_sparsecore_spec(spec, keras_backend="tensorflow").config
    assert (config.keras_backend, config.mode) == ("tensorflow", "tensorflow")
    plain = _spec(tmp_path)
    assert load_sparsecore_spec(plain).config.keras_backend == "tensorflow"  # Keras' default
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    assert load_sparsecore_spec(plain).config.keras_backend == "jax"


# -- the commands -----------------------------------------------------------------------------


def test_inspect_names_the_backend_and_the_limits_it_gives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    spec = _spec(tmp_path)
    result = run_cli("inspect", spec)
    assert result.exit_code == 0, result.output
    assert "keras_rs API on Keras' tensorflow backend (chosen by Keras' default)" in result.output
    assert "max_ids_per_partition 256" in result.output
    result = run_cli("inspect", "--keras-backend", "jax", spec)
    assert result.exit_code == 0, result.output
    assert "keras_rs API on Keras' jax backend (chosen by --keras-backend), jax stacking" in \
        result.output
    assert "max_ids_per_partition 8192 (TableConfig '0' max_ids_per_partition (the largest" \
        in result.output
    summary = json.loads(run_cli("inspect", "--json", "--keras-backend", "jax", spec).output)
    assert (summary["keras_backend"], summary["allow_id_dropping"]) == ("jax", True)
    assert [s["limits"]["max_unique_ids_per_partition"]["value"]
            for s in summary["stacks"]] == [4096]


def test_validate_rules_speak_of_the_backend_the_spec_runs_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On TensorFlow the tables' limits are dropped (SC004, whose hint names the JAX backend);
    on JAX keras-rs keeps the largest of them, so neither SC004 nor SC003 reports them."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    spec = _spec(tmp_path)
    on_tf = run_cli("validate", "--format", "json", spec)
    codes = [d["rule"] for f in json.loads(on_tf.stdout)["files"] for d in f["diagnostics"]]
    assert codes.count("SC004") == 3, on_tf.output
    assert "KERAS_BACKEND=jax" in on_tf.stdout
    on_jax = run_cli("validate", "--format", "json", "--keras-backend", "jax", spec)
    assert on_jax.exit_code == 0, on_jax.output
    codes = [d["rule"] for f in json.loads(on_jax.stdout)["files"]
                 for d in f["diagnostics"]]
    assert "SC004" not in codes and "SC003" not in codes


def test_every_command_that_reads_a_spec_takes_keras_backend(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    spec = _spec(tmp_path)
    out = tmp_path / "layouts.pbtxt"
    result = run_cli("compile", "--sparsecore", "--keras-backend", "jax", spec, "-o", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_text().count("stacked_table_name: \"0_1_9\"") == 3
    for command in ("validate", "compile", "inspect", "simulate", "plan"):
        assert "--keras-backend [jax|tensorflow]" in run_cli(command, "--help").output, command
    refused = run_cli("inspect", "--keras-backend", "torch", spec)
    assert refused.exit_code == 2 and "'torch' is not one of" in refused.output


def test_a_spec_naming_an_unusable_backend_is_refused_at_its_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    spec = _spec(tmp_path, 'keras_backend = "torch"')
    result = run_cli("inspect", spec)
    assert result.exit_code == 2
    assert f"{spec}:3:1: error: keras backend 'torch' (from the spec's keras_backend)" in \
        result.output


def test_tables_are_converted_by_name_the_first_one_winning() -> None:
    """keras-rs' keras_to_jte_feature_configs keeps one TableSpec per table name: a second
    TableConfig of the same name is the first one's spec (keras-rs 0.4.0, run on JAX: vocabulary
    10 and limit 5 for both features). A table without optimizer is refused (keras-rs fails there
    with an AttributeError)."""
    first = TableConfig("t", 10, 8, optimizer="sgd", placement="sparsecore",
                        max_ids_per_partition=5)
    second = TableConfig("t", 99, 16, optimizer="adam", placement="sparsecore",
                         max_ids_per_partition=7)
    features = {"x": FeatureConfig("x", first, (8, 1), (8, 8)),
                "y": FeatureConfig("y", second, (8, 1), (8, 16))}
    config = keras_rs_config(features, topology="v6e-4", keras_backend="jax")
    assert [(t.name, t.vocabulary_size, t.max_ids_per_partition) for t in config.tables] == [
        ("t", 10, 5)]
    assert [f.table for f in config.features] == ["t", "t"]
    none = {"x": FeatureConfig("x", TableConfig("u", 10, 8, optimizer=None), (8, 1), (8, 8))}
    with pytest.raises(EmbeddingConfigError, match="table 'u': optimizer is None"):
        keras_rs_config(none, topology="v6e-4", keras_backend="jax")


def test_weight_decay_fails_on_tensorflow_and_is_dropped_on_jax(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """keras-rs 0.4.0 on TensorFlow passes a Keras optimizer's weight_decay on, and
    TPUEmbeddingV2 refuses it (SC006, an error); on JAX keras_to_jte_optimizer does not read it
    (Adam(weight_decay=0.004) converts to AdamOptimizerSpec(learning_rate, beta_1, beta_2,
    epsilon) and nothing else): SC006 warns that the tables train without it."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    decayed = json.dumps({"class_name": "Adam", "config": {
        "name": "adam", "learning_rate": 0.01, "weight_decay": 0.004, "clipnorm": None,
        "global_clipnorm": None, "clipvalue": None, "use_ema": False, "ema_momentum": 0.99,
        "ema_overwrite_frequency": None, "loss_scale_factor": None,
        "gradient_accumulation_steps": None, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-07,
        "amsgrad": False}})
    spec = _spec(tmp_path)
    Path(spec).write_text(Path(spec).read_text().replace(
        'optimizer="adagrad"', f"optimizer={decayed}").replace("null", "None")
        .replace("false", "False"))

    def sc006(*options: str) -> list[dict[str, Any]]:
        result = run_cli("validate", "--format", "json", *options, spec)
        return [d for f in json.loads(result.stdout)["files"] for d in f["diagnostics"]
                if d["rule"] == "SC006"]

    (on_tf,) = sc006()
    assert on_tf["severity"] == "error" and "NotImplementedError" in on_tf["message"]
    (on_jax,) = sc006("--keras-backend", "jax")
    assert on_jax["severity"] == "warning"
    assert "keras-rs on JAX drops without a word" in on_jax["message"]
