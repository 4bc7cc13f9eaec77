"""Lambda account limits the stack (infra/compute.py), the trigger's start check
(fasdl.aws.account) and the planner's quotas (planner/search/quotas.py) agree on."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from fasdl.contract.fields import PlanError, require_int, show

EXECUTIONS_PER_WORKER = 2  # a worker and a retried segment's overlapping attempt

DEFAULT_ACCOUNT_CONCURRENCY = 1000  # Lambda's default "Concurrent executions" per Region

MIN_UNRESERVED_CONCURRENCY = 100  # PutFunctionConcurrency must leave this many unreserved

QUOTA_NAME = "Concurrent executions"

QUOTA_CODE = "L-B99A9384"  # Service Quotas code of QUOTA_NAME (service code "lambda")

# Provenance keys that carried the quotas before the plan's ``quotas`` section (issue 40);
# a plan that still has one of them and no section is refused (fasdl.contract.plan), so an old
# plan's quota is never silently replaced by the default
ACCOUNT_MEMORY_KEY = "account_max_memory_mb"
ACCOUNT_CONCURRENCY_KEY = "account_max_concurrency"
ACCOUNT_KEY = "account"
MOVED_PROVENANCE_KEYS: tuple[str, ...] = ("max_concurrency", "max_memory_mb", ACCOUNT_MEMORY_KEY,
                                          ACCOUNT_CONCURRENCY_KEY, ACCOUNT_KEY)

# The function-memory limit accounts on the reduced new-account quotas have met:
# CreateFunction answers "'MemorySize' value failed to satisfy constraint: Member must have
# value less than or equal to 3008". AWS documents only that new accounts have "reduced
# concurrency and memory quotas" (gettingstarted-limits.html), not the number.
NEW_ACCOUNT_MEMORY_MB = 3008


MAX_CONCURRENCY = 1_000_000  # only catches typos; W itself stops at 1000 (plan contract)
MIN_MEMORY_MB, MAX_MEMORY_MB = 128, 10_240  # Lambda's function memory range
ACCOUNT_MAX_CHARS = 64  # "<12-digit id> <region> <YYYY-MM-DD>"


@dataclass(frozen=True)
class PlanQuotas:
    """The plan's ``quotas`` section: the account quotas the planner's search kept to
    (planner/search/quotas.py) and, with ``planner plan --account``, what the account itself
    reported. The stack acts on them: a reservation of 2·W must leave Lambda's unreserved
    minimum of ``max_concurrency`` (infra/compute.py), and ``deployment.memory_mb`` above
    ``account_max_memory_mb`` is refused at synth (infra/settings.py), since Lambda would
    refuse to create the functions."""

    max_concurrency: int
    max_memory_mb: int
    account_max_memory_mb: int | None = None  # None: planned without --account
    account_max_concurrency: int | None = None
    account: str | None = None  # "<account id> <region> <date read>", for messages

    def validate(self) -> None:
        require_int("quotas.max_concurrency", self.max_concurrency, EXECUTIONS_PER_WORKER,
                    MAX_CONCURRENCY)
        require_int("quotas.max_memory_mb", self.max_memory_mb, MIN_MEMORY_MB, MAX_MEMORY_MB)
        if self.account_max_memory_mb is not None:
            require_int("quotas.account_max_memory_mb", self.account_max_memory_mb,
                        MIN_MEMORY_MB, MAX_MEMORY_MB)
        if self.account_max_concurrency is not None:
            require_int("quotas.account_max_concurrency", self.account_max_concurrency,
                        EXECUTIONS_PER_WORKER, MAX_CONCURRENCY)
        if self.account is not None and not (isinstance(self.account, str)
                                             and self.account.isprintable()
                                             and 0 < len(self.account) <= ACCOUNT_MAX_CHARS):
            raise PlanError("quotas.account", f"must be printable text of 1-{ACCOUNT_MAX_CHARS} "
                                              f"characters, got {show(self.account)}")

    def to_dict(self) -> dict[str, object]:
        """The JSON section, without the account fields a plan made without --account lacks."""
        return {name: value for name, value in asdict(self).items() if value is not None}
