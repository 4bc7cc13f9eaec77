"""One instance instead of Lambda: the --instance parser, the billing formula, the shipped
table's mapping onto workloads, and the verdict's words. Expected values are computed here
from the formula and the shipped files, never by the functions under test."""

from __future__ import annotations

import csv
import json
import math
from importlib import resources
from typing import Any

import pytest

from planner.commands.verdict import Option, verdict
from planner.model.inputs.profiles import load_workload
from planner.model.instance.options import (
    InstanceError,
    InstanceOption,
    instance_cost,
    parse_instance,
    price_run,
)
from planner.model.instance.shipped import (
    default_user_startup_s,
    measurements,
    shipped_options,
    workload_key,
)

DATA = resources.files("planner") / "data"


def shipped_table() -> dict[str, Any]:
    document: dict[str, Any] = json.loads((DATA / "instances.json").read_text("utf-8"))
    return document


def csv_rows() -> list[dict[str, str]]:
    text = (DATA / "measurements" / "instance_training_throughput.csv").read_text("utf-8")
    return list(csv.DictReader(text.splitlines()))


# ---- the parser -----------------------------------------------------------------------------

def test_parser_reads_name_price_epoch_and_an_optional_start_up() -> None:
    option = parse_instance("my-box:1.0:100", default_startup_s=42.0)
    assert (option.name, option.usd_per_hour, option.seconds_per_epoch, option.startup_s) == (
        "my-box", 1.0, 100.0, 42.0)
    assert option.origin == "--instance"
    option = parse_instance("g5.xlarge:1.006:12.5:0", default_startup_s=42.0)
    assert (option.name, option.usd_per_hour, option.seconds_per_epoch, option.startup_s) == (
        "g5.xlarge", 1.006, 12.5, 0.0)


@pytest.mark.parametrize(("text", "field"), [
    ("my-box", "format"), ("a:1", "format"), ("a:1:2:3:4", "format"), ("", "format"),
    ("a:one:100", "usd_per_hour"), ("a:0:100", "usd_per_hour"), ("a:-1:100", "usd_per_hour"),
    ("a:1000.5:100", "usd_per_hour"), ("a:nan:100", "usd_per_hour"),
    ("a:inf:100", "usd_per_hour"), ("a:1:0", "seconds_per_epoch"),
    ("a:1:2e7", "seconds_per_epoch"), ("a:1:x", "seconds_per_epoch"),
    ("a:1:10:-1", "startup_s"), ("a:1:10:90000", "startup_s"), ("a:1:10:soon", "startup_s"),
    (":1:10", "name"), ("my box:1:10", "name"), ("-box:1:10", "name"), ("x" * 65 + ":1:1", "name"),
])
def test_parser_refuses_bad_values_naming_the_part(text: str, field: str) -> None:
    with pytest.raises(InstanceError) as caught:
        parse_instance(text, default_startup_s=60.0)
    assert caught.value.field == field
    if field not in ("format", "name"):  # a range, or what a number is
        assert "must be" in caught.value.detail


# ---- the billing formula --------------------------------------------------------------------

@pytest.mark.parametrize(("price", "seconds"), [(3.6, 30.0), (3.6, 60.0), (3.6, 1000.0),
                                                (0.714, 2602.7), (6.88, 0.0)])
def test_instance_cost_is_per_second_with_a_60_s_minimum(price: float, seconds: float) -> None:
    billed = seconds if seconds > 60 else 60  # the rule as AWS states it
    assert instance_cost(price, seconds) == pytest.approx(price * billed / 3600, rel=1e-12)


def test_a_run_is_start_up_plus_epochs_and_short_runs_pay_the_minute() -> None:
    option = InstanceOption(name="box", usd_per_hour=2.0, seconds_per_epoch=7.5, startup_s=20)
    run = price_run(option, epochs=4, deadline_s=50.0)
    assert run.time_s == 50.0 and run.meets_deadline
    assert run.billed_s == 60.0
    assert run.cost_usd == pytest.approx(2.0 / 60)
    run = price_run(option, epochs=40, deadline_s=50.0)
    assert run.time_s == 320.0 and not run.meets_deadline
    assert run.cost_usd == pytest.approx(2.0 * 320 / 3600)
    row = run.to_dict()
    assert row["kind"] == "instance" and row["cost_usd"] == pytest.approx(run.cost_usd)


# ---- the shipped table ----------------------------------------------------------------------

