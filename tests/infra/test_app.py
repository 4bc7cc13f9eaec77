"""app.py and synth settings: default plan, plan errors before any resource, layer fallback,
packaging options, and one real offline `npx cdk synth`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fasdl.contract.plan import Plan, PlanError
from infra.compute import plan_environment
from infra.lambda_runtime import PYTHON_RUNTIME, TORCH_TMP_RESERVE_MB, lambda_target
from infra.settings import (
    DEFAULT_PLAN_PATH,
    LAYER_MANIFEST,
    REPO_ROOT,
    STUB_TORCH_LAYER,
    SynthSettingsError,
    load_settings,
)
from infra.stack import STAND_IN_REFUSAL
from tests.infra.conftest import PLANS, Synth, synthesize

OFFLINE_ENV = {
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    "CDK_DISABLE_VERSION_CHECK": "1",
    "CDK_DISABLE_CLI_TELEMETRY": "true",
}


def _env(**extra: str) -> dict[str, str]:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, **OFFLINE_ENV, "PATH": path, **extra}


def _bad_plan(tmp_path: Path) -> tuple[Path, str]:
    data = json.loads(DEFAULT_PLAN_PATH.read_text())
    data["deployment"]["workers"] = 0
    path = tmp_path / "bad_plan.json"
    path.write_text(json.dumps(data))
    with pytest.raises(PlanError) as caught:
        Plan.load(path)
    return path, str(caught.value)


def test_default_plan_is_the_documented_small_job() -> None:
    settings = load_settings({}, warn=False)
    deployment = settings.plan.deployment
    assert settings.plan_path == DEFAULT_PLAN_PATH
    assert (deployment.workers, deployment.channel, deployment.arch) == (4, "s3", "x86_64")


def test_invalid_plan_raises_plan_error(tmp_path: Path) -> None:
    path, message = _bad_plan(tmp_path)
    with pytest.raises(PlanError, match=r"deployment\.workers"):
        load_settings({"plan": str(path)})
    assert "deployment.workers" in message


def test_app_fails_with_plan_message_before_building(tmp_path: Path) -> None:
    path, message = _bad_plan(tmp_path)
    context = json.dumps({"plan": str(path)})
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "app.py")], cwd=REPO_ROOT, capture_output=True,
        text=True, timeout=120, check=False,
        env=_env(CDK_CONTEXT_JSON=context, CDK_OUTDIR=str(tmp_path / "out")))
    assert result.returncode == 2
    assert message in result.stderr
    assert not (tmp_path / "out" / "FasdlStack.template.json").exists()


def test_missing_layer_falls_back_to_stub(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    settings = load_settings({"torch_layer": str(tmp_path / "nope")})
    assert settings.torch_layer_is_stub
    assert settings.torch_layer_dir == STUB_TORCH_LAYER
    warning = capsys.readouterr().err
    assert "WARNING" in warning and "make layer" in warning and "NOT have torch" in warning


def _built_layer(folder: Path, **manifest: object) -> Path:
    """A layer directory with a build manifest, as layers/torch/build.py leaves it."""
    folder.mkdir(parents=True, exist_ok=True)
    fields = {"arch": "x86_64", "runtime": PYTHON_RUNTIME, "python": lambda_target("x86_64").abi,
              "unpacked_bytes": 482_800_000, **manifest}
    (folder / LAYER_MANIFEST).write_text(json.dumps(fields))
    return folder


def test_layer_for_other_arch_is_an_error(tmp_path: Path) -> None:
    _built_layer(tmp_path, arch="arm64", python=lambda_target("arm64").abi)
    settings = load_settings({"torch_layer": str(tmp_path),
                              "plan": str(PLANS / "valkey_arm64.json")})
    assert not settings.torch_layer_is_stub
    with pytest.raises(SynthSettingsError, match="--arch x86_64"):
        load_settings({"torch_layer": str(tmp_path)})


@pytest.mark.parametrize(("runtime", "python"), [
    (PYTHON_RUNTIME, "cp311"),     # a test-only --python-override build
    ("python3.11", "cp311"),       # an old build for the Amazon Linux 2 runtime
])
def test_layer_for_another_runtime_or_abi_is_an_error(tmp_path: Path, runtime: str,
                                                      python: str) -> None:
    layer = _built_layer(tmp_path, runtime=runtime, python=python)
    with pytest.raises(SynthSettingsError, match=rf"{python}.*{PYTHON_RUNTIME} \(cp312"):
        load_settings({"torch_layer": str(layer)})


def test_layer_that_does_not_fit_the_tmp_reserve_is_an_error(tmp_path: Path) -> None:
    layer = _built_layer(tmp_path, unpacked_bytes=(TORCH_TMP_RESERVE_MB + 1) * 2**20)
    with pytest.raises(SynthSettingsError, match="TORCH_TMP_RESERVE_MB"):
        load_settings({"torch_layer": str(layer)})


def test_stand_in_layer_template_cannot_be_deployed(s3_synth: Synth, tmp_path: Path) -> None:
    """CloudFormation evaluates template rules before touching any resource: a stand-in
    template carries a rule that always fails, with the reason; a built layer's has none.
    The stand-in template is the session's default-plan synth (one synth fewer)."""
    stub = s3_synth.json
    (rule,) = stub["Rules"]["RefuseStandInTorchLayer"]["Assertions"]
    assert rule["AssertDescription"] == STAND_IN_REFUSAL
    assert rule["Assert"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "TorchLayer"}, "stand-in"]}]}
    assert stub["Parameters"]["TorchLayer"]["AllowedValues"] == ["stand-in"]
    built = synthesize("built", DEFAULT_PLAN_PATH,
                       torch_layer=str(_built_layer(tmp_path / "dist"))).json
    assert "RefuseStandInTorchLayer" not in built.get("Rules", {})
    assert "TorchLayer" not in built.get("Parameters", {})


