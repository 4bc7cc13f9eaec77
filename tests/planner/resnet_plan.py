"""A valid ResNet-50 plan (W = 7, K = 4) with any training fields changed: the contract's
tests (test_plan_contract.py) and the learning-rate scaling's (test_lr_scaling.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

from fasdl.contract.plan import Deployment, Plan, Prediction, Training, Workload


def make_plan(**training: Any) -> Plan:
    base = Training(aggregators=4, batch_aggregator=128, batch_non_aggregator=170,
                    max_global_batch=1024, epochs=10, segment_iterations=30)
    return Plan(
        workload=Workload(name="resnet50-cifar10", model="resnet50", dataset="datasets/cifar10",
                          samples=50_000, dataset_mb=146.48, model_mb=97.49),
        deployment=Deployment(channel="s3", arch="x86_64", memory_mb=1536, workers=7),
        training=dataclasses.replace(base, **training),
        prediction=Prediction(time_s=7000.0, cost_usd=1.25, lambda_compute_usd=1.0,
                              breakdown={"upload_s": 0.5}),
        provenance={"search": "exact"},
    )
