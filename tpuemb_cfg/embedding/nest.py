"""Flattening nested feature structures the way ``tf.nest.flatten`` does.

Mappings are visited in sorted key order at every level (TensorFlow sorts dict keys, so
``{"b": f1, "a": f2}`` gives ``[f2, f1]``); lists and tuples keep their order; named tuples follow
their fields; anything else is a leaf. Each leaf comes with its joined path (keys and indices
joined by ``/``; ``""`` for a lone leaf), which error messages use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tpuemb_cfg.base.usercode import tree_leaves
from tpuemb_cfg.embedding.errors import EmbeddingConfigError, EmbeddingTypeError


def _sorted_items(mapping: Mapping[Any, Any], path: str) -> list[tuple[Any, Any]]:
    try:
        keys = sorted(mapping)
    except TypeError:
        kinds = sorted({type(k).__name__ for k in mapping})
        where = f" at '{path}'" if path else ""
        raise EmbeddingTypeError(
            f"feature structure{where}: dict keys must be mutually comparable so they can be "
            f"sorted (TensorFlow visits dict keys in sorted order); found keys of types "
            f"{', '.join(kinds)}: use keys of one type, e.g. all str"
        ) from None
    return [(k, mapping[k]) for k in keys]


def _join(path: str, key: Any) -> str:
    return f"{path}/{key}" if path else str(key)


def children(value: Any, path: str) -> list[tuple[str, Any]] | None:
    """The (path, child) pairs of a structure node, or ``None`` for a leaf."""
    if isinstance(value, Mapping):
        return [(_join(path, k), v) for k, v in _sorted_items(value, path)]
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return [(_join(path, f), v) for f, v in zip(value._fields, value, strict=True)]
    if isinstance(value, list | tuple):
        return [(_join(path, i), v) for i, v in enumerate(value)]
    return None


def flatten_with_paths(structure: Any) -> list[tuple[str, Any]]:
    """All leaves of ``structure`` with their joined paths, in TensorFlow's order."""
    try:
        return tree_leaves(structure, children, what="the feature structure")
    except EmbeddingConfigError:  # a key that cannot be sorted: as it is
        raise
    except ValueError as exc:  # the structure contains itself
        raise EmbeddingConfigError(str(exc)) from None


def flatten_up_to(
    structure: Any, values: Any, is_leaf: Callable[[Any], bool]
) -> list[tuple[str, Any]] | None:
    """The entries of ``values`` at the leaf positions of ``structure``, in flattening order.

    ``values`` must nest like ``structure`` (same mapping keys, same sequence lengths); at each
    leaf of ``structure`` the corresponding part of ``values`` is taken whole (a shape such as
    ``[16, 4]`` is one value, not a list). Returns ``None`` when the structures differ.
    """
    out: list[tuple[str, Any]] = []

    def walk(node: Any, value: Any, path: str) -> bool:
        kids = children(node, path)
        if kids is None:
            if not is_leaf(value):
                return False
            out.append((path, value))
            return True
        if isinstance(node, Mapping):
            if not isinstance(value, Mapping) or set(value) != set(node):
                return False
            return all(
                walk(child, value[k], _join(path, k)) for k, child in _sorted_items(node, path)
            )
        if not isinstance(value, list | tuple) or len(value) != len(kids):
            return False
        return all(walk(child, v, p) for (p, child), v in zip(kids, value, strict=True))

    return out if walk(structure, values, "") else None
