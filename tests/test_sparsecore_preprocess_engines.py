"""The two engines of SparseCore preprocessing give the same bytes: ``engine="numba"`` (compiled
kernels, ``sparsecore.preprocess_kernels``) against ``engine="numpy"`` (the reference), at numba
thread counts 1 and 2, on every stored batch of tests/data/sparsecore (jax-tpu-embedding's own
results: test_sparsecore_preprocess.py and test_sparsecore_minibatch.py check the default
engine against them) and on random stackings (several features per stack, rotations, weights
with NaN, inf and zero, every combiner, dropping on and off, small buffers, minibatching,
several hosts); ``csr=False`` keeps every statistic and drop flag.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sparsecore_minibatch import _mb_cases
from test_sparsecore_preprocess import _batch, _cases, _stacking

from tpuemb_cfg.sparsecore.preprocessing import ENGINES, preprocess
from tpuemb_cfg.sparsecore.stacking import FeatureSlot, Stack, StackedTable, Stacking

numba = pytest.importorskip("numba")

_ARRAYS = ("max_ids_per_partition", "max_unique_ids_per_partition",
           "required_buffer_size_per_sc", "row_pointers", "embedding_ids", "sample_ids", "gains",
           "valid_mask", "padding_mask")


@contextlib.contextmanager
def _threads(count: int) -> Iterator[None]:
    before = numba.get_num_threads()
    numba.set_num_threads(min(count, numba.config.NUMBA_NUM_THREADS))
    try:
        yield
    finally:
        numba.set_num_threads(before)


def _outcome(call: Any) -> Any:
    """What a call gives: its batch, or the error's type, message and reason."""
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - both engines must fail alike
        return (type(exc).__name__, str(exc), getattr(exc, "reason", None))


def _same(a: Any, b: Any, *, csr: bool = True, nan_sign: bool = True) -> None:
    """The same outcome byte for byte (the CSR arrays only when ``csr``); without
    ``nan_sign`` a NaN gain may differ in sign and payload (where two NaNs of different signs
    meet in a sum or a quotient, which one survives is up to the processor and the compiler's
    operand order: NumPy's own ``+=`` keeps the first operand's NaN or the second's depending
    on the array's length)."""
    assert type(a) is type(b)
    if isinstance(a, tuple):
        assert a == b
        return
    assert a.num_minibatches == b.num_minibatches
    assert list(a.stacks) == list(b.stacks)
    for name, x in a.stacks.items():
        y = b.stacks[name]
        assert (x.id_drop_count, x.coo_buffer_size_per_device,
                x.theoretical_max_coo_buffer_size) == (
            y.id_drop_count, y.coo_buffer_size_per_device, y.theoretical_max_coo_buffer_size)
        for field in _ARRAYS if csr else _ARRAYS[:3]:
            u, v = getattr(x, field), getattr(y, field)
            assert (u.dtype, u.shape) == (v.dtype, v.shape), field
            if field == "gains" and not nan_sign:
                nan = np.isnan(u)
                assert np.array_equal(nan, np.isnan(v))
                u, v = u[~nan], v[~nan]
            assert u.tobytes() == v.tobytes(), field
        assert list(x.dropped) == list(y.dropped)
        for feature, flags in x.dropped.items():
            assert flags.tobytes() == y.dropped[feature].tobytes(), feature


def _engines_agree(call: Any, *, nan_sign: bool = True) -> Any:
    """``call(engine)`` on NumPy, then numba at 1 and 2 threads: the same bytes."""
    expected = _outcome(lambda: call("numpy"))
    for count in (1, 2):
        with _threads(count):
            _same(_outcome(lambda: call("numba")), expected, nan_sign=nan_sign)
    return expected


def test_the_engines() -> None:
    assert ENGINES == ("numba", "numpy")
    with pytest.raises(ValueError, match="engine"):
        preprocess(_stacking(_cases()[0]), *_batch(_cases()[0]), local_devices=1,
                   engine="fast")


def _stored(case: dict[str, Any], engine: str, **options: Any) -> Any:
    features, weights = _batch(case)
    return preprocess(_stacking(case), features, weights, engine=engine,
                      local_devices=case["local_device_count"],
                      allow_id_dropping=case["allow_id_dropping"],
                      has_leading_dimension=case["has_leading_dimension"],
                      enable_minibatching=case["enable_minibatching"], **options)


