"""bench/cold_start.py's pure logic (with bench/cold_start_stats.py): the child's result, the
statistics, the 10-s verdict."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.cold_start import (
    abi_of,
    check_abi,
    decision,
    format_table,
    smallest_memory_mb,
    torch_load_estimate,
)
from bench.cold_start_stats import (
    INIT_LIMIT_S,
    SAFETY_MARGIN,
    BenchError,
    Sample,
    fits,
    parse_child,
    summarize,
)

CHILD_RESULT = {"outcome": "installed", "unpack_s": 6.0, "unpack_user_s": 1.5,
                "unpack_sys_s": 0.5, "import_s": 2.0, "import_user_s": 0.75,
                "import_sys_s": 0.25, "maxrss_mb": 220.0}


def sample(total_s: float, cpu_s: float = 3.0, outcome: str = "installed") -> Sample:
    return Sample(outcome=outcome, unpack_s=total_s * 0.75, unpack_user_s=cpu_s * 0.5,
                  unpack_sys_s=cpu_s * 0.25, import_s=total_s * 0.25,
                  import_user_s=cpu_s * 0.25, import_sys_s=0.0, maxrss_mb=200.0,
                  process_s=total_s + 0.1, process_cpu_s=cpu_s + 0.1, held_s=0.0)


def point(memory: int | None, vcpu: float | None, cold_totals: list[float],
          cpu_s: float = 3.0) -> dict[str, Any]:
    return summarize(memory, vcpu, [sample(t, cpu_s) for t in cold_totals],
                     [sample(1.0, 1.0, "reused")] * len(cold_totals))


def test_the_childs_last_line_is_its_result() -> None:
    out = "a warning from torch\n" + json.dumps(CHILD_RESULT) + "\n"
    result = parse_child(out, process_s=8.5, process_cpu_s=3.2, held_s=4.0)
    assert result.outcome == "installed" and result.total_s == 8.0
    assert result.unpack_cpu_s == 2.0 and result.import_cpu_s == 1.0 and result.cpu_s == 3.0
    assert (result.process_s, result.process_cpu_s, result.held_s) == (8.5, 3.2, 4.0)


@pytest.mark.parametrize("stdout", ["", "Traceback ...", json.dumps({"outcome": "installed"}),
                                    json.dumps({**CHILD_RESULT, "unpack_s": "slow"})])
def test_a_broken_child_result_is_a_bench_error(stdout: str) -> None:
    with pytest.raises(BenchError, match="cannot read the child's result"):
        parse_child(stdout, 1.0, 1.0, 0.0)


def test_the_10_s_verdict_keeps_the_margin() -> None:
    assert (INIT_LIMIT_S, SAFETY_MARGIN) == (10.0, 0.30)
    assert fits(10.0) and not fits(10.01)
    assert fits(7.0, margin=SAFETY_MARGIN) and not fits(7.01, margin=SAFETY_MARGIN)


def test_a_point_reports_min_median_and_the_median_verdict() -> None:
    p = point(384, 0.2171, [30.0, 6.0, 9.0])
    assert p["cold"]["total_s"] == {"min": 6.0, "median": 9.0}
    assert p["cold"]["cpu_s"] == {"min": 3.0, "median": 3.0}
    assert p["warm"]["outcomes"] == ["reused"] and p["repeats"] == 3
    assert p["fits_10s"] and not p["fits_10s_with_margin"]  # 9 s: in 10 s, not in 7 s
    assert p["headroom"] == pytest.approx(0.1)
    assert not point(384, 0.2171, [12.0, 11.0])["fits_10s"]


def test_decision_follows_the_smallest_memory() -> None:
    slow = [point(384, 0.2171, [20.0]), point(1769, 1.0, [5.0])]
    assert decision(slow, 384).startswith("lazy: cold unpack + import 20.0 s at 384 MB")
    fast = [point(384, 0.2171, [6.5]), point(1769, 1.0, [2.0])]
    assert decision(fast, 384).startswith("init:")


def test_torch_load_is_the_cpu_at_one_vcpu_and_is_checked_against_every_point() -> None:
    points = [point(442, 0.25, [16.0], cpu_s=4.0), point(1769, 1.0, [5.0], cpu_s=4.0),
              point(3538, 2.0, [4.0], cpu_s=4.0), point(None, None, [5.0], cpu_s=4.0)]
    estimate = torch_load_estimate(points)
    assert estimate["torch_load_cpu_s"] == 4.0
    assert estimate["uncapped_cpus_busy"] == pytest.approx(0.8)
    checks = {c["memory_mb"]: c for c in estimate["model_check"]}
    assert checks[442]["predicted_s"] == 16.0 and checks[442]["error"] == 0.0
    assert checks[3538]["predicted_s"] == 4.0  # one thread: no faster past one vCPU
    assert checks[1769]["error"] == pytest.approx(-0.2)
    assert torch_load_estimate(points[:1]) == {}


def test_table_has_one_row_per_point_with_its_verdict() -> None:
    table = format_table([point(384, 0.2171, [20.0]), point(None, None, [5.0])])
    lines = table.splitlines()
    assert len(lines) == 4 and "fits 10 s" in lines[0]
    assert lines[2].split()[:2] == ["384", "0.22"] and lines[2].endswith("NO (NO)")
    assert lines[3].startswith("uncapped") and lines[3].endswith("yes (yes)")


def test_smallest_memory_comes_from_the_grid_and_the_shipped_memory_models() -> None:
    memory, workloads = smallest_memory_mb()
    # mlp-digits and squeezenet-cifar10 first fit the grid's 384 MB (cnn-digits' c: 512)
    assert memory == 384 and "mlp-digits" in workloads and "cnn-digits" not in workloads


def test_a_layer_built_for_another_python_is_refused(tmp_path: Path) -> None:
    here = abi_of(sys.executable)
    assert here == f"cp{sys.version_info[0]}{sys.version_info[1]}"
    check_abi(tmp_path, here, sys.executable)  # no manifest: nothing to compare
    (tmp_path / "torch.tar.zst.json").write_text(json.dumps({"python": "cp312"}))
    check_abi(tmp_path, "cp312", "python3.12")
    with pytest.raises(BenchError, match=r"built for cp312 but py311 is cp311: pass --python"):
        check_abi(tmp_path, "cp311", "py311")
