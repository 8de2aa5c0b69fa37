"""How many gradings run at once on one replica, and how many may wait for a slot.

A grading is the heaviest thing a replica does (a sandbox running the hidden tests, a second one
for the script check), and training asks for a GRPO group's gradings at once. ``GradingQueue``
runs ``slots`` of them at a time; the others wait in order, up to ``max_waiting``. A submit that
finds the queue full is refused before anything happens (``GRADER_BUSY`` with ``retry_after_s``:
not a step, not a grading, nothing lost); the client library waits and sends it again. So a
burst never turns into gradings that time out, which a trainer would count as infra failures.
A grading's own time limit (``grade_timeout_s``) starts when it leaves the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import AsyncIterator


class GradingQueue:
    """``slots`` gradings at once (0: one per CPU), ``max_waiting`` more queued behind them."""

    def __init__(self, slots: int = 0, max_waiting: int = 0) -> None:
        self.slots = slots or max(1, os.cpu_count() or 1)
        self.max_waiting = max_waiting
        self._free = asyncio.Semaphore(self.slots)
        self.running = 0
        self.waiting = 0
        self.refused = 0
        self._recent_s = 10.0  # a grading's recent wall time (retry_after_s is derived from it)

    @property
    def full(self) -> bool:
        """Whether a new grading would have to wait and no place in the queue is left."""
        return self.running >= self.slots and self.waiting >= self.max_waiting

    def retry_after_s(self) -> float:
        """When a refused submit may come back: about when the queue's head gets a slot."""
        return round(max(1.0, self._recent_s * (1 + self.waiting) / self.slots), 1)

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Wait for a slot (in order), hold it for one grading."""
        self.waiting += 1
        try:
            await self._free.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            yield
        finally:
            self.running -= 1
            self._free.release()
            self._recent_s = 0.8 * self._recent_s + 0.2 * (loop.time() - started)

    def stats(self) -> dict[str, float]:
        return {"slots": self.slots, "running": self.running, "waiting": self.waiting, "refused": self.refused,
                "max_waiting": self.max_waiting}