@pytest.mark.parametrize("source", ["c", "mb"])
def test_every_stored_batch_gives_the_same_bytes(source: str) -> None:
    """All 256 stored batches (200 of PROVENANCE-C.md, 56 of PROVENANCE-MB.md): accepted,
    dropped, split into minibatches or aborted, alike."""
    cases = _cases() if source == "c" else _mb_cases()
    outcomes = {"ok": 0, "error": 0}
    for case in cases.values():
        expected = _engines_agree(lambda engine, case=case: _stored(case, engine))
        outcomes["error" if isinstance(expected, tuple) else "ok"] += 1
    assert outcomes == ({"ok": 168, "error": 32} if source == "c" else {"ok": 53, "error": 3})


@pytest.mark.parametrize("source", ["c", "mb"])
def test_without_csr_the_statistics_and_flags_stay(source: str) -> None:
    cases = _cases() if source == "c" else _mb_cases()
    for case in cases.values():
        full = _outcome(lambda case=case: _stored(case, "numpy"))
        for engine in ENGINES:
            bare = _outcome(lambda case=case, engine=engine: _stored(case, engine, csr=False))
            _same(bare, full, csr=False)
            if not isinstance(bare, tuple):
                stack = next(iter(bare.stacks.values()))
                assert stack.embedding_ids.size == stack.row_pointers.size == 0


