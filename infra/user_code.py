"""The user's own code (a model builder, a loss) as a Lambda layer: the file, or its whole
package, under the layer's ``python/`` folder, which Lambda puts on ``sys.path``; and the
``{reference: module}`` map the functions import it by (fasdl.contract.user_code)."""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fasdl.contract.plan import Plan
from fasdl.contract.settings import USER_MODULES_ENV
from fasdl.contract.user_code import ModelRef, code_location
from infra.lambda_runtime import tree_bytes

# Lambda's limit on a function's unzipped code and layers together; the user's code is small,
# but a folder the user did not mean to ship (data beside the model file) is refused here.
MAX_USER_CODE_BYTES = 50 * 2**20
SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")
# The layer's construct id: local/aws/template.py puts its python/ on the emulated PYTHONPATH
USER_CODE_LAYER_ID = "UserCodeLayer"
# The layer of workload.requirements (layers/torch/requirements_layer.py builds it)
REQUIREMENTS_LAYER_ID = "RequirementsLayer"


@dataclass(frozen=True)
class UserCode:
    staging: Path  # holds python/<module or package>
    modules: dict[str, str]  # reference -> module

    @property
    def environment(self) -> dict[str, str]:
        return {USER_MODULES_ENV: json.dumps(self.modules, sort_keys=True)}


def _references(plan: Plan) -> list[tuple[str, ModelRef]]:
    """(field, reference) of every ``file.py:function`` the plan names."""
    named = [("workload.model", plan.workload.model_ref),
             ("workload.loss", plan.workload.loss_ref)]
    return [(field, ref) for field, ref in named if ref.code is not None]


def stage_user_code(plan: Plan) -> UserCode | None:
    """Copy the plan's own code into a staging folder for the layer; None without any.
    Raises fasdl.contract.user_code.UserCodeError naming the field."""
    references = _references(plan)
    if not references:
        return None
    staging = Path(tempfile.mkdtemp(prefix="fasdl-user-code-"))
    target = staging / "python"
    target.mkdir()
    modules: dict[str, str] = {}
    for field, reference in references:
        assert reference.file is not None  # _references keeps the user's code only
        location = code_location(Path(reference.file), field)
        if tree_bytes(location.shipped) > MAX_USER_CODE_BYTES:
            raise ValueError(f"{field}: {location.shipped} holds more than "
                             f"{MAX_USER_CODE_BYTES // 2**20} MB; ship only the code")
        destination = target / location.shipped.name
        if location.shipped.is_dir():
            shutil.copytree(location.shipped, destination, ignore=SKIPPED, dirs_exist_ok=True)
        else:
            shutil.copy2(location.shipped, destination)
        modules[reference.name] = location.module
    return UserCode(staging=staging, modules=modules)
