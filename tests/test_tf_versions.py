"""TensorFlow 2.20's and 2.21's SparseCore stacking, byte for byte (``tf_version``).

The expected values are each version's own answers (``tests/data/diff/tf_versions/``, README.md
there; ``tools/tf_reference/gen_tf_versions.py``):

- ``feeds.json``: 33 table sets (the repository's TensorFlow specs, hand-made sets, seeded random
  ones) fed to each version's stacker by that version's ``TPUEmbeddingV2`` code, with every
  ``AddTable`` call and the bytes of ``GetLayouts()``;
- ``stacker.json.gz``: 2.20's bytes for the 300 table sets whose 2.21 bytes are in
  ``tests/data/sparsecore/tf_stacker_cases.json.gz``, and both versions' at the default limits.

TensorFlow's group strings change from run to run (stored renamed ``g0``, ``g1``, ...) and
tpuemb's are its own, so groups are compared as a partition of the tables. The layouts are
compared byte for byte: no recorded set has two groups at one padded width (whose order would
follow the strings).
"""

from __future__ import annotations

import base64
import gzip
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA, partition

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.base.tf_versions import (
    DEFAULT_TF_VERSION,
    TENSORFLOW_VERSIONS,
    tensorflow_version,
    tf_version_names,
)
from tpuemb_cfg.embedding import (
    Adagrad,
    Adam,
    FeatureConfig,
    SparseCoreEmbeddingConfig,
    TableConfig,
)
from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec, tensorflow_config
from tpuemb_cfg.proto import sparse_core_layout_pb2 as pb
from tpuemb_cfg.session import prepare_sparsecore
from tpuemb_cfg.sparsecore import feed
from tpuemb_cfg.sparsecore.stacker import SparseCoreLayoutStacker
from tpuemb_cfg.sparsecore.summary import layouts_of
from tpuemb_cfg.sparsecore.topology import Topology

ROOT = Path(__file__).resolve().parents[1]
HERE = DATA / "diff" / "tf_versions"
VERSIONS = ("2.20", "2.21")
FEEDS: list[dict[str, Any]] = json.loads((HERE / "feeds.json").read_text())["cases"]
META: dict[str, Any] = json.loads((HERE / "feeds.json").read_text())["meta"]


@cache
def _stacker_data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(gzip.decompress((HERE / "stacker.json.gz").read_bytes()))
    return data


@cache
def _recorded_stacker_cases() -> list[dict[str, Any]]:
    data = json.loads(gzip.decompress((DATA / "sparsecore" / "tf_stacker_cases.json.gz")
                                      .read_bytes()))
    return list(data["cases"])


def _config(case: dict[str, Any]) -> Any:
    """The case's configuration, built with tpuemb's classes as the generator built it with
    TensorFlow's (a spec file is loaded as ``tpuemb`` loads it)."""
    if "spec" in case:
        return load_sparsecore_spec(str(ROOT / case["spec"])).config
    shared = Adagrad(learning_rate=0.1)
    tables = {t["name"]: TableConfig(
        vocabulary_size=t["vocabulary_size"], dim=t["dim"], name=t["name"],
        optimizer=shared if t["optimizer"] == "shared" else Adam(learning_rate=0.01),
        combiner=t["combiner"]) for t in case["tables"]}
    features = {f["name"]: FeatureConfig(tables[f["table"]], output_shape=f["output_shape"],
                                         name=f["name"]) for f in case["features"]}
    sc = SparseCoreEmbeddingConfig(
        disable_table_stacking=case.get("disable_table_stacking", False))
    topology = Topology(chips=case["num_partitions"],
                        sparse_cores_per_chip=case["num_sc_per_partition"])
    return tensorflow_config(features, shared, sc, topology=topology)


