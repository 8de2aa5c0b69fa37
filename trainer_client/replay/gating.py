"""Which trace steps are worth querying the teachers on."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from .models import FrozenState


class GatingConfig(BaseModel):
    """`all` queries every step with a student action; the others keep only steps worth it.

    - error_sites: the observation the student was answering carries `error_kind`
      (its last action failed), so its next move is the recovery worth judging.
    - entropy: the student's mean token entropy at this step is >= `entropy_threshold`;
      read from `entropy_key` in the record's `metadata` or its observation's metadata.
      Steps without an entropy value are not selected by this criterion.
    - error_sites_or_entropy: either.
    """

    model_config = ConfigDict(extra="forbid")

    mode: Literal["all", "error_sites", "entropy", "error_sites_or_entropy"] = "all"
    entropy_threshold: float = 1.0
    entropy_key: str = "student_entropy"


def step_entropy(state: FrozenState, key: str) -> float | None:
    extra = state.model_extra or {}
    for meta in (extra.get("metadata"), state.obs_metadata):
        if isinstance(meta, dict) and isinstance(meta.get(key), (int, float)):
            return float(meta[key])
    return None


def is_error_site(state: FrozenState) -> bool:
    return bool(state.obs_metadata.get("error_kind"))


def select(state: FrozenState, cfg: GatingConfig) -> bool:
    """True when the teachers should be asked about this step."""
    if state.next_action is None:
        return False
    if cfg.mode == "all":
        return True
    err = cfg.mode in ("error_sites", "error_sites_or_entropy") and is_error_site(state)
    ent = None
    if cfg.mode in ("entropy", "error_sites_or_entropy"):
        ent = step_entropy(state, cfg.entropy_key)
    return err or (ent is not None and ent >= cfg.entropy_threshold)
