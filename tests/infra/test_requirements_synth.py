"""workload.requirements at the synth: the layer that layers/torch/requirements_layer.py built
(run for real here, from a wheel made on the spot) is attached to the functions that import
the user's code, and the emulator puts it on their path; a missing, stale, other-target or
oversized layer stops the synth naming the field and the command that builds it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from fasdl.contract.plan import PlanError
from fasdl.contract.requirements import LOCAL_LAYERS_ENV, REQUIREMENTS_MANIFEST, local_layer_dir
from infra.lambda_runtime import PYTHON_RUNTIME, lambda_target
from infra.settings import LAYER_MANIFEST, SynthSettingsError, load_settings
from infra.stack import build_stacks
from infra.user_code import REQUIREMENTS_LAYER_ID
from local.aws.template import load_template
from tests.infra.app_process import synth_app
from tests.infra.conftest import REPO_ROOT, STUB_TORCH_LAYER, cdk_context
from tests.layer.wheels import make_wheel

BUILD = REPO_ROOT / "layers" / "torch" / "requirements_layer.py"
MODEL = ("import fasdl_test_extra\nfrom torch import nn\n\ndef build(num_classes, input_shape):\n"
         "    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))\n")


def _torch_layer(folder: Path) -> Path:
    """A finished torch layer build for the functions' target, reduced to its manifest."""
    target = lambda_target("x86_64")
    folder.mkdir(parents=True)
    (folder / LAYER_MANIFEST).write_text(json.dumps({
        "arch": "x86_64", "runtime": PYTHON_RUNTIME, "python": target.abi, "sha256": "1" * 64,
        "unpacked_bytes": 482_800_000}))
    return folder


def _plan(tmp_path: Path, requirements: str) -> Path:
    data: dict[str, Any] = json.loads((REPO_ROOT / "infra" / "default_plan.json").read_text())
    data["workload"]["requirements"] = requirements
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    return path


def _built(tmp_path: Path) -> dict[str, Path]:
    """A requirements file, the torch layer and the requirements layer built from them."""
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "fasdl-test-extra", "1.0", {"fasdl_test_extra/__init__.py": b"VALUE = 1\n"})
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("fasdl-test-extra==1.0\n")
    torch_layer = _torch_layer(tmp_path / "torch-layer")
    out = tmp_path / "requirements-layer"
    result = subprocess.run([sys.executable, str(BUILD), "--requirements", str(requirements),
                             "--torch-layer", str(torch_layer), "--out", str(out),
                             "--find-links", str(wheels)],
                            capture_output=True, text=True, timeout=180, check=False)
    assert result.returncode == 0, result.stderr
    return {"requirements": requirements, "torch_layer": torch_layer, "layer": out,
            "plan": _plan(tmp_path, str(requirements))}


def _settings(built: dict[str, Path], **context: str) -> Any:
    return load_settings({"plan": str(built["plan"]), "torch_layer": str(built["torch_layer"]),
                          "requirements_layer": str(built["layer"]), **context}, warn=False)


def test_the_layer_is_attached_and_on_the_emulated_path(tmp_path: Path) -> None:
    built = _built(tmp_path)
    settings = _settings(built)
    assert settings.requirements_layer_dir == built["layer"]
    outdir = tmp_path / "cdk.out"
    # the CLI's default, which local/aws/template.py reads the staged asset folders by
    app = cdk.App(context={**cdk_context(), "aws:cdk:enable-asset-metadata": True},
                  outdir=str(outdir))
    stack, _ = build_stacks(app, settings)
    app.synth()
    template_path = outdir / f"{stack.stack_name}.template.json"
    resources = json.loads(template_path.read_text())["Resources"]
    (layer_id,) = [key for key, value in resources.items()
                   if value["Type"] == "AWS::Lambda::LayerVersion"
                   and REQUIREMENTS_LAYER_ID in key]
    handlers = {value["Properties"]["Handler"]: value["Properties"]
                for value in resources.values() if value["Type"] == "AWS::Lambda::Function"
                and str(value["Properties"].get("Handler", "")).startswith("handlers.")}
    for name in ("worker", "finalize", "profiler"):
        assert {"Ref": layer_id} in handlers[f"handlers.{name}.handler"]["Layers"], name
    local = load_template(template_path, region=settings.plan.deployment.region)
    worker = next(f for f in local.functions.values() if f.handler == "handlers.worker.handler")
    (python,) = worker.layer_python
    assert (python / "fasdl_test_extra" / "__init__.py").is_file()


def test_a_stale_missing_or_other_target_layer_stops_the_synth(tmp_path: Path) -> None:
    built = _built(tmp_path)
    with pytest.raises(SynthSettingsError, match=r"no built layer of .* build it with `python "
                                                 r"layers/torch/requirements_layer\.py"):
        _settings(built, requirements_layer=str(tmp_path / "absent"))
    manifest = built["layer"] / REQUIREMENTS_MANIFEST
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "python": "cp311"}))
    with pytest.raises(SynthSettingsError, match=r"is for \['x86_64', 'python3.12', 'cp311'\]"):
        _settings(built)
    manifest.write_text(json.dumps(data))
    built["requirements"].write_text("fasdl-test-extra==1.0\n# changed\n")
    with pytest.raises(SynthSettingsError, match="built from another version of"):
        _settings(built)


def test_layers_over_lambdas_limit_stop_the_synth(tmp_path: Path) -> None:
    built = _built(tmp_path)
    with open(built["layer"] / "python" / "big.bin", "wb") as sparse:  # no disk: a hole
        sparse.truncate(262_144_000)
    with pytest.raises(SynthSettingsError, match="over Lambda's limit of 262,144,000"):
        _settings(built)


def test_with_the_stand_in_torch_layer_the_local_layer_is_added(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Local runs: the same pins, built for this machine's Python (what the emulated functions
    put on their path), whatever requirements_layer says."""
    built = _built(tmp_path)
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "wheels"))
    monkeypatch.setenv(LOCAL_LAYERS_ENV, str(tmp_path / "local-layers"))
    settings = load_settings({"plan": str(built["plan"]), "torch_layer": str(STUB_TORCH_LAYER),
                              "requirements_layer": str(tmp_path / "absent")}, warn=False)
    assert settings.requirements_layer_dir == local_layer_dir(built["requirements"])
    assert (settings.requirements_layer_dir / "python" / "fasdl_test_extra").is_dir()


@pytest.mark.parametrize("value", ["../requirements.txt", "requirements.cfg", ""])
def test_the_field_is_a_requirements_file_path(tmp_path: Path, value: str) -> None:
    with pytest.raises(PlanError, match=r"workload\.requirements"):
        load_settings({"plan": str(_plan(tmp_path, value)),
                       "torch_layer": str(STUB_TORCH_LAYER)}, warn=False)


def test_the_app_stops_with_one_line_on_a_bad_requirements_file(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("fasdl-test-extra>=1\n")
    plan = _plan(tmp_path, str(tmp_path / "requirements.txt"))
    result = synth_app(plan, tmp_path / "cdk.out")
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("fasdl: invalid synth input: plan field 'workload.requirements':"
                               f" {tmp_path}/requirements.txt:1: 'fasdl-test-extra>=1' is not an "
                               "exact pin")
