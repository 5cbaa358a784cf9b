"""``tpuemb bench``: the anchor workload and its timing loop (the yardsticks: ``benchmarks/``).

The anchor workload: one training step of a ``vocab x dim`` float32 table (default 1,000,000 x
64, Adagrad) for a batch of ``ids`` ids (65,536) drawn Zipf-like: rank r in 1..V has probability
proportional to r^-zipf (1.05), and ranks are mapped to ids through a seeded random permutation
of the vocabulary, so popular ids are scattered over the table (about 21,800 unique ids).

:func:`run` measures, in one process:

- **step** (``sec_per_step``, the main figure): the public ``Executor(config).step(batch)`` a
  user runs, on a one-feature batch (one id per bag, ``sum`` combiner, a random [ids, dim]
  activation gradient): input checks, the forward pass (activations), back-propagation and
  the duplicate sum, the update, and the per-step report (update norm, per-host counts);
- **update** (``update_sec_per_step``): the update alone - de-duplicate the ids, sum the
  gradient rows of equal ids, update the touched rows - through the executor's own code for it
  (the engine's ``deduplicate`` and ``backprop_sum``, then ``Executor.apply_row_gradients``);
- **first call** (``compile_sec``): importing numba and loading (or compiling, when the cache is
  cold: ``kernels_compiled``) every kernel the steps use, apart from the steps;
- **peak RSS**: the process's high-water mark (``getrusage``), against the tables plus slots;
- **memory-traffic limits** (:func:`traffic_limit`, the one model of them): the bytes the step
  and the update must move, divided by the machine's **copy bandwidth** measured in the same
  run (:func:`copy_bandwidth`: ``np.copyto`` of 64 MiB, best of 7, before and after the steps),
  so ``step_over_limit`` says how far the step is from what memory allows on this machine;
- **load**: the 1-minute load average (``os.getloadavg``) before and after, so a figure from a
  busy machine says so.

Before anything is allocated, :func:`check_memory` refuses (``UsageError``) a workload whose
estimate (:func:`memory_needed`) would not fit in ``max_memory`` (default: 80% of the memory
available), naming a ``vocab`` that fits and a ``max_memory`` that admits it.

The other yardsticks - the naive NumPy step, a fresh process's warm start, the multi-feature
step, and TensorFlow's and PyTorch's steps - are benchmark machinery, in the repository's
``benchmarks/`` (``benchmarks/anchor.py`` builds on this module; docs/performance.md).
"""

from __future__ import annotations

import math
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import numpy as np

from tpuemb_cfg.algorithms.table import BENCHMARK, BENCHMARK_DEFAULT
from tpuemb_cfg.base import units
from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.base.errors import parameter as arg
from tpuemb_cfg.executor import Executor, RunOptions
from tpuemb_cfg.executor.core import require_memory
from tpuemb_cfg.executor.engines import get_engine
from tpuemb_cfg.executor.memory import memory_estimate
from tpuemb_cfg.formats.io import load
from tpuemb_cfg.session import prepare

__all__ = [
    "OPTIMIZERS",
    "PROBE_BYTES",
    "Anchor",
    "BenchResult",
    "Machine",
    "TrafficLimit",
    "Workload",
    "anchor",
    "check_memory",
    "check_workload",
    "config_text",
    "copy_bandwidth",
    "measured",
    "median_time",
    "memory_needed",
    "peak_rss",
    "report_lines",
    "run",
    "set_threads",
    "traffic_limit",
    "warm_up",
    "zipf_ids",
]

F32 = np.float32
LEARNING_RATE = 0.01
#: Bytes of the copy-bandwidth probe's two arrays (:func:`copy_bandwidth`).
PROBE_BYTES = 128 << 20
_T = TypeVar("_T")

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


@dataclass(frozen=True)
class TrafficLimit:
    """The bytes one anchor step must move between memory and the processor
    (:func:`traffic_limit`): the whole step's and the update's."""

    step_bytes: int
    update_bytes: int


