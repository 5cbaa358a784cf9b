"""``tpuemb bench``: the executor on the anchor workload, with its yardsticks.

The anchor workload: one training step of a ``vocab x dim`` float32 table (default 1,000,000 x
64, Adagrad) for a batch of ``ids`` ids (65,536) drawn Zipf-like: rank r in 1..V has probability
proportional to r^-zipf (1.05), and ranks are mapped to ids through a seeded random permutation
of the vocabulary, so popular ids are scattered over the table (about 21,800 unique ids).

Everything below is measured in the same run, on the same arrays:

- **step** (``sec_per_step``, the main figure): the public ``Executor(config).step(batch)`` a
  user runs, on a one-feature batch (one id per bag, ``sum`` combiner, a random [ids, dim]
  activation gradient): input checks, the forward pass (activations), back-propagation and
  the duplicate sum, the update, and the per-step report (update norm, per-host counts);
- **update** (``update_sec_per_step``): the update alone - de-duplicate
  the ids, sum the gradient rows of equal ids, update the touched rows - through the
  executor's own code for it (the engine's ``deduplicate`` and ``backprop_sum``, then
  ``Executor.apply_row_gradients``); before it is timed, one such update is checked against
  the naive step below on copies of the touched rows (``step_check_max_abs_diff``), so a
  benchmark that times the wrong thing shows;
- **naive step**: the same update written the obvious NumPy way (``np.unique``, ``np.add.at``,
  fancy indexing), inside this module;
- **memory-traffic limits**: the bytes a step must move divided by the machine's copy
  bandwidth (``np.copyto`` of a 64 MiB array, best of several, counting the bytes read plus
  the bytes written). The whole step (``limit_sec_per_step``): every touched row of the table
  and of each slot read and written once, the activation gradients read once, the activations
  written once; the update (``update_limit_sec_per_step``): the touched rows and slots read and
  written once, the gradient rows read once;
- **first call** (``compile_sec``): importing numba and loading (or compiling, when the cache
  is cold: ``kernels_compiled``) every kernel the steps use, apart from the steps; and
  ``warm_start_sec``: a fresh process importing tpuemb and running a tiny step with the kernels
  in the cache (``engines.jit.cache_dir``), the cost a user pays for every new process;
- **peak RSS**: the process's high-water mark (``getrusage``), against the tables plus slots.

Before anything is allocated, :func:`memory_needed` estimates the run's peak and :func:`run`
refuses (``UsageError``) a workload that would not fit in ``max_memory`` (default: 80% of the
memory available), naming a ``vocab`` that fits and a ``max_memory`` that admits it.

A ``multi_feature`` run adds a realistic step: three tables (together the
same vocabulary), eight features with the ``mean`` combiner and bags of 1 to 20 ids, about the
same number of ids, timed against the same ids sent as one anchor-style step.
"""

from __future__ import annotations

import math
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from . import units
from .algorithms.table import BENCHMARK, BENCHMARK_DEFAULT
from .algorithms.update import UpdateContext
from .errors import UsageError
from .errors import parameter as arg

if TYPE_CHECKING:
    from .executor import Executor

__all__ = [
    "OPTIMIZERS",
    "BenchResult",
    "Workload",
    "copy_bandwidth",
    "check_memory",
    "median_time",
    "memory_needed",
    "naive_step",
    "run",
    "zipf_ids",
]

F32 = np.float32
LEARNING_RATE = 0.01

# The optimizers the benchmark knows, as configuration text: every one with a TensorFlow sparse
# CPU kernel (the algorithm table's ``BENCHMARK``).
OPTIMIZERS: dict[str, str] = {
    short: f"{name} {{ {body + ' ' if body else ''}}}" for short, (name, body) in BENCHMARK.items()
}


@dataclass(frozen=True)
class Workload:
    """The benchmark's inputs (defaults: the anchor workload)."""

    vocab: int = 1_000_000
    dim: int = 64
    ids: int = 65_536
    zipf: float = 1.05
    optimizer: str = BENCHMARK_DEFAULT
    steps: int = 20
    seed: int = 0


