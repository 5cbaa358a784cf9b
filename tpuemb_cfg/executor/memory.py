"""How much memory a simulation takes: its peak resident size, estimated before anything runs.

:func:`estimate` adds up, for a :class:`RunShape` (the run's steps, engine, data and outputs),
every part of a run's peak resident memory (``Estimate``, bytes):

- **process**: the interpreter and its libraries, measured once (2-core development machine,
  ``benchmarks/bench_memory.py``: a one-row configuration's peak): Python with NumPy, protobuf,
  click and tpuemb :data:`BASE_PROCESS` (47 MiB); numba and the kernels a run loads from its
  cache :data:`NUMBA_PROCESS` (105 MiB more: a synthetic run draws its data with numba whatever
  ``--engine`` says, so it is counted whenever numba can be imported); matplotlib for
  ``--plot`` :data:`PLOT_PROCESS` (36 MiB).
- **state**: the tables and slots as far as they are resident. Default rows are computed when a
  step first reads them (``state.Pending``), so a run that writes only the rows it touched
  (``--tables touched`` or ``none``, no checkpoint) holds the memory pages those rows fall on:
  ``u`` distinct rows of a table's ``V`` (the id distribution's ``expected_unique`` of the run's
  ids), scattered over the table, touch a page of ``k`` rows with probability
  ``1 - (1 - u/V)^k``. Pages are 2 MiB where the kernel gives NumPy's large arrays transparent
  huge pages (``/sys/kernel/mm/transparent_hugepage/enabled`` ``always`` or ``madvise``: NumPy
  asks for them for arrays of 4 MiB and more), else 4 KiB: with huge pages a few thousand
  scattered rows make a whole table resident. Writing every table (``--tables all``), a
  checkpoint, given initial arrays and a non-lazy optimizer (every row each step) make the
  whole state resident.
- **steady** and **peak**: one step's working arrays, with per feature f ``b_f`` bags and
  ``n_f`` ids (``b_f`` times the mean bag size of ``executor.bags`` times the filled share of
  a sequence, ``executor.workload``) and per table t its features' ``N_t`` ids, ``U_t`` distinct
  ids and dimension ``D_t``. Held all step (**steady**): the batch (ids and row splits int64,
  the uniforms they were drawn from, the weights float32: ``20 n + 8 b``), every feature's
  activation and its gradient (``2 * 4 b D``), per table the forward pass's record (ids,
  sample and inverse int64, gains float32, distinct ids: ``28 N + 8 U``; with accumulation
  DISABLED the per-core partials add ``16 N + 8 U``), the report's counts per host, the
  bitmaps of the pending and the touched rows (``V / 4``). On top (**peak**), the largest
  transient of one table, which depends on the engine:

  - NumPy: the back-propagation (``gains * dA[sample]`` and the float32 rows it sums into,
    with the rows before the update: ``2 * 4 N D + 2 * 4 U D``, and for a table of several
    features their gradients stacked, ``4 B D``), the gradients' NaN check (``b D``, the
    largest feature), the forward lookup (the distinct rows, the per-occurrence rows and their
    weighted copy: ``4 U D + 2 * 4 n D``), the synthetic loss when numba cannot be imported (its
    kernels stream otherwise, whatever the engine: teacher rows and their weighted copy,
    ``2 * 4 n D + 4 b D``, or the float64 squared error beside the error and the teacher's
    activation, ``24 b D``; a replay computes no loss) and the update (the rows, slots and
    the optimizer's results, ``(2 S + 4) * 4 U D``; a non-lazy optimizer steps every row
    with the table's pre-step copy: ``(S + 5) * 4 V D``);
  - numba, the compiled step (tables in this process, no pipelining or quantization): no
    per-occurrence rows at all - the de-duplication's bitmap (``V / 4``) or hash table, the
    summed gradient ``4 U D`` (above 8 MiB the occurrences grouped by row instead, ``12 N +
    8 U``) with the stacked gradients of a table of several features (``4 B D``), the update's
    per-row norms (``8 U``; ``8 V`` non-lazy);
  - numba without the compiled step (pipelining, quantization, a custom callable): the
    gathered distinct rows and their pre-update copy (``2 * 4 U D``; non-lazy ``4 V D``), the
    summed gradient ``4 U D``, the stacked gradients, or the NaN check (``b D``).
- **pipelining**: per table the rows the last update changed and their values before it,
  kept for the next forward pass (``4 U D + 8 U``; non-lazy a whole table's copy ``4 V D``).
- **history**: what the caller keeps per step (``RunShape.history``: the synthetic run's
  records, ``sim.synthetic.history_bytes``).
- **outputs**: writing the files at the end: a 16 MiB block of rows at a time, and for
  ``--tables touched`` the list of a table's touched rows (``V + 8 u`` bytes).
- **workers** (a multi-worker run only, ``sim.multiworker.run_estimate``): the gradients the
  workers have in flight and what the chief's accumulators hold.
- **inputs** (a replay only, :func:`replay_estimate`): the recorded batches (``--batches``)
  and the initial arrays (``--init``) as read, whole.

A replay (:func:`replay_estimate`) runs the recorded steps: its step's arrays are those of the
largest recorded step (``RunShape.recorded``: per feature its bags and ids; every id counted as
distinct, at most the vocabulary), the whole tables are written at the end with every step's
activations (as large as the recorded gradients, held until then: **outputs**), and its history
is :data:`REPLAY_STEP_BYTES` a table a step (the ``--json`` figures). It loads numba with the
numba engine, or to draw a table of :data:`NUMPY_DRAW_BLOCK` elements or more; otherwise NumPy
draws the default rows, :data:`NUMPY_DRAW_BYTES` a drawn element at once (a **peak**).

Everything is float32 as in the executor. ``benchmarks/bench_memory.py`` runs the example
models and scaled copies of real models' configurations and compares this estimate with each
run's measured peak resident memory (``docs/performance.md``: within 20% on every one).
:func:`memory_estimate` is the estimate of a library ``Executor``: whole tables, one step,
no process footprint.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tpuemb_cfg.base import units
from tpuemb_cfg.base.errors import UsageError, parameter
from tpuemb_cfg.base.jit_availability import jit_disabled
from tpuemb_cfg.base.units import format_size
from tpuemb_cfg.formats import limits

from .bags import expected_ids_per_bag
from .route import step_route
from .workload import (
    DEFAULT_IDS,
    DEFAULT_SEQUENCE_LENGTHS,
    ZIPF_DEFAULT,
    IdDistribution,
    SequenceLengths,
)

if TYPE_CHECKING:
    from .plan import FeaturePlan, Plan, TablePlan

__all__ = [
    "BASE_PROCESS",
    "NUMBA_PROCESS",
    "PLOT_PROCESS",
    "NUMPY_DRAW_BLOCK",
    "NUMPY_DRAW_BYTES",
    "REPLAY_STEP_BYTES",
    "ZIPF_EXPONENT",
    "Estimate",
    "RunShape",
    "estimate",
    "memory_estimate",
    "require_memory",
    "expected_unique",
    "feature_ids",
    "process_bytes",
    "replay_estimate",
    "step_ids",
]

#: The exponent of the synthetic ids' default Zipf law (``sim.synthetic``; a test keeps them
#: equal).
ZIPF_EXPONENT = ZIPF_DEFAULT

#: Peak resident bytes of a run's process before its tables and steps (module docstring).
BASE_PROCESS = 47 << 20
NUMBA_PROCESS = 105 << 20
PLOT_PROCESS = 36 << 20

#: Bytes a replay keeps per table and step: the figures of its report (``--json``).
REPLAY_STEP_BYTES = 512
#: Default rows drawn by NumPy (``state``: numba not loaded, blocks of at most
#: :data:`NUMPY_DRAW_BLOCK` elements; larger fills load numba's kernels instead): peak resident
#: bytes per element of a block (measured: a NumPy-engine replay of the quickstart, whose
#: 800,000-element table peaks 36 MiB above the rest of its estimate).
NUMPY_DRAW_BYTES = 48
NUMPY_DRAW_BLOCK = 1 << 20

_F32 = 4
_SMALL_PAGE = 4 << 10
_HUGE_PAGE = 2 << 20
_HUGE_FROM = 4 << 20  # NumPy asks for huge pages from this size on
_FUSE_ABOVE = 8 << 20  # engines.numba.FusedStep.fuse_above_bytes
_WRITE_BLOCK = 16 << 20


@dataclass(frozen=True)
class RunShape:
    """What a run does around its steps, as far as memory goes.

    ``steps``: steps run (the rows they touch); ``engine``: ``numba`` or ``numpy``; ``ids``,
    ``sequence_lengths``: the synthetic data (``executor.workload``); ``tables``: what is
    written at the end (``all`` computes every default row; ``touched``, ``none`` do not);
    ``checkpoints``: whole states are written during the run; ``lazy``: default rows are
    computed when first touched (a local storage without given arrays); ``process``: count the
    process's own footprint (``numba``: whether numba is loaded, None: whether it can be;
    ``plot``: matplotlib too); ``history``: bytes the caller keeps per run; ``recorded``: a
    replay's largest step, per feature its bags and ids (None: the synthetic data's).
    """

    steps: int = 1
    engine: str = "numba"
    ids: IdDistribution = DEFAULT_IDS
    sequence_lengths: SequenceLengths = DEFAULT_SEQUENCE_LENGTHS
    tables: str = "all"
    checkpoints: bool = False
    lazy: bool = True
    process: bool = True
    numba: bool | None = None
    plot: bool = False
    history: int = 0
    huge_pages: bool | None = field(default=None, compare=False)
    recorded: tuple[tuple[float, float], ...] | None = None


#: The shape ``memory_estimate`` assumes: the NumPy engine's working arrays (the larger of
#: the two engines'), whole tables, no process footprint (a library caller's process exists).
LIBRARY = RunShape(engine="numpy", tables="none", process=False, lazy=False)


@dataclass(frozen=True)
class Estimate:
    """The parts of :func:`estimate`, in bytes: ``state`` (resident tables and slots),
    ``steady`` (what a step holds from start to end), ``peak`` (the largest transient on top of
    it), ``process`` (the interpreter and libraries), ``pipelining``, ``history``, ``outputs``,
    ``workers`` (a multi-worker run's gradients in flight and accumulators; None for other
    runs), ``inputs`` (a replay's batches and initial arrays; None for other runs); ``total`` is
    their sum, ``run`` the total without the process."""

    state: int
    steady: int
    peak: int
    process: int = 0
    pipelining: int = 0
    history: int = 0
    outputs: int = 0
    whole_state: int = 0
    workers: int | None = None
    inputs: int | None = None

    @property
    def total(self) -> int:
        return self.run + self.process

    @property
    def run(self) -> int:
        return (self.state + self.steady + self.peak + self.pipelining + self.history
                + self.outputs + (self.workers or 0) + (self.inputs or 0))

    def as_dict(self) -> dict[str, int]:
        """JSON-ready parts (``--json``, ``--dry-run``): every field, ``run`` and ``total``
        (``workers_bytes``, ``inputs_bytes`` only for the runs that have them)."""
        parts = {"total_bytes": self.total, "process_bytes": self.process,
                 "tables_and_slots_bytes": self.state,
                 "tables_and_slots_whole_bytes": self.whole_state,
                 "step_bytes": self.steady + self.peak, "pipelining_bytes": self.pipelining,
                 "history_bytes": self.history, "outputs_bytes": self.outputs}
        if self.workers is not None:
            parts["workers_bytes"] = self.workers
        if self.inputs is not None:
            parts["inputs_bytes"] = self.inputs
        return parts


def expected_unique(vocabulary: int, draws: float,
                    ids: IdDistribution = DEFAULT_IDS) -> float:
    """The expected number of distinct ids among ``draws`` synthetic ids over ``vocabulary``
    rows (``IdDistribution.expected_unique``; the default Zipf law)."""
    return ids.expected_unique(vocabulary, draws)


def _bags(plan: Plan, feature: FeaturePlan) -> int:
    return plan.num_cores * math.prod(feature.input_shape)


def feature_ids(plan: Plan, feature: FeaturePlan, lengths: SequenceLengths) -> float:
    """The expected ids of one synthetic step of ``feature`` (sequences filled as
    ``lengths`` says)."""
    filled = 1.0
    if len(feature.input_shape) > 1:
        filled = lengths.expected_fraction(math.prod(feature.input_shape[1:]))
    return _bags(plan, feature) * expected_ids_per_bag(feature) * filled


def step_ids(plan: Plan, table: TablePlan, shape: RunShape | None = None) -> tuple[float, float]:
    """The ids one synthetic step looks up in ``table`` (all its features) and how many of them
    are distinct (:func:`expected_unique`)."""
    shape = shape or RunShape()
    ids = sum(_sizes(plan, plan.features[f], shape)[1] for f in table.features)
    return ids, _unique(shape, table.vocabulary, ids)


def _sizes(plan: Plan, feature: FeaturePlan, shape: RunShape) -> tuple[float, float]:
    """The bags and ids of one step of ``feature``: recorded (a replay) or synthetic."""
    if shape.recorded is not None:
        return shape.recorded[feature.index]
    return float(_bags(plan, feature)), feature_ids(plan, feature, shape.sequence_lengths)


def _unique(shape: RunShape, vocabulary: int, ids: float) -> float:
    """The distinct ids among ``ids``: expected of the synthetic data, at most all of a
    replay's."""
    if shape.recorded is not None:
        return float(min(ids, vocabulary))
    return shape.ids.expected_unique(vocabulary, ids)


def numba_available() -> bool:
    """Whether numba can be imported and runs compiled (``NUMBA_DISABLE_JIT`` unset), without
    importing it: then a synthetic run loads it whatever the engine."""
    return importlib.util.find_spec("numba") is not None and not jit_disabled()


def process_bytes(numba: bool | None = None, plot: bool = False) -> int:
    """The process footprint (module docstring); ``numba`` None: :func:`numba_available`."""
    if numba is None:
        numba = numba_available()
    return BASE_PROCESS + (NUMBA_PROCESS if numba else 0) + (PLOT_PROCESS if plot else 0)


def huge_pages() -> bool:
    """Whether NumPy's large arrays get transparent huge pages here (module docstring)."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled", encoding="ascii") as handle:
            setting = handle.read()
    except OSError:
        return False
    return "[always]" in setting or "[madvise]" in setting


def _resident(table_bytes: int, rows: int, touched: float, huge: bool) -> float:
    """Resident bytes of one array of ``rows`` rows of which ``touched`` distinct ones, at
    scattered places, were written (module docstring)."""
    if rows <= 0 or table_bytes <= 0:
        return 0.0
    page = _HUGE_PAGE if huge and table_bytes >= _HUGE_FROM else _SMALL_PAGE
    per_page = max(page * rows / table_bytes, 1.0)
    share = min(touched / rows, 1.0)
    hit = -math.expm1(per_page * math.log1p(-share)) if share < 1.0 else 1.0
    return min(table_bytes, math.ceil(table_bytes / page) * page * hit)


def _compiled_step(plan: Plan, table: TablePlan, engine: str) -> bool:
    """Whether the numba engine's compiled step runs ``table`` (``route.step_route``)."""
    return step_route(plan, table, compiled=engine == "numba").forward


def _table_terms(plan: Plan, table: TablePlan, shape: RunShape,
                 compiled_data: bool) -> tuple[int, int, int]:
    """(steady, peak, pipelining) bytes of one table's step; ``compiled_data``: the synthetic
    data's kernels are compiled (numba can be imported)."""
    dim = table.dimension
    bags = ids = 0.0
    features = []
    for f in table.features:
        b, n = _sizes(plan, plan.features[f], shape)
        features.append((b, n))
        bags += b
        ids += n
    unique = _unique(shape, table.vocabulary, ids)
    slots = len(table.optimizer.slots)
    steady = 20 * ids + 8 * bags + 2 * _F32 * bags * dim + 28 * ids + 8 * unique
    steady += 16 * plan.num_hosts  # the report: ids and distinct ids per host, int64
    steady += table.vocabulary / 4  # the bitmaps of pending and touched rows
    if plan.num_hosts > 1:  # the report's host of every id and distinct id
        steady += 8 * (ids + unique)
    if plan.updates and not table.accumulate:  # one partial per core: its ids and rows
        steady += 16 * ids + 8 * plan.num_cores * _unique(shape, table.vocabulary,
                                                          ids / plan.num_cores)
    rows = table.vocabulary if not table.lazy else unique
    # A table of several features back-propagates from their gradients stacked in one array;
    # outside the compiled step every gradient is checked for NaN first (a bool per value).
    stack = _F32 * bags * dim if len(features) > 1 and plan.updates else 0.0
    check = max((b * dim for b, _ in features), default=0) if plan.updates else 0.0
    if shape.engine == "numpy":
        lookup = _F32 * unique * dim + max((2 * _F32 * n * dim for _, n in features), default=0)
        # The loss without numba (compiled, it streams: sim.kernels): the teacher's weights and
        # weighted sums, or the float64 squared error next to the teacher's activation and the
        # error itself.
        loss = 0.0 if compiled_data or shape.recorded is not None else max(
            (max(2 * _F32 * n * dim + _F32 * b * dim, 24 * b * dim) for b, n in features),
            default=0)
        peak = max(lookup, loss, check)
        if plan.updates:
            # gains * dA[sample] and the rows it sums into, the rows before the update
            backward = 2 * _F32 * ids * dim + 2 * _F32 * unique * dim + stack
            update = (slots + 5 if not table.lazy else 2 * slots + 4) * _F32 * rows * dim
            peak = max(peak, backward, update)
    elif _compiled_step(plan, table, shape.engine):
        dedup = table.vocabulary / 4 if table.vocabulary < 256 * max(ids, 1) else 32 * ids
        summed = _F32 * unique * dim
        backward = summed if summed <= _FUSE_ABOVE else 12 * ids + 8 * unique
        peak = max(dedup, backward + 8 * rows + stack if plan.updates else 0)
    else:
        gathered = 2 * _F32 * unique * dim
        peak = max(check, gathered + (_F32 * unique * dim + _F32 * rows * dim + stack
                                      if plan.updates else 0))
    pipelining = 0.0
    if plan.pipelined and plan.mode == "TRAINING":
        pipelining = _F32 * rows * dim + (8 * rows if table.lazy else 0)
    return int(steady), int(peak), int(pipelining)


def estimate(plan: Plan, shape: RunShape | None = None) -> Estimate:
    """The peak resident bytes of a run of ``plan`` shaped ``shape`` (default: one synthetic
    step of the numba engine in a process of its own, every table written) and their parts
    (see the module docstring)."""
    shape = shape or RunShape()
    huge = huge_pages() if shape.huge_pages is None else shape.huge_pages
    numba = numba_available() if shape.numba is None else shape.numba
    whole = plan.state_bytes()
    steady = peak = pipelining = 0
    state = 0.0
    largest_array = 0
    listing = 0.0  # the largest list of touched rows: the bitmap unpacked (V), the ids (8 u)
    for table in plan.tables:
        table_steady, table_peak, table_pipelining = _table_terms(plan, table, shape,
                                                                  numba)
        steady += table_steady
        peak = max(peak, table_peak)
        pipelining += table_pipelining
        arrays = 1 + len(table.optimizer.slots)
        array_bytes = table.vocabulary * table.dimension * _F32
        largest_array = max(largest_array, array_bytes)
        partial = (shape.lazy and shape.tables != "all" and not shape.checkpoints
                   and (table.lazy or not plan.updates))
        if not partial:
            state += arrays * array_bytes
            listing = max(listing, 9 * table.vocabulary)
            continue
        ids, _ = step_ids(plan, table, shape)
        touched = _unique(shape, table.vocabulary, ids * max(shape.steps, 1))
        state += arrays * _resident(array_bytes, table.vocabulary, touched, huge)
        listing = max(listing, table.vocabulary + 8 * touched)
    outputs = 0
    if shape.tables != "none" or shape.checkpoints:  # a block of rows of the largest array
        outputs = min(_WRITE_BLOCK, largest_array)
        if shape.tables == "touched":  # the touched rows' bitmap unpacked, their ids
            outputs += int(listing)
    process = process_bytes(numba, shape.plot) if shape.process else 0
    return Estimate(int(state), steady, peak, process, pipelining, shape.history, outputs,
                    whole)


def library_estimate(plan: Plan, engine: str = "numpy") -> Estimate:
    """What ``memory_estimate`` totals (:data:`LIBRARY`'s shape), and what an ``Executor``
    of ``engine`` checks before it allocates anything."""
    return estimate(plan, LIBRARY if engine == "numpy" else RunShape(
        engine=engine, tables="none", process=False, lazy=False))


def replay_estimate(plan: Plan, headers: Mapping[str, Any], *, engine: str = "numba",
                    init_bytes: int | None = None, numba: bool | None = None) -> Estimate:
    """The peak resident memory of a replay of ``plan`` (module docstring): ``headers``, the
    batches file's arrays by key (anything with ``shape`` and ``nbytes``: ``npzio.NpyHeader``s
    read before the data, or the arrays); ``engine``: the engine in use; ``init_bytes``: the
    bytes of ``--init`` (None: no initial arrays, the default rows are computed as touched,
    every one by the end, since every table is written)."""
    bags = [0.0] * len(plan.features)
    ids = [0.0] * len(plan.features)
    steps: set[str] = set()
    activations = 0
    for key, header in headers.items():
        step, _, rest = key.partition("/")
        steps.add(step)
        feature, _, kind = rest.partition("/")
        if not feature.startswith("f") or not feature[1:].isdigit():
            continue
        index = int(feature[1:])
        if index >= len(plan.features) or not header.shape:
            continue
        if kind == "ids":
            ids[index] = max(ids[index], float(header.shape[0]))
        elif kind == "row_splits":
            bags[index] = max(bags[index], float(max(header.shape[0] - 1, 0)))
        elif kind == "grad":
            activations += int(header.nbytes)  # each step's activations, as large
    available = numba_available() if numba is None else numba
    numba = engine == "numba" and available
    draw = 0
    if not numba:  # the default rows: numba's kernels for a large fill, else NumPy's blocks
        largest = max((t.vocabulary * t.dimension for t in plan.tables), default=0)
        if largest >= NUMPY_DRAW_BLOCK and available:
            numba = True
        else:
            draw = NUMPY_DRAW_BYTES * min(largest, NUMPY_DRAW_BLOCK)
    shape = RunShape(steps=max(len(steps), 1), engine=engine, tables="all",
                     lazy=init_bytes is None, numba=numba,
                     history=REPLAY_STEP_BYTES * len(plan.tables) * len(steps),
                     recorded=tuple(zip(bags, ids, strict=True)))
    parts = estimate(plan, shape)
    inputs = sum(int(header.nbytes) for header in headers.values()) + (init_bytes or 0)
    return replace(parts, outputs=parts.outputs + activations, inputs=inputs,
                   peak=max(parts.peak, draw))


def reduce_hint(parts: Estimate, *, steps: int | None = None, tables: str = "none",
                updates: bool = True) -> str:
    """What shrinks a run whose estimate is ``parts`` the most, for a refusal: fewer ``steps``
    when the history is the largest part, smaller batches when the step is, else writing only
    the touched rows (``tables`` ``all`` while they are fewer) or smaller tables. The text names
    parameters as ``errors.parameter`` marks them: it belongs in an error's message."""
    step = parts.steady + parts.peak
    largest = max(parts.state, step, parts.history)
    if steps and largest == parts.history:
        return (f"run fewer steps (each keeps about "
                f"{format_size(parts.history // max(steps, 1))} of history)")
    if largest == step:
        return "give the features smaller batches (input_shape, per_replica_input_shapes)"
    if tables == "all" and updates and parts.whole_state > parts.state:
        return (f"write only the touched rows ({parameter('tables')} touched) or reduce "
                "vocabulary_size/dimension")
    return "reduce vocabulary_size/dimension"


def describe(parts: Estimate) -> str:
    """One line naming the parts: ``6.1 GiB (process 152 MiB, tables and slots 4.0 GiB, ...)``."""
    return describe_parts(parts.as_dict())


def describe_parts(parts: dict[str, int]) -> str:
    """:func:`describe` of ``Estimate.as_dict()``'s figures."""
    items = [("process", "process_bytes"), ("tables and slots", "tables_and_slots_bytes"),
             ("step", "step_bytes"), ("pipelining", "pipelining_bytes"),
             ("history", "history_bytes"), ("writing outputs", "outputs_bytes"),
             ("workers' gradients and accumulators", "workers_bytes"),
             ("batches and initial arrays", "inputs_bytes")]
    shown = ", ".join(f"{name} {format_size(parts[key])}" for name, key in items
                      if parts.get(key))
    return f"{format_size(parts['total_bytes'])} ({shown})"


def memory_estimate(plan: Plan) -> int:
    """An estimate of the bytes a library ``Executor`` adds to its process: the whole tables
    and slots plus every working array of one synthetic step of the NumPy engine (the
    larger of the two engines') for the configured bags, cores and bag sizes (ids, gains,
    activations, gradients, gathered rows, per-core partials, a non-lazy optimizer's
    full-size arrays): :func:`library_estimate`'s total. ``estimate`` estimates a whole run
    (the process, the engine in use, the rows touched, the history)."""
    return library_estimate(plan).total


def require_memory(
    needed: int,
    max_memory: int | None,
    *,
    what: str = "the simulation",
    counted: str = "tables, slots and a step's working arrays",
    reduce: str | Callable[[int], str] = "reduce vocabulary_size/dimension",
    process: int = 0,
    scale_out: bool = True,
) -> None:
    """Raise ``UsageError`` when ``needed`` bytes exceed ``max_memory`` (None: the default limit,
    ``limits.default_memory_limit``; no check where the available memory is unknown).

    ``process``: the part of ``needed`` this process holds already (its interpreter and
    libraries): held against a limit given, which bounds the whole process, but not against
    the default, a share of the memory still available. The message says which limit it was
    and what to do: ``reduce``, the fix that shrinks the run (or a function of the limit giving
    it), and a ``--max-memory`` that admits the run (``limits.suggest_memory``) only when this
    machine has that much memory; else a larger machine or (``scale_out``: the run can use it)
    the Ray backend on several.
    """
    limit = max_memory if max_memory is not None else limits.default_memory_limit()
    compared = needed if max_memory is not None else needed - process
    if limit is None or compared <= limit:
        return
    size = limits.suggest_memory(needed)
    if callable(reduce):
        reduce = reduce(limit)
    head = f"{what} needs about {units.format_size(needed)} (estimate: {counted}), more than "
    machine = limits.total_memory()
    beyond = needed > units.MAX_SIZE // 2  # no size can be suggested: past 4 EiB
    if machine is not None and (beyond or units.parse_size(size) > machine):  # cannot do it
        where = (f"the memory limit of {units.format_size(limit)}" if max_memory is not None
                 else f"the {units.format_size(limit)} it may use here "
                      f"({limits.MEMORY_SHARE:.0%} of "
                 "the memory available)")
        spread = (" or spread the tables over several machines (--backend ray --ray-address "
                  "ADDR --shards N, docs/scale.md)" if scale_out else "")
        raise UsageError(
            f"{head}{where}, and more than this machine has ({units.format_size(machine)}); "
            f"{reduce}, or run it on a machine with more memory{spread}")
    if max_memory is not None:
        raise UsageError(
            f"{head}the memory limit of {units.format_size(limit)}; {reduce}, or raise the limit "
            f"to --max-memory {size} (max_memory= in Python)"
        )
    raise UsageError(
        f"{head}the {units.format_size(limit)} it may use here "
        f"({limits.MEMORY_SHARE:.0%} of the memory "
        f"available); {reduce}, or set a limit to try anyway: --max-memory {size} (max_memory= "
        "in Python)"
    )
