"""Run-state logic of the trigger: segments, shortened retries, plan and dataset validation."""

from __future__ import annotations

import dataclasses
import io
import itertools
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fasdl.contract.errors import DatasetError
from fasdl.contract.plan import Plan, PlanError
from fasdl.run.dataset_check import check_dataset, npy_shape
from fasdl.run.run_state import (
    MAX_ATTEMPTS,
    MAX_RETRIES,
    RetriesExhausted,
    RunStateError,
    check_deployment,
    first_state,
    next_state,
    parse_fingerprint,
    parse_run,
    partition_layout,
    resolve_plan,
    resolve_run_id,
    retry_state,
    shorten_state,
)
from tests.runtime.kreduce_helpers import make_plan, plan_with


def walk(plan: Plan) -> list[dict[str, int]]:
    run = first_state(plan, "r", "runs/r/plan.json", epoch=1)
    seen = []
    while not run["done"]:
        seen.append(run["segment"])
        run = next_state(run, plan, epoch=run["segment"]["epoch"] + 1)
    assert run["segment"]["start_iteration"] == plan.total_iterations
    assert run["segment"]["iterations"] == 0
    return seen


def test_segments_cover_the_run_exactly() -> None:
    plan = plan_with(total_epochs=3, segment_iterations=4)  # 10 iterations/epoch → 30
    segments = walk(plan)
    assert [s["iterations"] for s in segments] == [4] * 7 + [2]
    assert [s["index"] for s in segments] == list(range(8))
    assert all(s["attempt"] == 0 for s in segments)
    # each segment its own epoch, resuming from the checkpoint the one before it wrote
    assert [s["epoch"] for s in segments] == list(range(1, 9))
    assert [s["resume_epoch"] for s in segments] == list(range(0, 8))
    run = first_state(plan, "r", "k", epoch=1)
    assert run["workers"] == [0, 1, 2, 3] and run["plan_key"] == "k"


@given(epochs=st.integers(1, 20), length=st.integers(1, 50))
def test_segments_are_contiguous_for_any_length(epochs: int, length: int) -> None:
    plan = plan_with(total_epochs=epochs, segment_iterations=length)
    segments = walk(plan)
    starts = [s["start_iteration"] for s in segments]
    assert starts == [sum(s["iterations"] for s in segments[:i]) for i in range(len(segments))]
    assert sum(s["iterations"] for s in segments) == plan.total_iterations
    assert len(segments) == plan.segments


def test_shorten_halves_the_same_segment_and_later_segments_keep_the_length() -> None:
    plan = plan_with(total_epochs=3, segment_iterations=8)
    run = next_state(first_state(plan, "r", "k", epoch=1), plan, epoch=2)
    short = shorten_state(run, {"Error": "FasDL.SegmentTimeout", "Cause": "slow"}, epoch=3)
    assert short["segment"] == {"index": 1, "start_iteration": 8, "iterations": 4,
                                "attempt": 1, "epoch": 3, "resume_epoch": 1}
    following = next_state(short, plan, epoch=4)
    assert following["segment"] == {"index": 2, "start_iteration": 12, "iterations": 4,
                                    "attempt": 0, "epoch": 4, "resume_epoch": 3}


def test_shorten_gives_up_with_a_clear_error() -> None:
    plan = plan_with(total_epochs=100, segment_iterations=1000)
    run = first_state(plan, "r", "k", epoch=1)
    for epoch in range(2, MAX_ATTEMPTS + 1):
        run = shorten_state(run, epoch=epoch)
    with pytest.raises(RetriesExhausted, match=f"giving up after {MAX_ATTEMPTS} attempts"):
        shorten_state(run, {"Error": "States.Timeout", "Cause": "x"}, epoch=99)
    single = {**run, "segment": {**run["segment"], "iterations": 1, "attempt": 0}}
    with pytest.raises(RetriesExhausted, match="single iteration"):
        shorten_state(single, epoch=99)


def test_retry_reruns_the_same_segment_and_counts() -> None:
    plan = plan_with(total_epochs=3, segment_iterations=8)
    run = next_state(first_state(plan, "r", "k", epoch=1), plan, epoch=2)
    again = retry_state(run, {"Error": "Runtime.ExitError", "Cause": "exit status 137"},
                        epoch=3)
    assert again["segment"] == {"index": 1, "start_iteration": 8, "iterations": 8,
                                "attempt": 1, "retries": 1, "epoch": 3, "resume_epoch": 1}
    assert parse_run(again) == again and not again["done"]
    following = next_state(again, plan, epoch=4)  # the next segment starts fresh
    assert following["segment"] == {"index": 2, "start_iteration": 16, "iterations": 8,
                                    "attempt": 0, "epoch": 4, "resume_epoch": 3}


