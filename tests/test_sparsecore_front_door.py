"""The front door of SparseCore specs (``tpuemb_cfg.sparsecore.checks``): every value a spec gives
is checked once, where the spec is read, and a bad one is one line at the spec line that gave it
- a ``PARSE001`` finding in ``tpuemb validate`` (exit 2), one ``error:`` line with exit 2 in
``inspect``, ``compile --sparsecore``, ``simulate`` and ``plan`` - never a traceback, nine
internal errors of the rules, or a wrong answer with exit 0.

Each spec below marks the line at fault with ``#@`` (``rulecheck.marked`` finds it), so the
expected line is read from the text, not written down separately.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import zipf_sample
from rulecheck import invoke, marked, write_file

from tpuemb_cfg.embedding.nest import flatten_with_paths
from tpuemb_cfg.embedding.sparsecore import is_sparsecore_spec, tensorflow_config
from tpuemb_cfg.sparsecore import jte
from tpuemb_cfg.sparsecore.checks import INT32_MAX, INT64_MAX, NAME_LIMIT, check_config

JAX = """\
from tpuemb_cfg.sparsecore.jte import AdagradOptimizerSpec, FeatureSpec, TableSpec

a = TableSpec(name="a", vocabulary_size=1000, embedding_dim=16, initializer=None,
              optimizer=AdagradOptimizerSpec(learning_rate=0.1), combiner="sum")
b = TableSpec(name="b", vocabulary_size=50, embedding_dim=16, initializer=None,
              optimizer=AdagradOptimizerSpec(learning_rate=0.1), combiner="sum")
feature_specs = [
    FeatureSpec(name="fa", table_spec=a, input_shape=(32, 1), output_shape=(32, 16)),
    FeatureSpec(name="fb", table_spec=b, input_shape=(32, 1), output_shape=(32, 16)),
]
global_device_count = 2
num_sc_per_device = 4
"""

TF = """\
from tpuemb_cfg.embedding import Adagrad, FeatureConfig, TableConfig

user = TableConfig(vocabulary_size=1000, dim=8, name="user", optimizer=Adagrad(0.1))
feature_config = {"user_id": FeatureConfig(user, output_shape=[32])}
topology = "v6e-4"
"""

#: The commands that read a SparseCore spec (the spec is refused before ``plan``'s sample is
#: opened).
COMMANDS = (("inspect",), ("compile", "--sparsecore"), ("simulate", "--steps", "1"),
            ("plan", "--ids", os.devnull))


def _spec(tmp_path: Path, text: str, name: str = "spec.py") -> tuple[str, int]:
    """The spec written, and the line marked ``#@`` in it."""
    (line, _), = marked(text)
    return str(write_file(tmp_path, text, name)), line


def _refused_everywhere(tmp_path: Path, text: str, *needles: str) -> None:
    """``validate`` reports one PARSE001 at the marked line (exit 2) and every other command
    one error line there (exit 2); each message holds ``needles``."""
    path, line = _spec(tmp_path, text)
    result = invoke("validate", path)
    assert result.exit_code == 2, result.output
    errors = [x for x in result.output.splitlines() if "error[" in x]
    assert len(errors) == 1 and errors[0].startswith(f"{path}:{line}:"), result.output
    assert "PARSE001" in errors[0] and "internal error" not in result.output
    for needle in needles:
        assert needle in errors[0], errors[0]
    for command in COMMANDS:
        result = invoke(*command, path)
        assert result.exit_code == 2, (command, result.output)
        assert "Traceback" not in result.output, (command, result.output)
        assert result.output.startswith(f"{path}:{line}:"), (command, result.output)
        assert len(result.output.strip().splitlines()) == 1, (command, result.output)
        for needle in needles:
            assert needle in result.output, (command, result.output)


def _jax(**edits: str) -> str:
    text = JAX
    for old, new in edits.items():
        assert old in text
        text = text.replace(old, new, 1)
    return text


def _at_a(old: str, new: str) -> str:
    """The jax spec with ``old`` replaced in table ``a``, whose line is marked."""
    head = "initializer=None,\n"
    text = JAX.replace(head, "initializer=None,  #@\n", 1)
    assert old in text
    return text.replace(old, new, 1)


# -- 1. the limit callables -----------------------------------------------------------------------


