"""How many bytes a synthetic step needs: the tables and every working array of one step.

``Plan.memory_estimate`` is the sum :func:`estimate` computes, checked before anything is
allocated (``Executor``, ``tpuemb simulate``). A step of the NumPy engine (the default; the numba
engine needs less) holds, with per feature f ``b_f`` bags (``num_tensor_cores * prod(input_shape)``)
and ``n_f`` ids (``b_f`` times the mean bag size of ``executor.bags``), per table t its features'
``N_t`` ids, ``U_t`` distinct ids (the Zipf law of ``sim.synthetic``: :func:`expected_unique`)
and dimension ``D_t``:

- **all step long**: the batch (ids and row splits int64, weights float32: ``12 n + 8 b`` bytes),
  every feature's activation and its gradient (``2 * 4 b D``), and per table the forward pass's
  record (ids, sample and inverse int64, gains float32, distinct ids: ``28 N + 8 U``; with
  accumulation DISABLED the per-core partials add ``16 N + 8 U``);
- **at the peak**, the largest of, per table: the back-propagation (``gains * dA[sample]``, its
  sorted copy and the float32 rows it sums into: ``3 * 4 N D + 2 * 4 U D``), the forward lookup
  (the distinct rows, the per-occurrence rows and their weighted copy: ``4 U D + 2 * 4 n D``), the
  synthetic loss (teacher rows and their weighted copy, ``2 * 4 n D + 4 b D``, or the float64
  squared error beside the error and the teacher's activation, ``24 b D``) and the update (the
  rows, slots and the optimizer's results, ``(2 S + 4) * 4 U D``; a non-lazy optimizer steps
  every row with the table's pre-step copy: ``(S + 5) * 4 V D``).

Everything is float32 as in the executor; the sums are within 20% of the peak resident memory the
step adds on the model configurations of ``examples/models`` (``benchmarks/bench_memory.py``,
``docs/performance.md``). The interpreter and its libraries (about 40 MB, 150 MB once numba has
compiled the initialisation kernels) are not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .bags import expected_ids_per_bag

if TYPE_CHECKING:
    from .plan import Plan, TablePlan

__all__ = ["ZIPF_EXPONENT", "Estimate", "estimate", "expected_unique"]

#: The exponent of the synthetic ids' Zipf law (``sim.synthetic``; a test keeps them equal).
ZIPF_EXPONENT = 1.1

_F32 = 4
_BUCKETS = 512


@dataclass(frozen=True)
class Estimate:
    """The parts of :func:`estimate`, in bytes: ``state`` (tables and slots), ``steady`` (what a
    step holds from start to end), ``peak`` (the largest transient on top of it) and ``total``."""

    state: int
    steady: int
    peak: int

    @property
    def total(self) -> int:
        return self.state + self.steady + self.peak


def expected_unique(vocabulary: int, draws: float) -> float:
    """The expected number of distinct ids among ``draws`` ids of the synthetic Zipf law over
    ``vocabulary`` rows: ``sum over ranks r of 1 - (1 - p_r)^draws``.

    The rank probabilities come from the continuous power law the sampler inverts,
    ``p_r = F(r + 2) - F(r + 1)`` with ``F(x) = (x^a - 1) / ((V + 1)^a - 1)``, ``a = 1 - s``;
    ranks are summed in geometric buckets (the probability changes slowly within one), so the
    cost does not grow with the vocabulary.
    """
    if vocabulary <= 0 or draws <= 0:
        return 0.0
    a = 1.0 - ZIPF_EXPONENT
    edges = np.unique(np.rint(float(vocabulary) ** np.linspace(0.0, 1.0, _BUCKETS + 1)))
    edges = np.concatenate(([0.0], edges))
    cdf = ((edges + 1.0) ** a - 1.0) / ((vocabulary + 1.0) ** a - 1.0)
    counts = np.diff(edges)
    p = np.minimum(np.diff(cdf) / counts, 1.0 - 1e-16)  # mean probability within a bucket
    total = float(np.sum(counts * -np.expm1(draws * np.log1p(-p))))
    return min(total, float(vocabulary), draws)


def _table_terms(plan: Plan, table: TablePlan) -> tuple[int, int]:
    """(steady, peak) bytes of one table's step."""
    dim = table.dimension
    bags = ids = 0.0
    features = []
    for f in table.features:
        feature = plan.features[f]
        b = plan.num_cores * math.prod(feature.input_shape)
        n = b * expected_ids_per_bag(feature)
        features.append((b, n))
        bags += b
        ids += n
    unique = expected_unique(table.vocabulary, ids)
    slots = len(table.optimizer.slots)
    steady = 12 * ids + 8 * bags + 2 * _F32 * bags * dim + 28 * ids + 8 * unique
    if plan.updates and not table.accumulate:  # one partial per core: its ids and rows
        steady += 16 * ids + 8 * plan.num_cores * expected_unique(
            table.vocabulary, ids / plan.num_cores)
    lookup = _F32 * unique * dim + max((2 * _F32 * n * dim for _, n in features), default=0)
    # The loss: teacher rows and their weighted copy, or the float64 squared error next to the
    # teacher's activation and the error itself.
    loss = max((max(2 * _F32 * n * dim + _F32 * b * dim, 24 * b * dim) for b, n in features),
               default=0)
    peak = max(lookup, loss)
    if plan.updates:
        backward = 3 * _F32 * ids * dim + 2 * _F32 * unique * dim
        rows = table.vocabulary if not table.lazy else unique
        update = (slots + 5 if not table.lazy else 2 * slots + 4) * _F32 * rows * dim
        peak = max(peak, backward, update)
    return int(steady), int(peak)


def estimate(plan: Plan) -> Estimate:
    """The bytes of ``plan``'s tables and of one synthetic step (see the module docstring)."""
    state = plan.state_bytes()
    steady = peak = 0
    for table in plan.tables:
        table_steady, table_peak = _table_terms(plan, table)
        steady += table_steady
        peak = max(peak, table_peak)
    return Estimate(state, steady, peak)
