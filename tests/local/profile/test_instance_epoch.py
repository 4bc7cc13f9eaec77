"""`python -m local instance-epoch`: an unthrottled epoch timed here becomes an --instance row
the planner weighs, labelled with where it was measured (issue 43, point 5)."""

from __future__ import annotations

import argparse
import json
import math

import pytest

from local.profile import instance_epoch
from planner.commands.cli import main as planner_main
from planner.model.inputs.profiles import WorkloadProfile, load_workload
from planner.model.instance.options import parse_instance


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m local")
    instance_epoch.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["instance-epoch", *argv])


def test_the_epoch_becomes_an_instance_row_the_plan_weighs(
        capsys: pytest.CaptureFixture[str]) -> None:
    said: list[str] = []
    code = instance_epoch.main(_args("--workload", "cnn-digits", "--threads", "1", "--batch",
                                     "32", "--window", "0.3", "--name", "my-box",
                                     "--usd-per-hour", "0.5", "--json"), said.append)
    assert code == 0
    (line,) = said
    timing = json.loads(line)
    assert timing["iterations_per_epoch"] == math.ceil(1438 / 32)  # the digits train split
    assert timing["iterations_timed"] >= 3 and timing["window_s"] >= 0.3
    assert timing["seconds_per_epoch"] == pytest.approx(
        45 * timing["seconds_per_iteration"], rel=1e-2, abs=2e-3)
    assert "1 torch thread(s)" in timing["measured_on"]
    option = parse_instance(timing["instance"], 60.0)
    assert (option.name, option.usd_per_hour) == ("my-box", 0.5)
    assert option.seconds_per_epoch == pytest.approx(timing["seconds_per_epoch"], abs=1e-3)

    capsys.readouterr()
    assert planner_main(["plan", "--workload", "cnn-digits", "--deadline", "3600",
                         "--max-global-batch", "256", "--epochs", "10", "--channel", "s3",
                         "--instance", timing["instance"], "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [row["name"] for row in document["instances"]] == ["my-box"]


def test_without_a_price_the_value_says_what_to_fill_in() -> None:
    said: list[str] = []
    assert instance_epoch.main(_args("--workload", "mlp-digits", "--threads", "1",
                                     "--window", "0.1", "--warmup", "0"), said.append) == 0
    assert any("measured on" in line and "will differ" in line for line in said)
    assert said[-1].startswith("plan against it: python -m planner plan ... --instance "
                               "this-machine:USD_PER_HOUR:")


def test_a_workload_of_ones_own_uses_its_shape() -> None:
    data = load_workload("cnn-digits").to_dict()
    own = WorkloadProfile.from_dict({**data, "dataset": "datasets/mine",
                                     "input_shape": [1, 8, 8], "classes": 4})
    assert instance_epoch.shape_of(own) == ((1, 8, 8), 4)
    shipped = load_workload("squeezenet-cifar10")
    assert instance_epoch.shape_of(shipped) == ((3, 32, 32), 10)


@pytest.mark.parametrize(("argv", "flag"), [
    (["--threads", "0"], "--threads"),
    (["--batch", "0"], "--batch"),
    (["--window", "0"], "--window"),
    (["--name", "no spaces"], "--name"),
    (["--usd-per-hour", "-1"], "--usd-per-hour"),
    (["--workload", "no-such-workload"], "--workload"),
])
def test_bad_input_exits_2_naming_the_flag(argv: list[str], flag: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    said: list[str] = []
    args = _args("--workload", "cnn-digits", *argv)
    assert instance_epoch.main(args, said.append) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"fasdl local instance-epoch: {flag}: "), error
    assert said == []
