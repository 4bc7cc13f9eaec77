"""`compare`, `plan --explain` and `frontier` with one instance beside Lambda: the JSON rows,
--instance on the command line (good and bad), the verdict, the frontier's points. Expected
times and costs are computed here from the shipped files and the billing rule."""

from __future__ import annotations

import contextlib
import csv
import io
import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import matplotlib.axes
import pytest

from planner.commands.cli import main

DATA = resources.files("planner") / "data"
RESNET = ["--workload", "resnet50-cifar10", "--deadline", "8000", "--max-global-batch", "1024",
          "--epochs", "19"]
SQUEEZENET = ["--workload", "squeezenet-cifar10", "--deadline", "3000",
              "--max-global-batch", "384", "--epochs", "20"]


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def one_json(text: str) -> dict[str, Any]:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    document: dict[str, Any] = json.loads(lines[0])
    return document


@cache
def resnet_compare() -> dict[str, Any]:
    """One compare of the issue's example (the Lambda searches take ~20 s), shared."""
    code, out, _ = cli("compare", *RESNET, "--instance", "my-box:1.0:100", "--json")
    assert code == 0
    return one_json(out)


def shipped() -> dict[str, Any]:
    table: dict[str, Any] = json.loads((DATA / "instances.json").read_text("utf-8"))
    return table


def expected_shipped_row(name: str, samples: int, epochs: int, cap: int) -> tuple[float, float]:
    """(time, cost) of a shipped instance from the CSV, the price table and the billing rule."""
    offer = next(o for o in shipped()["instances"] if o["name"] == name)
    text = (DATA / "measurements" / "instance_training_throughput.csv").read_text("utf-8")
    rows = [r for r in csv.DictReader(text.splitlines())
            if r["model"] == "resnet50" and r["input"] == "3x32x32"
            and r["device"] == offer["device"] and r["amp_bf16"] == "false"
            and (r["threads"] or None) == (str(offer["threads"]) if offer["threads"] else None)
            and int(r["batch"]) <= cap]
    per_sample = min(float(r["s_per_iter"]) / int(r["batch"]) for r in rows)
    time_s = offer["startup_s"] + epochs * samples * per_sample
    return time_s, offer["usd_per_hour"] * max(60.0, time_s) / 3600.0


def test_compare_json_has_instance_rows_with_price_source_date_time_and_cost() -> None:
    document = resnet_compare()
    rows = {row["name"]: row for row in document["instances"]}
    assert set(rows) == {o["name"] for o in shipped()["instances"]} | {"my-box"}
    for row in rows.values():
        assert row["kind"] == "instance"
        for field in ("usd_per_hour", "price_source", "price_date", "time_s", "cost_usd",
                      "startup_s", "meets_deadline"):
            assert field in row
    for name in ("p5.4xlarge", "c7i.4xlarge"):
        time_s, cost = expected_shipped_row(name, samples=50_000, epochs=19, cap=1024)
        assert rows[name]["time_s"] == pytest.approx(time_s, rel=1e-9)
        assert rows[name]["cost_usd"] == pytest.approx(cost, rel=1e-9)
        assert rows[name]["price_date"] == shipped()["price_checked"]
        assert rows[name]["price_source"].startswith("https://aws.amazon.com/ec2/pricing")
        assert rows[name]["meets_deadline"] == (time_s <= 8000)
    # the Lambda rows are unchanged beside them
    assert [r["method"] for r in document["results"]][:2] == ["exact", "two-stage"]


def test_an_instance_of_ones_own_costs_epochs_times_its_epoch_plus_start_up() -> None:
    row = next(r for r in resnet_compare()["instances"] if r["name"] == "my-box")
    startup = shipped()["default_user_startup_s"]
    expected_time = startup + 19 * 100.0
    assert row["time_s"] == pytest.approx(expected_time)
    assert row["cost_usd"] == pytest.approx(1.0 * expected_time / 3600.0)
    assert row["origin"] == "--instance" and row["price_date"] is None


def test_the_verdict_names_the_cheapest_option_and_the_deadline_outcome() -> None:
    document = resnet_compare()
    lambda_costs = [r["choice"]["cost_usd"] for r in document["results"] if r["feasible"]]
    options = [("lambda", c, True) for c in lambda_costs] + [
        (f"one {r['name']}", r["cost_usd"], r["meets_deadline"]) for r in document["instances"]]
    on_time = [o for o in options if o[2]]
    name, cost, _ = min(on_time, key=lambda o: o[1])
    judged = document["verdict"]
    assert judged["cheapest_within_deadline"]["cost_usd"] == pytest.approx(cost)
    text = judged["text"].replace("\n", " ")
    if name != "lambda":
        assert text.startswith(f"Verdict: {name} is the cheapest way to meet the 8,000-s "
                               "deadline")
        assert "Lambda wins on cost only if" in text
    else:
        assert text.startswith("Verdict: Lambda (") and "Lambda wins:" in text


def test_compare_prints_the_instance_table_and_the_verdict() -> None:
    code, out, _ = cli("compare", *SQUEEZENET, "--instance", "lab:2.5:40:0")
    assert code == 0
    assert "One instance instead (on-demand, per-second billing, 60 s minimum" in out
    for name in ("p5.4xlarge", "c7i.4xlarge", "lab"):
        assert f"\n{name} " in out
    # the CPU row says its hardware was not measured (notes wrap: compare words)
    assert "NOT measured on a c7i" in " ".join(out.split())
    assert "\nVerdict: " in out and "deadline" in out.split("Verdict: ", 1)[1]


