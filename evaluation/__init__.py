"""Evaluate any model as an agent on SWE tasks, and collect its rollouts (docs/evaluation.md).

endpoint.py `ChatEndpoint` (a model behind an OpenAI-compatible endpoint) -> agent.py
`run_episode` (the policy's own harness: the contract's prompt, tool schemas and rendering,
through the env server) -> run.py `evaluate` (k samples per task, N at a time, retries of
episodes lost to infrastructure, resumable) -> stats.py (resolved rate with a Wilson interval,
unbiased pass@k, breakdowns) -> report.py (report.md / .json / .png). tasksets.py splits task
files by repository and filters them by measured pass rate; cli.py is `trainer-client evaluate`
and `trainer-client tasks`. Torch-free: it imports only the contract and the client library.
"""

from .agent import AgentLimits, EpisodeResult, LostEpisode, Policy, TaskRef, Usage, run_episode
from .endpoint import (UNNAMED_TOOL, ChatEndpoint, EndpointConfig, EndpointError, PolicyReply, list_models,
                       wire_tool_calls)
from .run import EvalConfig, EvaluationError, evaluate, finish, load_task_refs, read_results
from .stats import pass_at_k, result_repo, summarize, task_pass_rates, wilson_interval
from .tasksets import TaskSetError, filter_by_pass_rate, split_tasks

__all__ = [
    "UNNAMED_TOOL", "AgentLimits", "ChatEndpoint", "EndpointConfig", "EndpointError", "EpisodeResult", "EvalConfig",
    "EvaluationError", "LostEpisode", "Policy", "PolicyReply", "TaskRef", "TaskSetError", "Usage", "evaluate",
    "filter_by_pass_rate", "finish", "list_models", "load_task_refs", "pass_at_k", "read_results", "result_repo",
    "run_episode", "split_tasks", "summarize", "task_pass_rates", "wilson_interval", "wire_tool_calls",
]
