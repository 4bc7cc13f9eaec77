"""The container image option installs what the zip layer carries, on the same runtime.

Docker cannot run here, so these tests read the Dockerfile: its base tag is the Lambda
runtime's own image, torch comes from the CPU index at the project's pin, and the handlers'
dependencies are exactly the one list (functions/requirements.txt) the layer installs too.
"""

from __future__ import annotations

import re
import tomllib

from infra.compute import IMAGE_INCLUDES
from infra.lambda_runtime import PYTHON_RUNTIME, image_tag
from infra.settings import DOCKERFILE, REPO_ROOT

REQUIREMENTS = REPO_ROOT / "functions" / "requirements.txt"


def _dockerfile() -> str:
    return (REPO_ROOT / DOCKERFILE).read_text()


def _pins(lines: list[str]) -> dict[str, str]:
    pins = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.lower()] = version
    return pins


def test_base_image_is_the_lambda_runtime() -> None:
    (default,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", _dockerfile(), re.MULTILINE)
    assert default == image_tag() == f"public.ecr.aws/lambda/python:{PYTHON_RUNTIME[6:]}"
    assert re.search(r"^FROM \$\{PYTHON_IMAGE\}$", _dockerfile(), re.MULTILINE)


def test_torch_is_the_cpu_build_at_the_project_pin() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    torch_pin = _pins([d for d in project["dependencies"] if d.startswith("torch==")])
    (line,) = [line for line in _dockerfile().splitlines() if "pip install" in line
               and "torch==" in line]
    assert f"torch=={torch_pin['torch']}" in line
    assert "--index-url ${TORCH_INDEX_URL}" in line
    assert re.search(r"^ARG TORCH_INDEX_URL=https://download\.pytorch\.org/whl/cpu$",
                     _dockerfile(), re.MULTILINE)


def test_image_installs_exactly_the_runtime_requirements() -> None:
    text = _dockerfile()
    assert "COPY functions/requirements.txt /tmp/fasdl-requirements.txt" in text
    assert "pip install --no-cache-dir -r /tmp/fasdl-requirements.txt" in text
    # No other package is installed by name beside torch: the list lives in one place.
    named = re.findall(r"\b([A-Za-z0-9_.-]+)==", text)
    assert named == ["torch"], named
    # The build context keeps functions/ (and so the requirements file).
    assert "!functions" in IMAGE_INCLUDES


def test_runtime_requirements_are_pinned_as_in_pyproject() -> None:
    required = _pins(REQUIREMENTS.read_text().splitlines())
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    pinned = _pins(project["dependencies"])
    assert {"numpy", "redis", "aws-lambda-powertools", "google-crc32c", "boto3",
            "botocore"} <= set(required)
    for name, version in required.items():
        assert pinned.get(name) == version, f"{name}: {version} here, {pinned.get(name)} in " \
                                            "pyproject.toml"

