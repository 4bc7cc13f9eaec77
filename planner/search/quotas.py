"""AWS account quotas as hard planner constraints.

All W workers of a run execute at once, and a retried segment can overlap the aborted attempt's
workers, so a run needs 2·W concurrent executions. New accounts often have far less than the
default regional concurrency of 1000 and may be held at 3008 MB of function memory
(https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).

The quotas cut the search grid itself: M <= max-memory on the problem's own 128-MB grid (so a
3008-MB quota allows 2944 MB) and W <= max-concurrency // 2. Every search and baseline walks the
same smaller grid. When nothing in it is feasible but raising a quota would make something
feasible, that quota is named as the binding constraint.

``--account FILE`` (:class:`AccountLimits`, written by ``python -m planner account``) sets both
quotas from what the account itself reported, and the plan records them (provenance
``account_max_memory_mb``...), so the synth can refuse a plan the account cannot deploy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace

from fasdl.contract.fields import is_int_in, require_region
from fasdl.contract.lambda_quotas import (
    ACCOUNT_CONCURRENCY_KEY,
    ACCOUNT_KEY,
    ACCOUNT_MEMORY_KEY,
    DEFAULT_ACCOUNT_CONCURRENCY,
    EXECUTIONS_PER_WORKER,
)
from planner.model.inputs.problem import VIOLATION_TEXT, ModelInputError, Problem, Violation
from planner.search.searches import Choice, SearchResult

# One definition with the trigger's runtime check (the functions bundle has no planner).
DEFAULT_MAX_CONCURRENCY = DEFAULT_ACCOUNT_CONCURRENCY  # AWS's default regional concurrency
DEFAULT_MAX_MEMORY_MB = 10240   # Lambda's largest function memory
LAMBDA_MIN_MEMORY_MB = 128
MAX_CONCURRENCY_INPUT = 1_000_000  # only catches typos; W itself stops at 1000 (plan contract)

Search = Callable[[Problem], SearchResult]


# how max_memory_mb was found: read from Service Quotas, inferred (the two heuristics, labelled
# so in account.json and the output), or given with --max-memory
MEMORY_SOURCES = ("service-quotas", "heuristic-new-account", "heuristic-lambda-maximum", "given")


@dataclass(frozen=True)
class AccountLimits:
    """The Lambda limits of one account in one region, as ``python -m planner account`` read
    them (its file, ``account.json``)."""

    account_id: str
    region: str
    max_memory_mb: int  # the function memory the account may configure
    max_concurrency: int  # AccountLimit.UnreservedConcurrentExecutions: what the worker gets
    concurrent_executions: int  # AccountLimit.ConcurrentExecutions: the account's quota
    memory_source: str  # one of MEMORY_SOURCES (planner/commands/account.py says which is when)
    memory_note: str  # where max_memory_mb came from, in words ("inferred, a heuristic (...)")
    read_on: str  # the UTC date of the read, YYYY-MM-DD: quotas change

    def __post_init__(self) -> None:
        if not (isinstance(self.account_id, str) and len(self.account_id) == 12
                and self.account_id.isdigit()):
            raise ModelInputError("account_id", f"must be a 12-digit AWS account id, got "
                                          f"{self.account_id!r}")
        require_region("region", self.region)
        _check("max_memory_mb", self.max_memory_mb, LAMBDA_MIN_MEMORY_MB,
               DEFAULT_MAX_MEMORY_MB, "MB, Lambda's function memory range")
        _check("max_concurrency", self.max_concurrency, EXECUTIONS_PER_WORKER,
               MAX_CONCURRENCY_INPUT, "unreserved concurrent executions; a run needs 2·W")
        _check("concurrent_executions", self.concurrent_executions, self.max_concurrency,
               MAX_CONCURRENCY_INPUT, "the account's quota, at least the unreserved part")
        if self.memory_source not in MEMORY_SOURCES:
            raise ModelInputError("memory_source", f"must be one of {', '.join(MEMORY_SOURCES)}, "
                                             f"got {self.memory_source!r}")
        if not isinstance(self.memory_note, str) or not 0 < len(self.memory_note) <= 600:
            raise ModelInputError("memory_note", f"must be a sentence of 1-600 characters, got "
                                                 f"{self.memory_note!r}")
        if not (isinstance(self.read_on, str) and len(self.read_on) == 10
                and self.read_on[4] == self.read_on[7] == "-"
                and self.read_on.replace("-", "").isdigit()):
            raise ModelInputError("read_on", f"must be a date YYYY-MM-DD, got {self.read_on!r}")

    @classmethod
    def from_dict(cls, data: object) -> AccountLimits:
        """Every field present, none unknown; a bad one raises a FieldError naming it."""
        names = [item.name for item in fields(cls)]
        if not isinstance(data, Mapping):
            raise ModelInputError("<root>", f"must be a JSON object, got {type(data).__name__}")
        unknown = sorted(set(data) - set(names))
        missing = [name for name in names if name not in data]
        if unknown or missing:
            field = (unknown or missing)[0]
            raise ModelInputError(str(field), "is not a field of an account file" if unknown else
                            "is missing (python -m planner account writes every field)")
        return cls(**{name: data[name] for name in names})

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def provenance(self) -> dict[str, str]:
        return {ACCOUNT_MEMORY_KEY: str(self.max_memory_mb),
                ACCOUNT_CONCURRENCY_KEY: str(self.max_concurrency),
                ACCOUNT_KEY: f"{self.account_id} {self.region} {self.read_on}"}


@dataclass(frozen=True)
class Quotas:
    """The account's concurrent-execution and function-memory quotas; ``account``: what the
    account reported (--account), which the two may only lower."""

    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    max_memory_mb: int = DEFAULT_MAX_MEMORY_MB
    account: AccountLimits | None = None

    def __post_init__(self) -> None:
        _check("max_concurrency", self.max_concurrency, EXECUTIONS_PER_WORKER,
               MAX_CONCURRENCY_INPUT if self.account is None else self.account.max_concurrency,
               "concurrent executions; a run needs 2·W" if self.account is None else
               "at most what the --account file allows")
        _check("max_memory_mb", self.max_memory_mb, LAMBDA_MIN_MEMORY_MB,
               DEFAULT_MAX_MEMORY_MB if self.account is None else self.account.max_memory_mb,
               "MB, Lambda's function memory range" if self.account is None else
               "MB, at most what the --account file allows")

    @classmethod
    def of_account(cls, account: AccountLimits, max_concurrency: int | None = None,
                   max_memory_mb: int | None = None) -> Quotas:
        """The account's limits, or lower ones given on the command line."""
        return cls(max_concurrency=(account.max_concurrency if max_concurrency is None
                                    else max_concurrency),
                   max_memory_mb=(account.max_memory_mb if max_memory_mb is None
                                  else max_memory_mb), account=account)

    @property
    def max_workers(self) -> int:
        return self.max_concurrency // EXECUTIONS_PER_WORKER

    def provenance(self) -> dict[str, str]:
        return {"max_concurrency": str(self.max_concurrency),
                "max_memory_mb": str(self.max_memory_mb),
                **(self.account.provenance() if self.account is not None else {})}

    def apply(self, problem: Problem) -> Problem | None:
        """``problem`` on the grid the quotas leave; None when they leave nothing."""
        return limit_workers(limit_memory(problem, self.max_memory_mb), self.max_workers)


