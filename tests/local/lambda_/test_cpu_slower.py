"""``--cpu-slower F`` (local/lambda_/lambda_speed.py): an emulated platform F times slower in
compute gets M/1769/F vCPU for its workers and keeps Lambda's thread count; out of range it
is refused."""

from __future__ import annotations

import pytest

from local.__main__ import main
from local.lambda_.lambda_speed import EmulationError, load_emulation


def test_a_slower_platform_gets_a_smaller_cpu_share_and_the_same_threads() -> None:
    plain = load_emulation(None, channel="s3")
    slower = load_emulation(None, channel="s3", cpu_slower=2.0)
    assert slower.cpu_share(1024) == pytest.approx(plain.cpu_share(1024) / 2)
    # the orchestration's functions keep their share: only the training workers are slower
    assert slower.cpu_share(256, "handlers.trigger.handler") == plain.cpu_share(256)
    assert slower.threads(3538) == plain.threads(3538) == 2
    assert "compute 2x slower" in slower.describe_platform()
    assert "slower" not in plain.describe_platform()


@pytest.mark.parametrize("factor", [0.5, 17.0])
def test_a_factor_out_of_range_is_refused_naming_the_flag(factor: float) -> None:
    with pytest.raises(EmulationError, match=r"--cpu-slower: must be in \[1, 16\]"):
        load_emulation(None, channel="s3", cpu_slower=factor)


def test_without_emulation_the_factor_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--cpu-slower", "2"]) == 2
    assert "--cpu-slower slows the emulated Lambda CPU" in capsys.readouterr().err
