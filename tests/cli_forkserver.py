"""A fork server for ``python -m tpuemb_cfg``: each request is one command in a fresh child.

    python tests/cli_forkserver.py REQUEST_FD REPLY_FD [MODULE ...]

Started once per group of commands (``tests/test_cli_properties.py``) with the environment the
commands get, it imports the command's modules (and the MODULEs named: what the group's
commands load when they run, such as the executor and numba for ``simulate``), then for each
request (one JSON line on ``REQUEST_FD``:
``argv``, ``cwd``, ``stdin`` as latin-1 text, ``stdout`` and ``stderr`` file paths or
``"/dev/full"`` or ``null`` for a closed standard output, ``memory_cap``, ``timeout``) forks a
child that starts as ``python -m tpuemb_cfg ARGV`` does:

- a new session, the address-space cap, the working directory and ``sys.path[0]`` set to it;
- standard input a pipe holding the bytes, standard output and error the files named (a closed
  standard output is ``sys.stdout is None``, as at interpreter start);
- ``tpuemb_cfg`` run as ``__main__``; what ends it (a return, ``SystemExit``, an uncaught
  exception) ends the interpreter the usual way: the traceback, flushing the standard streams
  and its exit status, all as in a process of its own.

The server never runs a command itself, so every child starts from the same imported state
and no example sees another's. It answers one JSON line per request on ``REPLY_FD``:
``{"returncode": N}`` (negative: the signal, as ``subprocess`` says; ``"timeout"`` when the
child was killed after ``timeout`` seconds).
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import resource
import signal
import sys
import time


def preload(extra: list[str]) -> None:
    """Import what the commands import on their way: the module of every command the
    ``tpuemb`` group lists (it imports one only to run it), the executor ``simulate`` runs, and
    the ``extra`` modules (only imports: nothing is compiled, loaded from a cache or run)."""
    from tpuemb_cfg import cli

    for module_name, *_ in cli.COMMANDS.values():
        importlib.import_module(module_name)
    importlib.import_module("tpuemb_cfg.executor")
    for module_name in extra:
        importlib.import_module(module_name)


def _child(request: dict) -> None:  # type: ignore[type-arg]
    """In the forked child: become the command (returns into the interpreter's top level)."""
    os.setsid()
    os.environ.update(request.get("env") or {})
    cap = request["memory_cap"]
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    os.chdir(request["cwd"])
    read, write = os.pipe()
    os.write(write, request["stdin"].encode("latin-1"))  # small inputs: the pipe holds them
    os.close(write)
    os.dup2(read, 0)
    os.close(read)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(err, 2)
    os.close(err)
    if request["stdout"] is None:
        os.close(1)
        sys.stdout = sys.__stdout__ = None  # type: ignore[misc]  # as CPython starts
    else:
        flags = os.O_WRONLY | (0 if request["stdout"] == "/dev/full" else os.O_CREAT | os.O_TRUNC)
        out = os.open(request["stdout"], flags, 0o644)
        os.dup2(out, 1)
        os.close(out)
    for fd in (REQUESTS, REPLIES):
        os.close(fd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path[0] = os.getcwd()  # what ``python -m`` puts first
    import runpy

    sys.argv = ["-m", *request["argv"]]
    runpy.run_module("tpuemb_cfg", run_name="__main__", alter_sys=True)


def _wait(pid: int, timeout: float) -> int | str:
    """The child's status as ``subprocess`` gives it, or "timeout" (its session killed)."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout"
        time.sleep(0.002)


def serve() -> bool:
    """Serve requests until the request pipe closes; True in a child that is to become its
    command."""
    lines = os.fdopen(REQUESTS, "r", encoding="utf-8", closefd=False)
    while True:
        line = lines.readline()
        if not line:
            return False
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
            return True
        status = _wait(pid, request["timeout"])
        os.write(REPLIES, (json.dumps({"returncode": status}) + "\n").encode())


if __name__ == "__main__":
    REQUESTS, REPLIES = int(sys.argv[1]), int(sys.argv[2])
    preload(sys.argv[3:])
    gc.freeze()  # the children's collections leave the imported objects (and their pages) alone
    if not serve():
        sys.exit(0)
    # a child: the command has run; the interpreter now ends as its own process would
