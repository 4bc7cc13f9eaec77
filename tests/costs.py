"""What a test costs: the cost marks of pyproject.toml by folder, file, test and fixture, and
which started command needs which mark (tests/cost_marks.py applies and enforces them).

Keys of :data:`PATHS` are relative to tests/: a folder ends with ``/``, a file is a path, a
test is ``file::name`` (every parametrization of it). A test gets the marks of every key that
covers it, of every fixture it requests (:data:`FIXTURES`) and of its own decorators.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import PurePath

SERVERS, SYNTH, SANDBOX, NETWORK, E2E = "servers", "synth", "sandbox", "network", "e2e"
COST_MARKS = (SERVERS, SYNTH, SANDBOX, NETWORK, E2E)
# `slow` predates the cost marks; test modules still carry it, so it stands for e2e
ALIASES = {"slow": E2E}

PATHS: dict[str, tuple[str, ...]] = {
    # folders where (nearly) every test pays
    "integration/": (SERVERS,),  # session Valkey, Valkey cluster, Redis TLS, SeaweedFS
    "infra/": (SYNTH,),  # jsii in-process, `python app.py`, npx cdk, asl-validator
    # files and tests of the cheap folders
    "bench/test_memory_roles.py": (SERVERS,),
    "bench/test_orchestration.py::test_a_small_wide_run_stays_inside_the_limits": (SYNTH, SERVERS),
    "infra/test_requirements_synth.py": (NETWORK,),  # requirements_layer.py runs pip
    # build.py runs pip (its refusals too: the rule judges the command)
    "layer/test_build_target.py::test_download_miss_names_what_pip_saw": (NETWORK,),
    "layer/test_build_target.py::test_refuses_cp311_wheel_for_python312": (NETWORK,),
    "layer/test_build_target.py::test_refuses_cuda_build": (NETWORK,),
    "layer/test_build_target.py::test_refuses_wrong_arch_or_glibc": (NETWORK,),
    "layer/test_requirements_layer.py": (NETWORK,),
    # pip builds the requirements' local layer
    "planner/test_own_model.py::test_the_requirements_file_goes_into_the_workload_and_the_plan":
        (NETWORK,),
    "local/aws/test_adapter.py": (SANDBOX,),
    "local/servers/test_ecpu_relay_sockets.py": (SERVERS,),
    "local/lambda_/test_emulator.py": (SANDBOX,),
    "local/lambda_/test_lambda_faults_memory.py": (SANDBOX,),
    "local/faults/test_lambda_faults_service.py::test_a_fault_for_an_action_waits_for_an_event_with_it":
        (SANDBOX,),
    "local/faults/test_lambda_faults_service.py::test_a_detached_invocation_can_be_waited_for":
        (SANDBOX,),
    "local/faults/test_lambda_faults_service.py::test_catch_sees_the_aws_error_name": (SANDBOX,),
    "local/faults/test_lambda_faults_service.py::test_concurrent_invocations_take_exactly_n":
        (SANDBOX,),
    "local/faults/test_lambda_faults_service.py::test_faults_for_one_function_queue_in_order":
        (SANDBOX,),
    "local/faults/test_lambda_faults_service.py::test_first_n_fail_without_running_then_the_handler_runs":
        (SANDBOX,),
    "local/faults/test_lambda_faults_service.py::test_retry_on_the_name_then_the_handler_runs":
        (SANDBOX,),
    "local/lambda_/test_lambda_speed.py": (SANDBOX,),
    "local/run/test_own_model_e2e.py": (SYNTH,),
    "local/profile/test_profile.py::test_profile_end_to_end":
        (SERVERS, SYNTH, SANDBOX),  # in-process
    "local/run/test_run_cache_stack.py": (SYNTH,),
    "local/run/test_run_faults.py": (SYNTH,),
    "local/run/test_run_adaptive.py": (SYNTH,),
    "local/run/test_run_guards.py": (SYNTH,),
    "local/run/test_run_guards.py::test_deadline_stop_ends_in_its_own_failed_state": (SANDBOX,),
    "local/run/test_run_out_of_memory.py": (SYNTH,),
    "local/run/test_run_quotas.py": (SYNTH,),
    "local/lambda_/test_sandbox.py": (SANDBOX,),
    "runtime/test_fencing.py::test_a_later_segment_never_reads_a_dead_attempts_merged_shards":
        (SERVERS,),  # moto as a server
    "runtime/test_lambda_python.py": (NETWORK, SERVERS),  # pip for cp312; moto as a server
    "runtime/test_normalize_run.py::test_a_worker_trains_and_evaluates_on_normalised_rows":
        (SERVERS,),
}

# A fixture's cost falls on every test that requests it, directly or through another fixture,
# wherever a fixture of that name is defined (a name reused for something cheap only
# over-marks; a missing mark is what the enforcement catches).
FIXTURES: dict[str, tuple[str, ...]] = {
    "default_template": (SYNTH,),  # tests/local: npx cdk synth, once per session
    "seaweed": (SERVERS,),
    "valkey": (SERVERS,),
    "real": (SERVERS,),  # tests/local: seaweed or valkey by parameter
    "layer": (NETWORK,),  # tests/layer: the real torch layer, build.py with pip
}

# What a command needs: its marks and what it is (for the message).
Cost = tuple[tuple[str, ...], str]
# argv[0]'s name
_PROGRAMS: dict[str, Cost] = {
    "valkey-server": ((SERVERS,), "a Valkey server"),
    "redis-server": ((SERVERS,), "a Redis server"),
    "weed": ((SERVERS,), "a SeaweedFS server"),
    "moto_server": ((SERVERS,), "a moto server"),
    "node": ((SYNTH,), "node"),
    "npx": ((SYNTH,), "npx (node)"),
    "cdk": ((SYNTH,), "the CDK CLI (node)"),
    "asl-validator": ((SYNTH,), "asl-validator (node)"),
    "pip": ((NETWORK,), "pip"),
    "pip3": ((NETWORK,), "pip"),
}
# python -m MODULE [FIRST ARGUMENT]; None: any first argument
_MODULES: dict[tuple[str, str | None], Cost | None] = {
    ("pip", None): ((NETWORK,), "pip"),
    ("local.lambda_.invoke", None): ((SANDBOX,), "a Lambda emulator sandbox"),
    ("local", "run"): ((E2E,), "a full local run"),
    ("local", "profile"): ((E2E,), "a full local profiling run"),
    # the benchmarks that start servers, synths, local runs or the layer build themselves
    ("bench.channel", None): ((SERVERS,), "bench.channel (Valkey, SeaweedFS)"),
    ("bench.memory_roles", None): ((SERVERS,), "bench.memory_roles (SeaweedFS)"),
    ("bench.memory_roles", "--child"): None,  # one of its workers: the server is the parent's
    ("bench.orchestration", None): ((SYNTH, SERVERS), "bench.orchestration (synth, SeaweedFS)"),
    ("bench.chaos", None): ((E2E, SYNTH), "bench.chaos (synths, local runs)"),
    ("bench.prediction", None): ((E2E, SYNTH), "bench.prediction (synth, local profile)"),
    ("bench.patterns", None): ((E2E, SYNTH), "bench.patterns (synth, local profile)"),
    ("bench.cold_start", None): ((NETWORK,), "bench.cold_start (the torch layer build)"),
}
# python SCRIPT: scripts that start such processes themselves (their path's tail)
_SCRIPTS: dict[str, Cost] = {
    "app.py": ((SYNTH,), "the CDK app (jsii starts node)"),
    "layers/torch/build.py": ((NETWORK,), "the torch layer build (pip)"),
    "layers/torch/requirements_layer.py": ((NETWORK,), "the requirements layer build (pip)"),
}
_SHELLS = {"bash", "sh"}


def marks_of_path(relative: str) -> set[str]:
    """The marks :data:`PATHS` gives a test id relative to tests/ (``file::name[params]``)."""
    file, _, name = relative.partition("::")
    name = name.split("[")[0]
    found: set[str] = set()
    for key, marks in PATHS.items():
        key_file, _, key_name = key.partition("::")
        if key_name:
            hit = key_file == file and key_name == name
        else:
            hit = file.startswith(key) if key.endswith("/") else file == key
        if hit:
            found.update(marks)
    return found


def _is_jsii_kernel(argv: Sequence[str]) -> bool:
    return any(arg.endswith("jsii-runtime.js") for arg in argv[1:])


def _python_cost(argv: Sequence[str]) -> Cost | None:
    args = list(argv[1:])
    while args and args[0].startswith("-") and args[0] not in ("-m", "-c"):
        del args[:2 if args[0] in ("-X", "-W") else 1]  # interpreter options: -I, -u, -X dev
    if len(args) >= 2 and args[0] == "-m":
        module, first = args[1], (args[2] if len(args) > 2 else None)
        key = (module, first) if (module, first) in _MODULES else (module, None)
        return _MODULES.get(key)
    if args and args[0] != "-c":
        script = PurePath(args[0]).as_posix()
        for tail, cost in _SCRIPTS.items():
            if script == tail or script.endswith(f"/{tail}"):
                return cost
    return None


def command_cost(argv: Sequence[str]) -> Cost | None:
    """(marks, what it is) of a command a test starts, or None when it needs no mark.

    Only the command itself is judged: what a child starts in turn is its own business, which
    is why scripts and modules known to start servers, node or pip are listed here. jsii's own
    node kernel is judged by the calls made into it (tests/cost_marks.py), not by its start.
    """
    if not argv:
        return None
    name = PurePath(argv[0]).name
    if name in _SHELLS and "-c" in argv[1:-1]:  # its script's first command
        try:
            return command_cost(shlex.split(argv[list(argv).index("-c") + 1]))
        except ValueError:
            return None
    if name.startswith("python"):
        return _python_cost(argv)
    if name == "node" and _is_jsii_kernel(argv):
        return None
    return _PROGRAMS.get(name)
