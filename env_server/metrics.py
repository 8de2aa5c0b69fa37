"""Prometheus metrics of one server (its own registry, so apps in tests don't clash)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from contract import SuspicionReason

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0, 30.0, 120.0, 600.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.sessions = Gauge("envserver_sessions_active", "live sessions", registry=r)
        self.resets = Counter("envserver_resets_total", "episodes started", registry=r)
        self.steps = Counter("envserver_steps_total", "steps served", ["tool"], registry=r)
        self.step_latency = Histogram("envserver_step_latency_seconds", "server-side step latency",
                                      buckets=LATENCY_BUCKETS, registry=r)
        self.tool_errors = Counter("envserver_tool_errors_total", "failed tool calls", ["error_kind", "error_source"],
                                   registry=r)
        self.protocol_errors = Counter("envserver_protocol_errors_total", "error frames sent", ["code"], registry=r)
        self.rewards = Counter("envserver_graded_total", "graded episodes", ["resolved"], registry=r)
        self.reward_hacking = Counter("envserver_reward_hacking_total",
                                      "graded episodes whose grading detected tampering", registry=r)
        self.suspicious = Counter("envserver_suspicious_submissions_total",
                                  "monitor flags on graded episodes, one per reason", ["reason"], registry=r)
        for reason in SuspicionReason:  # every series exists from the start (at 0)
            self.suspicious.labels(reason.value)
        self._step_counters: dict[str, Counter] = {}

    def step_counter(self, tool: str) -> Counter:
        """``steps.labels(tool)``, looked up once per tool (it is on every step's path)."""
        child = self._step_counters.get(tool)
        if child is None:
            child = self._step_counters[tool] = self.steps.labels(tool)
        return child

    def render(self) -> bytes:
        return generate_latest(self.registry)