@pytest.mark.parametrize(("value", "needle"), [
    ("5", "must be a callable"),
    ("lambda name, samples: 1 // 0", "raised ZeroDivisionError"),
    ("lambda name, samples: None", "returned None"),
    ("lambda name, samples: 2.7", "returned 2.7"),
    ("lambda name, samples: 2**40", "does not fit a C++ int32_t"),
])
def test_a_limit_callable_that_is_not_one_or_returns_no_int_is_refused(
        tmp_path: Path, value: str, needle: str) -> None:
    text = JAX + f"stack_to_max_ids_per_partition = {value}  #@\n"
    _refused_everywhere(tmp_path, text, "stack_to_max_ids_per_partition", needle)


def test_a_limit_callable_s_float_is_refused_by_the_library() -> None:
    specs = _library_specs()
    config = jte.feature_specs_to_config(
        specs, global_device_count=2, num_sc_per_device=4,
        stack_to_max_unique_ids_per_partition=lambda name, samples: 2.7)
    with pytest.raises(ValueError, match=r"stack_to_max_unique_ids_per_partition\('a_b', 64\) "
                       r"returned 2.7 \(float\); it must return an int"):
        jte.stack_config(config)
    # A good callable is still called once per stack of several tables and its value kept.
    good = jte.feature_specs_to_config(specs, global_device_count=2, num_sc_per_device=4,
                                       stack_to_max_ids_per_partition=lambda n, s: s + 1)
    (stack,) = jte.stack_config(good).stacks
    assert stack.max_ids_per_partition == 32 + 32 + 1


def _library_specs() -> list[Any]:
    opt = jte.AdagradOptimizerSpec(learning_rate=0.1)
    tables = [jte.TableSpec(name=n, vocabulary_size=v, embedding_dim=16, initializer=None,
                            optimizer=opt, combiner="sum") for n, v in (("a", 1000), ("b", 50))]
    return [jte.FeatureSpec(name=f"f{t.name}", table_spec=t, input_shape=(32, 1),
                            output_shape=(32, 16)) for t in tables]


# -- 2 and 9. the jax tables' values ---------------------------------------------------------------


@pytest.mark.parametrize(("old", "new", "needle"), [
    ('name="a"', "name=5", "`name` must be a str; received 5"),
    ("vocabulary_size=1000", "vocabulary_size=-5", "`vocabulary_size` must be at least 1"),
    ("vocabulary_size=1000", 'vocabulary_size="1000"',
     "`vocabulary_size` must be an int; received '1000'"),
    ("vocabulary_size=1000", "vocabulary_size=1000.0", "`vocabulary_size` must be an int"),
    ("embedding_dim=16", "embedding_dim=0", "`embedding_dim` must be at least 1"),
    ('combiner="sum"', 'combiner="avg"', "`combiner` must be one of sum, mean, sqrtn"),
])
def test_a_jax_table_with_a_wrong_value_is_refused_at_its_line(
        tmp_path: Path, old: str, new: str, needle: str) -> None:
    _refused_everywhere(tmp_path, _at_a(old, new), needle)


