"""Shipped price tables of several regions: `--region` plans with that region's prices and the
plan deploys there; a region without a confirmed ElastiCache price refuses a Valkey plan and
says how to give one (--prices FILE)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner.commands.cli import main
from planner.model.inputs.problem import ModelInputError, Problem
from planner.model.inputs.profiles import (
    VALKEY_PRICES,
    known_regions,
    load_platform,
    load_prices,
    load_workload,
)

PLAN = ["plan", "--workload", "mlp-digits", "--deadline", "3600", "--max-global-batch", "512",
        "--epochs", "1", "--min-workers", "2", "--json"]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(list(argv))
    return code, json.loads(capsys.readouterr().out)


def test_every_shipped_table_is_its_regions_and_dated() -> None:
    assert {"us-east-1", "eu-west-1", "us-west-2"} <= set(known_regions())
    for region in known_regions():
        prices = load_prices(region)
        assert prices.region == region
        assert prices.s3_storage_gb_month > 0 and prices.sfn_transition > 0
        assert "https://aws.amazon.com/" in prices.source
    for region in ("eu-west-1", "us-west-2"):
        assert "2026-11-28" in load_prices(region).source


def test_plan_in_eu_west_1_uses_its_table_and_deploys_there(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, *PLAN, "--region", "eu-west-1")
    assert code == 0, out
    plan = out["plan"]
    assert plan["deployment"]["region"] == "eu-west-1"
    assert plan["provenance"]["prices"] == "eu-west-1"
    assert plan["prediction"]["breakdown"]["storage_usd"] > 0


def test_a_valkey_plan_without_a_cache_price_names_it_and_the_way_out(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out = _run(capsys, *PLAN, "--region", "eu-west-1", "--channel", "valkey")
    assert code == 2
    assert out["argument"] == "--region"
    assert "valkey_gb_hour" in out["message"] and "--prices FILE" in out["message"]
    # the same region with the cache's prices given in a table of one's own plans
    table = {**load_prices("eu-west-1").to_dict(),
             **{name: value for name, value in load_prices().to_dict().items()
                if name in VALKEY_PRICES}}
    path = tmp_path / "eu-west-1.json"
    path.write_text(json.dumps(table))
    code, out = _run(capsys, *PLAN, "--channel", "valkey", "--prices", str(path))
    assert code == 0, out
    assert out["plan"]["deployment"]["region"] == "eu-west-1"
    assert out["plan"]["prediction"]["breakdown"]["cache_minimum_usd"] > 0


def test_the_model_refuses_a_valkey_problem_without_cache_prices() -> None:
    with pytest.raises(ModelInputError, match="valkey_gb_hour") as raised:
        Problem(workload=load_workload("mlp-digits"), platform=load_platform("valkey"),
                prices=load_prices("us-west-2"), epochs=1, deadline_s=3600,
                max_global_batch=512)
    assert raised.value.field == "prices"
    Problem(workload=load_workload("mlp-digits"), platform=load_platform("s3"),
            prices=load_prices("us-west-2"), epochs=1, deadline_s=3600, max_global_batch=512)
