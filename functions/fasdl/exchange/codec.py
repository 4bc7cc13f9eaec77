"""What a worker's uploaded shards carry (``training.exchange_dtype``).

``float32``: the worker's parameter values, as the paper sends them.

``bfloat16``: the difference from the last merged model, rounded to bfloat16, with error
feedback. With R the last merged model this worker loaded (before the first one, the seeded
model every worker starts from) and e the residual it keeps (zero at first), it sends

    q = bf16(x − R + e)      and keeps      e ← (x − R + e) − q

so what rounding drops in one iteration goes out with the next, and nothing is lost over
time. An aggregator folds R_w + q_w for each peer w, in float64 and in the usual worker order
(bitwise reproducible, like fasdl.exchange.kreduce's float32 fold), its own shard exactly. R_w is
merged
l−1 for a worker that is not stale and merged l−2 for a HAP non-aggregator (staleness 1): the
aggregator keeps its shard's previous merged values for those. Merged shards travel in
float32, so every worker's R is the same bits as the aggregator's.

Uploads take half the bytes; merged downloads do not shrink. The state, checkpointed with the
worker (fasdl.run.checkpoint) so a resumed run is bitwise the undisturbed one: R and e (2·S_m of
float32) and, on an aggregator, its shard's previous merged values (S_m/K). Rounding is to
nearest, ties to even, of the float32 bits (NaN stays NaN).
"""

from __future__ import annotations

import numpy as np

from fasdl.exchange.inflight import SCALED_AT_ONCE, add_weighted
from fasdl.exchange.wire import BFLOAT16_BITS

FLOAT32, BFLOAT16 = "float32", "bfloat16"
_NAN_BITS = np.uint16(0x7FC0)
_ROUND_BIAS = np.uint32(0x7FFF)


def to_bfloat16_bits(values: np.ndarray, out: np.ndarray) -> np.ndarray:
    """float32 ``values`` rounded to bfloat16 (nearest, ties to even), as uint16 bits."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = bits + (_ROUND_BIAS + ((bits >> 16) & np.uint32(1)))
    np.right_shift(rounded, 16, out=rounded)
    out[:] = rounded  # the upper half, which fits 16 bits
    out[np.isnan(values)] = _NAN_BITS  # a rounded NaN could carry into the sign or zero
    return out


def from_bfloat16_bits(bits: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The float32 values of bfloat16 ``bits`` (exact: the lower 16 bits are zero)."""
    wide = out.view(np.uint32)
    wide[:] = bits
    np.left_shift(wide, 16, out=wide)
    return out


class ExchangeCodec:
    """``float32``: shards go out as they are; a peer's frame is folded as it comes."""

    wire_dtype: np.dtype[np.generic] = np.dtype(np.float32)

    @property
    def itemsize(self) -> int:
        return int(self.wire_dtype.itemsize)

    def frame_values(self, values: np.ndarray, start: int, end: int) -> np.ndarray:
        """What this worker uploads for ``values[start:end]`` (framed at once by the caller)."""
        return values[start:end]

    def fold_peer(self, total: np.ndarray, received: np.ndarray, weight: float, *, stale: bool,
                  start: int, scratch: np.ndarray) -> None:
        """total += weight · (peer's values of [start, start + len(total)))."""
        add_weighted(total, received, weight, scratch)

    def loaded(self, values: np.ndarray, start: int, end: int) -> None:
        """Merged values of [start, end) were just loaded into ``values``."""

    def merged_own(self, values: np.ndarray, start: int, end: int) -> None:
        """This aggregator just merged [start, end) of its own shard into ``values``."""

    def state(self) -> dict[str, np.ndarray]:
        """The arrays a checkpoint keeps, by name (views)."""
        return {}


class BFloat16Codec(ExchangeCodec):
    """``bfloat16``: differences from the last merged model with error feedback (above)."""

    wire_dtype = BFLOAT16_BITS

    def __init__(self, initial: np.ndarray, own_shard: tuple[int, int] | None) -> None:
        self.reference = np.array(initial, dtype=np.float32)  # R: the last merged model
        self.residual = np.zeros_like(self.reference)  # e
        self.own_start = own_shard[0] if own_shard else 0
        # an aggregator's shard one merge before R: what a HAP non-aggregator's R holds
        self.previous = (self.reference[own_shard[0]:own_shard[1]].copy() if own_shard
                         else np.empty(0, dtype=np.float32))
        self._bits = np.empty(0, dtype=BFLOAT16_BITS)
        self._values = np.empty(SCALED_AT_ONCE, dtype=np.float32)

    def frame_values(self, values: np.ndarray, start: int, end: int) -> np.ndarray:
        if self._bits.size < end - start:
            self._bits = np.empty(end - start, dtype=BFLOAT16_BITS)
        for begin in range(start, end, SCALED_AT_ONCE):
            stop = min(begin + SCALED_AT_ONCE, end)
            difference = self._values[:stop - begin]
            np.subtract(values[begin:stop], self.reference[begin:stop], out=difference)
            difference += self.residual[begin:stop]
            bits = to_bfloat16_bits(difference, self._bits[begin - start:stop - start])
            sent = from_bfloat16_bits(bits, self.residual[begin:stop])
            np.subtract(difference, sent, out=self.residual[begin:stop])
        return self._bits[:end - start]

    def fold_peer(self, total: np.ndarray, received: np.ndarray, weight: float, *, stale: bool,
                  start: int, scratch: np.ndarray) -> None:
        count = len(total)
        if stale:
            base = self.previous[start - self.own_start:start - self.own_start + count]
        else:
            base = self.reference[start:start + count]
        add_weighted(total, base, weight, scratch)
        for begin in range(0, count, SCALED_AT_ONCE):
            stop = min(begin + SCALED_AT_ONCE, count)
            delta = from_bfloat16_bits(received[begin:stop], self._values[:stop - begin])
            add_weighted(total[begin:stop], delta, weight, scratch)

    def loaded(self, values: np.ndarray, start: int, end: int) -> None:
        self.reference[start:end] = values[start:end]

    def merged_own(self, values: np.ndarray, start: int, end: int) -> None:
        offset = start - self.own_start
        self.previous[offset:offset + end - start] = self.reference[start:end]
        self.reference[start:end] = values[start:end]

    def state(self) -> dict[str, np.ndarray]:
        state = {"exchange_reference": self.reference, "exchange_residual": self.residual}
        if self.previous.size:
            state["exchange_previous"] = self.previous
        return state


def build_codec(dtype: str, initial: np.ndarray, own_shard: tuple[int, int] | None
                ) -> ExchangeCodec:
    """The codec of ``training.exchange_dtype`` for a worker whose parameters are ``initial``
    (``own_shard``: an aggregator's shard bounds; None for a non-aggregator)."""
    if dtype == BFLOAT16:
        return BFloat16Codec(initial, own_shard)
    if dtype != FLOAT32:
        raise ValueError(f"training.exchange_dtype: must be {FLOAT32} or {BFLOAT16}, "
                         f"got {dtype!r}")
    return ExchangeCodec()
