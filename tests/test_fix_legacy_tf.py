"""`validate --fix` of legacy configurations writes exactly TensorFlow's own conversion.

TensorFlow converts a legacy configuration itself when the TPU system starts
(``PopulateFeatureDescriptors``, ``tpu_embedding_configuration_proto_rewrite.cc``): it keeps
``batch_size_per_tensor_core`` and every ``num_features`` and appends, per table, one feature of
``[B * num_features]``. The fixed file must hold exactly those features; it drops the legacy
fields because a file with both is what the same rewrite rejects (MODE001/MODE002).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, ROOT, golden

from tpuemb_cfg.formats.io import load, read_source
from tpuemb_cfg.validation.fix import fix_source
from tpuemb_cfg.validation.validator import validate

DATA = ROOT / "tests" / "data" / "legacy"
EXPECTED: dict[str, Any] = json.loads((DATA / "expected_rewrites.json").read_text())["cases"]


def _source_path(name: str) -> Path:
    if name.startswith("golden:"):
        return golden(*name.removeprefix("golden:").split("/"))
    return ROOT / name


def tensorflow_rewrite(config: Any) -> Any:
    """An independent restatement of TensorFlow's legacy branch of
    ``PopulateMissingFieldsInTPUEmbeddingConfig``: validate, then append one feature per table."""
    out = type(config)()
    out.CopyFrom(config)
    assert not out.feature_descriptor and out.batch_size_per_tensor_core > 0
    for t, table in enumerate(out.table_descriptor):
        assert table.num_features > 0
        feature = out.feature_descriptor.add()
        feature.table_id = t
        feature.input_shape.append(out.batch_size_per_tensor_core * table.num_features)
    return out


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fix_equals_tensorflow_rewrite(name: str, tmp_path: Path) -> None:
    path = tmp_path / Path(name.split(":")[-1]).name
    shutil.copyfile(_source_path(name), path)
    original = load(str(path))
    result = fix_source(read_source(str(path)), {"legacy"})
    assert result.applied == ["converted legacy style to feature descriptors"]
    fixed = result.message
    got = [[f.table_id, list(f.input_shape)] for f in fixed.feature_descriptor]
    assert got == EXPECTED[name]
    assert all(f.name == "" for f in fixed.feature_descriptor)

    # The fixed file is TensorFlow's rewritten configuration without the legacy fields.
    rewritten = tensorflow_rewrite(original)
    fixed_with_legacy = type(fixed)()
    fixed_with_legacy.CopyFrom(fixed)
    fixed_with_legacy.batch_size_per_tensor_core = original.batch_size_per_tensor_core
    for table, before in zip(
        fixed_with_legacy.table_descriptor, original.table_descriptor, strict=True
    ):
        table.num_features = before.num_features
    assert fixed_with_legacy.SerializeToString(deterministic=True) == rewritten.SerializeToString(
        deterministic=True
    )
    # What was written parses back to it and is no longer legacy style.
    path.write_bytes(result.data)
    assert load(str(path)).SerializeToString(deterministic=True) == fixed.SerializeToString(
        deterministic=True
    )
    assert not [d for d in validate(str(path), select=["MODE"]) if d.rule != "MODE005"]


def test_fix_keeps_comments_of_the_example(tmp_path: Path) -> None:
    path = tmp_path / "video_legacy.pbtxt"
    shutil.copyfile(EXAMPLES / "video_legacy.pbtxt", path)
    result = fix_source(read_source(str(path)), {"legacy"})
    assert result.text is not None
    assert result.text.startswith((EXAMPLES / "video_legacy.pbtxt").read_text().splitlines()[0])
    assert not any("comments were not kept" in note for note in result.notes)
