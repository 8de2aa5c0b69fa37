"""Teacher replay: frozen traces -> N external teachers -> (chosen, rejected) pairs for channel 3.

- traces.py reads the frozen states (`FrozenState`, models.py) from trace files or an env server;
- pair_mining.py (`replay`) asks the teachers about them (client.py, budget.py; gating.py picks
  the states, agreement.py or verify.py decides, normalize.py cleans the pairs; summary.py);
- cli.py is `trainer-client replay` on exported traces; during_training.py runs the same pair
  mining in the background of a training run (`replay.enabled`); local.py serves our own
  checkpoints as teachers.

The pairs are `contract.PairRecord`s and the actions `contract.ToolCall`s. Channel 3's loss on
them is trainer_client/losses/pairs_channel.py.
"""

from .agreement import AgreementRule, Verdict, decide
from .canonical import CanonicalizerConfig, canonical_key
from .config import ReplayConfigError, RetryConfig, TeacherConfig, TeachersFile, load_teachers
from .gating import GatingConfig
from .models import CallRecord, FrozenState, StepResult
from .normalize import NormalizeConfig, normalize_pairs
from .pair_mining import ReplayOptions, ReplayResult, replay
from .summary import ReplaySummary
from .traces import fetch_state, fetch_trace, read_trace_files

__all__ = [
    "AgreementRule", "CallRecord", "CanonicalizerConfig", "FrozenState", "GatingConfig", "NormalizeConfig",
    "ReplayConfigError", "ReplayOptions", "ReplayResult", "ReplaySummary", "RetryConfig", "StepResult",
    "TeacherConfig", "TeachersFile", "Verdict", "canonical_key", "decide", "fetch_state", "fetch_trace",
    "load_teachers", "normalize_pairs", "read_trace_files", "replay",
]