@dataclass
class BenchResult:
    """All figures of one run; ``as_json`` is what ``tpuemb bench --json`` prints."""

    engine: str
    workload: Workload
    threads: int
    unique_ids: int
    sec_per_step: float
    update_sec_per_step: float
    naive_sec_per_step: float
    limit_sec_per_step: float
    limit_bytes: int
    update_limit_sec_per_step: float
    update_limit_bytes: int
    copy_bandwidth_bytes_per_sec: float
    compile_sec: float
    kernels_compiled: bool
    warm_start_sec: float
    peak_rss_bytes: int
    state_bytes: int
    setup_sec: float
    step_check_max_abs_diff: float = 0.0
    engine_note: str | None = None
    multi_feature: dict[str, float] = field(default_factory=dict)

    @property
    def ids_per_sec(self) -> float:
        return self.workload.ids / self.sec_per_step

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "engine": self.engine,
            "sec_per_step": self.sec_per_step,
            "update_sec_per_step": self.update_sec_per_step,
            "naive_sec_per_step": self.naive_sec_per_step,
            "limit_sec_per_step": self.limit_sec_per_step,
            "update_limit_sec_per_step": self.update_limit_sec_per_step,
            "unique_ids": self.unique_ids,
            "step_check_max_abs_diff": self.step_check_max_abs_diff,
            "peak_rss_bytes": self.peak_rss_bytes,
            "compile_sec": self.compile_sec,
            "kernels_compiled": self.kernels_compiled,
            "warm_start_sec": self.warm_start_sec,
            "ids_per_sec": self.ids_per_sec,
            "naive_over_update": self.naive_sec_per_step / self.update_sec_per_step,
            "step_over_limit": self.sec_per_step / self.limit_sec_per_step,
            "update_over_limit": self.update_sec_per_step / self.update_limit_sec_per_step,
            "limit_bytes": self.limit_bytes,
            "update_limit_bytes": self.update_limit_bytes,
            "copy_bandwidth_bytes_per_sec": self.copy_bandwidth_bytes_per_sec,
            "state_bytes": self.state_bytes,
            "peak_rss_over_state": self.peak_rss_bytes / self.state_bytes,
            "peak_rss_target_bytes": int(1.3 * self.state_bytes) + 200_000_000,
            "threads": self.threads,
            "setup_sec": self.setup_sec,
            "workload": asdict(self.workload),
        }
        if self.engine_note:
            out["engine_note"] = self.engine_note
        if self.multi_feature:
            out["multi_feature"] = self.multi_feature
        return out


# ------------------------------------------------------------------------------------------------
# Inputs


def zipf_ids(vocab: int, count: int, exponent: float, seed: int) -> np.ndarray:
    """``count`` int64 ids: Zipf(``exponent``) ranks over ``vocab`` through a seeded permutation.

    Rank r (1-based) has probability r^-exponent / sum_k k^-exponent (inverse-CDF sampling of
    the exact discrete law); rank r becomes id ``permutation[r - 1]``.
    """
    rng = np.random.default_rng([seed, 0x21F])
    cdf = np.cumsum(np.arange(1, vocab + 1, dtype=np.float64) ** -float(exponent))
    cdf /= cdf[-1]
    ranks = np.minimum(np.searchsorted(cdf, rng.random(count), side="right"), vocab - 1)
    return rng.permutation(vocab)[ranks].astype(np.int64)


def _config_text(tables: list[tuple[str, int, int]], features: list[tuple[int, int]],
                 optimizer: str) -> str:
    body = OPTIMIZERS[optimizer]
    text = "".join(
        f'table_descriptor {{ name: "{name}" vocabulary_size: {vocab} dimension: {dim} '
        f"optimization_parameters {{ {body} learning_rate {{ constant: {LEARNING_RATE} }} "
        "gradient_accumulation_status: ENABLED } } "
        for name, vocab, dim in tables
    )
    text += "".join(
        f'feature_descriptor {{ name: "f{f}" table_id: {table} input_shape: {bags} }} '
        for f, (table, bags) in enumerate(features)
    )
    return text + "mode: TRAINING num_hosts: 1 num_tensor_cores: 1"