def test_retry_gives_up_after_max_retries_or_attempts() -> None:
    plan = plan_with(total_epochs=3, segment_iterations=8)
    run = first_state(plan, "r", "k", epoch=1)
    for epoch in range(2, MAX_RETRIES + 2):
        run = retry_state(run, epoch=epoch)
    with pytest.raises(RetriesExhausted, match=rf"giving up after {MAX_RETRIES} retries "
                                               r"\(last error: ChannelTimeout: gone\)"):
        retry_state(run, {"Error": "ChannelTimeout", "Cause": "gone"}, epoch=99)
    late = {**run, "segment": {**run["segment"], "attempt": MAX_ATTEMPTS - 1, "retries": 0}}
    with pytest.raises(RetriesExhausted, match=f"giving up after {MAX_ATTEMPTS} attempts"):
        retry_state(late, epoch=99)
    with pytest.raises(RunStateError, match=r"run\.segment\.retries"):
        parse_run({**run, "segment": {**run["segment"], "retries": -1}})


def test_parse_run_names_the_bad_field() -> None:
    plan = plan_with()
    good = first_state(plan, "r", "k", epoch=1)
    assert parse_run(good) == good
    with pytest.raises(RunStateError, match=r"run.segment.epoch"):
        parse_run({**good, "segment": {**good["segment"], "epoch": 0}})
    with pytest.raises(RunStateError, match=r"run.segment.iterations"):
        parse_run({**good, "segment": {**good["segment"], "iterations": -1}})
    with pytest.raises(RunStateError, match=r"run.workers"):
        parse_run({**good, "workers": [1, 2]})
    with pytest.raises(RunStateError, match=r"run.plan_key"):
        parse_run({**good, "plan_key": ""})


def test_overrides_apply_and_are_validated() -> None:
    plan = plan_with()
    fingerprint = plan.deployment_fingerprint()
    resolved = resolve_plan({"epochs": 7, "dataset": "data/other/"}, plan.to_json(),
                            fingerprint)
    assert resolved.training.epochs == 7 and resolved.workload.dataset == "data/other"
    with pytest.raises(PlanError, match=r"training.epochs"):
        resolve_plan({"epochs": 0}, plan.to_json(), fingerprint)
    with pytest.raises(PlanError, match=r"workload.dataset"):
        resolve_plan({"dataset": "../etc"}, plan.to_json(), fingerprint)
    given_plan = resolve_plan({"plan": plan.to_dict()}, None, fingerprint)
    assert given_plan == plan
    with pytest.raises(PlanError, match="<root>"):
        resolve_plan({}, "{corrupt", fingerprint)
    with pytest.raises(PlanError, match=r"training.aggregators"):
        bad = plan.to_dict()
        bad["training"]["aggregators"] = 9
        resolve_plan({"plan": bad}, None, fingerprint)
    with pytest.raises(RunStateError, match="'plan'"):
        resolve_plan({}, None, fingerprint)


def test_the_input_policy_overrides_the_plans_where_the_stack_re_plans() -> None:
    """``adaptive`` in the input: any policy on a stack deployed for an adaptive plan (its
    state machine has the re-plan states), only off on a static one, where a policy, given
    alone or in ``input.plan``, would silently do nothing."""
    static = plan_with()
    adaptive = dataclasses.replace(static, training=dataclasses.replace(
        static.training, adaptive="deadline"))
    fingerprint = static.deployment_fingerprint()
    assert resolve_plan({"adaptive": "cost"}, adaptive.to_json(),
                        fingerprint).training.adaptive == "cost"
    assert resolve_plan({"adaptive": "off"}, adaptive.to_json(),
                        fingerprint).training.adaptive == "off"
    assert resolve_plan({"adaptive": "off"}, static.to_json(),
                        fingerprint).training.adaptive == "off"
    for asked in ({"adaptive": "deadline"}, {"plan": adaptive.to_dict()}):
        with pytest.raises(PlanError, match=r"training.adaptive': 'deadline' needs a stack "
                                            r"deployed for an adaptive plan"):
            resolve_plan(asked, static.to_json(), fingerprint)
    with pytest.raises(PlanError, match=r"training.adaptive"):
        resolve_plan({"adaptive": "always"}, adaptive.to_json(), fingerprint)


