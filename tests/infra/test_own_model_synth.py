"""A plan of the user's own model at the synth: the file ships as a layer the functions import it
from (``FASDL_USER_MODULES``), and a model the workers could not build stops the synth with
one line naming the field (exit 2), before anything is staged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infra.user_code import USER_CODE_LAYER_ID
from tests.infra.app_process import synth_app
from tests.infra.conftest import REPO_ROOT, STUB_TORCH_LAYER, synthesize

MODEL = ("from torch import nn\n\ndef build(num_classes, input_shape):\n"
         "    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))\n")


def _plan(tmp_path: Path, model: str) -> Path:
    data: dict[str, Any] = json.loads((REPO_ROOT / "infra" / "default_plan.json").read_text())
    data["workload"].update(model=model, input_shape=[1, 8, 8], classes=10,
                            model_mb=round(650 * 4 / 2**20, 4))
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    return path


def test_the_users_model_ships_as_a_layer(tmp_path: Path) -> None:
    (tmp_path / "tiny_model.py").write_text(MODEL)
    reference = f"{tmp_path}/tiny_model.py:build"
    synth = synthesize("own_model", _plan(tmp_path, reference))
    resources = synth.json["Resources"]
    layers = {key: value for key, value in resources.items()
              if value["Type"] == "AWS::Lambda::LayerVersion" and USER_CODE_LAYER_ID in key}
    assert len(layers) == 1
    (layer_id,) = layers
    functions = {key: value["Properties"] for key, value in resources.items()
                 if value["Type"] == "AWS::Lambda::Function"
                 and "Handler" in value["Properties"]
                 and value["Properties"]["Handler"].startswith("handlers.")}
    for name in ("worker", "finalize", "profiler"):
        (props,) = [p for p in functions.values() if p["Handler"] == f"handlers.{name}.handler"]
        assert {"Ref": layer_id} in props["Layers"], name
        modules = json.loads(props["Environment"]["Variables"]["FASDL_USER_MODULES"])
        assert modules == {reference: "tiny_model"}



@pytest.mark.parametrize(("model", "message"), [
    ("{dir}/tiny_model.py:absent", "workload.model: {dir}/tiny_model.py has no function "
                                   "'absent'"),
    ("{dir}/missing.py:build", "workload.model: file {dir}/missing.py not found"),
    ("mynet", "plan field 'workload.model': unknown model 'mynet'"),
])
def test_a_model_the_workers_could_not_build_stops_the_synth(tmp_path: Path, model: str,
                                                             message: str) -> None:
    (tmp_path / "tiny_model.py").write_text(MODEL)
    out = tmp_path / "cdk.out"
    result = synth_app(_plan(tmp_path, model.format(dir=tmp_path)), out)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"fasdl: invalid synth input: {message.format(dir=tmp_path)}")
    assert not out.exists() or not any(out.iterdir())


def _workload_file(tmp_path: Path, **changes: Any) -> Path:
    """A workload as `python -m planner workload new` writes it: no compute coefficients."""
    data = {"name": "tiny", "model": f"{tmp_path}/tiny_model.py:build",
            "dataset": "datasets/tiny", "samples": 120, "dataset_mb": 0.01,
            "model_mb": round(650 * 4 / 2**20, 4), "input_shape": [1, 8, 8], "classes": 10,
            "recipe": {"augmentation": "none"}, "notes": "not profiled yet", **changes}
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({key: value for key, value in data.items()
                                if value is not None}))
    return path


def test_a_workload_not_planned_yet_ships_for_profiling_on_aws(tmp_path: Path) -> None:
    """`-c workload=FILE` deploys the code of a workload that has no plan yet (planning needs
    its profile): the default plan's deployment with that workload, no prediction."""
    (tmp_path / "tiny_model.py").write_text(MODEL)
    workload = _workload_file(tmp_path)
    synth = synthesize("workload_only", REPO_ROOT / "infra" / "default_plan.json",
                       {"profiling": "true"}, workload=str(workload))
    plan = synth.settings.plan
    default = json.loads((REPO_ROOT / "infra" / "default_plan.json").read_text())
    assert plan.workload.model == f"{tmp_path}/tiny_model.py:build"
    assert plan.workload.samples == 120 and plan.prediction is None
    assert plan.to_dict()["deployment"] == default["deployment"]
    assert plan.provenance["workload"] == f"-c workload={workload}"
    profilers = [value["Properties"] for value in synth.resources("AWS::Lambda::Function").values()
                 if value["Properties"].get("Handler") == "handlers.profiler.handler"]
    assert profilers
    for props in profilers:
        modules = json.loads(props["Environment"]["Variables"]["FASDL_USER_MODULES"])
        assert modules == {plan.workload.model: "tiny_model"}


def test_a_bad_workload_file_names_the_context_and_the_field(tmp_path: Path) -> None:
    (tmp_path / "tiny_model.py").write_text(MODEL)
    from infra.settings import SynthSettingsError, load_settings

    with pytest.raises(SynthSettingsError, match=r"context 'workload': .*workload\.classes"):
        load_settings({"workload": str(_workload_file(tmp_path, classes=None)),
                       "torch_layer": str(STUB_TORCH_LAYER)}, warn=False)
    with pytest.raises(SynthSettingsError, match="context 'workload': cannot read"):
        load_settings({"workload": str(tmp_path / "absent.json"),
                       "torch_layer": str(STUB_TORCH_LAYER)}, warn=False)