def traffic_limit(unique_ids: int, bags: int, dim: int, slots: int) -> TrafficLimit:
    """The memory-traffic model of one step of a one-id-per-bag feature (``bags`` ids, of which
    ``unique_ids`` distinct) on a float32 table of dimension ``dim`` with ``slots`` slots.

    The update must read and write every touched row of the table and of each slot once
    (``2 * unique_ids * row * (1 + slots)``, ``row = 4 * dim`` bytes) and read the activation
    gradients once (``bags * row``); the whole step also writes the activations once
    (``bags * row``). Nothing else is counted: the ids, the de-duplication and the summed
    gradients are small or stay in the caches. Divided by the copy bandwidth, a time no
    implementation can beat on that machine.
    """
    row = 4 * dim
    update = 2 * unique_ids * row * (1 + slots) + bags * row
    return TrafficLimit(step_bytes=update + bags * row, update_bytes=update)


def copy_bandwidth(nbytes: int = PROBE_BYTES // 2, repeats: int = 7) -> float:
    """Bytes moved per second by ``np.copyto`` of ``nbytes`` (read + written, so twice
    ``nbytes`` per copy), the best of ``repeats``: the machine's copy bandwidth, which the
    memory-traffic limits divide by."""
    source = np.ones(nbytes // 4, dtype=F32)
    target = np.empty_like(source)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - start)
    return 2 * nbytes / best


@dataclass(frozen=True)
class Machine:
    """What the figures of a run depend on besides the code: the copy bandwidth measured before
    and after the steps (bytes per second; the limits use the higher) and the 1-minute load
    average before and after (``os.getloadavg``; it counts the benchmark's own threads)."""

    bandwidth_before: float
    bandwidth_after: float
    load_before: float
    load_after: float

    @property
    def bandwidth(self) -> float:
        return max(self.bandwidth_before, self.bandwidth_after)


def measured(fn: Callable[[], _T]) -> tuple[_T, Machine]:
    """``fn()`` and the :class:`Machine` it ran on: the load and the copy bandwidth measured
    right before and right after it."""
    load_before = os.getloadavg()[0]
    bandwidth_before = copy_bandwidth()
    result = fn()
    bandwidth_after = copy_bandwidth()
    return result, Machine(bandwidth_before, bandwidth_after, load_before, os.getloadavg()[0])


@dataclass
class BenchResult:
    """All figures of one run; ``as_json`` is what ``tpuemb bench --json`` prints."""

    engine: str
    workload: Workload
    threads: int
    unique_ids: int
    sec_per_step: float
    update_sec_per_step: float
    compile_sec: float
    kernels_compiled: bool
    peak_rss_bytes: int
    state_bytes: int
    setup_sec: float
    limit: TrafficLimit
    machine: Machine
    engine_note: str | None = None

    @property
    def ids_per_sec(self) -> float:
        return self.workload.ids / self.sec_per_step

    @property
    def limit_sec_per_step(self) -> float:
        return self.limit.step_bytes / self.machine.bandwidth

    @property
    def update_limit_sec_per_step(self) -> float:
        return self.limit.update_bytes / self.machine.bandwidth

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "engine": self.engine,
            "sec_per_step": self.sec_per_step,
            "update_sec_per_step": self.update_sec_per_step,
            "unique_ids": self.unique_ids,
            "peak_rss_bytes": self.peak_rss_bytes,
            "compile_sec": self.compile_sec,
            "kernels_compiled": self.kernels_compiled,
            "ids_per_sec": self.ids_per_sec,
            "state_bytes": self.state_bytes,
            "peak_rss_over_state": self.peak_rss_bytes / self.state_bytes,
            "peak_rss_target_bytes": int(1.3 * self.state_bytes) + 200_000_000,
            "threads": self.threads,
            "setup_sec": self.setup_sec,
            "workload": asdict(self.workload),
            "limit_bytes": self.limit.step_bytes,
            "update_limit_bytes": self.limit.update_bytes,
            "limit_sec_per_step": self.limit_sec_per_step,
            "update_limit_sec_per_step": self.update_limit_sec_per_step,
            "step_over_limit": self.sec_per_step / self.limit_sec_per_step,
            "update_over_limit": self.update_sec_per_step / self.update_limit_sec_per_step,
            "copy_bandwidth_bytes_per_sec": self.machine.bandwidth,
            "copy_bandwidth_before_bytes_per_sec": self.machine.bandwidth_before,
            "copy_bandwidth_after_bytes_per_sec": self.machine.bandwidth_after,
            "load_before": self.machine.load_before,
            "load_after": self.machine.load_after,
        }
        if self.engine_note:
            out["engine_note"] = self.engine_note
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


