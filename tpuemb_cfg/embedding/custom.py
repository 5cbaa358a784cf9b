"""``CustomOptimizer`` and ``CustomCombiner``: TensorFlow 2.21's SparseCore extension points.

TensorFlow takes a traced ``tf.function`` as the computation and compiles it for the SparseCore
(``TPUEmbeddingV2`` only). tpuemb takes any Python callable with the same signature, NumPy
arrays in and out, and runs it row by row (:meth:`CustomOptimizer.update_rows`) or sample by
sample (:meth:`CustomCombiner.combine`), so a custom update or combiner can be checked against
the built-in ones on a laptop. The executor runs both inside a training step
(``Executor(build_config(..., validate=False))``, ``tpuemb simulate spec.py``;
``tpuemb_cfg.executor.custom`` and ``docs/simulate.md`` have the decisions)::

    def sgd(gradient, embedding_table, slot_variables, learning_rate, hyperparameters):
        return embedding_table - learning_rate * gradient

    custom = CustomOptimizer(sgd, learning_rate=0.1)
    rows, slots = custom.update_rows(gradient, rows, [], 0.1)   # == SGD(0.1)'s update

Arguments, checks, slot names and dimensions, equality and what reaches a configuration are
TensorFlow 2.21's:

- ``CustomOptimizer(custom_computation, learning_rate=0.01, slot_names=None,
  slot_initializers=None, hyperparameters=None, slot_dims=None)``: as many initializers as slot
  names, ``slot_dims`` empty or one per slot and each 1 or 2; gradient accumulation off, no
  clipping, no weight decay, no packing. TensorFlow's ``TPUEmbedding`` configuration writer
  writes its learning rate and ``gradient_accumulation_status: DISABLED`` and no algorithm, which
  the TPU's C++ then refuses ("No optimization algorithm specified"); ``build_config`` writes the
  same bytes and its validation reports it.
- ``CustomCombiner(combiner_computation, max_valency, num_weights=0, initializer=None,
  combiner_weights_learning_rate=0.01)``: ``initializer`` is required when ``num_weights > 0``;
  the combiner is named ``"custom_combiner_<hash of the computation>"`` (its ``str``) and has one
  slot, ``custom_combiner_variables`` (the weights), when it has weights. A combiner never
  reaches the configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tpuemb_cfg.base.usercode import user_value
from tpuemb_cfg.embedding import _checks as chk
from tpuemb_cfg.embedding.equality import ValueEquality
from tpuemb_cfg.embedding.optimizers import Optimizer, TagOf


class CustomOptimizer(Optimizer):
    """A user-written per-row update (TensorFlow's ``tf.tpu.experimental.embedding
    .CustomOptimizer``).

    ``custom_computation(gradient, embedding_table, slot_variables, learning_rate,
    hyperparameters)`` receives the rows being updated (``[n, dim]``), their slots (a list, one
    array per slot name), the learning rate and the tuple of hyper-parameters (callables
    evaluated first); it returns the new rows, or a tuple ``(rows, slot, ...)``.
    """

    def __init__(
        self,
        custom_computation: Callable[..., Any],
        learning_rate: float | Callable[[], float] = 0.01,
        slot_names: Sequence[str] | None = None,
        slot_initializers: Sequence[Callable[..., Any]] | None = None,
        hyperparameters: Sequence[float | Callable[[], float]] | None = None,
        slot_dims: Sequence[int] | None = None,
    ) -> None:
        super().__init__(
            learning_rate,
            use_gradient_accumulation=False,
            clip_weight_min=None,
            clip_weight_max=None,
            weight_decay_factor=None,
            multiply_weight_decay_factor_by_learning_rate=None,
            clipvalue=None,
            slot_variable_creation_fn=None,
            low_dimensional_packing_status=False,
        )
        owner = self._owner()
        if not callable(custom_computation):
            raise chk.fail_type(
                owner,
                f"`custom_computation` must be a callable (gradient, embedding_table, "
                f"slot_variables, learning_rate, hyperparameters); received "
                f"{chk.show(custom_computation)}",
            )
        names = tuple(slot_names if slot_names else ())
        initializers = tuple(slot_initializers if slot_initializers else ())
        dims = tuple(slot_dims if slot_dims else ())
        if len(names) != len(initializers):
            raise chk.fail(
                owner,
                f"{len(names)} slot_names {chk.show(names)} but {len(initializers)} "
                f"slot_initializers: give one initializer per slot",
            )
        if dims and len(dims) != len(names):
            raise chk.fail(
                owner,
                f"{len(dims)} slot_dims {chk.show(dims)} for {len(names)} slot_names: give "
                f"one dimension (1 or 2) per slot, or none",
            )
        for name, dim in zip(names, dims, strict=False):
            if dim not in (1, 2):
                raise chk.fail(
                    owner,
                    f"slot {name!r} has slot_dim {chk.show(dim)}; only 1 (a value per row) "
                    f"and 2 (a row of the table's width) are supported",
                )
        self.slot_names = names  # type: ignore[misc]  # per instance, unlike the built-ins
        self.slot_initializers = initializers
        self._slot_dims = dims
        self._hyperparameters = tuple(hyperparameters if hyperparameters else ())
        self._custom_computation = custom_computation

    @property
    def custom_computation(self) -> Callable[..., Any]:
        return self._custom_computation

    @property
    def hyperparameters(self) -> tuple[float | Callable[[], float], ...]:
        return self._hyperparameters

    @property
    def slot_dims(self) -> tuple[int, ...]:
        """Per slot: 1 (one value per row) or 2 (a row as wide as the table); empty: all 2."""
        return self._slot_dims

    def dynamic_inputs(self) -> list[tuple[str, Any]]:
        return [("learning_rate", self.learning_rate)] if callable(self.learning_rate) else []

    def slot_initial_values(self) -> dict[str, float]:
        return dict.fromkeys(self.slot_names, 0.0)

    def _write_algorithm(self, params: Any, tag_of: TagOf) -> None:
        """TensorFlow writes no algorithm for a custom optimizer."""

    def initial_slots(self, rows: int, dim: int) -> list[np.ndarray]:
        """The slot arrays of a ``rows`` x ``dim`` table, from the slot initializers."""
        dims = self.slot_dims or (2,) * len(self.slot_names)
        return [
            np.asarray(init((rows, dim) if d == 2 else (rows, 1), "float32"), dtype=np.float32)
            for init, d in zip(self.slot_initializers, dims, strict=True)
        ]

    def update_rows(
        self,
        gradient: np.ndarray,
        rows: np.ndarray,
        slots: Sequence[np.ndarray],
        learning_rate: float | None = None,
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """One step on ``rows`` (``[n, dim]``) with their gradient and slots; returns the new
        rows and slots (float32). ``learning_rate`` defaults to the optimizer's own."""
        lr = user_value(self.learning_rate) if learning_rate is None else learning_rate
        hyper = tuple(user_value(h) for h in self.hyperparameters)
        result = self.custom_computation(
            np.asarray(gradient, np.float32), np.asarray(rows, np.float32),
            [np.asarray(s, np.float32) for s in slots], np.float32(lr), hyper,
        )
        parts = list(result) if isinstance(result, tuple | list) else [result]
        if len(parts) != 1 + len(self.slot_names):
            raise ValueError(
                f"{self._owner()}: the computation returned {len(parts)} array(s); expected the "
                f"new rows and one array per slot ({1 + len(self.slot_names)} in all)"
            )
        new = [np.asarray(p, dtype=np.float32) for p in parts]
        for got, want in zip(new, [rows, *slots], strict=True):
            if got.shape != np.shape(want):
                raise ValueError(
                    f"{self._owner()}: the computation returned shape {got.shape} where "
                    f"{np.shape(want)} was expected"
                )
        return new[0], new[1:]

    def update_fn(self) -> Callable[..., tuple[np.ndarray, tuple[np.ndarray, ...]]]:
        """The update in the executor's row-function form ``(params, state, grad, lr, hyper,
        ctx) -> (params, state)``, ``state`` being the tuple of slot arrays."""

        def update(params: np.ndarray, state: Sequence[np.ndarray], grad: np.ndarray,
                   lr: Any, hyper: Any = None, ctx: Any = None) -> tuple[Any, Any]:
            new_rows, new_slots = self.update_rows(grad, params, list(state), lr)
            return new_rows, tuple(new_slots)

        return update