def _executor(text: str, combiner: str, engine: str) -> Executor:
    from .executor import Executor, RunOptions
    from .io import load
    from .session import prepare

    # check_memory=False: run() checked the whole benchmark first, against the limit it was given
    return Executor(prepare(load(text.encode(), "text"), combiners=combiner),
                    RunOptions(engine=engine, check_memory=False))


def memory_needed(workload: Workload) -> int:
    """Estimated peak bytes of :func:`run` for ``workload``: the executor's estimate of the
    anchor table (table, slots, a step's working arrays: ``memory.memory_estimate``), the id
    sampler's float64 CDF and int64 permutation of the vocabulary (16 bytes a row), four
    ``ids x dim`` float32 arrays (gradients, activations, the naive step's gathered rows and sums),
    the 128 MiB of the copy-bandwidth probe and the timings (a Python float per step)."""
    return _anchor_bytes(workload.vocab, workload) + _fixed_bytes(workload)


def _anchor_bytes(vocab: int, w: Workload) -> int:
    """The bytes that grow with the vocabulary (see :func:`memory_needed`)."""
    from .executor.memory import memory_estimate
    from .io import load
    from .session import prepare

    text = _config_text([("anchor", vocab, w.dim)], [(0, w.ids)], w.optimizer)
    return memory_estimate(prepare(load(text.encode(), "text")).plan) + 16 * vocab


def _fixed_bytes(w: Workload) -> int:
    return 16 * w.ids * w.dim + (128 << 20) + 32 * w.steps  # the steps' times: one float each


def check_memory(w: Workload, max_memory: int | None = None) -> None:
    """Refuse a workload beyond the memory limit before allocating anything."""
    from .executor.core import require_memory

    def smaller(limit: int) -> str:
        """The largest --vocab (two significant digits) whose estimate fits under ``limit``:
        a bisection, the estimate growing with the vocabulary."""
        fits, above = 0, w.vocab
        while above - fits > 1:
            middle = (fits + above) // 2
            if _anchor_bytes(middle, w) + _fixed_bytes(w) <= limit:
                fits = middle
            else:
                above = middle
        if fits < 1:
            return (f"lower {arg('ids')} or {arg('dim')}" if limit > (128 << 20)
                    else "no smaller workload helps (the bandwidth probe alone takes 128 MiB)")
        digits = 10 ** max(len(str(fits)) - 2, 0)
        return f"use {arg('vocab')} {fits // digits * digits} or less at {arg('dim')} {w.dim}"

    require_memory(memory_needed(w), max_memory,
                   what=f"the benchmark of a {w.vocab:,} x {w.dim} table",
                   counted="the table, its slots, a step's working arrays, the id sampler and "
                   "the gradients", reduce=smaller)


# ------------------------------------------------------------------------------------------------
# Yardsticks


def copy_bandwidth(nbytes: int = 64 << 20, repeats: int = 7) -> float:
    """Bytes moved per second by ``np.copyto`` (read + write), best of ``repeats``."""
    source = np.ones(nbytes // 4, dtype=F32)
    target = np.empty_like(source)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - start)
    return 2 * nbytes / best


def naive_step(
    optimizer: str, table: np.ndarray, slots: list[np.ndarray], ids: np.ndarray,
    grads: np.ndarray, lr: float = LEARNING_RATE,
) -> None:
    """The update step written the obvious NumPy way: ``np.unique``, ``np.add.at``, fancy
    indexing, and the family's NumPy update of the rows (the yardstick of ``naive_sec_per_step``:
    the executor's equations)."""
    if optimizer not in OPTIMIZERS:
        raise UsageError(_unknown_optimizer(optimizer))
    unique, inverse = np.unique(ids, return_inverse=True)
    g = np.zeros((unique.shape[0], table.shape[1]), dtype=F32)
    np.add.at(g, inverse.reshape(-1), grads)
    optimizer_of, hyper = _naive_update(optimizer)
    state = optimizer_of.state(*(slot[unique] for slot in slots))
    w, state = optimizer_of.update(table[unique], state, g, F32(lr), hyper, UpdateContext(0, ()))
    table[unique] = w
    for slot, value in zip(slots, state, strict=True):
        slot[unique] = value


