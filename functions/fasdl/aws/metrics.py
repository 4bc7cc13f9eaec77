"""CloudWatch EMF metrics (Powertools Metrics) and the structured logger of the handlers.

Each handler module holds one Logger (``@logger.inject_lambda_context``: cold start, request id
and function in every line) and the worker one Metrics (``@metrics.log_metrics`` flushes at the
end of every invocation, failed ones included), as Powertools recommends.

The dashboard (infra/monitoring.py) reads namespace ``FASDL_METRICS_NAMESPACE`` with the single
dimension ``Stack``: the Powertools ``service`` dimension is switched off, since it would put
every record under another dimension set that the dashboard never queries.
"""

from __future__ import annotations

from typing import Protocol

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

SECONDS_METRICS = {
    "IterationTime": "total_s",
    "ComputeTime": "compute_s",
    "UploadTime": "upload_s",
    "AggregateTime": "aggregate_s",
    "DownloadTime": "download_s",
    "IdleTime": "idle_s",
}
CPU_METRIC = "CpuTime"


class IterationStats(Protocol):  # fasdl.exchange.kreduce.StepStats, without importing torch here
    @property
    def total_s(self) -> float: ...
    @property
    def compute_s(self) -> float: ...
    @property
    def upload_s(self) -> float: ...
    @property
    def aggregate_s(self) -> float: ...
    @property
    def download_s(self) -> float: ...
    @property
    def idle_s(self) -> float: ...
    @property
    def loss(self) -> float: ...


def get_logger(service: str) -> Logger:
    return Logger(service=service)


def get_metrics() -> Metrics:
    """A handler module's Metrics; :class:`StepMetrics` sets its namespace and dimension per
    invocation, from the function's settings."""
    return Metrics()


class StepMetrics:
    """One EMF value per metric per iteration; Powertools flushes every 100 values."""

    def __init__(self, namespace: str, stack: str, metrics: Metrics | None = None) -> None:
        self.metrics = metrics if metrics is not None else Metrics()
        self.metrics.namespace = namespace
        self.metrics.provider.service = ""  # no "service" dimension: Stack only
        # Powertools keeps metric state per class: drop a previous invocation's leftovers
        self.metrics.clear_default_dimensions()
        self.metrics.clear_metrics()
        self.metrics.set_default_dimensions(Stack=stack)

    def record(self, stats: IterationStats, cpu_s: float | None = None) -> None:
        """``cpu_s``: the process's CPU seconds over the iteration, every thread (CpuTime):
        beside IterationTime it shows how much of the function's M/1769 vCPU share the
        iteration used, which at small M bounds the exchange."""
        for name, attribute in SECONDS_METRICS.items():
            self.metrics.add_metric(name=name, unit=MetricUnit.Seconds,
                                    value=float(getattr(stats, attribute)))
        if cpu_s is not None:
            self.metrics.add_metric(name=CPU_METRIC, unit=MetricUnit.Seconds, value=cpu_s)
        self.metrics.add_metric(name="Loss", unit=MetricUnit.NoUnit, value=float(stats.loss))

    def flush(self) -> None:
        if self.metrics.metric_set:
            self.metrics.flush_metrics()
