"""Measured vs fitted plot of ``python -m planner fit --png`` (matplotlib, Agg)."""

from __future__ import annotations

import numpy as np

from planner.fit.samples import Samples, by_channel, by_direction
from planner.fit.workload_fit import WorkloadFit, distinct
from planner.model.inputs.compute import predict_train_time
from planner.model.inputs.profiles import DIRECTIONS, PlatformProfile


def render_fit(png: str, samples: Samples, workload: WorkloadFit | None,
               platform: PlatformProfile | None) -> None:
    """Measured points and fitted curves: time and memory vs batch, transfer time vs size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (2 if workload else 0) + (2 if platform else 0)
    figure, axes = plt.subplots(1, max(panels, 1), figsize=(4.5 * max(panels, 1), 4),
                                squeeze=False)
    row = list(axes[0])
    if workload is not None:
        time_axis, memory_axis = row.pop(0), row.pop(0)
        for memory in distinct(s.memory_mb for s in samples.train):
            points = [s for s in samples.train if s.memory_mb == memory]
            batches = np.array([s.batch for s in points], dtype=np.float64)
            line = np.linspace(batches.min(), batches.max(), 50)
            fitted = predict_train_time(line, memory, a=workload.a, b=workload.b,
                                        m=workload.m)
            (handle,) = time_axis.plot(line, fitted, label=f"{memory:g} MB")
            time_axis.scatter(batches, [s.seconds for s in points], color=handle.get_color(),
                              s=12)
        time_axis.set(xlabel="batch B", ylabel="s / iteration", title="T = a(B+b)/(M+m)")
        time_axis.legend(fontsize=7)
        peaks = [s for s in samples.train if s.peak_mb is not None]
        batches = np.array([s.batch for s in peaks], dtype=np.float64)
        memory_axis.scatter(batches, [s.peak_mb for s in peaks], s=12)
        memory_axis.plot(np.sort(batches), workload.k * np.sort(batches) + workload.c)
        memory_axis.set(xlabel="batch B", ylabel="peak MB", title="M_B = kB + c")
    if platform is not None:
        for direction in DIRECTIONS:
            axis = row.pop(0)
            records = by_direction(by_channel(samples.transfer).get(platform.channel, [])
                                   ).get(direction, [])
            for memory in distinct(r.memory_mb for r in records):
                series = [r for r in records if r.memory_mb == memory]
                sizes = np.array([r.size_mb for r in series], dtype=np.float64)
                line = np.geomspace(sizes.min(), sizes.max(), 50)
                (handle,) = axis.plot(line, platform.transfer_time(direction, memory, line),
                                      label=f"{memory:g} MB")
                axis.scatter(sizes, [r.seconds for r in series], color=handle.get_color(), s=12)
            axis.set(xscale="log", yscale="log", xlabel="object MB", ylabel="seconds",
                     title=f"{platform.channel} {direction}")
            axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(png, dpi=110)
    plt.close(figure)