# -- the feeds: each version's TPUEmbeddingV2 and stacker ----------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", FEEDS, ids=lambda c: c["id"])
def test_feed_calls_and_layouts_are_each_versions(case: dict[str, Any], version: str) -> None:
    """The constructor, every ``AddTable`` argument (2.20: no ``num_features``) and the
    layouts' bytes of ``layouts_of(config, tf_version=...)``."""
    config = _config(case)
    expected = case["expected"][version]
    init, *added = expected["calls"]
    assert init == ["__init__", {"num_partitions": config.topology.num_partitions,
                                 "sparse_cores_per_partition":
                                     config.topology.sparse_cores_per_device,
                                 "disable_table_stacking": config.disable_table_stacking}]
    recorded = [call for kind, call in added if kind == "AddTable"]
    assert len(recorded) == len(added)
    calls = feed.tensorflow_stacker_calls(config, tf_version=version)
    fields = ("table_name", "table_height", "table_width", "output_samples")
    assert [{k: getattr(c, k) for k in fields} for c in calls] == [
        {k: c[k] for k in fields} for c in recorded]
    assert [c.num_features for c in calls] == [c.get("num_features") for c in recorded]
    assert partition([(c.table_name, c.group) for c in calls]) == partition(
        [(c["table_name"], c["group"]) for c in recorded])

    layouts, stacking = layouts_of(config, tf_version=version)
    assert layouts.SerializeToString(deterministic=True).hex() == expected["layouts_hex"]
    assert stacking == feed.stack(config, tf_version=version)


def test_feeds_cover_the_examples() -> None:
    """The repository's TensorFlow specs are among the recorded feeds, with the slice each
    names (``topology = "v6e-64"``: 64 partitions of 2 SparseCores)."""
    specs = {c["spec"]: (c["num_partitions"], c["num_sc_per_partition"]) for c in FEEDS
             if "spec" in c}
    assert specs == {"examples/sparsecore/v6e_dcnv2.py": (64, 2),
                     "tests/data/sparsecore/api_tf_spec.py": (4, 2)}


def test_the_versions_differ_only_in_the_first_features_table() -> None:
    """In every recorded feed the two versions' layouts differ (2.21 tells the first feature's
    table its batch and feature count) and only there: clearing fields 10 and 11 of 2.21's
    layouts gives 2.20's bytes, so the stacks, offsets and rotations are the same."""
    for case in FEEDS:
        old = bytes.fromhex(case["expected"]["2.20"]["layouts_hex"])
        new = pb.SparseCoreTableLayouts.FromString(
            bytes.fromhex(case["expected"]["2.21"]["layouts_hex"]))
        assert new.SerializeToString(deterministic=True) != old, case["id"]
        changed = [t.table_name for t in new.tables if t.num_features or
                   t.per_sparse_core_batch_size]
        first = [c for kind, c in case["expected"]["2.21"]["calls"][1:] if c["num_features"]]
        assert changed == [c["table_name"] for c in first], case["id"]
        for t in new.tables:
            t.ClearField("num_features")
            t.ClearField("per_sparse_core_batch_size")
        assert new.SerializeToString(deterministic=True) == old, case["id"]


def test_the_v6e_example_by_hand() -> None:
    """examples/sparsecore/v6e_dcnv2.py (v6e-64: 64 partitions of 2 SparseCores, batch 512 per
    replica). Flattened order sorts the keys, so ``brand`` is the first feature: TensorFlow 2.21
    adds ``brand`` with 512 samples and ``num_features=1`` and writes
    ``per_sparse_core_batch_size = 512 / 2 = 256``; 2.20 adds it with 512 samples and writes
    neither. Every other field, and the three stacks, are the same."""
    config = load_sparsecore_spec(str(ROOT / "examples/sparsecore/v6e_dcnv2.py")).config
    old, old_stacking = layouts_of(config, tf_version="2.20")
    new, new_stacking = layouts_of(config, tf_version="2.21")
    assert [(t.table_name, t.per_sparse_core_batch_size, t.num_features) for t in new.tables] == [
        ("brand", 256, 1), ("category", 0, 0), ("item_terms", 0, 0), ("query_terms", 0, 0),
        ("item_id", 0, 0), ("user_id", 0, 0)]
    assert all(t.per_sparse_core_batch_size == t.num_features == 0 for t in old.tables)
    assert [s.name for s in old_stacking.stacks] == [s.name for s in new_stacking.stacks] == [
        "brand_category", "item_terms_query_terms", "item_id_user_id"]
    assert [(t.name, t.output_samples, t.num_features) for t in old_stacking.stacks[0].tables] == [
        ("brand", 512, 0), ("category", 0, 0)]
    assert [(t.name, t.output_samples, t.num_features) for t in new_stacking.stacks[0].tables] == [
        ("brand", 512, 1), ("category", 0, 0)]
    assert old_stacking.features == new_stacking.features


