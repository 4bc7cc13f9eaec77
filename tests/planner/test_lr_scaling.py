"""The learning rate follows the global batch: the recipe's base batch, the scaling rules, the
warm-up that goes with them, and the plan fields that carry them to the runtime."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fasdl.contract.plan import Plan, PlanError
from planner.model.inputs.recipe import Recipe, describe_learning_rate
from tests.planner.cli_helpers import TEXT, cli
from tests.planner.resnet_plan import make_plan

GLOBAL_BATCH = 4 * 128 + 3 * 170  # resnet_plan's plan: K=4 of W=7
NEW_FIELDS = {"lr_scaling", "base_learning_rate", "base_batch", "warmup_start_learning_rate",
              "hap_merge"}


def test_linear_scaling_and_its_warm_up_by_hand() -> None:
    # 0.05 tuned at 16, global batch 64 (k = 4): 0.2, warmed up from 0.05 over 5 epochs of 20
    # iterations, which is less than a quarter of the 1,000-iteration run
    fields = Recipe(learning_rate=0.05, base_batch=16).training_fields(64, 20, 1000)
    assert (fields["learning_rate"], fields["lr_scaling"], fields["base_learning_rate"],
            fields["base_batch"]) == (0.2, "linear", 0.05, 16)
    assert (fields["warmup_iterations"], fields["warmup_start_learning_rate"]) == (100, 0.05)
    # a short run: the warm-up takes at most a quarter of it
    assert Recipe(learning_rate=0.05, base_batch=16).training_fields(
        64, 20, 40)["warmup_iterations"] == 10


def test_sqrt_none_and_smaller_batches() -> None:
    sqrt = Recipe(learning_rate=0.05, base_batch=16, lr_scaling="sqrt").training_fields(
        64, 20, 1000)
    assert sqrt["learning_rate"] == pytest.approx(0.1)
    unscaled = Recipe(learning_rate=0.05, base_batch=16, lr_scaling="none").training_fields(
        64, 20, 1000)
    assert unscaled["learning_rate"] == 0.05 and "lr_scaling" not in unscaled
    # a smaller batch lowers the rate and needs no warm-up
    smaller = Recipe(learning_rate=0.05, base_batch=64).training_fields(16, 20, 1000)
    assert smaller["learning_rate"] == 0.0125 and smaller["warmup_iterations"] == 0
    assert "warmup_start_learning_rate" not in smaller
    # the recipe's own warm-up (from zero) stays where it is the longer one
    own = Recipe(learning_rate=0.05, base_batch=16, warmup_fraction=0.2).training_fields(
        64, 20, 1000)
    assert own["warmup_iterations"] == 200 and "warmup_start_learning_rate" not in own


def test_the_plan_carries_the_scaled_rate_and_the_merge_and_prints_them(tmp_path: Path
                                                                         ) -> None:
    code, out, err = cli("plan", *TEXT, "--base-batch", "16", "--hap-merge", "paper",
                         "--out", str(tmp_path / "plan.json"))
    assert code == 0, err
    plan = Plan.load(tmp_path / "plan.json")
    t = plan.training
    assert (t.lr_scaling, t.base_batch, t.base_learning_rate, t.hap_merge) == (
        "linear", 16, 0.0003, "paper")
    assert math.isclose(t.learning_rate, 0.0003 * plan.global_batch / 16)
    assert t.warmup_start_learning_rate == 0.0003 and t.warmup_iterations > 0
    assert (f"learning rate {t.learning_rate:g}: linear scaling of 0.0003 tuned at global "
            f"batch 16, warm-up over {t.warmup_iterations} iterations from 0.0003") in out


def test_without_a_base_batch_the_plan_is_the_old_one_and_says_so() -> None:
    code, out, err = cli("plan", *TEXT, "--json")
    assert code == 0, err
    training = json.loads(out)["plan"]["training"]
    assert not NEW_FIELDS & set(training)
    assert training["learning_rate"] == 0.0003
    line = describe_learning_rate(Plan.from_dict(json.loads(out)["plan"]).training)
    assert "learning rate 0.0003 as given" in line and "not scaled" in line


@pytest.mark.parametrize(("flag", "value"), [("--base-batch", "0"), ("--lr-scaling", "cubic"),
                                             ("--hap-merge", "average")])
def test_a_bad_scaling_flag_exits_2_naming_it(flag: str, value: str) -> None:
    code, _, err = cli("plan", *TEXT, flag, value)
    assert code == 2 and flag in err, err


def test_the_contract_recomputes_the_rule() -> None:
    scaled = make_plan(lr_scaling="linear", base_learning_rate=0.05, base_batch=256,
                       learning_rate=0.05 * GLOBAL_BATCH / 256)
    assert Plan.from_json(scaled.to_json()) == scaled
    with pytest.raises(PlanError) as error:
        make_plan(lr_scaling="sqrt", base_learning_rate=0.05, base_batch=256, learning_rate=0.2)
    assert error.value.field == "training.learning_rate"
    assert f"{0.05 * math.sqrt(GLOBAL_BATCH / 256)!r}" in str(error.value)
    with pytest.raises(PlanError) as error:
        make_plan(base_batch=256)  # lr_scaling none
    assert error.value.field == "training.base_batch"
    with pytest.raises(PlanError) as error:
        make_plan(lr_scaling="linear", base_batch=256)
    assert error.value.field == "training.base_learning_rate"
    with pytest.raises(PlanError) as error:
        make_plan(hap_merge="mean")
    assert error.value.field == "training.hap_merge"


def test_an_old_plan_reads_and_writes_as_before() -> None:
    plan = make_plan()
    written = json.loads(plan.to_json())["training"]
    assert not NEW_FIELDS & set(written)
    assert Plan.from_dict(json.loads(plan.to_json())).training.hap_merge == "reapply"
