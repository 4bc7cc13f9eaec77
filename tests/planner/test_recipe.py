"""The training recipe: from the workload file or the command line into the plan, and the
optimizer's state into the memory model."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from fasdl.contract.plan import Plan
from planner.model.inputs.profiles import ProfileError, WorkloadProfile, load_workload
from planner.model.inputs.recipe import Recipe
from tests.planner.cli_helpers import TEXT, cli


def test_the_workloads_recipe_goes_into_the_plan(tmp_path: Path) -> None:
    code, _, err = cli("plan", *TEXT, "--out", str(tmp_path / "plan.json"))
    assert code == 0, err
    plan = Plan.load(tmp_path / "plan.json")
    recipe = load_workload("bert-mini-textset").recipe
    t = plan.training
    assert (t.optimizer, t.learning_rate, t.lr_schedule) == (
        recipe.optimizer, recipe.learning_rate, recipe.lr_schedule) == ("adamw", 0.0003, "linear")
    assert t.warmup_iterations == round(recipe.warmup_fraction * plan.total_iterations) > 0


def test_flags_override_the_recipe(tmp_path: Path) -> None:
    code, out, err = cli("plan", *TEXT, "--optimizer", "sgd", "--learning-rate", "0.2",
                         "--lr-schedule", "cosine", "--warmup-fraction", "0", "--json")
    assert code == 0, err
    training: dict[str, Any] = json.loads(out)["plan"]["training"]
    assert (training["optimizer"], training["learning_rate"], training["lr_schedule"],
            training["warmup_iterations"]) == ("sgd", 0.2, "cosine", 0)


@pytest.mark.parametrize(("flag", "value", "allowed"), [
    ("--learning-rate", "0", "(0.0, 10.0]"), ("--warmup-fraction", "1.5", "[0.0, 1.0]"),
    ("--momentum", "1", "[0.0, 1.0)"), ("--weight-decay", "-1", "[0.0, 1.0]")])
def test_a_bad_recipe_flag_exits_2_naming_it(flag: str, value: str, allowed: str) -> None:
    code, _, err = cli("plan", *TEXT, flag, value)
    assert code == 2 and flag in err and allowed in err, err


def test_adamw_holds_one_more_model_in_every_worker() -> None:
    workload = load_workload("resnet50-cifar10")
    adamw = dataclasses.replace(workload, recipe=Recipe(optimizer="adamw"))
    assert workload.recipe.optimizer == "sgd"
    assert float(adamw.min_memory(64)) == pytest.approx(
        float(workload.min_memory(64)) + workload.model_mb)
    assert int(adamw.max_batch(3008)) < int(workload.max_batch(3008))


def test_adamw_plans_memory_for_its_second_moment() -> None:
    memory = {}
    for optimizer in ("sgd", "adamw"):
        code, out, err = cli("plan", "--workload", "bert-base-cola", "--deadline", "2500",
                             "--max-global-batch", "640", "--epochs", "3",
                             "--optimizer", optimizer, "--pattern", "kreduce", "--json")
        assert code == 0, err
        plan = json.loads(out)["plan"]
        memory[optimizer] = plan["deployment"]["memory_mb"]
        assert plan["training"]["optimizer"] == optimizer
        workload = load_workload("bert-base-cola")
        workload = dataclasses.replace(workload, recipe=Recipe(optimizer=optimizer))
        batch = max(plan["training"]["batch_aggregator"], plan["training"]["batch_non_aggregator"])
        assert float(workload.min_memory(batch)) <= memory[optimizer]
        if optimizer == "adamw":  # AdamW's second moment is planned for
            sgd = dataclasses.replace(workload, recipe=Recipe(optimizer="sgd"))
            assert float(workload.min_memory(batch)) > float(sgd.min_memory(batch))


def test_a_bad_recipe_in_a_workload_file_names_its_field(tmp_path: Path) -> None:
    data = load_workload("cnn-digits").to_dict()
    data["recipe"] = {"optimizer": "adam"}
    path = tmp_path / "workload.json"
    path.write_text(json.dumps(data))
    code, _, err = cli("plan", "--workload", str(path), "--deadline", "900",
                       "--max-global-batch", "64", "--epochs", "3")
    assert code == 2 and "recipe.optimizer" in err and "sgd, adamw" in err, err
    data["recipe"] = {"optimiser": "sgd"}
    with pytest.raises(ProfileError, match=r"recipe\.optimiser"):
        WorkloadProfile.from_dict(data)
    assert WorkloadProfile.from_dict(load_workload("cnn-digits").to_dict()).recipe == Recipe()