def test_prepare_sparsecore_stacks_with_the_version() -> None:
    setup = prepare_sparsecore(str(ROOT / "examples/sparsecore/v6e_dcnv2.py"), tf_version="2.20")
    assert setup.stacking == feed.stack(setup.config, tf_version="2.20")
    assert setup.stacking != feed.stack(setup.config)
    with pytest.raises(InputError, match=r"'2\.19' is not modelled: tpuemb knows 2\.20, 2\.21"):
        prepare_sparsecore(str(ROOT / "examples/sparsecore/v6e_dcnv2.py"), tf_version="2.19")


# -- the stacker itself ---------------------------------------------------------------------------

@pytest.mark.parametrize("index", range(300))
def test_stacker_replays_tensorflow_220(index: int) -> None:
    """The 300 recorded table sets (2.21's inputs) through 2.20's binding: no ``num_features``."""
    case = _recorded_stacker_cases()[index]
    expected = _stacker_data()["replayed_2.20"][index]
    assert expected["id"] == case["id"]
    s = SparseCoreLayoutStacker(**case["constructor"], tf_version="2.20")
    for method, value in case["setters"]:
        getattr(s, method)(value)
    for table in case["tables"]:
        s.AddTable(**{k: v for k, v in table.items() if k != "num_features"})
    assert base64.b64encode(s.GetLayouts().SerializeToString(deterministic=True)).decode() == (
        expected["layouts_b64"])


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", _stacker_data()["boundaries"], ids=lambda c: c["id"])
def test_default_limits_are_the_same_in_both(case: dict[str, Any], version: str) -> None:
    """Two tables of one SparseCore at and just below the 2 MiB activation and 2 GiB shard
    limits: the second joins the first exactly when the totals stay below, in both versions."""
    s = SparseCoreLayoutStacker(1, False, 1, tf_version=version)
    extra = {"num_features": 1} if version == "2.21" else {}
    for name, samples in zip("ab", case["samples"], strict=True):
        s.AddTable(name, case["height"], case["width"], "g", samples, **extra)
    out = base64.b64encode(s.GetLayouts().SerializeToString(deterministic=True)).decode()
    assert out == case["expected"][version]
    joined = [t.stacked_table_name for t in s.GetLayouts().tables] == ["a_b", "a_b"]
    assert joined == case["id"].endswith("just_below")


def _signature_names(text: str) -> list[str]:
    return re.findall(r"(\w+): [\w.:]+", text.split("(", 1)[1])[1:]  # after self


def test_add_table_takes_each_versions_arguments() -> None:
    """2.20's binding: five arguments, ``num_features`` refused; 2.21's: six, required (the
    TypeErrors pybind11 raises). The recorded signatures say which."""
    assert _signature_names(META["2.20"]["add_table_signature"]) == [
        "table_name", "table_height", "table_width", "group", "output_samples"]
    assert _signature_names(META["2.21"]["add_table_signature"]) == [
        "table_name", "table_height", "table_width", "group", "output_samples", "num_features"]
    for version in TENSORFLOW_VERSIONS:
        assert version.add_table_num_features == ("num_features" in _signature_names(
            META[version.name]["add_table_signature"]))
    with pytest.raises(TypeError, match=r"TensorFlow 2\.20's AddTable takes no num_features"):
        SparseCoreLayoutStacker(1, False, 1, tf_version="2.20").AddTable("a", 8, 8, "g", 8, 1)
    with pytest.raises(TypeError, match="missing num_features"):
        SparseCoreLayoutStacker(1, False, 1).AddTable("a", 8, 8, "g", 8)


def test_layout_fields_of_each_version() -> None:
    """2.21's proto adds ``fdo_key`` (12) to 2.20's eleven fields; tpuemb's proto is 2.21's."""
    ours = [[f.number, f.name] for f in pb.SparseCoreTableLayout.DESCRIPTOR.fields]
    assert META["2.21"]["layout_fields"] == ours
    assert META["2.20"]["layout_fields"] == [f for f in ours if f[1] != "fdo_key"]


def test_version_names() -> None:
    assert tf_version_names() == VERSIONS
    assert DEFAULT_TF_VERSION == "2.21"
    assert tensorflow_version("2.21.0") is tensorflow_version(" 2.21 ")
    assert not tensorflow_version("2.20").layout_batch_fields
    for bad in ("2.19", "3", "2.2", "latest", None):
        with pytest.raises(ValueError, match="is not modelled"):
            tensorflow_version(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not modelled"):
        SparseCoreLayoutStacker(1, False, 1, tf_version="1.15")
