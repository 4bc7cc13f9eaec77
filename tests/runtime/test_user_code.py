"""The user's own code in the runtime: a builder or loss imported from its file, from its
package (relative imports work), or as the module the synth shipped when the file's path does
not exist (Lambda); the workload's loss by name or reference."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from fasdl.contract.settings import USER_MODULES_ENV
from fasdl.contract.user_code import ModelRef, UserCodeError, code_location
from fasdl.contract.workload import Workload
from fasdl.training.losses import build_loss
from fasdl.training.networks import build_model
from fasdl.training.user_code import load_function

BUILDER = "from torch import nn\n\ndef build(num_classes, input_shape):\n" \
          "    return nn.Linear(input_shape[0], num_classes)\n"


@pytest.fixture(autouse=True)
def _clean_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test imports its own files: keep sys.path and sys.modules as they were."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))


def test_a_file_in_a_plain_folder_is_one_module(tmp_path: Path) -> None:
    (tmp_path / "plain_net.py").write_text(BUILDER)
    model = build_model(f"{tmp_path}/plain_net.py:build", 3, (5,))
    assert isinstance(model, nn.Linear) and model.weight.shape == (3, 5)
    location = code_location(tmp_path / "plain_net.py", "workload.model")
    assert (location.module, location.root, location.shipped) == (
        "plain_net", tmp_path.resolve(), (tmp_path / "plain_net.py").resolve())


def test_a_file_in_a_package_ships_and_imports_with_its_package(tmp_path: Path) -> None:
    package = tmp_path / "zoo_pkg" / "nets"
    package.mkdir(parents=True)
    (tmp_path / "zoo_pkg" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "blocks.py").write_text("WIDTH = 7\n")
    (package / "head.py").write_text(
        "from torch import nn\nfrom .blocks import WIDTH\n\n"
        "def build(num_classes, input_shape):\n    return nn.Linear(WIDTH, num_classes)\n")
    location = code_location(package / "head.py", "workload.model")
    assert location.module == "zoo_pkg.nets.head"
    assert location.shipped == (tmp_path / "zoo_pkg").resolve()
    model = build_model(f"{package}/head.py:build", 2, (1,))
    assert model.weight.shape == (2, 7)


def test_where_the_file_is_absent_the_shipped_module_is_imported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As in Lambda: the layer's python/ is on sys.path and FASDL_USER_MODULES maps the
    plan's reference to the module the synth shipped."""
    layer = tmp_path / "opt" / "python"
    layer.mkdir(parents=True)
    (layer / "shipped_net.py").write_text(BUILDER)
    monkeypatch.syspath_prepend(str(layer))
    reference = "models/shipped_net.py:build"  # the user's path, which Lambda does not have
    monkeypatch.setenv(USER_MODULES_ENV, json.dumps({reference: "shipped_net"}))
    assert build_model(reference, 4, (2,)).weight.shape == (4, 2)
    monkeypatch.setenv(USER_MODULES_ENV, "{}")
    with pytest.raises(UserCodeError, match=r"workload\.model: file models/shipped_net\.py "
                                            r"not found"):
        build_model(reference, 4, (2,))


@pytest.mark.parametrize(("source", "reference", "message"), [
    (BUILDER, "{dir}/ok_net.py:other", "has no function 'other'"),
    ("raise RuntimeError('broken on import')\n", "{dir}/ok_net.py:build",
     "importing {dir}/ok_net.py failed: RuntimeError: broken on import"),
    (BUILDER, "{dir}/torch.py:build", "rename it"),
])
def test_bad_user_code_is_named(tmp_path: Path, source: str, reference: str,
                                message: str) -> None:
    name = reference.split("/")[-1].split(":")[0]
    (tmp_path / name).write_text(source)
    with pytest.raises(UserCodeError, match=r"^workload\.model: ") as raised:
        load_function(ModelRef.parse(reference.format(dir=tmp_path), "workload.model"),
                      "workload.model")
    assert message.format(dir=tmp_path) in str(raised.value)


def _workload(loss: str) -> Workload:
    return Workload(name="w", model="mlp", dataset="d/x", samples=10, dataset_mb=1.0,
                    model_mb=1.0, loss=loss)


def test_losses_by_name_on_one_hot_targets() -> None:
    logits = torch.tensor([[2.0, -1.0, 0.5], [0.0, 1.0, -2.0]])
    labels = torch.tensor([0, 2])
    one_hot = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    assert torch.equal(build_loss(_workload("cross_entropy"))(logits, labels),
                       nn.functional.cross_entropy(logits, labels))
    assert torch.equal(build_loss(_workload("mse"))(logits, labels),
                       nn.functional.mse_loss(logits, one_hot))
    assert torch.equal(build_loss(_workload("bce"))(logits, labels),
                       nn.functional.binary_cross_entropy_with_logits(logits, one_hot))


def test_a_loss_of_the_users_own(tmp_path: Path) -> None:
    (tmp_path / "my_loss.py").write_text(
        "from torch import nn\n\ndef smooth():\n"
        "    return nn.CrossEntropyLoss(label_smoothing=0.1)\n\ndef wrong(x):\n    return x\n")
    logits, labels = torch.tensor([[1.0, 0.0]]), torch.tensor([1])
    loss = build_loss(_workload(f"{tmp_path}/my_loss.py:smooth"))
    assert torch.equal(loss(logits, labels),
                       nn.functional.cross_entropy(logits, labels, label_smoothing=0.1))
    with pytest.raises(UserCodeError, match=r"workload\.loss: wrong must be function"):
        build_loss(_workload(f"{tmp_path}/my_loss.py:wrong"))
