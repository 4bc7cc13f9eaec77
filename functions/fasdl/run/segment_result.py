"""What one worker reports of one segment (the worker's JSON result, fasdl.run.results)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fasdl.exchange.step_stats import StepStats
from fasdl.run.role_times import BATCH_FIELD, ROLE_FIELD, WORKLOAD_FIELD


@dataclass
class SegmentResult:
    run_id: str
    worker: int
    segment: dict[str, int]
    iterations_done: int = 0
    losses: list[float] = field(default_factory=list)
    accuracy: float | None = None
    mcc: float | None = None  # Matthews correlation, two-class workloads only
    test_samples: int = 0
    times: dict[str, float] = field(default_factory=dict)
    bytes_up: int = 0
    bytes_down: int = 0
    resume_iteration: int | None = None
    # exchange requests S3 throttled (503 Slow Down), each retried (fasdl.exchange.channel.s3)
    throttled_retries: int = 0
    role: str | None = None  # aggregator | non_aggregator, and its batch (fasdl.run.role_times)
    batch: int | None = None
    workload: str | None = None  # the plan's workload name
    initial_weights: str | None = None  # workload.initial_weights, when this segment loaded it
    workers: int | None = None  # W of the segment's plan (an adaptive run's may change)

    def add(self, stats: StepStats) -> None:
        self.iterations_done += 1
        self.losses.append(stats.loss)
        for name in ("compute_s", "upload_s", "aggregate_s", "download_s", "idle_s"):
            self.times[name] = self.times.get(name, 0.0) + float(getattr(stats, name))
        self.bytes_up += stats.bytes_up
        self.bytes_down += stats.bytes_down

    def to_dict(self) -> dict[str, Any]:
        losses = self.losses
        return {
            "run_id": self.run_id, "worker": self.worker, "segment": self.segment,
            "iterations_done": self.iterations_done,
            "loss_first": losses[0] if losses else None,
            "loss_last": losses[-1] if losses else None,
            "loss_mean": sum(losses) / len(losses) if losses else None,
            "accuracy": self.accuracy, "mcc": self.mcc, "test_samples": self.test_samples,
            "time": {name: round(value, 6) for name, value in self.times.items()},
            "bytes_up": self.bytes_up, "bytes_down": self.bytes_down,
            "resume_iteration": self.resume_iteration,
            "exchange_throttled_retries": self.throttled_retries,
            ROLE_FIELD: self.role, BATCH_FIELD: self.batch, WORKLOAD_FIELD: self.workload,
            "initial_weights": self.initial_weights, "workers": self.workers,
        }