def test_uninitialised_buffers_are_written_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled engine allocates the CSR arrays uninitialised and its kernels write every
    slot (entries, padding, the zeros past each SparseCore's last run): with the arrays filled
    with garbage first, every stored batch still gives the NumPy engine's bytes."""
    from tpuemb_cfg.sparsecore import preprocess_kernels

    empty = preprocess_kernels._csr_empty

    def garbage(total: int) -> tuple[Any, ...]:
        arrays = empty(total)
        for array in arrays:
            array.view(np.uint8).fill(0x5B)  # nonzero in every byte: no bool is False
        return arrays

    monkeypatch.setattr(preprocess_kernels, "_csr_empty", garbage)
    for case in _cases().values():
        if not case["enable_minibatching"]:
            _engines_agree(lambda engine, case=case: _stored(case, engine))


@pytest.mark.parametrize("layout", ["samples beside the keys", "numpy for wide keys"])
def test_the_layouts_of_large_batches(monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    """A batch whose (embedding id, sample, position) keys would pass 63 bits keeps its
    samples beside the keys; one whose (embedding id, position) would, runs the NumPy code:
    both forced here on the stored batches."""
    from tpuemb_cfg.sparsecore import preprocess_kernels

    if layout == "samples beside the keys":
        monkeypatch.setattr(preprocess_kernels, "_PACK_SAMPLES", False)
    else:
        monkeypatch.setattr(preprocess_kernels, "_KEY_BITS", 0)
    for case in list(_cases().values())[::4]:
        _engines_agree(lambda engine, case=case: _stored(case, engine))


# ---------------------------------------------------------------- random stackings

_WEIGHTS = np.array([1.0, 0.5, 2.0, 0.0, -1.5, np.nan, np.inf, -np.inf, 3e38, 1e-40],
                    np.float32)


def _random_case(seed: int, devices: int, cores: int, hosts: int, minibatching: bool
                 ) -> tuple[Stacking, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A stacking of 1-2 stacks of 1-3 tables (1-2 features each, rotations, row offsets),
    ragged or dense ids drawn from a few hot ids, weights (some NaN, inf, zero) on some
    features, small limits and sometimes a small buffer; and the call's options."""
    rng = np.random.default_rng(seed)
    n = devices * cores
    local = devices // hosts
    slots, stacks, features, weights = [], [], {}, {}
    for s in range(int(rng.integers(1, 3))):
        tables, offset, sample_offset = [], 0, 0
        combiner = str(rng.choice(["sum", "mean", "sqrtn"]))
        for t in range(int(rng.integers(1, 4))):
            vocab = int(rng.integers(1, 300))
            padded = -(-vocab // (8 * n)) * 8 * n
            name = f"s{s}t{t}"
            rotation = int(rng.integers(0, n))
            tables.append(StackedTable(name, vocab, 8, padded, 8, offset, rotation))
            for k in range(int(rng.integers(1, 3))):
                fname = f"{name}f{k}"
                rows = local * cores * int(rng.integers(1, 5))
                slots.append(FeatureSlot(fname, name, f"s{s}", sample_offset, offset * n,
                                         rotation, rows))
                sample_offset += rows
                hot = rng.integers(0, vocab, size=int(rng.integers(1, 12)))
                lengths = rng.integers(0, 6, size=rows)
                if rng.random() < 0.3:
                    lengths[:] = int(rng.integers(1, 4))
                    ids: Any = rng.choice(hot, size=(rows, int(lengths[0])))
                    shape: tuple[int, ...] = ids.shape
                else:
                    values = rng.choice(hot, size=int(lengths.sum()))
                    ids = (values, np.concatenate([[0], np.cumsum(lengths)]))
                    shape = values.shape
                features[fname] = ids
                if rng.random() < 0.6:
                    pool = _WEIGHTS if rng.random() < 0.5 else _WEIGHTS[:3]
                    weights[fname] = rng.choice(pool, size=shape).astype(np.float32)
            offset += padded // n
        max_ids, max_unique = (int(x) for x in rng.integers(1, 24, size=2))
        theoretical = -(-max_ids // 8) * 8 * cores * n * (64 if minibatching else 1)
        suggested = None
        if rng.random() < 0.3:
            suggested = int(rng.integers(1, theoretical + 1))
        stacks.append(Stack(f"s{s}", tuple(tables), "", combiner, sample_offset, max_ids,
                            max_unique, suggested))
    stacking = Stacking("jax", devices, cores, tuple(stacks), tuple(slots))
    options = {"local_devices": local, "allow_id_dropping": bool(rng.random() < 0.7),
               "has_leading_dimension": bool(rng.random() < 0.5),
               "enable_minibatching": minibatching}
    return stacking, features, weights, options


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), devices=st.sampled_from([1, 2, 4]),
       cores=st.sampled_from([1, 2, 4]), hosts=st.sampled_from([1, 2]),
       minibatching=st.booleans(), csr=st.booleans())
def test_random_stackings_give_the_same_bytes(seed: int, devices: int, cores: int, hosts: int,
                                              minibatching: bool, csr: bool) -> None:
    hosts = 1 if minibatching or devices == 1 else hosts
    stacking, features, weights, options = _random_case(seed, devices, cores, hosts,
                                                        minibatching)

    def call(engine: str) -> Any:
        with np.errstate(all="ignore"):
            return preprocess(stacking, features, weights or None, engine=engine, csr=csr,
                              **options)

    expected = _engines_agree(call, nan_sign=False)
    if not csr and not isinstance(expected, tuple):
        with np.errstate(all="ignore"):
            full = preprocess(stacking, features, weights or None, engine="numpy", **options)
        _same(expected, full, csr=False)


def test_without_numba_the_numpy_engine_runs_with_one_warning() -> None:
    """``NUMBA_DISABLE_JIT`` (as a missing numba): ``engine="numba"`` warns once and gives
    NumPy's bytes."""
    script = (
        "import warnings, numpy as np\n"
        "from tpuemb_cfg.sparsecore.preprocessing import preprocess\n"
        "from tpuemb_cfg.sparsecore.stacking import FeatureSlot, Stack, StackedTable, Stacking\n"
        "t = StackedTable('t', 64, 8, 64, 8, 0, 0)\n"
        "s = Stacking('jax', 1, 2, (Stack('t', (t,), '', 'mean', 8, 256, 256),),\n"
        "             (FeatureSlot('f', 't', 't', 0, 0, 0, 8),))\n"
        "ids = {'f': np.arange(16).reshape(8, 2) % 5}\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always')\n"
        "    a = preprocess(s, ids, local_devices=1).stacks['t']\n"
        "    preprocess(s, ids, local_devices=1)\n"
        "b = preprocess(s, ids, local_devices=1, engine='numpy').stacks['t']\n"
        "print(len(seen), 'NUMBA_DISABLE_JIT' in str(seen[0].message),\n"
        "      a.gains.tobytes() == b.gains.tobytes(), a.sample_ids.tobytes() == "
        "b.sample_ids.tobytes())\n")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1",
           "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "True", "True", "True"]
