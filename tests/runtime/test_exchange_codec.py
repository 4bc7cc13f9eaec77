"""bfloat16 uploads with error feedback (fasdl.exchange.codec): the rounding, the residual, and
K-REDUCE runs that use them, phased and pipelined."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fasdl.contract.plan import PlanError
from fasdl.exchange.channel.memory import MemoryChannel
from fasdl.exchange.codec import (
    BFloat16Codec,
    build_codec,
    from_bfloat16_bits,
    to_bfloat16_bits,
)
from fasdl.exchange.kreduce import KReduceWorker
from fasdl.exchange.wire import BFLOAT16_BITS, decode_shard, encode_shard
from fasdl.training.networks import build_model
from tests.runtime.kreduce_helpers import (
    CLASSES,
    INPUT_SHAPE,
    drive,
    make_plan,
    make_workers,
    random_batches,
)

ITERATIONS = 6
FLOATS = hnp.arrays(np.float32, st.integers(1, 300),
                    elements=st.floats(width=32, allow_nan=False, allow_infinity=True))


@settings(max_examples=200, deadline=None)
@given(values=FLOATS)
def test_rounding_is_torch_bfloat16(values: np.ndarray) -> None:
    """Round to nearest, ties to even: the bits torch's own float32 → bfloat16 cast gives."""
    bits = to_bfloat16_bits(values, np.empty(values.size, dtype=BFLOAT16_BITS))
    expected = torch.from_numpy(values.copy()).to(torch.bfloat16).view(torch.int16).numpy()
    assert np.array_equal(bits, expected.view(np.uint16))
    back = from_bfloat16_bits(bits, np.empty(values.size, dtype=np.float32))
    assert np.array_equal(back, torch.from_numpy(values.copy()).to(torch.bfloat16).float())


def test_ties_go_to_even_and_nan_stays_nan() -> None:
    # 1 + 2^-8 lies halfway between two bfloat16 values: even mantissa (1.0) wins; 1 + 3·2^-8
    # is halfway too and rounds up to the even 1 + 2^-6
    values = np.array([1 + 2**-8, 1 + 3 * 2**-8, np.nan, -np.nan, np.inf], dtype=np.float32)
    back = from_bfloat16_bits(to_bfloat16_bits(values, np.empty(5, BFLOAT16_BITS)),
                              np.empty(5, np.float32))
    assert back[0] == 1.0 and back[1] == 1 + 2**-6
    assert np.isnan(back[2]) and np.isnan(back[3]) and back[4] == np.inf


def test_error_feedback_loses_nothing_over_time() -> None:
    """Whatever rounding drops is in the residual and goes out with the next upload: the sum of
    what was sent plus the residual is the sum of the true differences (to float32)."""
    generator = np.random.default_rng(3)
    reference = generator.normal(0, 1, 1000).astype(np.float32)
    codec = BFloat16Codec(reference, None)
    sent_total = np.zeros(1000, dtype=np.float64)
    true_total = np.zeros(1000, dtype=np.float64)
    for _ in range(50):
        update = generator.normal(0, 1e-3, 1000).astype(np.float32)
        values = reference + update
        bits = codec.frame_values(values, 0, 1000)
        sent_total += from_bfloat16_bits(bits, np.empty(1000, np.float32))
        true_total += (values - reference).astype(np.float64)
        assert np.all(np.abs(codec.residual) <= np.abs(values - reference) * 2**-7 + 1e-9)
    drift = np.abs(sent_total + codec.residual - true_total)
    assert drift.max() < 1e-6  # float32 sums of 50 updates; one rounding alone is ~4e-6
    assert np.abs(sent_total - true_total).max() < 2e-5  # bounded by the last residual