def test_a_shipped_name_given_with_instance_replaces_that_row() -> None:
    code, out, _ = cli("compare", *SQUEEZENET, "--instance", "p5.4xlarge:3.0:2.0:100", "--json")
    assert code == 0
    rows = [r for r in one_json(out)["instances"] if r["name"] == "p5.4xlarge"]
    assert len(rows) == 1 and rows[0]["origin"] == "--instance"
    assert rows[0]["cost_usd"] == pytest.approx(3.0 * (100 + 20 * 2.0) / 3600)


@pytest.mark.parametrize(("value", "words"), [
    ("my-box", "NAME:USD_PER_HOUR:SECONDS_PER_EPOCH"), ("my-box:0:100", "(0, 1000]"),
    ("my-box:1:-5", "(0, 1e+07]"), ("my-box:1:10:-1", "[0, 86400]"),
    ("my box:1:10", "letters, digits"), ("my-box:cheap:10", "must be a number"),
])
def test_a_bad_instance_is_one_line_naming_the_flag_and_exit_2(value: str, words: str) -> None:
    code, out, err = cli("compare", *SQUEEZENET, "--instance", value)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: argument --instance: ")
    assert words in lines[0]
    code, out, _ = cli("plan", *SQUEEZENET, "--explain", "--instance", value, "--json")
    assert code == 2 and one_json(out)["argument"] == "--instance"


def test_the_same_instance_name_twice_is_refused() -> None:
    code, _, err = cli("compare", *SQUEEZENET, "--instance", "a:1:1", "--instance", "a:2:2")
    assert code == 2 and "--instance" in err and "twice" in err


def test_a_workload_without_a_measurement_says_why_and_takes_instance_rows() -> None:
    digits = ["--workload", "cnn-digits", "--deadline", "600", "--max-global-batch", "256",
              "--epochs", "5"]
    code, out, _ = cli("compare", *digits, "--json")
    document = one_json(out)
    assert code == 0 and document["instances"] == []
    assert any("no shipped instance row" in note for note in document["instance_notes"])
    code, out, _ = cli("compare", *digits, "--instance", "laptop:0.05:2", "--json")
    assert [r["name"] for r in one_json(out)["instances"]] == ["laptop"]
    code, out, _ = cli("compare", *digits)
    assert "no shipped instance row: workload cnn-digits (model cnn)" in " ".join(out.split())


def test_plan_explain_mentions_the_instance_comparison(tmp_path: Path) -> None:
    code, out, _ = cli("plan", *SQUEEZENET, "--out", str(tmp_path / "plan.json"))
    assert code == 0 and "One instance instead" not in out and "Verdict" not in out
    code, out, _ = cli("plan", *SQUEEZENET, "--explain")
    assert code == 0
    assert "One instance instead" in out and "vs plan" in out and "\nVerdict: " in out
    code, out, _ = cli("plan", *SQUEEZENET, "--explain", "--json")
    document = one_json(out)
    assert {r["name"] for r in document["instances"]} == {"p5.4xlarge", "c7i.4xlarge"}
    plan_cost = document["search"]["choice"]["cost_usd"]
    cheapest = min([plan_cost, *(r["cost_usd"] for r in document["instances"]
                                 if r["meets_deadline"])])
    assert document["verdict"]["cheapest_within_deadline"]["cost_usd"] == pytest.approx(cheapest)
    # the verdict weighs Lambda with the plan's likely range (issue 43)
    lambda_rows = [row for row in document["verdict"].values()
                   if isinstance(row, dict) and row["kind"] == "lambda"]
    assert lambda_rows
    ranges = document["confidence"]["cost_usd"]
    for row in lambda_rows:
        assert row["cost_range_usd"] == pytest.approx([ranges["low"], ranges["high"]], rel=1e-4)


def test_plan_explain_still_compares_instances_when_lambda_cannot_meet_the_deadline() -> None:
    args = ["--workload", "bert-base-cola", "--deadline", "400", "--max-global-batch", "640",
            "--epochs", "6", "--explain"]
    code, out, _ = cli("plan", *args, "--json")
    document = one_json(out)
    assert code == 3 and document["status"] == "infeasible"
    on_time = [r for r in document["instances"] if r["meets_deadline"]]
    judged = document["verdict"]
    if on_time:
        best = min(on_time, key=lambda r: r["cost_usd"])
        assert judged["cheapest_within_deadline"]["name"] == f"one {best['name']}"
    assert "No Lambda configuration fits" in judged["text"].replace("\n", " ")


def test_frontier_draws_each_instance_as_a_point(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: list[tuple[float, float, str]] = []
    original = matplotlib.axes.Axes.scatter

    def spy(self: matplotlib.axes.Axes, x: Any, y: Any, *args: Any, **kwargs: Any) -> Any:
        drawn.append((float(x[0]), float(y[0]), str(kwargs.get("label"))))
        return original(self, x, y, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "scatter", spy)
    png = tmp_path / "frontier.png"
    code, out, _ = cli("frontier", *SQUEEZENET, "--png", str(png), "--points", "4",
                       "--instance", "lab:2.5:40:0", "--json")
    assert code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    points = one_json(out)["instances"]
    assert {p["name"] for p in points} == {"p5.4xlarge", "c7i.4xlarge", "lab"}
    lab = next(p for p in points if p["name"] == "lab")
    assert (lab["time_s"], lab["cost_usd"]) == pytest.approx((20 * 40.0, 2.5 * 800 / 3600))
    plotted = [value for x, y, _ in sorted(drawn) for value in (x, y)]
    assert plotted == pytest.approx([value for p in sorted(points, key=lambda p: p["time_s"])
                                     for value in (p["time_s"], p["cost_usd"])])
    assert any("not measured on it" in label for _, _, label in drawn)  # the c7i row
