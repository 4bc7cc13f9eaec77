"""Worker failures in the synthesized ASL: the same kinds and decisions under both Maps.

The inline Map (W <= 40) learns a failure's kind from its Catch; the Distributed Map's
children never fail (a failed child would surface only as
States.ExceedToleratedFailureThreshold) and the ``Segment outcome?`` Choice decides instead.
Checked on the reference stacks (W = 4, W = 8 Valkey, W = 64 Distributed) and on W = 4
synthesized with ``-c inline_map_max_workers=2``, the template the local tests run.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from fasdl.contract.errors import WorkerDuplicate, WorkerFenced
from fasdl.exchange.channel import ChannelError, ChannelTimeout
from fasdl.exchange.wire import FrameError
from fasdl.run.segment_runner import SegmentTooLong
from infra import lambda_errors, segment_states, workflow
from infra.segment_states import CRASHED, FAILED, OUT_OF_MEMORY, PRECEDENCE, TIMED_OUT
from tests.infra.conftest import Synth, is_distributed_map, state_machine_definition

ACTION_STATES = {"shorten": workflow.SHORTEN, "retry": workflow.RETRY,
                 "fail": workflow.RECORD_FAILURE}


@pytest.fixture(scope="module", params=["reference", "small_distributed"])
def any_synth(request: pytest.FixtureRequest, synth: Synth,
              small_distributed: Synth) -> Synth:
    return synth if request.param == "reference" else small_distributed


def _train(synth: Synth) -> dict[str, Any]:
    train: dict[str, Any] = state_machine_definition(synth)["States"][workflow.TRAIN_SEGMENT]
    return train


def _distributed(synth: Synth) -> bool:
    return is_distributed_map(_train(synth))


def test_threshold_context_picks_the_map(synth: Synth, small_distributed: Synth) -> None:
    assert _distributed(synth) == (synth.settings.plan.deployment.workers > 40)
    assert small_distributed.settings.plan.deployment.workers == 4
    assert _distributed(small_distributed)
    # History budget: a Distributed Map's children do not write to the parent's history.
    limit = workflow.segments_per_execution(4, inline_max=2)
    assert limit == workflow.segments_per_execution(64)


def test_worker_catches_name_each_kind(any_synth: Synth) -> None:
    inner = _train(any_synth)["ItemProcessor"]["States"]
    catches = [(set(c["ErrorEquals"]), c["Next"])
               for c in inner[segment_states.RUN_WORKER]["Catch"]]
    assert catches[:4] == [
        # a worker that fails fast because the segment cannot fit its time left times out too
        ({"States.Timeout", lambda_errors.TIMEOUT, SegmentTooLong.__name__},
         TIMED_OUT.state_name),
        # a dead worker, a peer that gave up waiting for its shards, a duplicate or fenced
        # worker (fasdl.run.fencing): rerun the segment under a new epoch
        ({lambda_errors.EXIT, ChannelTimeout.__name__, ChannelError.__name__,
          WorkerDuplicate.__name__, WorkerFenced.__name__, FrameError.__name__},
         CRASHED.state_name),
        ({lambda_errors.OUT_OF_MEMORY}, OUT_OF_MEMORY.state_name),
        ({lambda_errors.UNKNOWN}, segment_states.CLASSIFY_UNKNOWN)]
    if _distributed(any_synth):  # anything else is a status too, never a failed child
        assert catches[4:] == [({"States.ALL"}, FAILED.state_name)]
    else:  # anything else fails the inline Map as it is and ends on the failure path
        assert catches[4:] == []


def test_inline_map_catch_routes_each_kind(synths: dict[str, Synth]) -> None:
    inline = [synth for synth in synths.values() if not _distributed(synth)]
    assert len(inline) == 2  # W = 4 on S3, W = 8 on Valkey
    for synth in inline:
        catches = [(set(c["ErrorEquals"]), c["Next"]) for c in _train(synth)["Catch"]]
        assert catches == [
            ({TIMED_OUT.error, *TIMED_OUT.caught}, workflow.SHORTEN),
            ({CRASHED.error, *CRASHED.caught}, workflow.RETRY),
            # States.ALL does not catch States.Runtime: named apart, before it
            ({workflow.STATES_RUNTIME}, workflow.RECORD_FAILURE),
            ({"States.ALL"}, workflow.RECORD_FAILURE)]


def _distributed_synths(synths: dict[str, Synth], small: Synth) -> list[Synth]:
    found = [s for s in synths.values() if _distributed(s)] + [small]
    assert len(found) == 2  # the W = 64 reference stack and the W = 4 test template
    return found


def test_distributed_children_never_fail(synths: dict[str, Synth],
                                         small_distributed: Synth) -> None:
    for synth in _distributed_synths(synths, small_distributed):
        train = _train(synth)
        inner = train["ItemProcessor"]["States"]
        assert not [name for name, state in inner.items() if state["Type"] == "Fail"]
        ends = {name: state for name, state in inner.items() if state.get("End")}
        assert set(ends) == {segment_states.WORKER_FINISHED,
                             *(kind.state_name for kind in PRECEDENCE)}
        for name, state in ends.items():
            params = state["Parameters"]
            assert state["Type"] == "Pass" and params["worker.$"] == "$.worker", name
            assert params["status"] in {segment_states.OK_STATUS,
                                        *(kind.status for kind in PRECEDENCE)}
            assert "error" in params or "error.$" in params
        # the Map itself still fails the run on anything it cannot run
        assert train["Catch"] == [{"ErrorEquals": [error], "ResultPath": "$.error",
                                   "Next": workflow.RECORD_FAILURE}
                                  for error in (workflow.STATES_RUNTIME, "States.ALL")]
        assert "ExceedToleratedFailureThreshold" not in json.dumps(
            state_machine_definition(synth))


def test_distributed_outcome_choice_takes_the_most_serious_kind(
        synths: dict[str, Synth], small_distributed: Synth) -> None:
    for synth in _distributed_synths(synths, small_distributed):
        states = state_machine_definition(synth)["States"]
        train = states[workflow.TRAIN_SEGMENT]
        assert train["ResultPath"] == segment_states.OUTCOME_PATH
        assert "ResultSelector" not in train  # the children's results, as they are
        assert train["Next"] == segment_states.SUMMARIZE_SEGMENT
        summarize = states[segment_states.SUMMARIZE_SEGMENT]
        assert summarize["Parameters"] == {
            "action": "outcome", "results.$": "$.outcome",
            "statuses": [kind.status for kind in PRECEDENCE]}
        assert summarize["ResultPath"] == segment_states.OUTCOME_PATH
        assert summarize["Next"] == segment_states.SEGMENT_OUTCOME
        assert [c["ErrorEquals"] for c in summarize["Catch"]] == [
            [workflow.STATES_RUNTIME], ["States.ALL"]]
        assert {c["Next"] for c in summarize["Catch"]} == {workflow.RECORD_FAILURE}
        choice = states[segment_states.SEGMENT_OUTCOME]
        assert [(c["Variable"], c["BooleanEquals"]) for c in choice["Choices"]] == [
            (f"$.outcome.occurred.{kind.status}", True) for kind in PRECEDENCE]
        assert [kind.status for kind in PRECEDENCE] == [
            "out_of_memory", "failed", "timed_out", "crashed"]
        assert choice["Default"] == workflow.PLAN_NEXT
        for rule, kind in zip(choice["Choices"], PRECEDENCE, strict=True):
            error = states[rule["Next"]]
            assert error["Type"] == "Pass" and error["ResultPath"] == "$.error"
            assert error["Parameters"]["Error"] == kind.error
            # names the workers that ended so, as the action's $.error.Cause
            assert f"States.JsonToString($.outcome.workers.{kind.status})" in \
                error["Parameters"]["Cause.$"]
            assert error["Next"] == ACTION_STATES[kind.action]


def test_distributed_results_fit_the_map_output_limit() -> None:
    """A child's result with a long error name (an exception class name of 60 characters),
    for 1,000 workers (a 2,000-execution concurrency quota), stays under half the 256 KiB a
    Map's collected output may hold."""
    longest_error = max([*lambda_errors.SERVICE_ERRORS, "x" * 60], key=len)
    child = json.dumps({"worker": 999, "status": "out_of_memory", "error": longest_error},
                       separators=(",", ":"))
    assert 1000 * (len(child) + 1) < 256 * 1024 // 2