def test_unknown_packaging_is_an_error() -> None:
    with pytest.raises(SynthSettingsError, match="worker_packaging"):
        load_settings({"worker_packaging": "jar"}, warn=False)


def test_plan_environment_has_a_size_cap() -> None:
    data = json.loads(DEFAULT_PLAN_PATH.read_text())
    data["provenance"] = {"notes": "x" * 4000}
    with pytest.raises(ValueError, match="provenance"):
        plan_environment(Plan.from_dict(data))


@pytest.mark.slow
def test_image_packaging_builds_a_container_worker() -> None:
    synth = synthesize("image", DEFAULT_PLAN_PATH, worker_packaging="image")
    workers = [f["Properties"] for f in synth.resources("AWS::Lambda::Function").values()
               if "ImageUri" in f["Properties"]["Code"]]
    assert len(workers) == 1
    (worker,) = workers
    assert worker["PackageType"] == "Image"
    assert worker["ImageConfig"]["Command"] == ["handlers.worker.handler"]
    assert "Layers" not in worker
    assert worker["MemorySize"] == synth.settings.plan.deployment.memory_mb


@pytest.mark.slow
def test_cdk_cli_synth_offline(tmp_path: Path) -> None:
    # CI must run the real CLI: a machine without npx fails here, it does not skip.
    assert shutil.which("npx"), "npx not found: install Node.js/npm (make setup runs npm ci)"
    plan = PLANS / "valkey_arm64.json"
    result = subprocess.run(
        ["npx", "--no-install", "cdk", "synth", "--no-notices", "-q", "-o", str(tmp_path),
         "-c", f"plan={plan}", "-c", f"torch_layer={STUB_TORCH_LAYER}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False, env=_env())
    assert result.returncode == 0, result.stdout + result.stderr
    template = json.loads((tmp_path / "FasdlStack.template.json").read_text())
    kinds = {resource["Type"] for resource in template["Resources"].values()}
    assert "AWS::StepFunctions::StateMachine" in kinds
    # Valkey plans: the cache in a stack of its own, destroyed between runs
    cache = json.loads((tmp_path / "FasdlCacheStack.template.json").read_text())
    assert {resource["Type"] for resource in cache["Resources"].values()} - {
        "AWS::CDK::Metadata"} == {"AWS::ElastiCache::ServerlessCache"}


@pytest.mark.parametrize("value", ["0", "41", "four", "2.5", True])
def test_inline_map_max_workers_out_of_range_is_refused(value: object) -> None:
    with pytest.raises(SynthSettingsError, match=r"inline_map_max_workers.*1 to 40"):
        load_settings({"inline_map_max_workers": value}, warn=False)


@pytest.mark.parametrize(("value", "expected"), [(None, 40), ("4", 4), (1, 1), ("40", 40)])
def test_inline_map_max_workers_parsed(value: object, expected: int) -> None:
    settings = load_settings({"inline_map_max_workers": value}, warn=False)
    assert settings.inline_map_max_workers == expected


@pytest.mark.parametrize(("value", "expected"),
                         [(None, False), ("true", True), ("False", False), (True, True)])
def test_reserve_concurrency_flag(value: object, expected: bool) -> None:
    assert load_settings({"reserve_concurrency": value}, warn=False).reserve_concurrency \
        is expected


def test_reserve_concurrency_typo_is_refused() -> None:
    with pytest.raises(SynthSettingsError, match=r"reserve_concurrency.*true or false"):
        load_settings({"reserve_concurrency": "yes please"}, warn=False)
