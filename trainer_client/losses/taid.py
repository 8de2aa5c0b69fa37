"""TAID's adaptive interpolation scheduler (arXiv:2501.16937, SakanaAI/TAID)."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["TAIDScheduler"]


@dataclass
class TAIDScheduler:
    """t rises from t_start to t_end: at least linearly, faster while the loss keeps falling.

    update(loss, step): momentum m <- momentum * m + (1 - momentum) * relative loss drop;
    t <- min(t_end, max(linear target, t + alpha * sigmoid(m) * (1 - t))).
    """

    total_steps: int
    t_start: float = 0.4
    t_end: float = 1.0
    alpha: float = 5e-4
    momentum: float = 0.99
    adaptive: bool = True

    def __post_init__(self) -> None:
        if self.total_steps <= 0:
            raise ValueError("total_steps must be > 0")
        self.t = self.t_start
        self._m = 0.0
        self._prev: float | None = None

    def state_dict(self) -> dict:
        return {"t": self.t, "m": self._m, "prev": self._prev}

    def load_state_dict(self, state: dict) -> None:
        self.t, self._m, self._prev = float(state["t"]), float(state["m"]), state["prev"]

    def update(self, loss: float, step: int) -> float:
        progress = min(1.0, step / self.total_steps)
        target = self.t_start + (self.t_end - self.t_start) * progress
        if not self.adaptive:
            self.t = target
            return self.t
        if self._prev is not None:
            rel = (self._prev - loss) / (abs(self._prev) + 1e-15)
            self._m = self.momentum * self._m + (1 - self.momentum) * rel
        self._prev = loss
        delta = self.alpha * (1 / (1 + math.exp(-self._m))) * (1 - self.t)
        self.t = min(self.t_end, max(target, self.t + delta))
        return self.t
