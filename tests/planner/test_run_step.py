"""planner/adapt/run_step.py: the re-plan step between the trigger's next and the workers,
against a store of the run's records: decide once, record, apply at an epoch's start."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import pytest

from fasdl.contract.plan import Plan
from planner.adapt.online_calibration import SegmentRoles
from planner.adapt.replan import ReplanError
from planner.adapt.run_step import ADAPTIVE, StepContext, replan_step
from planner.model.terms.cost_model import evaluate
from tests.planner.test_boundary import (
    CURRENT,
    PLAN,
    PROBLEM,
    PROFILES,
    M,
    measured,
    segment_s,
)

NOW = 1_800_000_000.0
PREFIX = "runs/"
RUN = "r1"
PLAN_KEY = f"{PREFIX}{RUN}/plan.json"
ADAPTIVE_PLAN = dataclasses.replace(
    PLAN, training=dataclasses.replace(PLAN.training, adaptive="deadline"),
    deployment=dataclasses.replace(PLAN.deployment, workers_max=4 * PLAN.deployment.workers))
PER_EPOCH = ADAPTIVE_PLAN.iterations_per_epoch
CONTEXT = StepContext(PREFIX, PROFILES, NOW, "local-emulation")


class Store:
    """The results bucket in memory: what the step reads, creates once, and the roles."""

    def __init__(self, plan: Plan, roles: Mapping[int, SegmentRoles]) -> None:
        self.objects: dict[str, bytes] = {PLAN_KEY: plan.to_json().encode()}
        self.roles = roles
        self.reads_of_roles = 0

    def read(self, key: str) -> bytes | None:
        return self.objects.get(key)

    def create(self, key: str, data: bytes) -> bool:
        if key in self.objects:
            return False
        self.objects[key] = data
        return True

    def segment_roles(self, run_id: str, index: int) -> Mapping[str, Mapping[str, Any]] | None:
        assert run_id == RUN
        self.reads_of_roles += 1
        found = self.roles.get(index)
        return None if found is None else found.roles


def run_state(index: int, start: int, elapsed_s: float, **extra: Any) -> dict[str, Any]:
    iterations = ADAPTIVE_PLAN.training.segment_iterations
    return {"run_id": RUN, "plan_key": PLAN_KEY, "done": False, "cache": None,
            "workers": list(range(ADAPTIVE_PLAN.deployment.workers)),
            "segment": {"index": index, "start_iteration": start, "iterations": iterations,
                        "attempt": 0, "epoch": 7, "resume_epoch": 6},
            "usage": {"started_at": NOW - elapsed_s, "worker_gb_s": 0.0, "worker_requests": 0,
                      "trigger_gb_s": 0.0, "trigger_requests": 0}, **extra}


def slow_store(segments: int) -> Store:
    return Store(ADAPTIVE_PLAN, {i: measured(i, compute=2.0) for i in range(segments)})


def test_a_slow_run_decides_once_waits_for_the_epoch_and_then_switches_plans() -> None:
    length = ADAPTIVE_PLAN.training.segment_iterations
    assert PER_EPOCH % length  # an epoch is not a whole number of segments here
    store = slow_store(2)
    state = run_state(2, 2 * length, 2 * segment_s(2.0))
    after = replan_step(state, store, CONTEXT)
    record_key = f"{PREFIX}{RUN}/adaptations/00002.json"
    record = json.loads(store.objects[record_key])
    assert record["action"] == "change" and record["applies_from_iteration"] == PER_EPOCH
    assert after[ADAPTIVE] == {"since": 0, "pending": record_key, "changes": 0}
    assert after["plan_key"] == PLAN_KEY  # nothing applied inside the epoch
    # the same step again (a retried invocation): the same run state, no second decision
    reads = store.reads_of_roles
    assert replan_step(state, store, CONTEXT) == after and store.reads_of_roles == reads
    # the segment that reaches the epoch's start is cut there
    last = PER_EPOCH - PER_EPOCH % length
    cut = replan_step({**run_state(last // length, last, 4 * segment_s(2.0)),
                       ADAPTIVE: after[ADAPTIVE]}, store, CONTEXT)
    assert cut["segment"]["iterations"] == PER_EPOCH - last
    assert cut["plan_key"] == PLAN_KEY
    # at the epoch's start the change applies: the new plan written once, the run switched
    index = last // length + 1
    switched = replan_step({**run_state(index, PER_EPOCH, 5 * segment_s(2.0)),
                            ADAPTIVE: after[ADAPTIVE]}, store, CONTEXT)
    new_key = f"{PREFIX}{RUN}/plans/{index:05d}.json"
    assert switched["plan_key"] == new_key
    new = Plan.from_json(store.objects[new_key])
    chosen = record["chosen"]
    assert (new.deployment.workers, new.training.aggregators, new.training.batch_aggregator,
            new.training.batch_non_aggregator) == (
        chosen["workers"], chosen["aggregators"], chosen["batch_aggregator"],
        chosen["batch_non_aggregator"])
    assert new.global_batch == ADAPTIVE_PLAN.global_batch
    assert new.deployment.ceiling == ADAPTIVE_PLAN.deployment.ceiling
    assert switched["workers"] == list(range(chosen["workers"]))
    change = switched[ADAPTIVE]
    assert {key: change[key] for key in ("since", "pending", "changes")} == {
        "since": index, "pending": None, "changes": 1}
    # where the run stood, for the guards: 2x the planned pace so far
    assert change["since_iteration"] == PER_EPOCH
    assert change["since_s"] == pytest.approx(5 * segment_s(2.0))
    assert change["ratio_s"] == pytest.approx(2.0, rel=0.05)
    # the new plan predicts its own configuration over the whole run
    assert new.prediction is not None and ADAPTIVE_PLAN.prediction is not None
    assert new.prediction.time_s < ADAPTIVE_PLAN.prediction.time_s
    assert switched["segment"]["iterations"] == min(record["segment_iterations"],
                                                    new.total_iterations - PER_EPOCH)
    # the same segment re-planned again after the switch (a resumed or continued execution
    # issues it anew): the change is the run's plan already, nothing moves or is counted twice
    again = {**switched, "segment": {**switched["segment"], "epoch": 9}}
    assert replan_step(again, store, CONTEXT) == again
    # the boundary after the change decides again and keeps the change point the guards read
    new_store = Store(new, {})
    new_store.objects = store.objects
    t = new.training
    new_store.roles = {index: SegmentRoles(index, {role: {
        "iterations": t.segment_iterations, "exchange_s_per_iteration": 0.1,
        "compute_s_per_iteration": 2 * float(PROBLEM.workload.train_time(batch, M))}
        for role, batch in (("aggregator", t.batch_aggregator),
                            ("non_aggregator", t.batch_non_aggregator))})}
    following = {**run_state(index + 1, PER_EPOCH + new.training.segment_iterations,
                             6 * segment_s(2.0)),
                 "plan_key": new_key, "workers": switched["workers"], ADAPTIVE: change}
    after_change = replan_step(following, new_store, CONTEXT)
    assert after_change[ADAPTIVE] == change
    assert f"{PREFIX}{RUN}/adaptations/{index + 1:05d}.json" in store.objects


def test_as_planned_the_step_records_continue_and_changes_nothing() -> None:
    length = ADAPTIVE_PLAN.training.segment_iterations
    store = Store(ADAPTIVE_PLAN, {i: measured(i) for i in range(2)})
    state = run_state(2, 2 * length, 2 * segment_s(1.0))
    after = replan_step(state, store, CONTEXT)
    assert json.loads(store.objects[f"{PREFIX}{RUN}/adaptations/00002.json"])["action"] == (
        "continue")
    assert {key: value for key, value in after.items() if key != ADAPTIVE} == state
    assert after[ADAPTIVE] == {"since": 0, "pending": None, "changes": 0}


def test_policy_off_and_the_first_segment_pass_through_untouched() -> None:
    static = Store(PLAN, {i: measured(i, compute=2.0) for i in range(2)})
    state = run_state(2, 16, 2 * segment_s(2.0))
    assert replan_step(state, static, CONTEXT) == state
    assert list(static.objects) == [PLAN_KEY]
    first = run_state(0, 0, 0.0)
    assert replan_step(first, slow_store(0), CONTEXT) == first


def test_a_run_without_results_or_usage_is_refused_naming_what_is_missing() -> None:
    with pytest.raises(ReplanError, match=r"segments 0-1: no worker results"):
        replan_step(run_state(2, 16, 10.0), Store(ADAPTIVE_PLAN, {}), CONTEXT)
    without = {key: value for key, value in run_state(2, 16, 10.0).items() if key != "usage"}
    with pytest.raises(ReplanError, match=r"run\.usage"):
        replan_step(without, slow_store(2), CONTEXT)


def test_the_run_limits_decide_and_a_spent_run_is_left_to_the_guards() -> None:
    """A resumed run's input limits (run.limits) are the ones re-planned for; a run past
    its deadline records nothing (the guards stop it)."""
    assert ADAPTIVE_PLAN.limits is not None
    length = ADAPTIVE_PLAN.training.segment_iterations
    late = ADAPTIVE_PLAN.limits.deadline_s + 1.0
    store = slow_store(2)
    state = run_state(2, 2 * length, late)
    assert replan_step(state, store, CONTEXT) == {**state, ADAPTIVE: {
        "since": 0, "pending": None, "changes": 0}}
    assert not any("/adaptations/" in key for key in store.objects)
    extended = {**state, "limits": {"deadline_s": 10 * late}}
    replan_step(extended, store, CONTEXT)
    record = json.loads(store.objects[f"{PREFIX}{RUN}/adaptations/00002.json"])
    assert record["segment"] == 2 and record["policy"] == ADAPTIVE_PLAN.training.adaptive


def test_the_segments_overhead_is_measured_from_the_run_clock() -> None:
    """Every segment takes OVERHEAD_S more than its iterations, load and checkpoint: the
    first boundary sees it beside the cold start, the second from the first's recorded clock
    (warm segments only), and both records carry it."""
    overhead = 7.0
    length = ADAPTIVE_PLAN.training.segment_iterations
    planned = evaluate(PROBLEM, CURRENT.workers, M, CURRENT.aggregators,
                       CURRENT.batch_aggregator, CURRENT.batch_non_aggregator)
    segment = segment_s(1.0) + float(planned.load_s[0] + planned.checkpoint_s[0]) + overhead
    store = Store(ADAPTIVE_PLAN, {i: measured(i) for i in range(2)})
    first_s = float(planned.cold_start_s[0]) + segment
    replan_step(run_state(1, length, first_s), store, CONTEXT)
    replan_step(run_state(2, 2 * length, first_s + segment), store, CONTEXT)
    records = [json.loads(store.objects[f"{PREFIX}{RUN}/adaptations/{i:05d}.json"])
               for i in (1, 2)]
    assert [r["elapsed_s"] for r in records] == pytest.approx([first_s, first_s + segment])
    assert [r["iterations_done"] for r in records] == [length, 2 * length]
    for record in records:
        assert record["measured"]["segment_overhead_s"] == pytest.approx(overhead, rel=1e-3)
        assert record["planned"]["segment_overhead_s"] == 0.0


def test_a_decision_keeps_within_the_accounts_concurrency_at_the_start() -> None:
    """The trigger records how many workers the account's concurrency held when the run
    started (run.workers_cap): a slow run that would scale out to the ceiling keeps within it,
    and the record says what it considered."""
    length = ADAPTIVE_PLAN.training.segment_iterations
    workers = ADAPTIVE_PLAN.deployment.workers
    free = slow_store(2)
    replan_step(run_state(2, 2 * length, 2 * segment_s(2.0)), free, CONTEXT)
    key = f"{PREFIX}{RUN}/adaptations/00002.json"
    unbounded = json.loads(free.objects[key])
    assert unbounded["workers_max"] == ADAPTIVE_PLAN.deployment.ceiling
    assert unbounded["chosen"]["workers"] > workers  # scaled out without a cap
    capped = slow_store(2)
    replan_step(run_state(2, 2 * length, 2 * segment_s(2.0), workers_cap=workers), capped,
                CONTEXT)
    record = json.loads(capped.objects[key])
    assert record["workers_max"] == workers
    assert record["chosen"] is None or record["chosen"]["workers"] <= workers
