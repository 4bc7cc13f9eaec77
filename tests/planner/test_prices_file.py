"""--prices FILE: a price table of your own plans in its region; bad tables exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner.commands.cli import main
from planner.model.inputs.profiles import load_prices

PLAN = ["plan", "--workload", "mobilenet-cifar10", "--deadline", "3600",
        "--max-global-batch", "512", "--epochs", "1", "--min-workers", "2", "--json"]


def _table(tmp_path: Path, **changes: Any) -> Path:
    data: dict[str, Any] = {**load_prices().to_dict(), "region": "eu-west-1", **changes}
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(data))
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def test_a_table_of_another_region_plans_there(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    base = load_prices().to_dict()
    cheap = _table(tmp_path)
    code, ok, _ = _run(capsys, *PLAN, "--region", "eu-west-1", "--prices", str(cheap))
    assert code == 0
    assert ok["plan"]["deployment"]["region"] == "eu-west-1"
    assert ok["plan"]["provenance"]["prices"] == "eu-west-1"
    # the same prices as us-east-1: the same plan and cost
    _, home, _ = _run(capsys, *PLAN)
    assert ok["plan"]["prediction"]["cost_usd"] == home["plan"]["prediction"]["cost_usd"]
    # Lambda twice as dear: its compute share of the cost doubles, so the plan costs more
    dear = _table(tmp_path, lambda_gb_s={k: 2 * v for k, v in base["lambda_gb_s"].items()})
    code, costly, _ = _run(capsys, *PLAN, "--prices", str(dear))  # region from the table
    assert code == 0 and costly["plan"]["deployment"]["region"] == "eu-west-1"
    assert costly["plan"]["prediction"]["cost_usd"] > home["plan"]["prediction"]["cost_usd"]


@pytest.mark.parametrize(("changes", "needle"), [
    ({"region": "eu-west-1"}, "--region"),  # the table's region is not --region's
    ({"s3_put": -1.0}, "s3_put"),
    ({"lambda_gb_s": {"sparc": 1.0}}, "lambda_gb_s"),
])
def test_a_bad_table_exits_2_naming_prices(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                           changes: dict[str, Any], needle: str) -> None:
    path = _table(tmp_path, **changes)
    code, error, _ = _run(capsys, *PLAN, "--region", "eu-central-1", "--prices", str(path))
    assert code == 2
    assert error["argument"] == "--prices" and needle in error["message"]


def test_an_unknown_region_without_a_table_is_refused(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    code, error, _ = _run(capsys, *PLAN, "--region", "eu-west-9")
    assert code == 2 and error["argument"] == "--region"
