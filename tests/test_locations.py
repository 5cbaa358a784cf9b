"""Field paths -> line:column of a text file (positions counted by hand below)."""

from __future__ import annotations

from tpuemb_cfg import TPUEmbeddingConfiguration
from tpuemb_cfg.formats.locations import parent_path, scan_locations

TEXT = """\
# comment with table_descriptor { inside
table_descriptor {
  name: "a # not a comment"  # trailing
  optimization_parameters < learning_rate { dynamic { tag: 3 } } >
}
table_descriptor { name: 'b' 'c' vocabulary_size: 5 }
feature_descriptor { input_shape: [16, 0] table_id: 1 }
feature_descriptor: { input_shape: 4; input_shape: 5, name: "f" }
"""


def _locations():
    return scan_locations(TEXT, TPUEmbeddingConfiguration.DESCRIPTOR)


def test_positions_of_fields_and_repeated_elements() -> None:
    loc = _locations()
    assert loc.get("table_descriptor[0]") == (2, 1)
    assert loc.get("table_descriptor[0].name") == (3, 3)
    assert loc.get("table_descriptor[0].optimization_parameters") == (4, 3)
    lr = "table_descriptor[0].optimization_parameters.learning_rate"
    assert loc.get(lr) == (4, 29)
    assert loc.get(lr + ".dynamic") == (4, 45)
    assert loc.get(lr + ".dynamic.tag") == (4, 55)
    assert loc.get("table_descriptor[1]") == (6, 1)
    assert loc.get("table_descriptor[1].name") == (6, 20)
    assert loc.get("table_descriptor[1].vocabulary_size") == (6, 34)
    assert loc.get("feature_descriptor[0].input_shape[0]") == (7, 36)
    assert loc.get("feature_descriptor[0].input_shape[1]") == (7, 40)
    assert loc.get("feature_descriptor[0].table_id") == (7, 43)
    assert loc.get("feature_descriptor[1]") == (8, 1)
    assert loc.get("feature_descriptor[1].input_shape[0]") == (8, 23)
    assert loc.get("feature_descriptor[1].input_shape[1]") == (8, 39)
    assert loc.get("feature_descriptor[1].name") == (8, 55)


def test_missing_fields_fall_back_to_the_nearest_ancestor() -> None:
    loc = _locations()
    assert loc.get("table_descriptor[1].dimension") is None
    assert loc.nearest("table_descriptor[1].optimization_parameters.adam.beta1") == (6, 1)
    assert loc.nearest("table_descriptor[7].name") == (1, 1)
    assert loc.nearest("mode") == (1, 1)


def test_comments_by_line() -> None:
    loc = _locations()
    assert loc.line_comments == {1: [" comment with table_descriptor { inside"], 3: [" trailing"]}


def test_parent_path() -> None:
    assert parent_path("a.b[2].c") == "a.b[2]"
    assert parent_path("a.b[2]") == "a.b"
    assert parent_path("a") == ""