def _naive_update(optimizer: str) -> tuple[Any, Any]:
    """The family's NumPy update of the benchmark's ``optimizer`` and its bound hyper-parameters
    (read from the benchmark's configuration text)."""
    from google.protobuf import text_format

    from .algorithms.update import get as get_update
    from .proto.optimization_parameters_pb2 import OptimizationParameters

    name = BENCHMARK[optimizer][0]
    message = text_format.Parse(OPTIMIZERS[optimizer], OptimizationParameters())
    found = get_update(name)
    return found, found.bind(getattr(message, name))


def _check_step(
    optimizer: str, table: np.ndarray, slots: list[np.ndarray], ids: np.ndarray,
    grads: np.ndarray, update: Callable[[], np.ndarray],
) -> tuple[int, float]:
    """Run ``update`` (the timed step) once, and the naive step on copies of the rows it should
    touch; return the number of rows ``update`` updated and the largest absolute difference
    between the two results over those rows and their slots (inf when the rows differ)."""
    expected_rows = np.unique(ids)
    local = [table[expected_rows]] + [slot[expected_rows] for slot in slots]
    rows = update()
    naive_step(optimizer, local[0], local[1:], np.searchsorted(expected_rows, ids), grads)
    if rows.shape != expected_rows.shape or (rows != expected_rows).any():
        return int(rows.shape[0]), float("inf")
    diffs = [float(np.abs(array[rows] - want).max(initial=0.0))
             for array, want in zip([table, *slots], local, strict=True)]
    return int(rows.shape[0]), max(diffs)


def _unknown_optimizer(name: str) -> str:
    return f"unknown optimizer {name!r} for the benchmark; expected one of: {', '.join(OPTIMIZERS)}"


def median_time(fn: Callable[[], Any], steps: int) -> float:
    """Median seconds of ``steps`` calls of ``fn``, after one untimed call (the warm-up: tracing,
    caches, lazily loaded kernels, page faults of the first touch)."""
    fn()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _peak_rss() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


# ------------------------------------------------------------------------------------------------
# The run


def _tiny_step(optimizer: str, engine: str) -> None:
    tiny = _executor(_config_text([("t", 8, 4)], [(0, 4)], optimizer), "sum", engine)
    tiny.step([{"ids": np.array([1, 3, 1, 0]), "grad": np.ones((4, 4), dtype=F32)}])
    rows = np.array([0, 3])
    tiny.apply_row_gradients("t", rows, np.ones((2, 4), dtype=F32))


def _warm_up(engine: str, optimizer: str) -> tuple[str, str | None, float, bool]:
    """Load the engine and every kernel the benchmark uses on a tiny problem; return the
    engine's name, its fallback note, the seconds it took (numba's import and the kernels'
    compilation or cache load) and whether any kernel had to be compiled."""
    from .executor.engines import get_engine

    start = time.perf_counter()
    chosen = get_engine(engine)
    compiled = False
    if chosen.name == "numba":
        from numba.core.registry import CPUDispatcher

        _tiny_step(optimizer, engine)
        _tiny_step(BENCHMARK_DEFAULT, engine)  # the multi-feature and the naive step's own kernels
        compiled = any(
            sum(kernel.stats.cache_misses.values()) > 0
            for module in _kernel_modules()
            for kernel in vars(module).values()
            if isinstance(kernel, CPUDispatcher)
        )
    return chosen.name, chosen.fallback, time.perf_counter() - start, compiled


