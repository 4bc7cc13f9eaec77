"""The shipped workloads ``python -m local run --workload NAME`` can run with no dataset given:
how many epochs and workers make a short, convincing local job, and how its data is built."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TEXT_MAX_LENGTH = 16  # tokens: bert-mini-textset's dataset_mb and coefficients assume it


def _digits(folder: Path) -> Path:
    from fasdl.datasets.digits import build_digits

    build_digits(folder)
    return folder


def _textset(folder: Path) -> Path:
    """The generated acceptability set in CoLA's format, imported as the workers read it."""
    from fasdl.datasets.cola import import_cola
    from fasdl.datasets.textset import write_textset

    write_textset(folder / "tsv")
    import_cola(folder / "tsv", folder / "data", max_length=TEXT_MAX_LENGTH)
    return folder / "data"


@dataclass(frozen=True)
class LocalJob:
    """Defaults of a planned local job (``--epochs``/``--workers`` override them)."""

    epochs: int
    workers: int
    build_dataset: Callable[[Path], Path]  # into an empty folder; returns the dataset root
    why: str


LOCAL_JOBS = {
    "cnn-digits": LocalJob(40, 4, _digits, "40 epochs reach >= 0.95 test accuracy on digits "
                                           "under hap (0.964 measured, 0.958 at 30)"),
    "mlp-digits": LocalJob(40, 4, _digits, "the digits job with the smaller network"),
    "bert-mini-textset": LocalJob(8, 2, _textset, "8 epochs of AdamW take the text set's dev "
                                                  "MCC to 0.45-0.66 (W = 2, global batch 64)"),
}


def local_job(workload: str, dataset: str = "") -> LocalJob | None:
    """The shipped job of ``workload``; a plan of another name on the digits set (its
    ``workload.dataset`` says so) gets the digits."""
    job = LOCAL_JOBS.get(workload)
    if job is None and ("digits" in workload or "digits" in dataset):
        return LOCAL_JOBS["cnn-digits"]
    return job


def missing_dataset_hint() -> str:
    return (f"pass --dataset DIR with x.npy, y.npy (and test/x.npy, test/y.npy); built here "
            f"without one: {', '.join(LOCAL_JOBS)}")
