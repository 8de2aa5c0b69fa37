"""Reading a grading run's log in worker processes: never on the server's event loop, never
holding its interpreter lock.

The log is the submission's output: up to ``grade.OUTPUT_LIMIT`` (8 MB) of any shape. Reading
it is linear (``pytest_log.py``), but linear in 8 MB is still most of a second of Python, and a
harness's parser (swebench's, not ours) may be slower still. In a thread of the server that
time is taken from every other session: the thread holds the interpreter lock, and each time
the event loop wakes it waits for the lock. In a worker process it costs the server the copy
of the log to the worker, and nothing else.

``run`` calls a picklable function in one of ``WORKERS`` long-lived worker processes (started
on first use; each serves one call at a time over its stdin and stdout). A call that runs past
its time limit is answered by ``on_timeout`` and its worker is killed (only that one). Where a
worker cannot be started, or dies twice under a call (killed from outside), the call runs in a
thread, as the last resort.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO, Callable, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)

WORKERS = 2  # verdicts of honest logs take milliseconds; a hostile 8 MB log holds a worker for about a second
TIMEOUT_S = 60.0  # an honest log is read in well under a second; 8 MB of hostile lines in a few
_HEADER = struct.Struct("!Q")
_READY = b"R"
STARTUP_S = 60.0  # a worker imports what it runs, then says it is ready


class WorkerDied(RuntimeError):
    """The worker process ended (or was killed) before it answered."""


class WorkerCannotStart(OSError):
    """A worker process ended before it was ready: none will start here."""


_threads = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="verifier-offload")
_local = threading.local()  # each of those threads drives its own worker
_unavailable: str | None = None  # why workers cannot be started here (then: threads)
_WORKER_MAIN = "from verifier.offload import _main; _main(%r)"  # the module to import before ready


def _call(call: Callable[[], Any], timeout_s: float, preload: str) -> tuple[bool, Any]:
    """In one of ``_threads``: ``call`` in this thread's worker (started, importing ``preload``, or
    restarted once if it died).
    TimeoutError past ``timeout_s``, WorkerDied when it died twice, OSError when none can start."""
    global _unavailable
    deadline = time.monotonic() + timeout_s
    payload = pickle.dumps(call, protocol=pickle.HIGHEST_PROTOCOL)
    for attempt in range(2):
        worker: _Worker | None = getattr(_local, "worker", None)
        if worker is None or worker.proc.poll() is not None:
            try:
                worker = _local.worker = _Worker(preload)
            except OSError as exc:
                _unavailable = str(exc)
                raise
        try:
            return worker.call(payload, deadline)
        except WorkerCannotStart as exc:
            _local.worker = None
            worker.kill()
            _unavailable = str(exc)
            raise
        except (TimeoutError, WorkerDied):
            _local.worker = None
            worker.kill()
            if attempt or time.monotonic() >= deadline:
                raise
    raise AssertionError("unreachable")


async def run(fn: Callable[..., T], *args: Any, on_timeout: Callable[[], T], timeout_s: float = TIMEOUT_S,
              **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a worker process (``fn`` importable, the arguments and the result
    picklable); ``on_timeout()`` when it runs past ``timeout_s``. An exception ``fn`` raises is raised
    here. A worker that dies twice under the call (killed from outside: honest code does not crash the
    interpreter) leaves the call to a thread."""
    call = functools.partial(fn, *args, **kwargs)
    if _unavailable is None:
        try:
            ok, value = await asyncio.get_running_loop().run_in_executor(_threads, _call, call, timeout_s,
                                                                         fn.__module__)
        except TimeoutError:
            return on_timeout()
        except (WorkerDied, OSError) as exc:
            log.warning("reading a grading log in a thread: %s", exc)
        else:
            if ok:
                return value  # type: ignore[no-any-return]
            raise value
    return await asyncio.to_thread(call)


class _Worker:
    """One worker process and its pipes."""

    def __init__(self, preload: str) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # the caller's imports
        self.proc = subprocess.Popen([sys.executable, "-c", _WORKER_MAIN % preload], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, close_fds=True)
        self.ready = False

    def call(self, payload: bytes, deadline: float) -> tuple[bool, Any]:
        """Send one pickled call; its (ok, value or exception). WorkerDied, or TimeoutError past ``deadline``."""
        assert self.proc.stdin is not None
        if not self.ready:  # the worker says it has imported what it runs
            try:
                self._read(len(_READY), time.monotonic() + STARTUP_S)
            except (WorkerDied, TimeoutError) as exc:
                raise WorkerCannotStart(f"a worker process did not start: {exc!r}") from None
            self.ready = True
        try:
            self.proc.stdin.write(_HEADER.pack(len(payload)) + payload)
            self.proc.stdin.flush()
        except OSError as exc:
            raise WorkerDied(f"its pipe closed: {exc}") from None
        size = _HEADER.unpack(self._read(_HEADER.size, deadline))[0]
        return pickle.loads(self._read(size, deadline))  # type: ignore[no-any-return]

    def _read(self, n: int, deadline: float) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        chunks = []
        while n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(fd, min(n, 1 << 20))
            if not chunk:
                raise WorkerDied(f"the worker exited ({self.proc.poll()})")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def _serve(inp: BinaryIO, out: BinaryIO) -> None:
    """The worker's loop: read a call, answer it, until the parent closes the pipe."""
    while True:
        header = inp.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return
        payload = inp.read(_HEADER.unpack(header)[0])
        try:
            answer = pickle.dumps((True, pickle.loads(payload)()), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # raised in the caller
            try:
                answer = pickle.dumps((False, exc), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:
                answer = pickle.dumps((False, RuntimeError(repr(exc))), protocol=pickle.HIGHEST_PROTOCOL)
        out.write(_HEADER.pack(len(answer)) + answer)
        out.flush()


def _main(preload: str) -> None:
    """A worker (``python -c``, so no module runs twice): imports ``preload`` (the module of the function
    it was started for), then answers on its stdout, which nothing else writes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server's Ctrl-C is the server's to handle
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever the called code prints goes to stderr
    sys.stdout = sys.stderr
    import importlib

    importlib.import_module(preload)  # what it runs, imported before the worker says it is ready

    channel.write(_READY)
    channel.flush()
    _serve(sys.stdin.buffer, channel)
