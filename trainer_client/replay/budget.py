"""A hard USD ceiling shared by concurrent calls: reserve the worst case, settle the actual."""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass, field
from typing import Any

from .config import TeacherConfig

# Chat templates add a few tokens per message (role markers, separators) and per request.
_TOKENS_PER_MESSAGE = 8
_TOKENS_PER_REQUEST = 16


def estimate_prompt_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
    """An upper bound on prompt tokens: one token per UTF-8 byte of the JSON, plus template overhead.

    Byte-level BPE tokenizers never emit more tokens than bytes, so the bound holds for
    any of them; it over-reserves, which only delays calls near the ceiling.
    """
    payload = json.dumps([messages, tools], ensure_ascii=False, separators=(",", ":"))
    return len(payload.encode("utf-8")) + _TOKENS_PER_MESSAGE * len(messages) + _TOKENS_PER_REQUEST


def worst_case_cost(teacher: TeacherConfig, prompt_tokens: int) -> float:
    return prompt_tokens * teacher.price_in + teacher.max_tokens * teacher.price_out


def actual_cost(teacher: TeacherConfig, prompt_tokens: int, completion_tokens: int) -> float:
    return prompt_tokens * teacher.price_in + completion_tokens * teacher.price_out


@dataclass
class Budget:
    """`spent + reserved <= max_total_usd` holds at every moment.

    A call reserves its worst case before it goes out. When the ceiling is only held by
    calls in flight, the caller waits for them to settle; it is refused only when even
    the money already spent leaves no room. Check and update happen under one lock, so
    concurrent calls cannot oversubscribe the ceiling.
    """

    max_total_usd: float = math.inf
    spent: float = 0.0
    reserved: float = 0.0
    peak_committed: float = 0.0
    refused: int = 0
    overruns: int = 0
    _next_id: int = 0
    _open: dict[int, float] = field(default_factory=dict)
    _cond: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def reserve(self, amount: float) -> int | None:
        """A reservation id, or None when `amount` cannot fit even after calls in flight settle."""
        async with self._cond:
            while True:
                if self.spent + amount > self.max_total_usd:
                    self.refused += 1
                    return None
                if self.spent + self.reserved + amount <= self.max_total_usd:
                    break
                await self._cond.wait()
            self._next_id += 1
            self._open[self._next_id] = amount
            self.reserved += amount
            self.peak_committed = max(self.peak_committed, self.spent + self.reserved)
            return self._next_id

    async def settle(self, reservation: int, cost: float) -> None:
        """Release a reservation and charge the actual `cost`.

        An actual cost above the reservation (a server billing more output tokens than
        the `max_tokens` it was sent) is charged as is and counted in `overruns`.
        """
        async with self._cond:
            amount = self._open.pop(reservation)
            self.reserved = max(0.0, self.reserved - amount) if self._open else 0.0
            if cost > amount:
                self.overruns += 1
            self.spent += max(cost, 0.0)
            self._cond.notify_all()

    @property
    def remaining(self) -> float:
        return self.max_total_usd - self.spent - self.reserved
