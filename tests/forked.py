"""Processes of their own without a fresh interpreter's imports: forks of multiprocessing's fork server, which has
imported the framework once (a new ``python train.py`` spends about 10 s of CPU importing lightning first).

For the runs that must die on their own (SIGKILL, preemption signals) and for gloo ranks. The server starts clean
(no torch threads yet), so forking it is safe where forking the test process would not be.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest
import torch.multiprocessing as torch_mp

REPO = Path(__file__).resolve().parents[1]
CONTEXT = multiprocessing.get_context("forkserver")
CONTEXT.set_forkserver_preload(["sapiens2_ft.training.cli", "faults"])


def _child(target, args: tuple, env: dict, cwd: str, out: str, err: str) -> None:
    """In the fork: the given environment and folder, stdout / stderr to files, ``target(*args)``, its exit status."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for fd, path in ((1, out), (2, err)):
        file = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(file, fd)
        os.close(file)
    code = 0
    try:
        target(*args)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (exit_.code is not None)
        if isinstance(exit_.code, str):
            print(exit_.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


class Forked:
    """``target(*args)`` in a forked process (``target`` importable by name); a small ``subprocess.Popen``
    look-alike. ``env`` replaces the environment, as ``subprocess``'s does (default: this one's)."""

    def __init__(self, target, args: tuple, logs: Path, env: dict | None = None, cwd: Path = REPO):
        self.args, self.out, self.err = args, logs / "stdout.txt", logs / "stderr.txt"
        logs.mkdir(parents=True, exist_ok=True)
        self.process = CONTEXT.Process(target=_child, args=(target, args, dict(os.environ if env is None else env),
                                                            str(cwd), str(self.out), str(self.err)))
        self.process.start()
        self.pid = self.process.pid

    def poll(self) -> int | None:
        """The exit status (negative: the signal that ended it), or None while it runs."""
        return None if self.process.is_alive() else self.process.exitcode

    def wait(self, timeout: float = 300) -> subprocess.CompletedProcess:
        """Waits for the end (killed and failed after ``timeout`` s); the status and both outputs."""
        self.process.join(timeout)
        if self.process.is_alive():
            self.kill()
            pytest.fail(f"still running after {timeout} s: {self.args}\n{self.err.read_text()[-3000:]}")
        return subprocess.CompletedProcess(self.args, self.process.exitcode, self.out.read_text(),
                                           self.err.read_text())

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


def _train(args: list[str]) -> None:
    from sapiens2_ft.training.cli import main

    main(args)


def train(args: list[str], logs: Path, env: dict | None = None) -> Forked:
    """``python train.py ARGS`` (``sapiens2_ft.training.cli.main``) in a forked process."""
    return Forked(_train, (list(args),), logs, env)


def as_rank(rank: int, world: int, port: int, target, args: tuple, logs: Path) -> None:
    """``target(*args)`` as rank ``rank`` of ``world``, told so by the environment as torchrun tells its ranks (so
    Lightning launches no processes); stdout and stderr to ``logs/rank{rank}.log``."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world), RANK=str(rank),
                      LOCAL_RANK=str(rank), NODE_RANK="0")
    logs.mkdir(parents=True, exist_ok=True)
    log = os.open(logs / f"rank{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log, 1)
    os.dup2(log, 2)
    target(*args)


def train_ranks(args: list[str], logs: Path, nprocs: int = 2, timeout: float = 600) -> None:
    """``torchrun --nproc-per-node NPROCS train.py ARGS`` without torchrun: ``nprocs`` forked ranks."""
    start_ranks(as_rank, (nprocs, free_port(), _train, (list(args),), logs), nprocs, timeout)


def free_port() -> int:
    """A TCP port nobody listens on now (for a process group's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ranks(fn, args: tuple, nprocs: int, timeout: float = 600) -> None:
    """``torch.multiprocessing.spawn`` of ``fn(rank, *args)`` on ``nprocs`` ranks, forked from the server; a rank's
    exception is raised here, and ranks still running after ``timeout`` s are killed and fail the test."""
    context = torch_mp.start_processes(fn, args=args, nprocs=nprocs, join=False, start_method="forkserver")
    deadline = time.monotonic() + timeout
    while not context.join(timeout=max(1.0, deadline - time.monotonic())):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"{fn.__name__}: ranks still running after {timeout} s")