def test_every_shipped_instance_states_its_price_source_date_and_start_up() -> None:
    table = shipped_table()
    devices = {(row["device"], int(row["threads"]) if row["threads"] else None)
               for row in csv_rows()}
    assert table["instances"]
    for offer in table["instances"]:
        assert "https://" in offer["price_source"] and offer["usd_per_hour"] > 0
        assert offer["startup_s"] >= 0 and "http" in offer["startup_source"]
        assert (offer["device"], offer["threads"]) in devices  # a measurement exists for it
    assert len(table["price_checked"]) == 10 and table["price_checked"].startswith("20")
    assert "60 seconds" in table["billing"]["source"]
    assert default_user_startup_s() == table["default_user_startup_s"]


@pytest.mark.parametrize("name", ["resnet50-cifar10", "mobilenet-cifar10", "squeezenet-cifar10",
                                  "bert-base-cola"])
def test_paper_workloads_get_the_fastest_fp32_batch_within_the_cap(name: str) -> None:
    workload = load_workload(name)
    cap = 128
    offers = shipped_options(workload, cap)
    by_device = {(o["device"], o["threads"]): o["name"] for o in shipped_table()["instances"]}
    model, shape = shipped_table()["workloads"][name]["model"], shipped_table()["workloads"][
        name]["input"]
    expected: dict[str, tuple[int, float]] = {}
    for row in csv_rows():
        threads = int(row["threads"]) if row["threads"] else None
        instance = by_device.get((row["device"], threads))
        if (instance is None or (row["model"], row["input"]) != (model, shape)
                or row["amp_bf16"] == "true" or int(row["batch"]) > cap):
            continue
        per_sample = float(row["s_per_iter"]) / int(row["batch"])
        if instance not in expected or per_sample < expected[instance][1]:
            expected[instance] = (int(row["batch"]), per_sample)
    assert {o.name: o.batch for o in offers.options} == {k: v[0] for k, v in expected.items()}
    for option in offers.options:
        assert option.seconds_per_epoch == pytest.approx(
            workload.samples * expected[option.name][1], rel=1e-9)
        assert option.price_date == shipped_table()["price_checked"]


def test_the_cifar_epoch_time_matches_the_measured_s_per_epoch() -> None:
    # the CSV's s_per_epoch is 50,000 samples over the measured throughput: the same number
    option = {o.name: o for o in shipped_options(load_workload("resnet50-cifar10"),
                                                 1024).options}["p5.4xlarge"]
    row = next(r for r in csv_rows() if (r["model"], r["input"], r["device"], r["batch"],
                                         r["amp_bf16"]) == ("resnet50", "3x32x32", "gpu-h100",
                                                            "256", "false"))
    assert option.seconds_per_epoch == pytest.approx(float(row["s_per_epoch"]), abs=0.01)


def test_a_cap_below_every_measured_batch_gives_no_row_and_says_why() -> None:
    offers = shipped_options(load_workload("resnet50-cifar10"), 32)
    assert offers.options == ()
    assert offers.notes and all("B^g_max 32" in note for note in offers.notes)


def test_an_unmeasured_model_gets_no_shipped_row_and_the_reason() -> None:
    offers = shipped_options(load_workload("cnn-digits"), 1024)
    assert offers.options == ()
    (note,) = offers.notes
    assert "cnn" in note and "--instance" in note


def test_a_workload_of_ones_own_maps_by_model_and_input_shape() -> None:
    resnet = load_workload("resnet50-cifar10")
    photos = resnet.with_workload(name="my-photos", input_shape=[3, 224, 224], classes=10)
    assert workload_key(photos) == ("resnet50", "3x224x224")
    offers = shipped_options(photos, 1024)
    rows_224 = [m for m in measurements() if (m.model, m.input) == ("resnet50", "3x224x224")]
    assert offers.options and all(o.batch in {m.batch for m in rows_224}
                                  for o in offers.options)
    # the paper's name with another model is not the paper's workload
    assert workload_key(resnet.with_workload(model="squeezenet")) is None


# ---- the verdict ----------------------------------------------------------------------------

def _run(name: str, price: float, epoch_s: float, startup: float, epochs: int,
         deadline: float) -> Any:
    return price_run(InstanceOption(name=name, usd_per_hour=price, seconds_per_epoch=epoch_s,
                                    startup_s=startup), epochs, deadline)


