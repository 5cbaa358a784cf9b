"""``TableConfig``, ``FeatureConfig`` and their helpers, as in ``tf.tpu.experimental.embedding``.

Same argument names, order and defaults as TensorFlow 2.21 and the same conditions (``CTOR013`` to
``CTOR022`` of ``validation-rules.md``), with messages that name the argument, the value received
and what is allowed. ``TableConfig`` objects are compared by identity, as in TensorFlow: two equal
looking tables are two tables.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tpuemb_cfg.base.schema import COMBINERS
from tpuemb_cfg.embedding import _checks as chk
from tpuemb_cfg.embedding import origins, pbvalues
from tpuemb_cfg.embedding.custom import CustomCombiner
from tpuemb_cfg.embedding.errors import EmbeddingOverflowError
from tpuemb_cfg.embedding.shapes import Shape, shape_repr, to_shape

if TYPE_CHECKING:
    import numpy as np

    from tpuemb_cfg.embedding.optimizers import Optimizer

DTYPES = ("float32", "int32")


def _python_int(owner: str, name: str, value: Any, minimum: int) -> int:
    """TensorFlow's ``isinstance(value, int) and value >= minimum``: a Python int (``True``
    counts as 1), not a NumPy integer or a float."""
    if not isinstance(value, int):
        raise chk.fail_type(
            owner,
            f"`{name}` must be an int >= {minimum} (a Python int, as TensorFlow checks it: not "
            f"a float or a NumPy integer); received {chk.show(value)} ({chk.type_name(value)})",
        )
    if value < minimum:
        raise chk.fail(owner, f"`{name}` must be an int >= {minimum}; received {chk.show(value)}")
    return value


#: The keys of TensorFlow's ``dtypes.as_dtype`` table that name float32 or int32: the names
#: (``"float"`` is float32), the ``DataType`` enum numbers (1: ``DT_FLOAT``, 3: ``DT_INT32``) and
#: Python's ``float``. Looked up by hash and equality, as TensorFlow does: ``1.0`` and ``True``
#: are 1, so they are float32 too.
_AS_DTYPE: dict[Any, str] = {
    "float32": "float32", "float": "float32", "int32": "int32", 1: "float32", 3: "int32",
    float: "float32",
}
#: TensorFlow 2.21's ``DataType`` numbers (and their ``_REF`` twins): keys of the same table, so
#: a number equal to one of them is that type (``2.0`` is float64), not looked at further.
_DATA_TYPE_NUMBERS = frozenset(range(1, 34)) | frozenset(range(101, 134))


def _is_dtype_object(value: Any) -> bool:
    """A TensorFlow ``DType`` or a NumPy ``dtype`` (by class name: neither is imported)."""
    return any(cls.__name__ in ("DType", "dtype") for cls in type(value).__mro__)


def _dtype_name(dtype: Any) -> str | None:
    """``"float32"``/``"int32"`` for what TensorFlow's ``TableConfig`` takes as those types, or
    ``None``. TensorFlow compares ``dtype`` with ``tf.float32`` and ``tf.int32``, which converts it
    with ``dtypes.as_dtype``: a ``DType`` or NumPy dtype by its name; then a lookup in its table
    (:data:`_AS_DTYPE`, other ``DataType`` numbers, NumPy's scalar types); then the ``dtype``
    attribute of a NumPy scalar or array (``numpy.float32(0.5)`` is float32)."""
    if _is_dtype_object(dtype):
        name = getattr(dtype, "name", None)
        return name if name in DTYPES else None
    if isinstance(dtype, type):  # float, np.float32, np.int32
        if dtype.__module__ == "numpy" and dtype.__name__ in DTYPES:
            return dtype.__name__
        return _AS_DTYPE.get(dtype)
    try:
        if dtype in _AS_DTYPE:
            return _AS_DTYPE[dtype]
        if dtype in _DATA_TYPE_NUMBERS:
            return None
    except TypeError:  # unhashable (a NumPy array): on to its dtype
        pass
    inner = getattr(dtype, "dtype", None)
    if inner is not None and _is_dtype_object(inner):
        return _dtype_name(inner)
    return None


class QuantizationConfig:
    """Simulated quantization of a table's looked-up rows (forward pass only).

    ``num_buckets`` evenly spaced levels, endpoints included, between ``lower`` and ``upper``.
    """

    def __init__(self, num_buckets: int, lower: float, upper: float) -> None:
        owner = "QuantizationConfig"
        # Types and TensorFlow's one check now; the proto's ranges when written.
        buckets = pbvalues.check_int(owner, "num_buckets", num_buckets)
        if buckets < 2:
            raise chk.fail(
                owner,
                f"`num_buckets` must be an int >= 2 (simulated quantization divides the range "
                f"into num_buckets - 1 steps); received {chk.show(num_buckets)}",
            )
        pbvalues.check_number(owner, "lower", lower)
        pbvalues.check_number(owner, "upper", upper)
        self.num_buckets = num_buckets
        self.lower = lower
        self.upper = upper

    def __repr__(self) -> str:
        return (
            f"QuantizationConfig(num_buckets={self.num_buckets!r}, lower={self.lower!r}, "
            f"upper={self.upper!r})"
        )


class RowIdInitializer:
    """Initializer that fills row i with ``offset + i`` in every column (handy for tests)."""

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset

    def __call__(self, shape: Any, dtype: Any = "float32") -> np.ndarray:
        import numpy as np

        rows, *rest = (int(d) for d in shape)
        ids = np.arange(rows, dtype=np.float64) + self.offset
        values = np.broadcast_to(ids.reshape((rows,) + (1,) * len(rest)), (rows, *rest))
        return values.astype(_dtype_name(dtype) or "float32")

    def __repr__(self) -> str:
        return f"RowIdInitializer(offset={self.offset!r})"


class ConstantInitializer:
    """Every entry ``value`` (TensorFlow's ``tf.constant_initializer`` for scalars); for the slots
    of a :class:`~tpuemb_cfg.embedding.CustomOptimizer` or the weights of a ``CustomCombiner``."""

    def __init__(self, value: float = 0.0) -> None:
        self.value = value

    def __call__(self, shape: Any, dtype: Any = "float32") -> np.ndarray:
        import numpy as np

        size = tuple(int(d) for d in shape)
        return np.full(size, self.value, dtype=_dtype_name(dtype) or "float32")

    def __repr__(self) -> str:
        return f"ConstantInitializer(value={self.value!r})"


class TruncatedNormalInitializer:
    """Normal values with the given mean and standard deviation, redrawn beyond two deviations.

    ``TableConfig(initializer=None)`` uses mean 0 and standard deviation ``1/sqrt(dim)``.
    """

    def __init__(self, mean: float = 0.0, stddev: float = 1.0, seed: int | None = None) -> None:
        self.mean = mean
        self.stddev = stddev
        self.seed = seed

    def __call__(self, shape: Any, dtype: Any = "float32") -> np.ndarray:
        import numpy as np

        rng = np.random.default_rng(self.seed)
        size = tuple(int(d) for d in shape)
        values = rng.standard_normal(size)
        outside = np.abs(values) > 2.0
        while outside.any():
            values[outside] = rng.standard_normal(int(outside.sum()))
            outside = np.abs(values) > 2.0
        return (self.mean + self.stddev * values).astype(_dtype_name(dtype) or "float32")

    def __repr__(self) -> str:
        return f"TruncatedNormalInitializer(mean={self.mean!r}, stddev={self.stddev!r})"


class TableConfig:
    """One embedding table: ``vocabulary_size`` rows of width ``dim``.

    ``optimizer=None`` inherits the optimizer given to ``build_config``; ``name=None`` becomes
    ``table_{i}`` (i = the table's position) when the configuration is built. Both are written
    back into this object, as TensorFlow does. ``combiner`` ('mean', 'sum', 'sqrtn' or a
    :class:`CustomCombiner`), ``initializer``, ``layout`` and ``dtype`` are kept for the
    executor; they do not reach the proto.
    """

    def __init__(  # noqa: PLR0913  (TensorFlow's signature)
        self,
        vocabulary_size: int,
        dim: int,
        initializer: Any = None,
        optimizer: Optimizer | None = None,
        combiner: str | CustomCombiner = "mean",
        name: str | None = None,
        quantization_config: QuantizationConfig | None = None,
        layout: Any = None,
        dtype: Any = "float32",
    ) -> None:
        origins.record(self)
        owner = "TableConfig" if name is None else f"TableConfig {name!r}"
        _python_int(owner, "vocabulary_size", vocabulary_size, 1)
        width = _python_int(owner, "dim", dim, 1)
        if initializer is not None and not callable(initializer):
            raise chk.fail_type(
                owner,
                f"`initializer` must be a callable taking (shape, dtype), or None for a truncated "
                f"normal; received {chk.show(initializer)}",
            )
        if isinstance(combiner, str):
            if combiner not in COMBINERS:
                raise chk.fail(
                    owner,
                    f"`combiner` must be one of 'mean', 'sum', 'sqrtn'; received {combiner!r}",
                )
        elif not isinstance(combiner, CustomCombiner):
            raise chk.fail_type(
                owner,
                f"`combiner` must be one of the strings 'mean', 'sum', 'sqrtn' or a "
                f"CustomCombiner; received {chk.show(combiner)} ({chk.type_name(combiner)})",
            )
        dtype_name = _dtype_name(dtype)
        if dtype_name is None:
            raise chk.fail(
                owner, f"`dtype` must be float32 or int32; received {chk.show(dtype)}"
            )
        if name is not None and not isinstance(name, str):
            raise chk.fail_type(
                owner, f"`name` must be a str or None; received {chk.show(name)}"
            )
        if quantization_config is not None and not isinstance(
            quantization_config, QuantizationConfig
        ):
            raise chk.fail_type(
                owner,
                f"`quantization_config` must be a QuantizationConfig or None; received "
                f"{chk.show(quantization_config)}",
            )
        if initializer is None:
            try:
                stddev = 1.0 / math.sqrt(width)
            except OverflowError:  # TensorFlow's 1 / math.sqrt(dim) raises it too
                raise EmbeddingOverflowError(
                    f"{owner}: `dim` {chk.show(dim)} is too large for the default initializer "
                    f"(standard deviation 1 / sqrt(dim)); a table's dimension is an int32 in "
                    f"the proto, at most 2^31 - 1"
                ) from None
            initializer = TruncatedNormalInitializer(0.0, stddev)
        self.vocabulary_size = vocabulary_size
        self.dim = dim
        self.initializer = initializer
        self.optimizer = optimizer
        self.combiner = combiner
        self.name = name
        self.quantization_config = quantization_config
        self.layout = layout
        self.dtype = dtype_name

    def __repr__(self) -> str:
        # TensorFlow prints the default initializer as None.
        initializer = self.initializer
        if (
            isinstance(initializer, TruncatedNormalInitializer)
            and initializer.mean == 0.0
            and math.isclose(initializer.stddev, 1 / math.sqrt(self.dim))
        ):
            initializer = None
        return (
            f"TableConfig(vocabulary_size={self.vocabulary_size!r}, dim={self.dim!r}, "
            f"initializer={initializer!r}, optimizer={self.optimizer!r}, "
            f"combiner={self.combiner!r}, name={self.name!r}, "
            f"quantization_config={self.quantization_config!r})"
        )


class FeatureConfig:
    """One input feature looking up ``table``.

    ``max_sequence_length`` > 0 keeps a sequence axis of that length (no combining over it).
    ``output_shape`` fixes the per-replica shape of the feature's output without the embedding
    axis (``None``: taken from ``build_config``'s input shapes or batch size).
    """

    def __init__(
        self,
        table: TableConfig,
        max_sequence_length: int = 0,
        validate_weights_and_indices: bool = True,
        output_shape: Any = None,
        name: str | None = None,
    ) -> None:
        origins.record(self)
        owner = "FeatureConfig" if not name else f"FeatureConfig {name!r}"
        if not isinstance(table, TableConfig):
            raise chk.fail_type(
                owner,
                f"`table` must be a TableConfig; received {chk.show(table)} "
                f"({chk.type_name(table)})",
            )
        _python_int(owner, "max_sequence_length", max_sequence_length, 0)
        if not isinstance(validate_weights_and_indices, bool):
            raise chk.fail_type(
                owner,
                f"`validate_weights_and_indices` must be True or False; received "
                f"{chk.show(validate_weights_and_indices)}",
            )
        shape = to_shape(output_shape, owner, "output_shape")
        if name and not isinstance(name, str):  # a falsy name is not written, as in TensorFlow
            raise chk.fail_type(owner, f"`name` must be a str or None; received {chk.show(name)}")
        self.table = table
        self.max_sequence_length = max_sequence_length
        self.validate_weights_and_indices = validate_weights_and_indices
        self.output_shape: Shape = shape
        self.name = name

    def __repr__(self) -> str:
        return (
            f"FeatureConfig(table={self.table!r}, max_sequence_length="
            f"{self.max_sequence_length!r}, validate_weights_and_indices="
            f"{self.validate_weights_and_indices!r}, output_shape="
            f"{shape_repr(self.output_shape)}, name={self.name!r})"
        )
