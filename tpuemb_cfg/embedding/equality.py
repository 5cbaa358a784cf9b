"""TensorFlow's value equality for optimizer and combiner objects.

In TensorFlow 2.21 two optimizer objects (and two ``CustomCombiner`` objects) are equal when the
first's class accepts the second (``isinstance``) and their attributes, taken pairwise in
definition order, are equal; the hash is the hash of the attributes. So ``SGD(0.1) == SGD(0.1)``
with equal hashes, ``SGD(0.1) != SGD(0.2)`` and ``SGD(0.1) != Adagrad(0.1)``. An attribute that
cannot be hashed (a list learning rate, say) makes the object unhashable, as in TensorFlow.
"""

from __future__ import annotations

from typing import Any


class ValueEquality:
    """Mixin: ``==`` and ``hash`` from the instance attributes, as TensorFlow defines them."""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return False
        return all(
            mine == theirs
            for mine, theirs in zip(vars(self).items(), vars(other).items(), strict=False)
        )

    def __hash__(self) -> int:
        items: tuple[tuple[str, Any], ...] = tuple(vars(self).items())
        return hash(items)