class _Table:
    """A table spec by attribute names only, as jax-tpu-embedding's own (unchecked) one."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class _Feature(_Table):
    pass


@pytest.mark.parametrize(("field", "value", "error", "needle"), [
    ("vocabulary_size", -5, ValueError, "`vocabulary_size` must be at least 1"),
    ("vocabulary_size", "1000", TypeError, "`vocabulary_size` must be an int"),
    ("vocabulary_size", 2**70, ValueError, "does not fit a C++ int64_t"),
    ("embedding_dim", 0, ValueError, "`embedding_dim` must be at least 1"),
    ("embedding_dim", 2**31, ValueError, "`embedding_dim` 2,147,483,648 does not fit a C++ "
     "int32_t"),
    ("combiner", "avg", ValueError, "`combiner` must be one of sum, mean, sqrtn"),
    ("name", 5, TypeError, "`name` must be a str"),
    ("max_ids_per_partition", 2.5, TypeError, "`max_ids_per_partition` must be an int"),
])
def test_foreign_jax_specs_are_checked_by_the_library(field: str, value: Any,
                                                      error: type[Exception],
                                                      needle: str) -> None:
    fields: dict[str, Any] = {
        "name": "t", "vocabulary_size": 64, "embedding_dim": 8, "combiner": "sum",
        "optimizer": jte.SGDOptimizerSpec(0.1), "max_ids_per_partition": 256,
        "max_unique_ids_per_partition": 256, "suggested_coo_buffer_size_per_device": None}
    fields[field] = value
    feature = _Feature(name="f", table_spec=_Table(**fields), input_shape=(8, 1),
                       output_shape=(8, 8))
    with pytest.raises(error, match=re.escape(needle)):
        jte.feature_specs_to_config([feature], global_device_count=1, num_sc_per_device=4)


class _Quantization:
    def __init__(self, min_value: Any, max_value: Any, num_buckets: Any) -> None:
        self.min_value, self.max_value, self.num_buckets = min_value, max_value, num_buckets


@pytest.mark.parametrize(("quantization", "needle"), [
    (_Quantization(0.0, 1.0, 1), "`quantization_config.num_buckets` must be at least 2"),
    (_Quantization(1.0, 1.0, 4), "`quantization_config` needs min_value < max_value"),
    ("int8", "`quantization_config` must be a QuantizationConfig"),
])
def test_a_foreign_quantization_is_held_to_jax_tpu_embedding_s_checks(quantization: Any,
                                                                       needle: str) -> None:
    # jax-tpu-embedding's QuantizationConfig.__post_init__: num_buckets >= 2, min < max.
    table = _Table(name="t", vocabulary_size=64, embedding_dim=8, combiner="sum",
                   optimizer=jte.SGDOptimizerSpec(0.1), quantization_config=quantization)
    feature = _Feature(name="f", table_spec=table, input_shape=(8, 1), output_shape=(8, 8))
    with pytest.raises((TypeError, ValueError), match=re.escape(needle)):
        jte.feature_specs_to_config([feature], global_device_count=1, num_sc_per_device=4)


def test_the_jax_mirror_refuses_wrong_values_when_built() -> None:
    opt = jte.SGDOptimizerSpec(0.1)
    with pytest.raises(TypeError, match="TableSpec: `name` must be a str; received 5"):
        jte.TableSpec(name=5, vocabulary_size=8, embedding_dim=8, initializer=None,
                      optimizer=opt, combiner="sum")
    with pytest.raises(ValueError, match="TableSpec 't': `vocabulary_size` must be at least 1"):
        jte.TableSpec(name="t", vocabulary_size=0, embedding_dim=8, initializer=None,
                      optimizer=opt, combiner="sum")
    table = jte.TableSpec(name="t", vocabulary_size=8, embedding_dim=8, initializer=None,
                          optimizer=opt, combiner="sum")
    with pytest.raises(TypeError, match=r"FeatureSpec 'f': `output_shape\[0\]` must be an int"):
        jte.FeatureSpec(name="f", table_spec=table, input_shape=(8, 1), output_shape=(8.0, 8))
    with pytest.raises(TypeError, match="FeatureSpec 'f': `table_spec` must be a TableSpec"):
        jte.FeatureSpec(name="f", table_spec="t", input_shape=(8, 1), output_shape=(8, 8))
    with pytest.raises(TypeError, match="AdagradOptimizerSpec: `initial_accumulator_value` "
                       "must be a number or a callable"):
        jte.AdagradOptimizerSpec(0.1, initial_accumulator_value=None)
    with pytest.raises(TypeError, match="AdagradMomentumOptimizerSpec: `use_nesterov` must be "
                       "True or False; received 'yes'"):
        jte.AdagradMomentumOptimizerSpec(use_nesterov="yes")


# -- 3. a structure that contains itself -----------------------------------------------------------


def test_feature_specs_holding_themselves_are_refused(tmp_path: Path) -> None:
    text = JAX.replace("]\nglobal", "]\nfeature_specs.append(feature_specs)\nglobal", 1)
    text = text.replace("feature_specs = [", "feature_specs = [  #@", 1)  # the setting's line
    _refused_everywhere(tmp_path, text, "feature_specs contains itself at '[2]'")
    specs: list[Any] = []
    specs.append([specs])
    with pytest.raises(ValueError, match="contains itself"):
        jte.leaves(specs)
    with pytest.raises(TypeError, match="feature_specs: dict keys must be mutually comparable"):
        jte.leaves({1: None, "a": None})


def test_a_feature_config_holding_itself_is_refused(tmp_path: Path) -> None:
    text = TF.replace('topology = "v6e-4"\n', 'feature_config["again"] = feature_config  #@\n'
                      'topology = "v6e-4"\n')
    _refused_everywhere(tmp_path, text, "contains itself at 'again'")
    nested: dict[str, Any] = {}
    nested["x"] = (nested,)
    with pytest.raises(ValueError, match="contains itself at 'x/0'"):
        flatten_with_paths(nested)


# -- 4. sparse_core_config of the wrong type ----------------------------------------------------


@pytest.mark.parametrize(("value", "kind"), [('{"max_ids_per_table": {"user": 64}}', "(dict)"),
                                             ("64", "(int)")])
def test_sparse_core_config_of_the_wrong_type_is_refused(tmp_path: Path, value: str,
                                                         kind: str) -> None:
    text = TF + f"sparse_core_config = {value}  #@\n"
    _refused_everywhere(tmp_path, text, "sparse_core_config must be a SparseCoreEmbeddingConfig",
                        kind)


def test_sparse_core_config_of_the_wrong_type_is_a_type_error_in_the_library() -> None:
    from tpuemb_cfg.embedding import Adagrad, FeatureConfig, TableConfig

    features = {"f": FeatureConfig(TableConfig(8, 8, name="t", optimizer=Adagrad(0.1)),
                                   output_shape=[8])}
    with pytest.raises(TypeError, match="sparse_core_config must be a SparseCoreEmbeddingConfig"):
        tensorflow_config(features, sparse_core_config={"allow_id_dropping": True},
                          topology="v6e-4")


# -- 5. sizes beyond the C++ integers --------------------------------------------------------------


@pytest.mark.parametrize(("text", "needle"), [
    (_at_a("vocabulary_size=1000", "vocabulary_size=2**70"),
     "`vocabulary_size` 1,180,591,620,717,411,303,424 does not fit a C++ int64_t"),
    (_jax(**{"global_device_count = 2": "global_device_count = 2**40  #@"}),
     "1,099,511,627,776 does not fit a C++ int32_t"),
    (TF.replace('topology = "v6e-4"', 'topology = "v6e-2000000000000"  #@'),
     "2,000,000,000,000 does not fit a C++ int32_t"),
    # A vocabulary that fits int64 alone, but not once padded for the slice's SparseCores.
    (_at_a("vocabulary_size=1000", f"vocabulary_size={INT64_MAX // 16}"),
     "does not fit a C++ int64_t"),
])
def test_sizes_beyond_the_cpp_integers_are_refused(tmp_path: Path, text: str,
                                                   needle: str) -> None:
    _refused_everywhere(tmp_path, text, needle)


# -- 6. a learning rate that is no number ---------------------------------------------------------


def test_a_learning_rate_that_is_no_number_is_refused(tmp_path: Path) -> None:
    # At the optimizer's own line (the line of the AdagradOptimizerSpec call).
    text = JAX.replace('optimizer=AdagradOptimizerSpec(learning_rate=0.1), combiner="sum")',
                       'optimizer=AdagradOptimizerSpec(learning_rate="x"), combiner="sum")  #@', 1)
    _refused_everywhere(tmp_path, text, "AdagradOptimizerSpec: `learning_rate` must be a "
                        "number or a callable (a schedule); received 'x'")


class _Optimizer:
    """A foreign optimizer spec (jax-tpu-embedding's checks nothing)."""

    def __init__(self, learning_rate: Any) -> None:
        self.learning_rate = learning_rate


@pytest.mark.parametrize(("rate", "needle"), [
    ("x", "table 't' optimizer: `learning_rate` must be a number or a callable (a schedule); "
     "received 'x' (str)"),
    (float("inf"), "table 't' optimizer: `learning_rate` must be a finite number; received inf"),
])
def test_a_foreign_optimizer_s_rate_is_checked(rate: Any, needle: str) -> None:
    table = _Table(name="t", vocabulary_size=64, embedding_dim=8, combiner="sum",
                   optimizer=_Optimizer(rate))
    feature = _Feature(name="f", table_spec=table, input_shape=(8, 1), output_shape=(8, 8))
    with pytest.raises((TypeError, ValueError), match=re.escape(needle)):
        jte.feature_specs_to_config([feature], global_device_count=1, num_sc_per_device=4)


# -- 7. names too long for the outputs -------------------------------------------------------------


def test_a_table_name_beyond_the_limit_is_refused_before_anything_runs(tmp_path: Path) -> None:
    text = TF.replace('name="user"', f'name="{"u" * 70_000}"').replace(
        "user = TableConfig(", "user = TableConfig(  #@\n    ")
    _refused_everywhere(tmp_path, text, f"70,000 characters, more than the {NAME_LIMIT:,}")
    # simulate used to run every step, then fail writing tables.npz (struct.error): nothing runs.
    path, _ = _spec(tmp_path, text)
    out = tmp_path / "out"
    result = invoke("simulate", path, "--steps", "2", "--out-dir", str(out))
    assert result.exit_code == 2 and "characters, more than" in result.output
    assert "step" not in result.output and not out.exists()


def test_a_name_at_the_limit_is_accepted(tmp_path: Path) -> None:
    path = write_file(tmp_path, JAX.replace('name="fa"', f'name="{"f" * NAME_LIMIT}"'), "ok.py")
    result = invoke("inspect", str(path))
    assert result.exit_code == 0, result.output


# -- 10. two APIs in one spec ---------------------------------------------------------------------


def test_a_spec_with_both_feature_config_and_feature_specs_is_refused(tmp_path: Path) -> None:
    tf_half = TF.replace("feature_config = ", "feature_config = (  #@\n    ").replace(
        "output_shape=[32])}", "output_shape=[32])})").replace('topology = "v6e-4"\n', "")
    _refused_everywhere(tmp_path, JAX + tf_half, "defines both `feature_config`",
                        "`feature_specs`")


# -- 11. a byte order mark -------------------------------------------------------------------------


def test_a_spec_with_a_byte_order_mark_is_read_as_without(tmp_path: Path) -> None:
    # Three devices x 4 SparseCores do not divide the batch of 32: SC007 without the mark.
    text = JAX.replace("global_device_count = 2", "global_device_count = 3")
    plain = write_file(tmp_path, text, "plain.py")
    marked_path = tmp_path / "bom.py"
    marked_path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert is_sparsecore_spec(marked_path)
    expected = invoke("validate", "--select", "SC007", str(plain))
    result = invoke("validate", "--select", "SC007", str(marked_path))
    assert expected.exit_code == 1 and "error[SC007]" in expected.output, expected.output
    assert result.exit_code == 1, result.output
    assert result.output.replace(str(marked_path), "X") == \
        expected.output.replace(str(plain), "X")


def test_plan_reads_a_spec_with_a_byte_order_mark_as_without(tmp_path: Path) -> None:
    import json

    zipf = zipf_sample()
    plain = write_file(tmp_path, JAX, "plain.py")
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbf" + JAX.encode())
    # The sample has the jax spec's columns (fa, fb), not a legacy spec's (f0, f1).
    columns = zipf.zipf_columns(zipf.schema_of(str(plain)), 64, exponent=1.3, max_bag=2, seed=1)
    assert sorted(columns) == ["fa", "fb"]
    sample = tmp_path / "day.npz"
    zipf.write(str(sample), columns, 32)
    reports = []
    for path in (plain, bom):
        result = invoke("plan", str(path), "--ids", str(sample), "--format", "json")
        assert result.exit_code == 0, result.output
        reports.append(json.loads(result.stdout.replace(str(path), "SPEC")))
    assert reports[0]["kind"] == "sparsecore" and reports[0] == reports[1]


# -- 12. one FeatureSpec listed twice --------------------------------------------------------------


def test_a_feature_spec_listed_twice_is_refused_naming_it(tmp_path: Path) -> None:
    text = JAX.replace("]\nglobal", "]\nfeature_specs.append(feature_specs[1])\nglobal", 1)
    text = text.replace("feature_specs = [", "feature_specs = [  #@", 1)  # the setting's line
    _refused_everywhere(tmp_path, text, "lists the FeatureSpec 'fb' more than once")


def test_two_feature_specs_of_one_name_are_refused(tmp_path: Path) -> None:
    # simulate used to stop at step 0 with "the preprocessing returned a drop mask of shape ..."
    text = JAX.replace('FeatureSpec(name="fb"', 'FeatureSpec(name="fa"', 1)
    text = text.replace("feature_specs = [", "feature_specs = [  #@", 1)
    _refused_everywhere(tmp_path, text, "two FeatureSpecs named 'fa'")
    # The library keeps jax-tpu-embedding's behaviour: its stacking lets names repeat.
    specs = _library_specs()
    specs[1].name = "fa"
    config = jte.feature_specs_to_config(specs, global_device_count=2, num_sc_per_device=4)
    assert [f.name for f in jte.stack_config(config).features] == ["fa", "fa"]


def test_auto_stack_must_be_a_flag(tmp_path: Path) -> None:
    _refused_everywhere(tmp_path, JAX + 'auto_stack = "no"  #@\n',
                        "`auto_stack` must be True or False; received 'no'")


# -- the record itself ----------------------------------------------------------------------------


def test_check_config_returns_plain_values() -> None:
    import numpy as np

    table = _Table(name="t", vocabulary_size=np.int64(64), embedding_dim=np.int32(8),
                   combiner="sum", optimizer=jte.SGDOptimizerSpec(0.1))
    feature = _Feature(name="f", table_spec=table, input_shape=(np.int64(8), 1),
                       output_shape=(8, 8))
    config = jte.feature_specs_to_config([feature], global_device_count=2,
                                         num_sc_per_device=4, check=False)
    assert type(config.tables[0].vocabulary_size) is not int  # as given
    checked = check_config(config)
    (t,) = checked.tables
    assert (type(t.vocabulary_size), type(t.dim)) == (int, int)
    assert (t.vocabulary_size, t.dim) == (64, 8)
    assert type(checked.features[0].input_shape[0]) is int
    assert checked == jte.feature_specs_to_config([feature], global_device_count=2,
                                                  num_sc_per_device=4)
    assert INT32_MAX == 2**31 - 1 and INT64_MAX == 2**63 - 1


# -- 8. a layouts file that cannot be one ---------------------------------------------------------


def _layouts(tmp_path: Path) -> str:
    """``compile --sparsecore`` of the API tests' TensorFlow spec (4 v6e chips: 8 SparseCores)."""
    out = tmp_path / "layouts.pbtxt"
    spec = Path(__file__).parent / "data" / "sparsecore" / "api_tf_spec.py"
    result = invoke("compile", "--sparsecore", str(spec), "-o", str(out))
    assert result.exit_code == 0, result.output
    return out.read_text()


def test_inspect_of_layouts_without_a_shape_is_one_line(tmp_path: Path) -> None:
    text = _layouts(tmp_path)
    first = text.index("}")  # the first table's block
    head = "\n".join(x for x in text[:first].splitlines() if "unsharded_shape" not in x)
    path = write_file(tmp_path, head + "\n" + text[first:], "broken.pbtxt")
    result = invoke("inspect", str(path))
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        f"{path}: error: SparseCore layouts: table 'ctx' (tables[0]): `unsharded_shape` must be "
        "[rows, columns], both at least 1; found []")


