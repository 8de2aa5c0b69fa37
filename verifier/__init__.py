"""The verifier: grades a submission against a task's hidden tests, in a fresh sandbox.

``task`` (the task file format and its loader), ``diffs`` (the agent's diff, filtered the way git
reads it), ``grade`` (the grading flow: stage, apply, run, read, decide), ``canary`` (planted variants
of the hidden tests), ``pytest_log`` (the ``-rA`` log read like SWE-bench reads it, in linear time;
``offload`` reads it in worker processes, off the server's event loop), ``verdict``
(outcomes, tampering, blame), ``harness`` (a dataset's own test command and log parser),
``runner_config`` (the grader's pytest configuration), ``monitor`` (hack-shaped code, flagged),
``junit`` (test outcomes). It depends on ``sandbox`` and on the contract's vocabulary, never on the
server: the server and the task factory both call it.
"""

from .grade import GRADER_VERSION, GradeCache, GradeMode, GradeResult, grade_submission
from .task import TaskFileError, TaskInstance, TaskRecord, load_tasks

__all__ = ["GRADER_VERSION", "GradeCache", "GradeMode", "GradeResult", "TaskFileError", "TaskInstance", "TaskRecord",
           "grade_submission", "load_tasks"]