def limit_memory(problem: Problem | None, limit_mb: int) -> Problem | None:
    """M <= ``limit_mb``, keeping the problem's grid points (no new memory sizes)."""
    if problem is None:
        return None
    grid = problem.memory_grid()
    allowed = grid[grid <= limit_mb]
    if allowed.size == 0:
        return None
    return replace(problem, memory_max_mb=int(allowed.max()))


def limit_workers(problem: Problem | None, max_workers: int) -> Problem | None:
    """W <= ``max_workers``; None when that is below the problem's smallest W."""
    if problem is None or problem.min_workers > max_workers:
        return None
    return replace(problem, max_workers=min(problem.max_workers, max_workers))


def search_within(problem: Problem, quotas: Quotas, search: Search,
                  explain: Search | None = None) -> SearchResult:
    """``search`` on the grid the quotas leave. An infeasible result names a quota as the
    binding constraint when raising it (to ``problem``'s own limits) makes ``explain``
    (default: ``search``; a faster search with the same optimum will do) feasible."""
    bounded = quotas.apply(problem)
    if _bounds(bounded) == _bounds(problem):  # the quotas cut nothing: nothing to explain
        return search(problem)
    explain = explain or search
    if bounded is None:  # the quotas leave no grid at all, so they bind whatever else does
        raised = search(problem)  # ``search`` itself, so the result carries its method
        nothing = replace(raised, evaluated=0, elapsed_s=0.0)  # nothing was searched within
        if not raised.feasible:
            violation, head = _emptying_quota(problem, quotas)
            return _named(nothing, (violation,), quotas, None, head,
                          f"without the quotas: {raised.reason}")
        binding, choice = _binding_quota(problem, quotas, explain, bounded, raised)
        return _named(nothing, binding, quotas, choice)
    result = search(bounded)
    if result.feasible:
        return result
    raised = explain(problem)
    if not raised.feasible:
        return result  # infeasible for another reason: that reason binds
    binding, choice = _binding_quota(problem, quotas, explain, bounded, raised)
    return _named(result, binding, quotas, choice, tail=f"within the quotas: {result.reason}")


