"""The tabular user of the own-model journey (docs/user-guide.md, "Tabular data, a small model,
a package of your own"): a CSV of rows whose 24 features span 1,000x in scale, an MLP in a
package of two files (a relative import) that imports einops, pinned in a requirements file,
and the plain PyTorch loop the run is compared with."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from fasdl.contract.requirements import local_layer_dir

PACKAGE = {
    "__init__.py": "",
    "layers.py": '''"""Building blocks: einops names the row layout."""
from einops.layers.torch import Rearrange
from torch import nn


def mlp(features, hidden, classes):
    return nn.Sequential(Rearrange("rows features -> rows features"),
                         nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))
''',
    "model.py": '''"""A tabular MLP whose layers come from the package's other file."""
from .layers import mlp


def build(num_classes, input_shape):
    return mlp(input_shape[0], 32, num_classes)
''',
}
PIN = "einops==0.8.1"
ROWS, FEATURES = 3000, 24
# what the guide's block plans: its --max-global-batch, --epochs, and the recipe's defaults
GLOBAL_BATCH, EPOCHS, LEARNING_RATE, MOMENTUM = 64, 6, 0.05, 0.9


def write_user_files(root: Path) -> None:
    """The package, the requirements file and rows.csv: labels from a random hyperplane of
    standard normal features, then each feature scaled by 10^-1.5 .. 10^1.5 and shifted."""
    for name, text in PACKAGE.items():
        (root / "tabnet").mkdir(exist_ok=True)
        (root / "tabnet" / name).write_text(text)
    (root / "requirements-model.txt").write_text(f"{PIN}\n")
    rng = np.random.default_rng(0)
    z = rng.standard_normal((ROWS, FEATURES))
    labels = (z @ rng.standard_normal(FEATURES) > 0).astype(int)
    scale = np.logspace(-1.5, 1.5, FEATURES)
    rows = z * scale + 10 * scale
    lines = [",".join([*(f"f{i}" for i in range(FEATURES)), "label"])]
    lines += [",".join([*(f"{value:.6g}" for value in row), str(label)])
              for row, label in zip(rows, labels, strict=True)]
    (root / "rows.csv").write_text("\n".join(lines) + "\n")


@contextmanager
def users_package(root: Path) -> Iterator[object]:
    """``tabnet.model`` imported as its user imports it, einops from the requirements' local
    layer (the test's interpreter, like .venv, has none)."""
    paths = [str(root), str(local_layer_dir(root / "requirements-model.txt") / "python")]
    sys.path[:0] = paths
    try:
        yield importlib.import_module("tabnet.model")
    finally:
        for path in paths:
            sys.path.remove(path)
        for name in [name for name in sys.modules if name.split(".")[0] in {"tabnet", "einops"}]:
            del sys.modules[name]


def _accuracy(model: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    with torch.no_grad():
        predicted = model(torch.from_numpy(x).float()).argmax(1).numpy()
    return float(np.mean(predicted == y))


def plain_loop_accuracy(build: object, data: Path, *, standardize: bool, seed: int) -> float:
    """One process, plain PyTorch: SGD with momentum over shuffled batches of the global batch
    for the planned epochs, on the rows standardized per feature with the training split's
    statistics (as scikit-learn's StandardScaler) or raw; the test split's accuracy."""
    x, y = np.load(data / "train" / "x.npy"), np.load(data / "train" / "y.npy")
    x_test, y_test = np.load(data / "test" / "x.npy"), np.load(data / "test" / "y.npy")
    if standardize:
        mean, std = x.mean(0), x.std(0)
        x, x_test = (x - mean) / std, (x_test - mean) / std
    torch.manual_seed(seed)
    model = build(2, [FEATURES])  # type: ignore[operator]
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    rows, labels = torch.from_numpy(x).float(), torch.from_numpy(y)
    order = torch.Generator().manual_seed(seed)
    for _ in range(EPOCHS):
        for batch in torch.randperm(len(rows), generator=order).split(GLOBAL_BATCH):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(rows[batch]), labels[batch]).backward()
            optimizer.step()
    return _accuracy(model.eval(), x_test, y_test)
