"""``tpuemb diff``'s semantic differences (review/facts.py, review/semantic.py), issue 37 item 1.

Every expectation is read off the small configurations in ``tests/data/diff/semantic/`` (their
line numbers counted by hand) and off the platform facts the issue names: a v5p chip has 4
SparseCores, a v6e chip 2; v5p-64 counts TensorCores (32 chips, 2 TensorCores each) and v6e-32
chips; both have 4 chips per host, so 8 hosts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.review.facts import load_facts
from tpuemb_cfg.review.record import Change
from tpuemb_cfg.review.semantic import semantic_changes

DATA = Path(__file__).parent / "data" / "diff" / "semantic"
BASE = (DATA / "base.pbtxt").read_text()
KERAS_RS = Path(__file__).parents[1] / "examples" / "sparsecore" / "keras_rs_dcnv2_v6e32.py"


def _diff(old_text: str, new_text: str) -> list[Change]:
    """OLD and NEW as files read from git would be: bytes with a name to show."""
    return semantic_changes(load_facts(old_text.encode(), name="HEAD:config.pbtxt"),
                            load_facts(new_text.encode(), name="config.pbtxt"))


def _edited(old: str, new: str) -> str:
    assert old in BASE
    return BASE.replace(old, new)


def test_identical_configurations_have_no_difference() -> None:
    assert _diff(BASE, BASE) == []


def test_a_vocabulary_change_at_both_lines() -> None:
    changes = _diff(BASE, _edited("vocabulary_size: 1000\n", "vocabulary_size: 2000\n"))
    assert changes == [Change(
        "table", "changed", "user", "vocabulary_size", 1000, 2000,
        "table 'user': vocabulary_size 1000 -> 2000",
        new_location=("config.pbtxt", 6, 3), old_location=("HEAD:config.pbtxt", 6, 3))]


def test_a_table_added_and_removed() -> None:
    ads = ('table_descriptor {\n  name: "ads"\n  vocabulary_size: 300\n  dimension: 8\n'
           '  optimization_parameters { stochastic_gradient_descent {} '
           'learning_rate { constant: 0.5 } }\n}\n')
    grown = BASE + ads  # the table starts at line 24
    added = _diff(BASE, grown)
    assert [(c.subject, c.kind, c.name, c.new_location, c.old_location) for c in added] == [
        ("table", "added", "ads", ("config.pbtxt", 24, 1), None)]
    assert added[0].message == ("table 'ads' added (300 x 8, optimizer "
                                "stochastic_gradient_descent)")
    assert added[0].new["learning_rate"] == 0.5 and added[0].old is None
    removed = _diff(grown, BASE)
    assert [(c.subject, c.kind, c.name, c.new_location, c.old_location) for c in removed] == [
        ("table", "removed", "ads", None, ("HEAD:config.pbtxt", 24, 1))]


def test_a_rename_is_said_once_and_its_features_follow() -> None:
    changes = _diff(BASE, _edited('name: "user"', 'name: "member"'))
    assert changes == [Change(
        "table", "renamed", "member", "name", "user", "member",
        "table 'user' renamed to 'member' (same shape and optimizer: 1000 x 16, optimizer "
        "adagrad; features user_id follow)",
        new_location=("config.pbtxt", 4, 1), old_location=("HEAD:config.pbtxt", 4, 1))]


def test_a_table_of_another_shape_is_not_a_rename() -> None:
    new = _edited('name: "user"\n  vocabulary_size: 1000', 'name: "member"\n  vocabulary_size: 999')
    assert [(c.subject, c.kind, c.name) for c in _diff(BASE, new)] == [
        ("table", "added", "member"), ("table", "removed", "user"),
        ("feature", "changed", "user_id")]


def test_adagrad_to_sgd_drops_the_accumulator() -> None:
    changes = _diff(BASE, _edited("adagrad {}", "stochastic_gradient_descent {}"))
    assert changes == [Change(
        "optimizer", "changed", "user", "optimizer", "adagrad", "stochastic_gradient_descent",
        "table 'user': optimizer adagrad -> stochastic_gradient_descent (slot 'accumulators' "
        "dropped: its state is lost)",
        new_location=("config.pbtxt", 9, 5), old_location=("HEAD:config.pbtxt", 9, 5))]


def test_a_hyper_parameter_change_in_float32() -> None:
    # 0.9 and 0.8 are read as float32 (0.8999999761...) and shown with the digits written.
    changes = _diff(BASE, _edited("beta1: 0.9 ", "beta1: 0.8 "))
    assert changes == [Change(
        "hyper_parameter", "changed", "item", "optimizer.beta1", 0.9, 0.8,
        "table 'item': optimizer.beta1 0.9 -> 0.8",
        new_location=("config.pbtxt", 18, 12), old_location=("HEAD:config.pbtxt", 18, 12))]


def test_a_learning_rate_tag_change() -> None:
    changes = _diff(BASE, _edited("dynamic { tag: 1 }", "dynamic { tag: 0 }"))
    assert changes == [Change(
        "learning_rate", "changed", "item", "learning_rate.tag", 1, 0,
        "table 'item': learning_rate.tag 1 -> 0",
        new_location=("config.pbtxt", 19, 31), old_location=("HEAD:config.pbtxt", 19, 31))]


def test_a_constant_rate_becoming_dynamic() -> None:
    old = _edited("learning_rate { dynamic { tag: 0 } }", "learning_rate { constant: 0.05 }")
    changes = _diff(old, BASE)
    assert [(c.field, c.old, c.new) for c in changes] == [
        ("learning_rate", 0.05, "dynamic"), ("learning_rate.tag", None, 0)]


def test_hosts_and_sharding() -> None:
    new = _edited("num_hosts: 4", "num_hosts: 8") + "sharding_strategy: MOD\n"
    changes = _diff(BASE, new)
    assert changes == [
        Change("setting", "changed", "sharding_strategy", "sharding_strategy", "DIV_DEFAULT",
               "MOD", "setting: sharding_strategy DIV_DEFAULT -> MOD",
               new_location=("config.pbtxt", 24, 1), old_location=None),
        Change("topology", "changed", "topology", "hosts", 4, 8, "topology: hosts 4 -> 8",
               new_location=("config.pbtxt", 1, 1), old_location=("HEAD:config.pbtxt", 1, 1)),
    ]


def test_a_schedule_change_in_a_toml_spec_read_from_git() -> None:
    text = (DATA / "warmup.toml").read_text()
    old = load_facts(text.encode(), name="HEAD:specs/warmup.toml")
    new = load_facts(text.replace("peak = 0.05", "peak = 0.1").encode(), name="specs/warmup.toml")
    (change,) = semantic_changes(old, new)
    assert (change.subject, change.name, change.field) == (
        "learning_rate", "user", "learning_rate.schedule")
    assert "peak=0.05" in change.old and "peak=0.1" in change.new
    # at the optimizer that names the schedule ([optimizers.sparse], line 11)
    assert change.new_location == ("specs/warmup.toml", 11, 1)
    assert change.old_location == ("HEAD:specs/warmup.toml", 11, 1)


def test_v5p_64_to_v6e_32() -> None:
    changes = semantic_changes(DATA / "jax_v5p64.py", DATA / "jax_v6e32.py")
    assert [(c.subject, c.field, c.old, c.new) for c in changes] == [
        ("topology", "kind", "v5p", "v6e"),
        ("topology", "sparse_cores", 128, 64),
        ("topology", "sparse_cores_per_chip", 4, 2),
        ("topology", "sparse_cores_per_device", 4, 2),
    ]
    assert {c.new_location for c in changes} == {(str(DATA / "jax_v6e32.py"), 3, 1)}
    assert {c.old_location for c in changes} == {(str(DATA / "jax_v5p64.py"), 3, 1)}


def test_a_legacy_message_against_a_sparsecore_spec() -> None:
    old, new = DATA / "legacy_small.pbtxt", DATA / "jax_v6e32.py"
    changes = semantic_changes(old, new)
    # The optimizer, rate, width, feature and hosts/devices agree; the pbtxt says nothing of
    # the slot's initial value and jax-tpu-embedding nothing of gradient accumulation.
    assert changes == [
        Change("table", "changed", "user", "vocabulary_size", 2000, 1000,
               "table 'user': vocabulary_size 2000 -> 1000",
               new_location=(str(new), 5, 1), old_location=(str(old), 5, 3)),
        Change("setting", "changed", "configuration", "kind",
               "a legacy TPUEmbeddingConfiguration (text)",
               "a SparseCore configuration of jax-tpu-embedding",
               "the kind of configuration changed: a legacy TPUEmbeddingConfiguration (text) -> "
               "a SparseCore configuration of jax-tpu-embedding (compared where both say "
               "something)",
               new_location=(str(new), 7, 1), old_location=(str(old), 3, 1)),
    ]


def test_keras_rs_on_tensorflow_and_on_jax() -> None:
    tf = load_facts(KERAS_RS, keras_backend="tensorflow")
    jax = load_facts(KERAS_RS, keras_backend="jax")
    changes = semantic_changes(tf, jax)
    # keras-rs on TensorFlow names a feature by its path in feature_config ("0_id"), on JAX by
    # FeatureConfig.name ("0"); the nine tables (their shapes, Adagrad, 0.0034) are the same.
    renames = [(c.old, c.new) for c in changes if c.kind == "renamed"]
    assert sorted(renames) == sorted((f"{n}_id", n) for n in
                                     ("0", "1", "9", "10", "11", "19", "20", "21", "22"))
    assert all(c.subject == "feature" for c in changes if c.kind == "renamed")
    assert [(c.field, c.old, c.new) for c in changes if c.kind != "renamed"] == [
        ("stacking", "tensorflow", "jax"),
        ("keras_backend", "tensorflow", "jax"),
        ("limits_dropped_by_conversion", True, False),  # SC004: TensorFlow drops the limits
        ("stack_limits_from_tables", False, True),  # JAX: a stack's limits are its tables'
    ]
    # the features are all built at the feature_config assignment (line 40)
    assert {c.new_location for c in changes} == {(str(KERAS_RS), 40, 1)}


def test_the_spec_variable_chooses_the_backend_and_the_option_overrides_it(
        tmp_path: Path) -> None:
    spec = tmp_path / "model.py"
    spec.write_text(KERAS_RS.read_text() + 'keras_backend = "jax"\n')
    assert load_facts(spec).settings.values["keras_backend"] == "jax"
    assert load_facts(spec, keras_backend="tensorflow").settings.values["keras_backend"] == \
        "tensorflow"
    data = spec.read_bytes()
    from_git = load_facts(data, name="HEAD:model.py")
    assert from_git.settings.values["keras_backend"] == "jax"
    assert from_git.tables[0].location == ("HEAD:model.py", 40, 1)


def test_a_sparsecore_spec_read_from_git_is_placed_at_its_display_name() -> None:
    data = (DATA / "jax_v5p64.py").read_bytes()
    facts = load_facts(data, name="HEAD:tests/jax_v5p64.py")
    (table,) = facts.tables
    assert table.location == ("HEAD:tests/jax_v5p64.py", 5, 1)
    assert table.where("optimizer") == ("HEAD:tests/jax_v5p64.py", 4, 1)
    assert facts.topology.location == ("HEAD:tests/jax_v5p64.py", 3, 1)
    assert facts.features[0].location == ("HEAD:tests/jax_v5p64.py", 7, 1)
    json.dumps(facts.as_json())  # JSON-able throughout


def test_facts_of_loaded_objects() -> None:
    from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec
    from tpuemb_cfg.formats.io import load

    message = load(DATA / "base.pbtxt")
    facts = load_facts(message)
    assert (facts.path, facts.kind, [t.name for t in facts.tables]) == (
        "<message>", "legacy", ["user", "item"])
    assert facts.tables[0].location is None
    config = load_sparsecore_spec(DATA / "jax_v6e32.py", legacy=False).config
    assert load_facts(config).tables[0].location == (str(DATA / "jax_v6e32.py"), 5, 1)
    assert semantic_changes(message, DATA / "base.pbtxt") == []


@pytest.mark.parametrize(("data", "name", "where"), [
    (None, "missing.pbtxt", ("missing.pbtxt", None)),
    (b'table_descriptor {\n  name: "a"\n  vocabulary_size: x\n}\n', "HEAD:c.pbtxt",
     ("HEAD:c.pbtxt", 3)),
    (b"x = (\n", "HEAD:spec.py", ("HEAD:spec.py", 1)),
    (b"topology = 'v6e-8'\nfeature_config = undefined\n", "HEAD:sc.py", ("HEAD:sc.py", 2)),
    (b"[tables.a]\nvocabulary_size = \n", "HEAD:s.toml", ("HEAD:s.toml", 2)),
])
def test_bad_input_is_one_input_error(data: bytes | None, name: str,
                                      where: tuple[str, int | None], tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        if data is None:  # a file that is not there
            load_facts(tmp_path / name)
        else:
            load_facts(data, name=name)
    shown = where[0] if data is not None else str(tmp_path / name)
    assert (caught.value.path, caught.value.line) == (shown, where[1])
    assert "tpuemb-diff-" not in str(caught.value)  # the temporary copy is never named


TF_SPEC = '''\
from tpuemb_cfg.embedding import Adagrad, FeatureConfig, TableConfig

topology = "v6e-8"


def rate():
    return 0.1


optimizer = Adagrad(learning_rate=rate)
user = TableConfig(vocabulary_size=1000, dim=16, name="user", combiner="sum")
feature_config = {"user": FeatureConfig(user, output_shape=[64])}
'''


def test_a_rate_function_is_compared_by_its_code_not_its_line(tmp_path: Path) -> None:
    def facts(text: str, name: str) -> object:
        return load_facts(text.encode(), name=name)

    moved = TF_SPEC.replace('topology = "v6e-8"\n', 'topology = "v6e-8"\n\n\n')
    assert semantic_changes(facts(TF_SPEC, "HEAD:m.py"), facts(moved, "m.py")) == []
    edited = TF_SPEC.replace("return 0.1", "return 0.2")
    (change,) = semantic_changes(facts(TF_SPEC, "HEAD:m.py"), facts(edited, "m.py"))
    assert (change.subject, change.name, change.field) == (
        "learning_rate", "user", "learning_rate.schedule")
    assert change.old.startswith("rate (code ") and change.new.startswith("rate (code ")
    assert change.old != change.new
    # at the optimizer (line 10) that takes the function
    assert (change.new_location, change.old_location) == (("m.py", 10, 1), ("HEAD:m.py", 10, 1))


@pytest.mark.parametrize(("compiled", "spec"), [
    ("specs/ranking.pbtxt", "specs/ranking.py"),
    ("specs/video_retrieval.pbtxt", "specs/video_retrieval.toml"),
    ("specs/dlrm_warmup.pbtxt", "specs/dlrm_warmup.py"),
    ("models/dcnv2_mlperf.pbtxt", "models/dcnv2_mlperf.py"),
])
def test_a_spec_and_the_message_it_compiles_to_do_not_differ(compiled: str, spec: str) -> None:
    # each .pbtxt is `tpuemb compile` of its spec: the same tables, rates and settings; the
    # spec's combiners, initializers and schedules are what the message cannot hold
    examples = Path(__file__).parents[1] / "examples"
    assert semantic_changes(examples / compiled, examples / spec) == []


@pytest.mark.parametrize("fmt", ["binary", "json"])
def test_binary_and_json_read_from_git_hold_the_same_facts(fmt: str) -> None:
    from tpuemb_cfg.formats.io import load, serialize

    data = serialize(load(DATA / "base.pbtxt"), fmt)
    name = "HEAD:config.pb" if fmt == "binary" else "HEAD:config.json"
    facts = load_facts(data, name=name)
    assert facts.form == fmt and facts.tables[0].location is None  # no lines in these forms
    assert semantic_changes(facts, DATA / "base.pbtxt") == []


def test_a_stack_limit_changed_added_and_removed_at_its_key() -> None:
    spec = Path(__file__).parents[1] / "examples" / "sparsecore" / "v6e_dcnv2.py"
    text = spec.read_text()
    new = (text.replace('"item_terms_query_terms": 2048,', '"item_terms_query_terms": 4096,')
               .replace('        "brand_category": 256,\n', '        "brand_cat": 256,\n'))
    changes = semantic_changes(load_facts(text.encode(), name="HEAD:v6e.py"),
                               load_facts(new.encode(), name="v6e.py"))
    key = 'max_unique_ids_per_table["brand_cat"]'
    assert [(c.subject, c.kind, c.field, c.old, c.new, c.new_location, c.old_location)
            for c in changes] == [
        ("limit", "changed", 'max_ids_per_table["item_terms_query_terms"]', 2048, 4096,
         ("v6e.py", 50, 9), ("HEAD:v6e.py", 50, 9)),
        ("limit", "added", key, None, 256, ("v6e.py", 56, 9), None),
        ("limit", "removed", 'max_unique_ids_per_table["brand_category"]', 256, None, None,
         ("HEAD:v6e.py", 56, 9)),
    ]


def test_adam_to_adagrad_momentum_names_each_slot() -> None:
    # Adam keeps momenta and velocities; AdagradMomentum accumulators and momenta (TensorFlow's
    # slot names): velocities go, accumulators come. Adam's beta1.. are not listed one by one.
    new = _edited("adam { beta1: 0.9 beta2: 0.999 epsilon: 1e-07 }",
                  "adagrad_momentum { momentum: 0.9 }")
    (change,) = _diff(BASE, new)
    assert change.message == (
        "table 'item': optimizer adam -> adagrad_momentum (slot 'velocities' dropped: its state "
        "is lost; slot 'accumulators' added: starts from the initial value)")
    assert change.new_location == ("config.pbtxt", 18, 5)


def test_a_schedule_made_by_a_factory_is_compared_by_its_values() -> None:
    factory = ("def decay(rate):\n    def schedule():\n        return rate\n    return schedule\n"
               "\n\n")
    old = TF_SPEC.replace("def rate():\n    return 0.1\n", factory + "rate = decay(0.1)\n")
    new = old.replace("decay(0.1)", "decay(0.2)")
    assert old != TF_SPEC
    (change,) = semantic_changes(load_facts(old.encode(), name="HEAD:m.py"),
                                 load_facts(new.encode(), name="m.py"))
    assert change.field == "learning_rate.schedule"
    assert change.old.startswith("decay.<locals>.schedule (code ") and change.old != change.new