def test_inspect_of_layouts_with_a_negative_sparse_core_count_is_refused(tmp_path: Path) -> None:
    text = _layouts(tmp_path)
    assert "num_sparse_cores: 8" in text and "-16 SparseCores" not in text
    path = write_file(tmp_path, text.replace("num_sparse_cores: 8", "num_sparse_cores: -16"),
                      "negative.pbtxt")
    result = invoke("inspect", str(path))
    assert result.exit_code == 2, result.output
    assert "SparseCores = -16" not in result.output
    assert "-16 SparseCores on 4 chips" in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(("edit", "error", "needle"), [
    ({"vocabulary_size": "1000"}, TypeError, "table 'a': `vocabulary_size` must be an int"),
    ({"dim": 2.5}, TypeError, "table 'a': `embedding_dim` must be an int"),
    ({"name": ["a"]}, TypeError, "table: `name` must be a str"),
])
def test_a_configuration_built_by_hand_meets_the_same_checks(edit: dict[str, Any],
                                                             error: type[Exception],
                                                             needle: str) -> None:
    """The library's entries that take a SparseCoreConfig: stacking raises the front door's
    error; validate reports it as PARSE001; the simulation's setup refuses it (InputError)."""
    from dataclasses import replace

    from tpuemb_cfg.base.errors import InputError
    from tpuemb_cfg.session import prepare_sparsecore, validate
    from tpuemb_cfg.sparsecore.feed import stack

    good = jte.feature_specs_to_config(_library_specs(), global_device_count=2,
                                       num_sc_per_device=4)
    tables = (replace(good.tables[0], optimizer=replace(good.tables[0].optimizer, source=None),
                      **edit), *good.tables[1:])
    config = replace(good, tables=tables)
    for call in (stack, jte.stack_config):
        with pytest.raises(error, match=re.escape(needle)):
            call(config)
    (finding,) = validate(config)
    assert finding.rule == "PARSE001" and needle in finding.message
    with pytest.raises(InputError, match=re.escape(needle)):
        prepare_sparsecore(config)