def config_text(tables: list[tuple[str, int, int]], features: list[tuple[int, int]],
                optimizer: str) -> str:
    """The configuration of ``tables`` (name, vocabulary, dimension) and ``features`` (table
    index, bags), every table trained by ``optimizer`` at ``LEARNING_RATE``."""
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


def executor(text: str, combiner: str, engine: str) -> Executor:
    """An executor of the configuration ``text`` (memory checked by :func:`check_memory`)."""
    # check_memory=False: the benchmark checked the whole run first, against its limit
    return Executor(prepare(load(text.encode(), "text"), combiners=combiner),
                    RunOptions(engine=engine, check_memory=False))


def check_workload(w: Workload) -> None:
    """Refuse an unknown optimizer, nonsensical sizes or a bad seed (``UsageError``)."""
    if w.optimizer not in OPTIMIZERS:
        raise UsageError(f"unknown optimizer {w.optimizer!r} for the benchmark; expected one "
                         f"of: {', '.join(OPTIMIZERS)}")
    if w.vocab < 1 or w.dim < 1 or w.ids < 1 or w.steps < 1 or not 0 < w.zipf < math.inf:
        raise UsageError(f"{arg('vocab')}, {arg('dim')}, {arg('ids')} and {arg('steps')} must be "
                         f">= 1 and {arg('zipf')} a finite number > 0")
    try:
        units.parse_seed(w.seed)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"seed={w.seed!r}: {exc}") from None


def memory_needed(workload: Workload, extra_bytes: int = 0) -> int:
    """Estimated peak bytes of :func:`run` for ``workload``: the executor's estimate of the
    anchor table (table, slots, a step's working arrays: ``memory.memory_estimate``), the id
    sampler's float64 CDF and int64 permutation of the vocabulary (16 bytes a row), the
    ``ids x dim`` float32 gradients, the copy-bandwidth probe (``PROBE_BYTES``) and the timings
    (a Python float per step); plus ``extra_bytes`` (what a caller measures besides, e.g.
    ``benchmarks/anchor.py``'s yardsticks)."""
    return _anchor_bytes(workload.vocab, workload) + _fixed_bytes(workload) + extra_bytes


def _anchor_bytes(vocab: int, w: Workload) -> int:
    """The bytes that grow with the vocabulary (see :func:`memory_needed`)."""
    text = config_text([("anchor", vocab, w.dim)], [(0, w.ids)], w.optimizer)
    return memory_estimate(prepare(load(text.encode(), "text")).plan) + 16 * vocab


def _fixed_bytes(w: Workload) -> int:
    # the gradients, the bandwidth probe, the steps' times (one float each)
    return 4 * w.ids * w.dim + PROBE_BYTES + 32 * w.steps


def check_memory(w: Workload, max_memory: int | None = None, extra_bytes: int = 0) -> None:
    """Refuse a workload beyond the memory limit before allocating anything."""
    def smaller(limit: int) -> str:
        """The largest --vocab (two significant digits) whose estimate fits under ``limit``:
        a bisection, the estimate growing with the vocabulary."""
        fits, above = 0, w.vocab
        while above - fits > 1:
            middle = (fits + above) // 2
            if _anchor_bytes(middle, w) + _fixed_bytes(w) + extra_bytes <= limit:
                fits = middle
            else:
                above = middle
        if fits < 1:
            return f"lower {arg('ids')} or {arg('dim')}"
        digits = 10 ** max(len(str(fits)) - 2, 0)
        return f"use {arg('vocab')} {fits // digits * digits} or less at {arg('dim')} {w.dim}"

    require_memory(memory_needed(w, extra_bytes), max_memory,
                   what=f"the benchmark of a {w.vocab:,} x {w.dim} table",
                   counted="the table, its slots, a step's working arrays, the id sampler and "
                   "the gradients", reduce=smaller)