def test_plan_for_another_stack_names_the_deployment_field() -> None:
    plan = plan_with()
    assert parse_fingerprint(plan.deployment_fingerprint())["workers"] == "4"
    other = make_plan(8, 2, 2, 3, "hap")
    with pytest.raises(PlanError, match=r"deployment.workers.*W?4.*8"):
        check_deployment(other, plan.deployment_fingerprint())
    valkey = dataclasses.replace(plan, deployment=dataclasses.replace(plan.deployment,
                                                                      channel="valkey"))
    with pytest.raises(PlanError, match=r"deployment.channel"):
        check_deployment(valkey, plan.deployment_fingerprint())
    with pytest.raises(RunStateError, match="FASDL_DEPLOYMENT"):
        check_deployment(plan, "garbage")
    check_deployment(plan, plan.deployment_fingerprint())
    # a stack deployed for an adaptive run's ceiling serves only plans with that ceiling
    ceiling = dataclasses.replace(plan, deployment=dataclasses.replace(plan.deployment,
                                                                       workers_max=16))
    assert parse_fingerprint(ceiling.deployment_fingerprint())["workers"] == "4-16"
    check_deployment(ceiling, ceiling.deployment_fingerprint())
    with pytest.raises(PlanError, match=r"deployment.workers.*workers=4-16, the plan has 4"):
        check_deployment(plan, ceiling.deployment_fingerprint())
    # ... of any W up to it: the plans a re-plan changes to
    fewer = make_plan(2, 1, 8, 8, "hap")
    fewer = dataclasses.replace(fewer, deployment=dataclasses.replace(
        plan.deployment, workers=2, workers_max=16))
    check_deployment(fewer, ceiling.deployment_fingerprint())
    other_ceiling = dataclasses.replace(fewer, deployment=dataclasses.replace(
        fewer.deployment, workers_max=8))
    with pytest.raises(PlanError, match=r"deployment.workers.*workers=4-16, the plan has 2-8"):
        check_deployment(other_ceiling, ceiling.deployment_fingerprint())
    # a stack built for W alone (an adaptive plan without workers_max) has W as its ceiling
    within = dataclasses.replace(fewer, deployment=dataclasses.replace(
        fewer.deployment, workers_max=4))
    check_deployment(within, plan.deployment_fingerprint())
    with pytest.raises(PlanError, match=r"deployment.workers.*workers=4, the plan has 2"):
        check_deployment(dataclasses.replace(within, deployment=dataclasses.replace(
            within.deployment, workers_max=None)), plan.deployment_fingerprint())


def test_run_id_defaults_to_the_execution_and_is_checked() -> None:
    assert resolve_run_id({}, "exec-1") == "exec-1"
    assert resolve_run_id({"run_id": "mine"}, "exec-1") == "mine"
    with pytest.raises(RunStateError, match="input field 'run_id'"):
        resolve_run_id({"run_id": "../x"}, "exec-1")


def _npy(array: np.ndarray) -> bytes:
    stream = io.BytesIO()
    np.save(stream, array, allow_pickle=False)
    return stream.getvalue()


def _reader(objects: dict[str, bytes]):  # type: ignore[no-untyped-def]
    return lambda key, start, end: objects[key][start:end]


def _sizes(objects: dict[str, bytes]):  # type: ignore[no-untyped-def]
    return lambda key: len(objects[key]) if key in objects else None


def test_npy_header_is_read_without_numpy() -> None:
    data = _npy(np.zeros((5, 1, 2, 3), np.uint8))
    assert npy_shape(_reader({"k": data}), "k") == ((5, 1, 2, 3), "|u1")
    with pytest.raises(DatasetError, match=r"not a .npy file"):
        npy_shape(_reader({"k": b"PK\x03\x04" + bytes(20)}), "k")
    evil = bytearray(data)
    evil[10:20] = b"__import__"  # a header that is not a literal is refused, never executed
    with pytest.raises(DatasetError, match="malformed"):
        npy_shape(_reader({"k": bytes(evil)}), "k")