def test_frames_carry_bfloat16_bits_under_their_own_dtype_code() -> None:
    bits = np.array([0x3F80, 0xBF80], dtype=BFLOAT16_BITS)  # 1.0, -1.0
    frame = encode_shard(bits, run="r/0", iteration=3, worker=1, shard=0)
    assert len(frame) == 64 + 4
    decoded = decode_shard(frame, run="r/0", iteration=3, shard=0, dtype=BFLOAT16_BITS)
    assert np.array_equal(decoded, bits)
    with pytest.raises(ValueError, match="wrong dtype"):
        decode_shard(frame, run="r/0", iteration=3, shard=0, dtype=np.float32)


def test_a_plan_names_the_exchange_dtype() -> None:
    with pytest.raises(PlanError, match=r"training\.exchange_dtype"):
        make_plan(2, 1, 4, 4, "bsp", exchange_dtype="float16").validate()
    with pytest.raises(ValueError, match=r"training\.exchange_dtype"):
        build_codec("int8", np.zeros(2, np.float32), None)


def _run(workers: int, aggregators: int, sync: str, **exchange: object
         ) -> tuple[list[KReduceWorker], MemoryChannel]:
    plan = make_plan(workers, aggregators, 4, 6 if aggregators < workers else 4, sync,
                     **exchange)
    torch.manual_seed(0)
    model = build_model("mlp", CLASSES, INPUT_SHAPE)
    channel = MemoryChannel()
    team = make_workers(plan, copy.deepcopy(model), channel)
    drive(team, random_batches(plan, ITERATIONS), range(ITERATIONS))
    return team, channel


@pytest.mark.parametrize(("aggregators", "sync"), [(1, "hap"), (2, "hap"), (2, "bsp"),
                                                   (4, "hap")])
def test_bfloat16_uploads_track_float32_and_the_pipeline_gives_the_same_bits(
        aggregators: int, sync: str) -> None:
    """Same seeds and batches: bf16 + error feedback stays close to the float32 exchange; the
    pipelined exchange folds in the same order, so its weights are the phased bf16 ones bit
    for bit; and the uploads are half the bytes."""
    exact, _ = _run(4, aggregators, sync)
    phased, _ = _run(4, aggregators, sync, exchange_dtype="bfloat16")
    pipelined, _ = _run(4, aggregators, sync, exchange_dtype="bfloat16", exchange_chunks=2)
    scale = float(np.abs(exact[0].parameters).max())
    for a, b, c in zip(exact, phased, pipelined, strict=True):
        assert np.array_equal(b.parameters, c.parameters)
        assert np.abs(a.parameters - b.parameters).max() < 1e-3 * scale
        assert not np.array_equal(a.parameters, b.parameters)  # it did round something
    assert all(w.exchange_state.keys() == {"exchange_reference", "exchange_residual",
                                           *(["exchange_previous"] if w.worker_id < aggregators
                                             else [])} for w in phased)


class _CountingChannel(MemoryChannel):
    """Bytes put per kind of key: a worker's shards (``/shard/``) and merged shards."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = {"shard": 0, "merged": 0}

    def put(self, key: str, data: bytes | bytearray) -> None:
        self.sent["merged" if "/merged/" in key else "shard"] += len(data)
        super().put(key, data)


def test_bfloat16_halves_the_uploaded_shards_not_the_merged_ones() -> None:
    sent = {}
    for dtype in ("float32", "bfloat16"):
        plan = make_plan(4, 2, 4, 6, "hap", exchange_dtype=dtype)
        torch.manual_seed(0)
        channel = _CountingChannel()
        team = make_workers(plan, build_model("mlp", CLASSES, INPUT_SHAPE), channel)
        drive(team, random_batches(plan, 3), range(3))
        sent[dtype] = channel.sent
    frames = 3 * (4 * 2 - 2)  # per iteration: W·K shards less each aggregator's own
    assert sent["bfloat16"]["merged"] == sent["float32"]["merged"]
    assert sent["bfloat16"]["shard"] - 64 * frames == (sent["float32"]["shard"] - 64 * frames) // 2