# ------------------------------------------------------------------------------------------------
# Timing


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


def peak_rss() -> int:
    """The process's high-water mark of resident memory, in bytes."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def tiny_step(optimizer: str, engine: str) -> None:
    """One ``Executor.step`` and one ``apply_row_gradients`` on an 8 x 4 table: every kernel
    the benchmark's steps use, loaded."""
    tiny = executor(config_text([("t", 8, 4)], [(0, 4)], optimizer), "sum", engine)
    tiny.step([{"ids": np.array([1, 3, 1, 0]), "grad": np.ones((4, 4), dtype=F32)}])
    rows = np.array([0, 3])
    tiny.apply_row_gradients("t", rows, np.ones((2, 4), dtype=F32))


def warm_up(engine: str, optimizer: str) -> tuple[str, str | None, float, bool]:
    """Load the engine and every kernel the benchmark uses on a tiny problem; return the
    engine's name, its fallback note, the seconds it took (numba's import and the kernels'
    compilation or cache load) and whether any kernel had to be compiled."""
    start = time.perf_counter()
    chosen = get_engine(engine)
    compiled = False
    if chosen.name == "numba":
        from numba.core.registry import CPUDispatcher

        from tpuemb_cfg.executor.engines import numba as numba_engine
        from tpuemb_cfg.executor.engines import numba_init, numba_step, numba_update

        tiny_step(optimizer, engine)
        tiny_step(BENCHMARK_DEFAULT, engine)  # the kernels of steps with other optimizers
        compiled = any(
            sum(kernel.stats.cache_misses.values()) > 0
            for module in (numba_engine, numba_init, numba_step, numba_update)
            for kernel in vars(module).values()
            if isinstance(kernel, CPUDispatcher)
        )
    return chosen.name, chosen.fallback, time.perf_counter() - start, compiled


def set_threads(threads: int | None) -> int:
    """Set numba's thread count (None: keep numba's); return the count in use."""
    import numba

    if threads is not None:
        limit = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
        if not 1 <= threads <= limit:
            raise UsageError(f"{arg('threads')} {threads}: expected 1..{limit} "
                             "(NUMBA_NUM_THREADS)")
        numba.set_num_threads(threads)
    return int(numba.get_num_threads())


@dataclass
class Anchor:
    """The anchor workload, set up: its executor, ids, gradients and the live table and slots."""

    executor: Executor
    ids: np.ndarray
    grads: np.ndarray
    table: np.ndarray
    slots: list[np.ndarray]
    setup_sec: float

    def step(self) -> None:
        """One public ``Executor.step`` of the batch."""
        self.executor.step([{"ids": self.ids, "grad": self.grads}])

    def update(self) -> np.ndarray:
        """The update alone, through the executor's code for it; returns the rows updated."""
        engine = self.executor.engine
        count = self.ids.shape[0]
        rows, inverse = engine.deduplicate(self.ids)
        g = engine.backprop_sum(self.grads, np.arange(count, dtype=np.int64),
                                np.ones(count, dtype=F32), inverse, rows.shape[0])
        self.executor.apply_row_gradients("anchor", rows, g)  # fused when the engine can
        return rows


def anchor(w: Workload, engine: str) -> Anchor:
    """Draw the ids and gradients of ``w`` and build its executor (the table and its slots)."""
    start = time.perf_counter()
    ids = zipf_ids(w.vocab, w.ids, w.zipf, w.seed)
    grads = np.random.default_rng([w.seed, 0x6AD]).standard_normal((w.ids, w.dim), dtype=F32)
    grads *= F32(0.01)
    built = executor(config_text([("anchor", w.vocab, w.dim)], [(0, w.ids)], w.optimizer), "sum",
                     engine)
    state = built.state_arrays()
    slots = [state[f"slot/anchor/{slot}"] for slot in built.plan.tables[0].slot_names]
    return Anchor(built, ids, grads, state["table/anchor"], slots, time.perf_counter() - start)


