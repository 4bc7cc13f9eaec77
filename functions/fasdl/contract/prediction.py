"""The plan's ``prediction``: the planner's time and cost, and the figures the stack and the budget
guard act on.

These figures are load-bearing, so they are named, typed and validated fields:
``lambda_compute_usd`` (the Lambda share of ``cost_usd``: the budget guard measures Lambda and
estimates the rest pro rata, fasdl.run.usage) and, on the Valkey channel,
``cache_ecpu_per_s_peak`` / ``cache_ecpu_per_s_mean`` (the cache's ECPU/s maximum and minimum,
infra/cache_limits.py) and ``cache_ramp_s`` (the seconds a fresh cache's ramp adds, as the plan
charged them: 0 when it planned a warm cache or nothing is throttled; the budget and deadline
guards charge them to the first segment, fasdl.run.guards), with the ramp it charged
(``cache_fresh_ecpu_per_s``, ``cache_ramp_doubling_s``: given exactly when ``cache_ramp_s`` > 0;
a local run's cache relay ramps by them, local/servers/ecpu_proxy.py), and
``cache_slot_ecpu_per_s`` (the per-hash-slot ceiling the plan charged its hot keys by; a local
run's relay holds every slot to it; plans written before it have none and are not held), and
``cache_wait_s`` (> 0: instead of the ramp, the run waits before its first segment until the
cache is that many seconds old, when the stack's pre-scaled minimum is in force; the trigger
holds the first segment until then, fasdl.aws.cache_lookup).
Everything else in ``breakdown`` is informational (reports, summaries) and never read for
control.

In plan.json they stay where planners have always written them, inside the
``prediction.breakdown`` object, so plans already written and the template snapshots (which
carry the plan in the trigger's environment) keep their bytes. :meth:`Prediction.from_dict` and
:meth:`Prediction.to_dict` are the only code that knows that layout. A prediction without
``lambda_compute_usd`` is refused (plans written before it: plan again) rather than read as 0,
which would count the whole prediction as non-Lambda cost. Pure Python (Lambda, planner, CDK).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fasdl.contract.cache import MAX_CACHE_WAIT_S
from fasdl.contract.fields import PlanError, require_float, require_number_map

MAX_USD = 1e12
MAX_SECONDS = 1e12
MAX_ECPU = 1e12  # a prediction, not a limit: infra clamps to what ElastiCache accepts
# Both figures are rounded to 6 decimals on their own, so the share may pass the total by one
# unit in the last place
ROUNDING_USD = 1e-6
# The JSON home of the typed figures: inside prediction.breakdown (see the module docstring)
RAMP_FIELDS: tuple[str, ...] = ("cache_fresh_ecpu_per_s", "cache_ramp_doubling_s")
LOAD_BEARING: tuple[str, ...] = ("lambda_compute_usd", "cache_ecpu_per_s_peak",
                                 "cache_ecpu_per_s_mean", "cache_ramp_s", *RAMP_FIELDS,
                                 "cache_slot_ecpu_per_s", "cache_wait_s")
JSON_FIELDS: tuple[str, ...] = ("time_s", "cost_usd", "breakdown")  # prediction's own keys


@dataclass(frozen=True)
class Prediction:
    """The planner's prediction for the plan; ``breakdown`` holds only informational terms."""

    time_s: float
    cost_usd: float
    lambda_compute_usd: float  # the Lambda share of cost_usd (the budget guard)
    cache_ecpu_per_s_peak: float | None = None  # Valkey: the cache's ECPU/s maximum
    cache_ecpu_per_s_mean: float | None = None  # Valkey: the cache's ECPU/s minimum
    cache_ramp_s: float | None = None  # Valkey: what a fresh cache's ramp adds (0: none)
    cache_fresh_ecpu_per_s: float | None = None  # the ramp charged: a fresh cache's rate
    cache_ramp_doubling_s: float | None = None  # and its doubling interval
    cache_slot_ecpu_per_s: float | None = None  # Valkey: the per-slot ceiling charged
    cache_wait_s: float | None = None  # Valkey: the cache's age the first segment waits for
    breakdown: dict[str, float] = field(default_factory=dict)

    def validate(self) -> None:
        # Copied into the trigger's environment and reports: checked like any other field.
        require_float("prediction.time_s", self.time_s, 0.0, MAX_SECONDS)
        require_float("prediction.cost_usd", self.cost_usd, 0.0, MAX_USD)
        require_float(_path("lambda_compute_usd"), self.lambda_compute_usd, 0.0,
                      float(self.cost_usd) + ROUNDING_USD)  # cost_usd checked just above
        _check_cache_ecpu(self.cache_ecpu_per_s_peak, self.cache_ecpu_per_s_mean)
        self._check_ramp()
        if self.cache_slot_ecpu_per_s is not None:
            require_float(_path("cache_slot_ecpu_per_s"), self.cache_slot_ecpu_per_s, 1.0,
                          MAX_ECPU)
        require_number_map("prediction.breakdown", self.breakdown)
        for name in LOAD_BEARING:  # one home per figure: the typed field
            if name in self.breakdown:
                raise PlanError(f"prediction.breakdown.{name}",
                                f"is given twice: as Prediction.{name} and in breakdown")

    def _check_ramp(self) -> None:
        if self.cache_ramp_s is not None:
            require_float(_path("cache_ramp_s"), self.cache_ramp_s, 0.0, MAX_SECONDS)
        if self.cache_wait_s is not None:
            require_float(_path("cache_wait_s"), self.cache_wait_s, 0.0, MAX_CACHE_WAIT_S)
            if self.cache_wait_s > 0 and self.charges_cache_ramp:
                raise PlanError(_path("cache_wait_s"), "is given with a ramp charged "
                                "(cache_ramp_s > 0): a run waits for its cache or ramps")
        given = [name for name in RAMP_FIELDS if getattr(self, name) is not None]
        if self.charges_cache_ramp and len(given) < len(RAMP_FIELDS):
            missing = next(name for name in RAMP_FIELDS if name not in given)
            raise PlanError(_path(missing), "is missing: a plan that charges a fresh cache's "
                                            "ramp (cache_ramp_s > 0) says which ramp")
        if given and not self.charges_cache_ramp:
            raise PlanError(_path(given[0]), "is given without a ramp charged (cache_ramp_s "
                                             "is 0 or missing)")
        if given:
            require_float(_path("cache_fresh_ecpu_per_s"), self.cache_fresh_ecpu_per_s, 1.0,
                          MAX_ECPU)
            require_float(_path("cache_ramp_doubling_s"), self.cache_ramp_doubling_s, 0.0,
                          MAX_SECONDS, open_low=True)

    @property
    def has_cache_ecpu(self) -> bool:
        return self.cache_ecpu_per_s_peak is not None

    @property
    def charges_cache_ramp(self) -> bool:
        """Whether the plan counted on a fresh cache that throttles its first iterations."""
        return bool(self.cache_ramp_s)

    def to_dict(self) -> dict[str, Any]:
        """The JSON layout: the typed figures inside ``breakdown`` (None ones left out), in the
        planner's order (the Lambda share first, the cache's rates last)."""
        rates = {"cache_ecpu_per_s_peak": self.cache_ecpu_per_s_peak,
                 "cache_ecpu_per_s_mean": self.cache_ecpu_per_s_mean,
                 "cache_ramp_s": self.cache_ramp_s,
                 "cache_fresh_ecpu_per_s": self.cache_fresh_ecpu_per_s,
                 "cache_ramp_doubling_s": self.cache_ramp_doubling_s,
                 "cache_slot_ecpu_per_s": self.cache_slot_ecpu_per_s,
                 "cache_wait_s": self.cache_wait_s}
        breakdown = {"lambda_compute_usd": self.lambda_compute_usd, **self.breakdown,
                     **{name: value for name, value in rates.items() if value is not None}}
        return {"time_s": self.time_s, "cost_usd": self.cost_usd, "breakdown": breakdown}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Prediction:
        """From the JSON layout (keys of :data:`JSON_FIELDS`; fasdl.contract.plan reports
        unknown and missing ones, as for every section)."""
        breakdown = data.get("breakdown", {})
        if not isinstance(breakdown, dict):  # its values are checked by validate()
            raise PlanError("prediction.breakdown",
                            f"must be an object of numbers, got {type(breakdown).__name__}")
        if "lambda_compute_usd" not in breakdown:
            raise PlanError(_path("lambda_compute_usd"),
                            "is missing: the budget guard needs the Lambda share of "
                            "prediction.cost_usd (plans written before it: plan again with "
                            "python -m planner plan, or drop the prediction)")
        rest = {name: value for name, value in breakdown.items() if name not in LOAD_BEARING}
        return cls(**{**data, "breakdown": rest,
                      **{name: breakdown[name] for name in LOAD_BEARING if name in breakdown}})


def _path(name: str) -> str:
    return f"prediction.breakdown.{name}"


def _check_cache_ecpu(peak: float | None, mean: float | None) -> None:
    """Both or neither, each within [0, MAX_ECPU]. The mean is not held under the peak: the
    planner's model can put it slightly above (squeezenet-cifar10 on Valkey: 89,844 against
    88,813), and infra/cache_limits.py caps the minimum at the maximum it derives from the peak."""
    if (peak is None) != (mean is None):
        missing = "cache_ecpu_per_s_mean" if mean is None else "cache_ecpu_per_s_peak"
        raise PlanError(_path(missing), "is missing: the cache's ECPU/s peak and mean come "
                                        "together (planner/model/terms/cache_throughput.py)")
    if peak is None:
        return
    require_float(_path("cache_ecpu_per_s_peak"), peak, 0.0, MAX_ECPU)
    require_float(_path("cache_ecpu_per_s_mean"), mean, 0.0, MAX_ECPU)
