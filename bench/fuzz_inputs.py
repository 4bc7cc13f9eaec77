"""Fuzzes the input doors with random mutations of valid inputs (issue 15).

* ``plan``: a valid plan document, its fields replaced, deleted, renamed or its bytes broken,
  into the synth's entry (infra.settings.load_settings) and the trigger's (Plan.from_json).
* ``workload``, ``platform``: a shipped workload or platform profile mutated the same way,
  into ``python -m planner plan --workload/--platform``.
* ``flags``: random values for the planner's flags.
* ``console``, ``archive``: the trigger's start input and damaged dataset archives
  (bench/fuzz_runtime_doors.py).

The property at every door: a clean error of that door's one type naming a field or flag
(PlanError; exit 2 with one JSON object naming an existing flag), or accepted and valid
(the plan round-trips and fits the trigger's environment; the planner's exit 0/3 prints one
JSON object and a written plan loads). Any other exception is a failure. The last printed
line is one JSON object with the cases tried and the failures per door.

    .venv/bin/python -m bench.fuzz_inputs [--cases N] [--seed S] [--smoke]

``--smoke`` (or FASDL_BENCH_SMOKE=1, bench/smoke.py): 5 inputs per door.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from bench.fuzz_runtime_doors import runtime_door_cases
from bench.smoke import parse_args
from fasdl.contract.fields import AWS_REGIONS
from fasdl.contract.plan import PLAN_MAX_COMPACT_BYTES, Plan, PlanError
from infra.settings import DEFAULT_PLAN_PATH, STUB_TORCH_LAYER, load_settings
from planner.commands.cli import build_parser, main

DATA = Path(__file__).resolve().parents[1] / "planner" / "data"
WORKLOAD_FILE = DATA / "workloads" / "cnn-digits.json"
PLATFORM_FILE = DATA / "platforms" / "aws-lambda-x86_64-s3.json"
_T = TypeVar("_T")

# Values a user or a broken tool might put anywhere: the findings first.
NASTY: list[object] = [
    "us-east-1\n", "xx-invalid-1", "datasets/../x", "a//b", "", " ", "\ud800", "\x00",
    "x" * 5000, -20000, 1e-300, -1e-300, 0, -1, 1.5, 10**30, -(10**30), 1e308, True, None,
    [], {}, [[[]]], {"a": {"b": {}}},
]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**40), 10**40)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
    | st.sampled_from(NASTY),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                  max_size=3),
    max_leaves=6)


def _paths(data: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for key, value in data.items():
        found.append((*prefix, key))
        if isinstance(value, dict):
            found.extend(_paths(value, (*prefix, key)))
    return found


@st.composite
def mutated_document(draw: st.DrawFn, base: dict[str, Any]) -> bytes:
    """``base`` with 1-3 field mutations, then maybe a byte-level one."""
    data = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(data) or [("x",)]
        path = draw(st.sampled_from(paths))
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        if not isinstance(parent, dict):
            continue
        action = draw(st.sampled_from(["tweak", "tweak", "set", "delete", "rename", "add"]))
        if action == "tweak":  # a plausible value: exercises the accepted path too
            parent[path[-1]] = draw(_near(parent[path[-1]]))
        elif action == "delete":
            parent.pop(path[-1], None)
        elif action == "rename":
            parent[path[-1] + draw(st.sampled_from(["s", "_", "x"]))] = parent.pop(path[-1])
        elif action == "add":
            parent[draw(st.text(max_size=8))] = draw(JSON_VALUES)
        else:
            parent[path[-1]] = draw(JSON_VALUES)
    raw = json.dumps(data, allow_nan=True).encode("utf-8", "surrogatepass")
    return draw(_broken_bytes(raw)) if draw(st.integers(0, 3)) == 0 else raw


PLAUSIBLE_TEXT = ["us-east-1", "eu-west-1", "us-west-2", "s3", "valkey", "arm64", "x86_64",
                  "hap", "bsp", "datasets/x", "cnn", "mlp", "digits-1"]


def _near(value: object) -> st.SearchStrategy[object]:
    """Values of the same kind near ``value``."""
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return st.sampled_from([value, value + 1, value - 1, 2 * value, -value]) | st.integers(
            0, 10**6)
    if isinstance(value, float):  # fixed bounds: value-derived ones made generation flaky
        return st.sampled_from([value, value * 2, value / 2, -value]) | st.floats(0.0, 1e6)
    if isinstance(value, str):
        return st.sampled_from([value, value + "\n", value + "x", value[:-1], "xx-invalid-1",
                                f"{value}/../x", *PLAUSIBLE_TEXT])
    return JSON_VALUES


def _broken_bytes(raw: bytes) -> st.SearchStrategy[bytes]:
    cut = st.integers(0, max(0, len(raw) - 1))
    return st.one_of(
        cut.map(lambda at: raw[:at]),
        st.tuples(cut, st.binary(min_size=1, max_size=4)).map(
            lambda pair: raw[:pair[0]] + pair[1] + raw[pair[0]:]),
        st.integers(1, 20_000).map(lambda depth: b"[" * depth + raw + b"]" * depth),
        st.just(b"\xff\xfe" + raw), st.just(raw.replace(b"2", b"2" + b"0" * 5000, 1)))


def check_plan(document: bytes, folder: Path) -> None:
    """The synth's and the trigger's readers: PlanError naming a field, or a valid plan."""
    path = folder / "plan.json"
    path.write_bytes(document)
    outcomes = []
    readers: list[Callable[[], Plan]] = [
        lambda: load_settings({"plan": str(path), "torch_layer": str(STUB_TORCH_LAYER)},
                              warn=False).plan,
        lambda: Plan.from_json(document)]
    for read in readers:
        try:
            plan = read()
        except PlanError as error:
            assert error.field and f"'{error.field}'" in str(error), error
            outcomes.append(False)
            continue
        outcomes.append(True)
        assert Plan.from_json(plan.to_json()) == plan
        assert plan.deployment.region in AWS_REGIONS, plan.deployment.region
        assert ".." not in plan.workload.dataset.split("/"), plan.workload.dataset
    if outcomes[0]:  # what the synth accepts fits the trigger's environment
        assert len(Plan.from_json(document).to_compact_json().encode()) <= PLAN_MAX_COMPACT_BYTES


def run_planner(argv: list[str]) -> tuple[int, dict[str, Any]]:
    """``python -m planner ... --json`` in process: exit code and its one JSON object."""
    with contextlib.redirect_stdout(io.StringIO()) as out, \
            contextlib.redirect_stderr(io.StringIO()):
        code = main([*argv, "--json"])
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one JSON line, got {out.getvalue()!r}"
    document = json.loads(lines[0])
    assert isinstance(document, dict)
    return code, document


def planner_flags() -> set[str]:
    names: set[str] = {"<command>"}
    for action in build_parser()._subparsers._group_actions:  # type: ignore[union-attr]
        for sub in action.choices.values():  # type: ignore[union-attr]
            for option in sub._actions:
                names.update(option.option_strings)
    return names


FLAGS = planner_flags()


def check_planner(argv: list[str], folder: Path, *, blame: str | None = None) -> None:
    """Exit 0/3 with one JSON object (a written plan loads), or 2 naming an existing flag."""
    out = folder / "out" / "plan.json"
    out.unlink(missing_ok=True)
    code, document = run_planner(argv)
    assert code in (0, 2, 3), code
    if code == 2:
        assert document["status"] == "error" and document["argument"] in FLAGS, document
        assert blame is None or document["argument"] == blame, document
    if code == 0 and str(out) in argv:
        Plan.load(out).check_environment_size()


# Every search of a workload, compare (all of them, ~1 s) least often.
SEARCHES = [["plan"]] * 4 + [["plan", "--search", "two-stage"]] * 3 + [["compare"]]


def check_workload(case: tuple[bytes, list[str]], folder: Path) -> None:
    document, command = case
    path = folder / "workload.json"
    path.write_bytes(document)
    check_planner([*command, "--workload", str(path), "--deadline", "3000",
                   "--max-global-batch", "32", "--epochs", "2"], folder, blame="--workload")


def check_platform(document: bytes, folder: Path) -> None:
    path = folder / "platform.json"
    path.write_bytes(document)
    check_planner(["plan", "--workload", "cnn-digits", "--platform", str(path), "--deadline",
                   "3000", "--max-global-batch", "32", "--epochs", "2"], folder,
                  blame="--platform")


def _flag_value(name: str, folder: Path) -> st.SearchStrategy[str]:
    numbers = st.one_of(st.integers(-(10**12), 10**12).map(str),
                        st.floats(allow_nan=True, allow_infinity=True).map(repr),
                        st.sampled_from(["", "x", "1e999", "-0", "0x10", "１"]))
    special: dict[str, st.SearchStrategy[str]] = {
        # large caps are valid but slow to search; the cap itself is tested with a few values
        "--max-global-batch": st.one_of(st.integers(-5, 96).map(str),
                                        st.sampled_from(["4097", "10000", "10" * 20, "x"])),
        "--search": st.sampled_from(["exact", "two-stage", "nope", ""]),
        "--pattern": st.sampled_from(["kreduce", "scatterreduce", "allreduce", "x"]),
        "--channel": st.sampled_from(["s3", "valkey", "S3", ""]),
        "--arch": st.sampled_from(["x86_64", "arm64", "riscv"]),
        "--region": st.sampled_from(["us-east-1", "us-east-1\n", "xx-invalid-1", ""]),
        "--workload": st.sampled_from(["cnn-digits", "squeezenet-cifar10", "nope", str(folder),
                                       str(folder / "missing.json")]),
        "--platform": st.sampled_from([str(folder), str(folder / "missing.json"),
                                       str(WORKLOAD_FILE)]),
        "--out": st.sampled_from([str(folder / "out" / "plan.json"), str(folder),
                                  str(folder / "missing" / "plan.json"), ""]),
    }
    return special.get(name, numbers)


@st.composite
def planner_argv(draw: st.DrawFn, folder: Path) -> list[str]:
    argv = ["plan"]
    values = {"--workload": "cnn-digits", "--deadline": "3000", "--max-global-batch": "32",
              "--epochs": "2"}
    optional = ["--channel", "--arch", "--region", "--platform", "--timeout", "--timeout-margin",
                "--min-workers", "--max-concurrency", "--max-memory", "--search", "--pattern",
                "--gamma-min", "--out", "--deadline", "--epochs", "--max-global-batch",
                "--workload"]
    for name in draw(st.lists(st.sampled_from(optional), max_size=4, unique=True)):
        values[name] = draw(_flag_value(name, folder))
    for name in draw(st.lists(st.sampled_from(sorted(values)), max_size=1)):
        del values[name]  # a required flag left out
    for name, value in values.items():
        argv += [name, value] if not value.startswith("-") else [f"{name}={value}"]
    return argv


def door_cases(folder: Path) -> dict[str, tuple[st.SearchStrategy[Any], Callable[[Any], None]]]:
    (folder / "out").mkdir(exist_ok=True)
    plan = json.loads(DEFAULT_PLAN_PATH.read_text())
    plan["prediction"] = {"time_s": 120.0, "cost_usd": 0.01,
                          "breakdown": {"lambda_compute_usd": 0.008, "upload_s": 1.0}}
    return {
        "plan": (mutated_document(plan), lambda value: check_plan(value, folder)),
        "workload": (st.tuples(mutated_document(json.loads(WORKLOAD_FILE.read_text())),
                               st.sampled_from(SEARCHES)),
                     lambda value: check_workload(value, folder)),
        "platform": (mutated_document(json.loads(PLATFORM_FILE.read_text())),
                     lambda value: check_platform(value, folder)),
        "flags": (planner_argv(folder), lambda value: check_planner(value, folder)),
    }


def fuzz(strategy: st.SearchStrategy[_T], check: Callable[[_T], None], cases: int,
         random_seed: int) -> dict[str, Any]:
    """Run ``check`` on ``cases`` generated inputs; count failures instead of stopping."""
    counts: dict[str, Any] = {"cases": 0, "failures": 0, "examples": []}

    @seed(random_seed)
    @settings(max_examples=cases, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def probe(value: _T) -> None:
        counts["cases"] += 1
        try:
            check(value)
        except Exception as error:  # the property: anything escaping check is a failure
            counts["failures"] += 1
            if len(counts["examples"]) < 3:
                counts["examples"].append(f"{type(error).__name__}: {str(error)[:200]}")

    probe()
    return counts


def main_bench(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cases", type=int, default=1000, help="inputs per door")
    parser.add_argument("--seed", type=int, default=15)
    args = parse_args(parser, argv, cases=5)
    doors = []
    with tempfile.TemporaryDirectory() as folder:
        cases = {**door_cases(Path(folder)), **runtime_door_cases()}
        for door, (strategy, check) in cases.items():
            result = fuzz(strategy, check, args.cases, args.seed)
            doors.append({"door": door, **result})
            print(f"{door}: {result['cases']} cases, {result['failures']} failures", flush=True)
    print(json.dumps({"bench": "fuzz_inputs", "seed": args.seed, "doors": doors,
                      "failures": sum(d["failures"] for d in doors)}))


if __name__ == "__main__":
    main_bench()