def run(workload: Workload = Workload(), *, engine: str = "numba", threads: int | None = None,
        max_memory: int | None = None) -> BenchResult:
    """Measure what the module docstring lists, for ``workload`` on ``engine``.

    ``threads``: numba's thread count (default: numba's, one per core). Raises ``UsageError``
    for an unknown optimizer or nonsensical sizes, and before allocating anything when
    :func:`memory_needed` exceeds ``max_memory`` (default: 80% of the memory available).
    """
    w = workload
    check_workload(w)
    check_memory(w, max_memory)
    name, note, compile_sec, compiled = warm_up(engine, w.optimizer)
    used_threads = set_threads(threads) if name == "numba" else 1

    def timed() -> tuple[Anchor, float, float]:
        a = anchor(w, engine)
        return a, median_time(a.step, w.steps), median_time(a.update, w.steps)

    (a, step_sec, update_sec), machine = measured(timed)
    unique_ids = int(np.unique(a.ids).shape[0])
    return BenchResult(
        engine=name,
        workload=w,
        threads=used_threads,
        unique_ids=unique_ids,
        sec_per_step=step_sec,
        update_sec_per_step=update_sec,
        compile_sec=compile_sec,
        kernels_compiled=compiled,
        peak_rss_bytes=peak_rss(),
        state_bytes=a.executor.plan.state_bytes(),
        setup_sec=a.setup_sec,
        limit=traffic_limit(unique_ids, w.ids, w.dim, len(a.slots)),
        machine=machine,
        engine_note=note,
    )


# ------------------------------------------------------------------------------------------------
# The report


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.2f} ms"


def _mb(count: float) -> str:
    return f"{count / 1e6:.0f} MB"


def report_lines(r: dict[str, Any]) -> list[str]:
    """The figures of :meth:`BenchResult.as_json` ``r``, one a line, each timed figure beside
    its memory-traffic limit, then the machine they were measured on (copy bandwidth, load)."""
    lines = [f"note: {r['engine_note']}"] if "engine_note" in r else []
    return lines + [
        f"  Executor.step (checks, forward, backward, update, report) {_ms(r['sec_per_step'])}"
        f"   {r['ids_per_sec'] / 1e6:.1f} M ids/s; {r['step_over_limit']:.1f}x its "
        "memory-traffic limit",
        f"  update alone (dedup + duplicate sum + row update)          "
        f"{_ms(r['update_sec_per_step'])}   {r['update_over_limit']:.1f}x its limit",
        f"  memory-traffic limit of the step                           "
        f"{_ms(r['limit_sec_per_step'])}   {_mb(r['limit_bytes'])} at "
        f"{r['copy_bandwidth_bytes_per_sec'] / 1e9:.1f} GB/s copy bandwidth",
        f"  memory-traffic limit of the update                         "
        f"{_ms(r['update_limit_sec_per_step'])}   {_mb(r['update_limit_bytes'])}",
        f"  machine: copy bandwidth {r['copy_bandwidth_before_bytes_per_sec'] / 1e9:.1f} GB/s "
        f"before the steps, {r['copy_bandwidth_after_bytes_per_sec'] / 1e9:.1f} after (the "
        f"limits use the higher); load {r['load_before']:.2f} before, {r['load_after']:.2f} "
        "after (1-minute average)",
        f"  peak RSS {_mb(r['peak_rss_bytes'])} for {_mb(r['state_bytes'])} of tables and slots "
        f"({r['peak_rss_over_state']:.2f}x; target 1.3x + 200 MB = "
        f"{_mb(r['peak_rss_target_bytes'])})",
        f"  first call: kernels {'compiled' if r['kernels_compiled'] else 'loaded from cache'} "
        f"in {r['compile_sec']:.2f} s (not in the steps)",
    ]