def _kernel_modules() -> list[Any]:
    from .executor.engines import numba as numba_engine
    from .executor.engines import numba_init, numba_step, numba_update

    return [numba_engine, numba_init, numba_step, numba_update]


def warm_start(engine: str = "numba", optimizer: str = BENCHMARK_DEFAULT) -> float:
    """Seconds a fresh Python process takes to import tpuemb and run one tiny ``Executor.step``
    (with the kernels already in the cache: what every new process pays)."""
    import subprocess

    code = (
        "import time; start = time.perf_counter()\n"
        "from tpuemb_cfg.bench import _tiny_step\n"
        f"_tiny_step({optimizer!r}, {engine!r})\n"
        "print(time.perf_counter() - start)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    try:
        return float(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return float("nan")


def run(workload: Workload = Workload(), *, engine: str = "numba", threads: int | None = None,
        multi_feature: bool = False, max_memory: int | None = None) -> BenchResult:
    """Measure everything the module docstring lists, for ``workload`` on ``engine``.

    ``threads``: numba's thread count (default: numba's, one per core). Raises ``UsageError``
    for an unknown optimizer or nonsensical sizes, and before allocating anything when
    :func:`memory_needed` exceeds ``max_memory`` (default: 80% of the memory available).
    """
    w = workload
    if w.optimizer not in OPTIMIZERS:
        raise UsageError(_unknown_optimizer(w.optimizer))
    if w.vocab < 1 or w.dim < 1 or w.ids < 1 or w.steps < 1 or not 0 < w.zipf < math.inf:
        raise UsageError(f"{arg('vocab')}, {arg('dim')}, {arg('ids')} and {arg('steps')} must be "
                         f">= 1 and {arg('zipf')} a finite number > 0")
    try:
        units.parse_seed(w.seed)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"seed={w.seed!r}: {exc}") from None
    if multi_feature and w.vocab < 3:
        raise UsageError(f"{arg('multi_feature')} needs {arg('vocab')} 3 or more (three tables "
                         f"share it); got {w.vocab}")
    check_memory(w, max_memory)
    bandwidth = copy_bandwidth()
    name, note, compile_sec, compiled = _warm_up(engine, w.optimizer)
    warm_sec = warm_start(engine, w.optimizer)
    used_threads = _set_threads(threads) if name == "numba" else 1

    start = time.perf_counter()
    ids = zipf_ids(w.vocab, w.ids, w.zipf, w.seed)
    grads = np.random.default_rng([w.seed, 0x6AD]).standard_normal((w.ids, w.dim), dtype=F32)
    grads *= F32(0.01)
    executor = _executor(
        _config_text([("anchor", w.vocab, w.dim)], [(0, w.ids)], w.optimizer), "sum", engine
    )
    setup_sec = time.perf_counter() - start
    engine_in_use = executor.engine
    state = executor.state_arrays()
    table = state["table/anchor"]
    slots = [state[f"slot/anchor/{slot}"] for slot in executor.plan.tables[0].slot_names]
    batch = [{"ids": ids, "grad": grads}]

    step_sec = median_time(lambda: executor.step(batch), w.steps)
    ones = np.ones(w.ids, dtype=F32)
    sample = np.arange(w.ids, dtype=np.int64)

    def update() -> np.ndarray:
        rows, inverse = engine_in_use.deduplicate(ids)
        g = engine_in_use.backprop_sum(grads, sample, ones, inverse, rows.shape[0])
        executor.apply_row_gradients("anchor", rows, g)  # fused when the engine can
        return rows

    unique_ids, step_check = _check_step(w.optimizer, table, slots, ids, grads, update)
    update_sec = median_time(update, w.steps)
    naive_sec = median_time(lambda: naive_step(w.optimizer, table, slots, ids, grads), w.steps)
    row_bytes = w.dim * 4
    update_limit_bytes = 2 * unique_ids * row_bytes * (1 + len(slots)) + w.ids * row_bytes
    limit_bytes = update_limit_bytes + w.ids * row_bytes  # the activations, written once
    state_bytes = executor.plan.state_bytes()
    multi: dict[str, float] = {}
    if multi_feature:
        del executor, state, table, slots, update  # free the anchor table first
        multi = _multi_feature(w, engine)
    return BenchResult(
        engine=name,
        workload=w,
        threads=used_threads,
        unique_ids=unique_ids,
        sec_per_step=step_sec,
        update_sec_per_step=update_sec,
        naive_sec_per_step=naive_sec,
        limit_sec_per_step=limit_bytes / bandwidth,
        limit_bytes=limit_bytes,
        update_limit_sec_per_step=update_limit_bytes / bandwidth,
        update_limit_bytes=update_limit_bytes,
        copy_bandwidth_bytes_per_sec=bandwidth,
        compile_sec=compile_sec,
        kernels_compiled=compiled,
        warm_start_sec=warm_sec,
        peak_rss_bytes=_peak_rss(),
        state_bytes=state_bytes,
        setup_sec=setup_sec,
        step_check_max_abs_diff=step_check,
        engine_note=note,
        multi_feature=multi,
    )


def _set_threads(threads: int | None) -> int:
    import numba

    if threads is not None:
        limit = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
        if not 1 <= threads <= limit:
            raise UsageError(f"{arg('threads')} {threads}: expected 1..{limit} "
                             "(NUMBA_NUM_THREADS)")
        numba.set_num_threads(threads)
    return int(numba.get_num_threads())


def _time_steps(text: str, combiner: str, engine: str, batch: list[dict[str, np.ndarray]],
                steps: int) -> float:
    """Median seconds of ``Executor.step(batch)`` on a fresh executor (freed on return)."""
    executor = _executor(text, combiner, engine)
    return median_time(lambda: executor.step(batch), steps)


def _multi_feature(w: Workload, engine: str) -> dict[str, float]:
    """The realistic step (3 tables, 8 features, mean, bags of 1-20 ids) against the same ids
    as one anchor-style step (one table holding the three side by side, one id per bag)."""
    rng = np.random.default_rng([w.seed, 0x3F])
    sizes = [w.vocab // 2, w.vocab // 4, w.vocab - w.vocab // 2 - w.vocab // 4]
    offsets = [0, sizes[0], sizes[0] + sizes[1]]
    feature_tables = [0, 0, 0, 1, 1, 1, 2, 2]
    bags_per_feature = max(w.ids // (len(feature_tables) * 21 // 2), 1)
    batch, global_ids = [], []
    for f, t in enumerate(feature_tables):
        lengths = rng.integers(1, 21, bags_per_feature)
        ids = zipf_ids(sizes[t], int(lengths.sum()), w.zipf, w.seed * 131 + f)
        batch.append({
            "ids": ids,
            "row_splits": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            "grad": rng.standard_normal((bags_per_feature, w.dim), dtype=F32) * F32(0.01),
        })
        global_ids.append(ids + offsets[t])
    multi_text = _config_text(
        [(f"t{t}", size, w.dim) for t, size in enumerate(sizes)],
        [(t, bags_per_feature) for t in feature_tables], w.optimizer,
    )
    multi_sec = _time_steps(multi_text, "mean", engine, batch, w.steps)
    flat = np.concatenate(global_ids)
    flat_grads = rng.standard_normal((flat.shape[0], w.dim), dtype=F32) * F32(0.01)
    anchor_text = _config_text([("all", w.vocab, w.dim)], [(0, flat.shape[0])], w.optimizer)
    anchor_sec = _time_steps(
        anchor_text, "sum", engine, [{"ids": flat, "grad": flat_grads}], w.steps
    )
    return {
        "ids": float(flat.shape[0]),
        "unique_ids": float(np.unique(flat).shape[0]),
        "multi_feature_sec_per_step": multi_sec,
        "same_ids_one_feature_sec_per_step": anchor_sec,
        "ratio": multi_sec / anchor_sec,
    }
