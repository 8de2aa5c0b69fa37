"""Teacher replay: frozen traces -> N external teachers -> (chosen, rejected) pairs for channel 3."""

from .agreement import AgreementRule, Verdict, decide
from .canonical import CanonicalizerConfig, canonical_key
from .config import ReplayConfigError, RetryConfig, TeacherConfig, TeachersFile, load_teachers
from .gating import GatingConfig
from .models import CallRecord, PairProvenance, PreferencePair, StateRecord, ToolAction
from .normalize import NormalizeConfig, normalize_pairs
from .replay import ReplayOptions, ReplayResult, replay
from .summary import ReplaySummary
from .traces import fetch_state, fetch_trace, read_trace_files

__all__ = [
    "AgreementRule", "CallRecord", "CanonicalizerConfig", "GatingConfig", "NormalizeConfig",
    "PairProvenance", "PreferencePair", "ReplayConfigError", "ReplayOptions", "ReplayResult",
    "ReplaySummary", "RetryConfig", "StateRecord", "TeacherConfig", "TeachersFile", "ToolAction",
    "Verdict", "canonical_key", "decide", "fetch_state", "fetch_trace", "load_teachers",
    "normalize_pairs", "read_trace_files", "replay",
]
