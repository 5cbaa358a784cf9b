"""Invariants of build_config over random feature structures (hypothesis).

For any nesting of dicts and lists, any sharing of tables, optimizers and learning-rate callables:
every leaf is one feature descriptor in sorted-key order, each descriptor points at its own table,
tables appear in first-use order with unique names, and the dynamic tags are exactly 0..K-1 in
first-appearance order, with equal callables sharing a tag.
"""

from __future__ import annotations

from typing import Any

from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuemb_cfg.embedding import SGD, Adagrad, FeatureConfig, TableConfig, build_config


def _rate(i: int) -> Any:
    def rate() -> float:
        return 0.01 * (i + 1)

    return rate


@st.composite
def _structures(draw: st.DrawFn) -> Any:
    rates = [_rate(i) for i in range(3)]
    n_tables = draw(st.integers(1, 5))
    tables = []
    for t in range(n_tables):
        lr = draw(st.one_of(st.sampled_from(rates), st.floats(0.001, 1.0)))
        opt = draw(st.sampled_from([None, SGD(learning_rate=lr), Adagrad(learning_rate=lr)]))
        tables.append(TableConfig(10 + t, 4, optimizer=opt, name=f"t{t}"))
    leaf = st.sampled_from(tables).map(FeatureConfig)
    keys = st.text(alphabet="aBz9_", min_size=1, max_size=3)
    return draw(st.recursive(
        leaf,
        lambda children: st.one_of(st.lists(children, min_size=1, max_size=3),
                                   st.dictionaries(keys, children, min_size=1, max_size=3)),
        max_leaves=8,
    ))


def _leaves(node: Any) -> list[FeatureConfig]:
    """Reference flattening written independently: sorted dict keys, lists in order."""
    if isinstance(node, dict):
        return [leaf for key in sorted(node) for leaf in _leaves(node[key])]
    if isinstance(node, list):
        return [leaf for child in node for leaf in _leaves(child)]
    return [node]


@settings(max_examples=examples(60), deadline=None)
@given(_structures())
def test_build_config_invariants(structure: Any) -> None:
    leaves = _leaves(structure)
    compiled = build_config(structure, SGD(learning_rate=0.5), per_replica_batch_size=4,
                            validate=False)
    config = compiled.config
    names = [t.name for t in config.table_descriptor]
    first_use: list[str] = []
    for leaf in leaves:
        if leaf.table.name not in first_use:
            first_use.append(leaf.table.name)
    assert names == first_use
    assert len(config.feature_descriptor) == len(leaves)
    for fd, leaf in zip(config.feature_descriptor, leaves, strict=True):
        assert names[fd.table_id] == leaf.table.name
    # tags: dense, by first appearance in table order, equal callables share
    seen: list[Any] = []
    for td, table in zip(config.table_descriptor, compiled.tables, strict=True):
        lr = table.optimizer.learning_rate
        written = td.optimization_parameters.learning_rate
        if callable(lr):
            if lr not in seen:
                seen.append(lr)
            assert written.WhichOneof("learning_rate") == "dynamic"
            assert written.dynamic.tag == seen.index(lr)
        else:
            assert written.WhichOneof("learning_rate") == "constant"
    assert compiled.dynamic_learning_rates == seen