def test_dataset_checks_name_the_field() -> None:
    plan = plan_with(samples=100)
    prefix = plan.workload.dataset
    objects = {f"{prefix}/x.npy": _npy(np.zeros((120, 1, 4, 4), np.uint8)),
               f"{prefix}/y.npy": _npy(np.zeros(120, np.int64))}
    check_dataset(plan, _reader(objects), _sizes(objects))
    with pytest.raises(PlanError, match=r"workload.dataset.*missing .*y.npy"):
        check_dataset(plan, _reader(objects), lambda key: 1 if key.endswith("x.npy") else None)
    truncated = {**objects, f"{prefix}/x.npy": objects[f"{prefix}/x.npy"][:-1]}
    with pytest.raises(PlanError, match=r"x.npy' holds \d+ bytes.*truncated"):
        check_dataset(plan, _reader(truncated), _sizes(truncated))
    with_test = {**objects, f"{prefix}/test/x.npy": _npy(np.zeros((9, 1, 4, 5), np.uint8)),
                 f"{prefix}/test/y.npy": _npy(np.zeros(9, np.int64))}
    with pytest.raises(PlanError, match=r"test'.*rows of shape \(1, 4, 5\)"):
        check_dataset(plan, _reader(with_test), _sizes(with_test))
    half_test = {**objects, f"{prefix}/test/x.npy": _npy(np.zeros((9, 1, 4, 4), np.uint8))}
    with pytest.raises(PlanError, match=r"missing .*test/y.npy"):
        check_dataset(plan, _reader(half_test), _sizes(half_test))
    small = {**objects, f"{prefix}/x.npy": _npy(np.zeros((50, 1, 4, 4), np.uint8)),
             f"{prefix}/y.npy": _npy(np.zeros(50, np.int64))}
    with pytest.raises(PlanError, match=r"workload.samples"):
        check_dataset(plan, _reader(small), _sizes(small))
    mismatched = {**objects, f"{prefix}/y.npy": _npy(np.zeros(119, np.int64))}
    with pytest.raises(PlanError, match="120 rows, y has 119"):
        check_dataset(plan, _reader(mismatched), _sizes(mismatched))
    labels = {**objects, f"{prefix}/y.npy": _npy(np.zeros(120, np.int32))}
    with pytest.raises(PlanError, match="1-D int64"):
        check_dataset(plan, _reader(labels), _sizes(labels))


def test_a_plan_whose_input_shape_is_not_the_datasets_is_refused_at_the_start() -> None:
    """Issue 43: a hand-edited workload.input_shape used to pass plan, synth and the run."""
    plan = plan_with(samples=100)
    prefix = plan.workload.dataset
    objects = {f"{prefix}/x.npy": _npy(np.zeros((120, 1, 4, 4), np.uint8)),
               f"{prefix}/y.npy": _npy(np.zeros(120, np.int64))}
    shaped = dataclasses.replace(plan, workload=dataclasses.replace(plan.workload,
                                                                     input_shape=[1, 4, 4]))
    check_dataset(shaped, _reader(objects), _sizes(objects))
    wrong = dataclasses.replace(plan, workload=dataclasses.replace(plan.workload,
                                                                    input_shape=[3, 4, 4]))
    with pytest.raises(PlanError, match=r"workload.input_shape.*\[3, 4, 4\].*\[1, 4, 4\]"):
        check_dataset(wrong, _reader(objects), _sizes(objects))


def test_partition_layout_tiles_the_samples() -> None:
    plan = plan_with(samples=103)
    layout = partition_layout(plan)
    assert layout[0]["start"] == 0 and layout[-1]["end"] == 103
    assert all(a["end"] == b["start"] for a, b in itertools.pairwise(layout))
    assert [part["batch"] for part in layout] == [2, 2, 3, 3]
    json.dumps(layout)  # small and JSON-serialisable


def test_the_workers_cap_is_a_positive_count_when_present() -> None:
    """run.workers_cap (the trigger's concurrency check at the start; a re-plan keeps within
    it): absent is fine, a number below 1 or not an integer is refused by name."""
    run = first_state(plan_with(total_epochs=1, segment_iterations=8), "r", "k", epoch=1)
    assert parse_run({**run, "workers_cap": 3})["workers_cap"] == 3
    for bad in (0, 2.5, "4"):
        with pytest.raises(RunStateError, match=r"run\.workers_cap': must be an integer >= 1"):
            parse_run({**run, "workers_cap": bad})