class CustomCombiner(ValueEquality):
    """A user-written combiner (TensorFlow's ``tf.tpu.experimental.embedding.CustomCombiner``).

    ``combiner_computation(valency, vectors)`` (or ``(valency, vectors, weights)`` when
    ``num_weights > 0``) receives the number of ids of one sample, its looked-up rows padded with
    zeros to ``[max_valency, dim]`` and the combiner's ``[num_weights]`` weights; it returns the
    combined ``[dim]`` vector.
    """

    SLOT_NAME = "custom_combiner_variables"

    def __init__(
        self,
        combiner_computation: Callable[..., Any],
        max_valency: int,
        num_weights: int = 0,
        initializer: Callable[..., Any] | None = None,
        combiner_weights_learning_rate: float | Callable[[], float] = 0.01,
    ) -> None:
        self.slot_variable_creation_fn = None
        self.combiner = f"custom_combiner_{hash(combiner_computation)}"
        self.combiner_computation = combiner_computation
        self.max_valency = max_valency
        self.num_weights = num_weights
        self.combiner_weights_learning_rate = combiner_weights_learning_rate
        if num_weights > 0 and initializer is None:
            raise chk.fail(
                "CustomCombiner",
                f"num_weights is {chk.show(num_weights)}: give an `initializer` for the "
                f"combiner's weights",
            )
        self._initializers: tuple[Callable[..., Any], ...] = (
            () if initializer is None else (initializer,)
        )

    @property
    def slot_names(self) -> tuple[str, ...]:
        return (self.SLOT_NAME,) if self.num_weights > 0 else ()

    @property
    def slot_initializers(self) -> tuple[Callable[..., Any], ...]:
        return self._initializers if self.num_weights > 0 else ()

    def __str__(self) -> str:
        return self.combiner

    def initial_weights(self) -> np.ndarray:
        if not self.num_weights > 0:
            return np.zeros(0, np.float32)
        return np.asarray(self._initializers[0]((self.num_weights,), "float32"), np.float32)

    def combine(self, ids: Sequence[int], table: np.ndarray,
                weights: np.ndarray | None = None) -> np.ndarray:
        """The combined vector of one sample looking up ``ids`` in ``table`` (``[rows, dim]``);
        ids beyond ``max_valency`` are dropped."""
        table = np.asarray(table, np.float32)
        kept = list(ids)[: self.max_valency]
        vectors = np.zeros((self.max_valency, table.shape[1]), np.float32)
        if kept:
            vectors[: len(kept)] = table[np.asarray(kept)]
        args: list[Any] = [np.int32(len(kept)), vectors]
        if self.num_weights > 0:
            args.append(self.initial_weights() if weights is None else np.asarray(weights))
        out = np.asarray(self.combiner_computation(*args), np.float32)
        if out.shape != (table.shape[1],):
            raise ValueError(
                f"CustomCombiner: the computation returned shape {out.shape}; expected "
                f"({table.shape[1]},), one combined vector"
            )
        return out

    def combine_batch(self, samples: Sequence[Sequence[int]], table: np.ndarray,
                      weights: np.ndarray | None = None) -> np.ndarray:
        """:meth:`combine` for every sample: ``[len(samples), dim]``."""
        return np.stack([self.combine(ids, table, weights) for ids in samples])