def test_the_verdict_names_the_cheapest_option_that_meets_the_deadline() -> None:
    lam = Option("lambda", "Lambda (K-REDUCE, 2 x 3,584 MB)", 7000.0, 0.87, True,
                 detail="K-REDUCE, 2 x 3,584 MB")
    gpu = _run("gpu-box", 6.88, 4.0, 300, 19, 8000)   # fast, dearer than Lambda? compute it
    cpu = _run("cpu-box", 0.714, 134.0, 60, 19, 8000)
    cheapest = min([lam.cost_usd, gpu.cost_usd, cpu.cost_usd])
    judged = verdict(lam, [gpu, cpu], 8000)
    names = {lam.cost_usd: lam.name, gpu.cost_usd: "one gpu-box", cpu.cost_usd: "one cpu-box"}
    assert judged["text"].replace("\n", " ").startswith(
        f"Verdict: {names[cheapest]} is the cheapest way to meet the 8,000-s deadline")
    assert judged["cheapest_within_deadline"]["cost_usd"] == pytest.approx(cheapest, abs=1e-6)
    fastest = min(gpu.time_s, cpu.time_s, lam.time_s)
    assert judged["fastest"]["time_s"] == pytest.approx(fastest, abs=1e-6)
    # an instance wins: the text says at what hourly price Lambda would
    winner = gpu if gpu.cost_usd == cheapest else cpu
    even = lam.cost_usd * 3600 / winner.billed_s
    assert f"${even:.2f} an hour" in judged["text"].replace("\n", " ")


def test_the_verdict_says_when_lambda_wins_and_when_an_instance_is_late() -> None:
    lam = Option("lambda", "Lambda (K-REDUCE, 2 x 768 MB)", 2900.0, 0.04, True,
                 detail="K-REDUCE, 2 x 768 MB")
    late = _run("slow-box", 0.5, 200.0, 60, 20, 3000)   # 4,060 s: past 3,000
    text = verdict(lam, [late], 3000)["text"].replace("\n", " ")
    assert text.startswith("Verdict: Lambda (K-REDUCE, 2 x 768 MB) is the cheapest way")
    assert "Lambda wins: the cheapest instance, one slow-box" in text
    assert "missing the deadline" in text


def test_the_verdict_when_nothing_meets_the_deadline_or_lambda_has_no_plan() -> None:
    slow = _run("slow-box", 1.0, 100.0, 60, 10, 500)
    judged = verdict(None, [slow], 500, lambda_reason="deadline: too short")
    text = judged["text"].replace("\n", " ")
    assert text.startswith("Verdict: nothing here meets the 500-s deadline")
    assert "one slow-box" in text and "No Lambda configuration fits (deadline: too short)" in text
    assert judged["cheapest_within_deadline"] is None
    assert math.isclose(judged["cheapest"]["cost_usd"], slow.cost_usd)


def test_without_an_instance_row_the_verdict_claims_nothing_about_instances() -> None:
    """Issue 43: "the cheapest way" needs something to be cheaper than."""
    lam = Option("lambda", "Lambda (K-REDUCE, 2 x 768 MB)", 2900.0, 0.04, True,
                 detail="K-REDUCE, 2 x 768 MB")
    text = verdict(lam, [], 3000)["text"].replace("\n", " ")
    assert text.startswith("Verdict: Lambda (K-REDUCE, 2 x 768 MB) meets the 3,000-s deadline")
    assert "compared with Lambda configurations only" in text
    assert "cheapest way" not in text


def test_the_verdict_carries_lambdas_likely_range_and_says_when_it_could_turn() -> None:
    """Issue 43: a verdict without a range hides that a ±50 % plan can lose to an instance."""
    box = _run("box", 0.5, 200.0, 60, 1, 3000)  # 260 s billed: $0.0361
    lam = Option("lambda", "Lambda (K-REDUCE, 2 x 768 MB)", 2500.0, 0.03, True,
                 detail="K-REDUCE, 2 x 768 MB", time_range=(1700.0, 3600.0),
                 cost_range=(0.02, 0.045))
    judged = verdict(lam, [box], 3000)
    text = judged["text"].replace("\n", " ")
    assert "(likely 28 min-60 min, $0.0200-$0.0450)" in text
    assert "Within Lambda's likely cost range ($0.0200-$0.0450) the order against one box " \
           "could turn" in text
    assert "At the high end of its likely range Lambda would take 60 min, past the deadline" \
        in text
    assert judged["cheapest"]["cost_range_usd"] == [0.02, 0.045]
    narrow = Option("lambda", lam.name, 2500.0, 0.03, True, detail=lam.detail,
                    time_range=(2400.0, 2600.0), cost_range=(0.029, 0.031))
    text = verdict(narrow, [box], 3000)["text"].replace("\n", " ")
    assert "could turn" not in text and "past the deadline" not in text
