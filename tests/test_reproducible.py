"""The same bytes on every machine (docs/numerics.md): golden replays under many settings.

``tests/replay_digests.py`` replays every golden case (and a few synthetic steps) and prints a
digest of every output array and report figure. Here it runs in subprocesses under the settings
that change which machine code computes the numbers, and every digest must equal the default
run's:

- NumPy's SIMD dispatch limited to the build's baseline (``NPY_DISABLE_CPU_FEATURES`` naming
  every dispatched feature group: on an AVX-512 machine the AVX-512 and AVX2 loops are off);
- numba's code generated for another CPU (``NUMBA_CPU_NAME=haswell`` on x86-64, ``generic``
  elsewhere), with a cache directory of its own;
- one thread (``NUMBA_NUM_THREADS=1``) against the machine's;
- the NumPy engine against the numba engine (both under the default and the limited dispatch);
- the Ray backend with the rows of every table on three host actors.

The subprocesses start as soon as the session has collected the comparison (``conftest``), and
run beside the other tests, at a lower priority (niceness + 10): they use the CPU time the suite
leaves idle rather than take it from the suite; the comparison itself runs last (``conftest``),
when they have had the whole suite's time.

Nothing here depends on what the machine has: on a machine without AVX-512 the dispatch setting
still turns off whatever NumPy would have used, and the comparison is the same.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor

from conftest import GOLDEN, ROOT, require_data

SCRIPT = ROOT / "tests" / "replay_digests.py"


def _dispatched_features() -> str:
    """Every feature group NumPy may dispatch to beyond its baseline, in the form
    ``NPY_DISABLE_CPU_FEATURES`` takes."""
    import numpy as np

    core = getattr(np, "_core", None) or np.core  # NumPy 2, NumPy 1.26
    return " ".join(core._multiarray_umath.__cpu_dispatch__)


def _numba_cache(cpu: str) -> str:
    from tpuemb_cfg.executor.engines.jit import cache_dir

    return str(cache_dir().parent / f"numba-{cpu}")


def _settings() -> dict[str, tuple[list[str], dict[str, str]]]:
    cpu = "haswell" if platform.machine().lower() in ("x86_64", "amd64") else "generic"
    baseline_numpy = {"NPY_DISABLE_CPU_FEATURES": _dispatched_features()}
    both = ["--engine", "numba,numpy"]
    settings = {
        "default": (both, {}),
        "numpy-dispatch-baseline": (both, baseline_numpy),
        f"numba-cpu-{cpu}": ([], {"NUMBA_CPU_NAME": cpu, "NUMBA_CACHE_DIR": _numba_cache(cpu)}),
        "one-thread": ([], {"NUMBA_NUM_THREADS": "1"}),
        "ray-three-hosts": (["--backend", "ray", "--shards", "3"], {}),
    }
    return settings


#: How much nicer than the suite the digest subprocesses are (what they start inherits it).
BACKGROUND_NICENESS = 10


def _yield_to_the_suite(pid: int) -> None:
    """Lower the priority of background process ``pid`` (where the platform has priorities)."""
    if not hasattr(os, "setpriority"):
        return
    try:
        niceness = min(19, os.getpriority(os.PRIO_PROCESS, 0) + BACKGROUND_NICENESS)
        os.setpriority(os.PRIO_PROCESS, pid, niceness)
    except OSError:  # already ended (its result says why), or not allowed: it runs as it is
        pass


def _digests(arguments: list[str], environment: dict[str, str]) -> dict[str, dict[str, str]]:
    """``{engine: {case: digest}}`` of one setting."""
    env = {**os.environ, **environment, "TPUEMB_GOLDEN": str(GOLDEN)}
    process = subprocess.Popen([sys.executable, str(SCRIPT), *arguments], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    _running.append(process)
    _yield_to_the_suite(process.pid)
    stdout, stderr = process.communicate(timeout=900)
    assert process.returncode == 0, stderr[-3000:]
    digests: dict[str, dict[str, str]] = json.loads(stdout)
    return digests


_pool: list[ThreadPoolExecutor] = []
_futures: dict[str, Future[dict[str, dict[str, str]]]] = {}
_running: list[subprocess.Popen[str]] = []


def start_settings() -> dict[str, Future[dict[str, dict[str, str]]]]:
    """Start every setting's subprocess (two at a time, at a lower priority), once:
    ``conftest`` calls this when the session has collected this module's comparison, so the
    subprocesses run beside the rest of the suite (which keeps one core busy) on the time it
    leaves, and the test (the session's last) waits for their digests."""
    if not _futures:
        _pool.append(ThreadPoolExecutor(max_workers=2))
        _futures.update({name: _pool[0].submit(_digests, *setting)
                         for name, setting in _settings().items()})
    return _futures


def stop_settings() -> None:
    """End the subprocesses still running (a session that stopped early) and the pool."""
    for future in _futures.values():
        future.cancel()
    for process in _running:
        if process.poll() is None:
            process.kill()
    for pool in _pool:
        pool.shutdown(wait=True)


def test_the_suite_copy_of_the_golden_data_is_unchanged() -> None:
    """``tests/data/golden`` is a copy of the project's ``shared/golden`` (TensorFlow's own
    output, never edited): where the shared folder sits beside the clone, every file matches."""
    shared = ROOT.parent / "shared" / "golden"
    copy = require_data(ROOT / "tests" / "data" / "golden")
    if not shared.is_dir():
        return  # a clone elsewhere: the copy is all there is
    names = sorted(p.relative_to(shared) for p in shared.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(copy) for p in copy.rglob("*") if p.is_file())
    for name in names:
        assert (copy / name).read_bytes() == (shared / name).read_bytes(), name


def test_golden_replays_give_the_same_bytes_under_every_setting() -> None:
    require_data(GOLDEN / "optimizers")
    results = {f"{name} ({engine})": digests
               for name, future in start_settings().items()
               for engine, digests in future.result().items()}
    want = results["default (numba)"]
    assert len(results) == 7
    assert len(want) >= 23 and all(len(d) == 64 for d in want.values())
    for name, got in results.items():
        assert got.keys() == want.keys(), name
        differ = sorted(case for case in want if got[case] != want[case])
        assert not differ, f"{name}: other bytes than the default run for {differ}"
