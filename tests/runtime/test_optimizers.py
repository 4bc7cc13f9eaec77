"""The workers' flat optimizers against torch's own, and the learning-rate schedule."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from fasdl.contract.plan import PlanError
from fasdl.training.networks import build_model
from fasdl.training.optimizers import FlatAdamW, FlatParameters, FlatSGD, LearningRateSchedule
from tests.runtime.kreduce_helpers import make_plan

INPUT_SHAPE = (1, 4, 4)
CLASSES = 3
CONSTANT = LearningRateSchedule(0.05)


def test_parameters_and_momentum_are_views_of_flat_buffers() -> None:
    model = build_model("cnn", CLASSES, INPUT_SHAPE)
    before = nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    flat = FlatParameters(model)
    assert torch.equal(flat.values, before)
    optimizer = FlatSGD(flat, LearningRateSchedule(0.1), 0.9, 0.0)
    model(torch.randn(2, *INPUT_SHAPE)).sum().backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    optimizer.step(0)
    assert torch.equal(optimizer.state["momentum"], grads)  # laid out like the parameters
    torch.testing.assert_close(flat.values, before - 0.1 * grads)
    flat.values.zero_()
    assert all(float(p.detach().abs().sum()) == 0.0 for p in model.parameters())


def _train_both(model: nn.Module, flat_optimizer: FlatSGD | FlatAdamW,
                reference: nn.Module, torch_optimizer: torch.optim.Optimizer) -> None:
    for iteration in range(4):
        x, y = torch.randn(5, *INPUT_SHAPE), torch.randint(0, CLASSES, (5,))
        for net, opt in ((model, flat_optimizer), (reference, torch_optimizer)):
            opt.zero_grad()
            nn.CrossEntropyLoss()(net(x), y).backward()
            if isinstance(opt, torch.optim.Optimizer):
                opt.step()
            else:
                opt.step(iteration)


def test_flat_sgd_matches_torch_sgd_bitwise() -> None:
    torch.manual_seed(0)
    model = build_model("cnn", CLASSES, INPUT_SHAPE)
    reference = copy.deepcopy(model)
    flat = FlatParameters(model)
    torch_sgd = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9,
                                weight_decay=1e-3)
    _train_both(model, FlatSGD(flat, CONSTANT, 0.9, 1e-3), reference, torch_sgd)
    expected = nn.utils.parameters_to_vector(reference.parameters()).detach()
    assert torch.equal(flat.values, expected)


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_flat_adamw_matches_torch_adamw_bitwise(weight_decay: float) -> None:
    torch.manual_seed(1)
    model = build_model("cnn", CLASSES, INPUT_SHAPE)
    reference = copy.deepcopy(model)
    flat = FlatParameters(model)
    adamw = FlatAdamW(flat, LearningRateSchedule(0.003), (0.9, 0.98), 1e-6, weight_decay)
    torch_adamw = torch.optim.AdamW(reference.parameters(), lr=0.003, betas=(0.9, 0.98),
                                    eps=1e-6, weight_decay=weight_decay, foreach=True)
    _train_both(model, adamw, reference, torch_adamw)
    expected = nn.utils.parameters_to_vector(reference.parameters()).detach()
    assert torch.equal(flat.values, expected)
    exp_avg = torch.cat([torch_adamw.state[p]["exp_avg"].flatten()
                         for p in reference.parameters()])
    assert torch.equal(adamw.state["exp_avg"], exp_avg)


@pytest.mark.parametrize(("kind", "momentum", "weight_decay"),
                         [("sgd", 0.9, 1e-3), ("sgd", 0.0, 0.0), ("sgd", 0.0, 1e-2),
                          ("adamw", 0.0, 0.0), ("adamw", 0.0, 1e-2)])
def test_reapply_adds_the_steps_update_again_and_keeps_the_state(
        kind: str, momentum: float, weight_decay: float) -> None:
    """What a HAP non-aggregator carries onto merged l−1 (fasdl.exchange.kreduce): from the same
    parameters, reapply moves them exactly as the step did, and leaves the state alone."""
    torch.manual_seed(1)
    model = build_model("cnn", CLASSES, INPUT_SHAPE)
    flat = FlatParameters(model)
    optimizer: FlatSGD | FlatAdamW = (
        FlatSGD(flat, CONSTANT, momentum, weight_decay) if kind == "sgd"
        else FlatAdamW(flat, CONSTANT, (0.9, 0.999), 1e-8, weight_decay))
    for iteration in range(3):  # momentum and moments away from zero
        optimizer.zero_grad()
        nn.CrossEntropyLoss()(model(torch.randn(5, *INPUT_SHAPE)),
                              torch.randint(0, CLASSES, (5,))).backward()
        before = flat.values.clone()
        optimizer.step(iteration)
    after = flat.values.clone()
    state = {name: vector.clone() for name, vector in optimizer.state.items()}
    flat.values.copy_(before)  # the step's own starting point: the same update again
    optimizer.reapply(2)
    torch.testing.assert_close(flat.values, after, rtol=0.0, atol=1e-7)
    assert not torch.equal(after, before)
    assert all(torch.equal(state[name], optimizer.state[name]) for name in state)


def test_adam_bias_correction_counts_global_iterations() -> None:
    """A worker resumed at iteration 7 steps as the undisturbed one does at 7, not at 0."""
    torch.manual_seed(2)
    model = build_model("cnn", CLASSES, INPUT_SHAPE)
    other = copy.deepcopy(model)
    first, second = FlatParameters(model), FlatParameters(other)
    x, y = torch.randn(5, *INPUT_SHAPE), torch.randint(0, CLASSES, (5,))
    for flat, iteration in ((first, 0), (second, 7)):
        optimizer = FlatAdamW(flat, CONSTANT, (0.9, 0.999), 1e-8, 0.0)
        nn.CrossEntropyLoss()(model(x) if flat is first else other(x), y).backward()
        optimizer.step(iteration)
    assert not torch.equal(first.values, second.values)


def test_schedule_warms_up_then_decays_to_zero() -> None:
    cosine = LearningRateSchedule(0.1, "cosine", warmup=4, total=104)
    assert [cosine(i) for i in range(4)] == pytest.approx([0.025, 0.05, 0.075, 0.1])
    assert cosine(4) == pytest.approx(0.1)
    assert cosine(54) == pytest.approx(0.05)  # half way through the decay
    assert cosine(104) == pytest.approx(0.0, abs=1e-12)
    linear = LearningRateSchedule(0.1, "linear", warmup=0, total=10)
    assert [linear(i) for i in (0, 5, 10)] == pytest.approx([0.1, 0.05, 0.0])
    assert LearningRateSchedule(0.1, "constant", warmup=2, total=10)(9) == 0.1


def test_a_scaled_rate_warms_up_from_the_base_rate() -> None:
    # Goyal et al.: 0.05 tuned at batch 16, scaled ×4 to 0.2 at batch 64, warmed up from 0.05
    goyal = LearningRateSchedule(0.2, "constant", warmup=4, total=20, start=0.05)
    assert [goyal(i) for i in range(6)] == pytest.approx(
        [0.0875, 0.125, 0.1625, 0.2, 0.2, 0.2])
    # a plan without the start field warms up from zero, bit for bit as before it existed
    plan = make_plan(2, 1, 4, 4, "bsp", warmup_iterations=7)
    schedule = LearningRateSchedule.for_plan(plan)
    assert schedule.start == 0.0
    assert [schedule(i) for i in range(8)] == [0.1 * (i + 1) / 7 for i in range(7)] + [0.1]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(base=st.floats(1e-5, 1.0), kind=st.sampled_from(["constant", "cosine", "linear"]),
       warmup=st.integers(0, 50), total=st.integers(1, 500), iteration=st.integers(0, 600))
def test_schedule_stays_within_zero_and_the_base_rate(base: float, kind: str, warmup: int,
                                                      total: int, iteration: int) -> None:
    rate = LearningRateSchedule(base, kind, warmup, total)(iteration)
    assert 0.0 <= rate <= base * (1 + 1e-12)
    assert math.isfinite(rate)


def test_plan_recipe_fields_are_checked_by_name() -> None:
    plan = make_plan(2, 1, 4, 4, "bsp", optimizer="adamw", lr_schedule="cosine",
                     warmup_iterations=10, augmentation="cifar")
    assert plan.training.optimizer == "adamw"
    for field, value, allowed in (("optimizer", "adam", "sgd, adamw"),
                                  ("lr_schedule", "step", "constant, cosine, linear"),
                                  ("warmup_iterations", -1, "[0, 1000000000]"),
                                  ("augmentation", "imagenet", "none, cifar"),
                                  ("adam_beta2", 1.0, "[0.0, 1.0)"),
                                  ("adam_eps", 0.0, "(0.0, 1.0]")):
        with pytest.raises(PlanError) as caught:
            make_plan(2, 1, 4, 4, "bsp", **{field: value})
        assert f"training.{field}" in str(caught.value) and allowed in str(caught.value)