def _binding_quota(problem: Problem, quotas: Quotas, search: Search, bounded: Problem | None,
                   raised: SearchResult) -> tuple[tuple[Violation, ...], Choice | None]:
    """Which quota to raise: memory alone, else concurrency alone, else both."""
    only_other = ((Violation.MAX_MEMORY, limit_workers(problem, quotas.max_workers)),
                  (Violation.MAX_CONCURRENCY, limit_memory(problem, quotas.max_memory_mb)))
    for violation, partial in only_other:
        if partial is None or _bounds(partial) == _bounds(bounded):
            continue  # the other quota alone leaves nothing, or this one cuts nothing
        relaxed = raised if _bounds(partial) == _bounds(problem) else search(partial)
        if relaxed.feasible:
            return (violation,), relaxed.choice
    return (Violation.MAX_MEMORY, Violation.MAX_CONCURRENCY), raised.choice


def _bounds(problem: Problem | None) -> tuple[int, int] | None:
    """What a quota changes in a problem (its other fields may hold NaN, which breaks ==)."""
    return None if problem is None else (problem.memory_max_mb, problem.max_workers)


def _emptying_quota(problem: Problem, quotas: Quotas) -> tuple[Violation, str]:
    if limit_memory(problem, quotas.max_memory_mb) is None:
        return Violation.MAX_MEMORY, (
            f"max-memory: no memory size of the grid ({problem.memory_min_mb}-"
            f"{problem.memory_max_mb} MB) is within the quota")
    return Violation.MAX_CONCURRENCY, (
        f"max-concurrency: the quota allows fewer workers than the smallest W considered "
        f"({problem.min_workers}, which needs {EXECUTIONS_PER_WORKER * problem.min_workers} "
        "concurrent executions)")


def _named(template: SearchResult, binding: tuple[Violation, ...], quotas: Quotas,
           choice: Choice | None, head: str | None = None, tail: str | None = None
           ) -> SearchResult:
    """``template`` made infeasible, its reason starting with the binding quota's name."""
    if head is None:
        head = (VIOLATION_TEXT[binding[0]] if len(binding) == 1 else
                "max-memory and max-concurrency: a feasible configuration needs more than "
                "both account quotas allow")
    reason = (f"{head} (quotas: M <= {quotas.max_memory_mb} MB; {quotas.max_concurrency} "
              f"concurrent executions, so W <= {quotas.max_workers}")
    if choice is not None:
        raised = " and ".join(VIOLATION_TEXT[v].split(":")[0] for v in binding)
        reason += (f"; with {raised} raised the search chooses M = {choice.memory_mb} MB, "
                   f"W = {choice.workers}")
    reason += ")" + (f"; {tail}" if tail else "")
    return replace(template, choice=None, reason=reason, violation=binding[0])


def _check(name: str, value: object, low: int, high: int, unit: str) -> None:
    if not is_int_in(value, low, high):
        raise ModelInputError(name, f"must be an integer in [{low}, {high}] ({unit}), "
                                    f"got {value!r}")
