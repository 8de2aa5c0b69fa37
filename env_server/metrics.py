"""Prometheus metrics of one server (its own registry, so apps in tests don't clash)."""

from __future__ import annotations

from typing import Any, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

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
        self.script_checks = Counter("envserver_script_checks_total", "script checks of graded episodes whose tests "
                              "passed (docs/grading.md, guarantee 8), by outcome: held, failed, or none (the task "
                              "has no checked call)", ["outcome"], registry=r)
        for outcome in ("held", "failed", "none"):
            self.script_checks.labels(outcome)
        self.suspicious = Counter("envserver_suspicious_submissions_total",
                                  "monitor flags on graded episodes, one per reason", ["reason"], registry=r)
        for reason in SuspicionReason:  # every series exists from the start (at 0)
            self.suspicious.labels(reason.value)
        self._step_counters: dict[str, Counter] = {}
        r.register(ImageCollector())

    def watch_gradings(self, gradings: Any) -> None:
        """Export ``gradings``' queue (an ``env_server.gradings.GradingQueue``) at each scrape."""
        self.registry.register(GradingCollector(gradings))

    def watch_pool(self, pool: Any) -> None:
        """Export ``pool``'s stats (a ``sandbox.WarmPool``) at each scrape."""
        self.registry.register(PoolCollector(pool))

    def step_counter(self, tool: str) -> Counter:
        """``steps.labels(tool)``, looked up once per tool (it is on every step's path)."""
        child = self._step_counters.get(tool)
        if child is None:
            child = self._step_counters[tool] = self.steps.labels(tool)
        return child

    def render(self) -> bytes:
        return generate_latest(self.registry)


class GradingCollector:
    """The grading queue, read at each scrape: gradings running and waiting, submits refused."""

    def __init__(self, gradings: Any) -> None:
        self.gradings = gradings

    def collect(self) -> Iterator[Any]:
        stats = self.gradings.stats()
        yield GaugeMetricFamily("envserver_gradings_running", "gradings running now (of max_gradings)",
                                value=stats["running"])
        yield GaugeMetricFamily("envserver_gradings_waiting", "gradings waiting for a slot (of max_waiting_gradings)",
                                value=stats["waiting"])
        yield CounterMetricFamily("envserver_grader_busy", "submits refused with GRADER_BUSY (the queue was full)",
                                  value=stats["refused"])


class PoolCollector:
    """The warm pool (``--warm-pool``), read at each scrape: jails idle and starting, and how claims
    were served (warm, cold, or by a start already running)."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def collect(self) -> Iterator[Any]:
        stats = self.pool.stats()
        for key, text in (("idle", "jails started and waiting for a claim"),
                          ("starting", "jails being started in the background")):
            yield GaugeMetricFamily(f"envserver_pool_{key}", text, value=stats[key])
        claims = CounterMetricFamily("envserver_pool_claims", "resets served by the pool, by how: warm (a jail "
                                     "was ready), raced (a start already running ended first), cold", labels=["how"])
        for how in ("warm", "raced", "cold"):
            claims.add_metric([how], stats[f"claims_{how}"])
        yield claims
        for key, text in (("start_failures", "background starts that failed"),
                          ("evicted", "idle jails killed to make room for another task's"),
                          ("expired", "idle jails killed past their age")):
            yield CounterMetricFamily(f"envserver_pool_{key}", text, value=stats[key])


class ImageCollector:
    """The task images of this process's docker sessions (``sandbox.backend.images``), read at each scrape:
    pulls (done, failed, in flight with their progress), derived session images, evictions and the
    bytes the project's images take against their budget."""

    def collect(self) -> Iterator[Any]:
        from sandbox.images import image_stores

        stats = [store.stats() for store in image_stores()]

        def total(key: str) -> float:
            return float(sum(s[key] or 0 for s in stats))

        for key, name, text in (("pulls", "pulls", "task images pulled on demand or by prefetch"),
                                ("pull_failures", "pull_failures", "pulls that failed (image_unavailable)"),
                                ("pulled_bytes", "pulled_bytes", "bytes downloaded by pulls"),
                                ("pull_seconds", "pull_seconds", "seconds spent pulling"),
                                ("derived", "derived", "hardened session images recorded (built once per source)"),
                                ("evicted", "evictions", "images removed to stay within the disk budget")):
            yield CounterMetricFamily(f"envserver_image_{name}", text, value=total(key))
        yield GaugeMetricFamily("envserver_image_pulls_in_flight", "pulls running now", value=total("pulls_in_flight"))
        yield GaugeMetricFamily("envserver_image_cache_bytes", "bytes the images this project pulled or derived "
                                "take", value=total("cache_bytes"))
        budget = GaugeMetricFamily("envserver_image_cache_budget_bytes", "their disk budget (absent: none)")
        if any(s["cache_budget_bytes"] for s in stats):
            budget.add_metric([], total("cache_budget_bytes"))
        yield budget
        progress = GaugeMetricFamily("envserver_image_pull_progress_bytes", "bytes downloaded so far by a "
                                     "running pull, and the bytes known to come", labels=["image", "of"])
        for s in stats:
            for image, (done, known) in s["pull_progress"].items():
                progress.add_metric([image, "done"], done)
                progress.add_metric([image, "known"], known)
        yield progress
