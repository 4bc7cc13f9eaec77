"""``python -m planner account``: the Lambda limits of this AWS account in one region, written to
``account.json`` for ``planner plan --account account.json``.

What is read, and from where:

* **Concurrency**: Lambda ``GetAccountSettings``: ``AccountLimit.ConcurrentExecutions`` (the
  account's quota, "Concurrent executions", Service Quotas code ``L-B99A9384``) and
  ``AccountLimit.UnreservedConcurrentExecutions`` (the quota minus what other functions have
  reserved). The worker shares the unreserved pool unless the stack reserves for it, and the
  trigger checks the same number before a run (fasdl/aws/account.py), so the unreserved count
  is the ``max_concurrency`` recorded. GetAccountSettings is the account's own number in that
  region, so Service Quotas is not asked.
* **Function memory**: Service Quotas ``ListServiceQuotas`` for service code ``lambda`` (the
  quotas applied to this account: "New AWS accounts have reduced concurrency and memory quotas.
  AWS raises these quotas automatically based on your usage", and the Lambda guide sends you to
  the Service Quotas dashboard to see them). AWS documents no quota code for function memory,
  so the quota is the one whose name speaks of memory with a value in Lambda's 128-10,240 MB
  (``memory_source`` ``service-quotas``). When Service Quotas lists none, or refuses the call,
  the limit is inferred, and labelled a heuristic: accounts held back have been refused with
  CreateFunction's MemorySize "less than or equal to 3008", so a concurrency quota below
  Lambda's default 1,000, the visible half of those reduced quotas, records 3,008 MB
  (``heuristic-new-account``), otherwise 10,240 MB (``heuristic-lambda-maximum``).
  ``--max-memory`` records what you know instead (``given``).
* **Who**: STS ``GetCallerIdentity`` (the account id).

Missing credentials (botocore's NoCredentialsError), an unknown --profile and a refused call
(AccessDenied...) are errors naming the option to fix, exit 2.

AWS sources:
https://docs.aws.amazon.com/lambda/latest/api/API_GetAccountSettings.html,
https://docs.aws.amazon.com/lambda/latest/api/API_AccountLimit.html,
https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html (new accounts, memory,
the Service Quotas dashboard),
https://docs.aws.amazon.com/servicequotas/2019-06-24/apireference/API_ListServiceQuotas.html,
https://docs.aws.amazon.com/general/latest/gr/lambda-service.html (Lambda's service quotas),
https://docs.aws.amazon.com/STS/latest/APIReference/API_GetCallerIdentity.html;
the 3,008-MB refusal as accounts met it: github.com/alexcasalboni/aws-lambda-power-tuning/pull/181,
github.com/aws-samples/serverless-rag-demo/pull/124.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from fasdl.contract.fields import PlanError, require_region
from fasdl.contract.lambda_quotas import (
    DEFAULT_ACCOUNT_CONCURRENCY,
    NEW_ACCOUNT_MEMORY_MB,
    QUOTA_CODE,
    QUOTA_NAME,
)
from planner.commands.cli_inputs import (
    DEFAULT_REGION,
    EXIT_OK,
    CliError,
    check_writable,
    write_atomically,
)
from planner.model.inputs.problem import ModelInputError
from planner.search.quotas import DEFAULT_MAX_MEMORY_MB, LAMBDA_MIN_MEMORY_MB, AccountLimits

DEFAULT_OUT = "account.json"
# Error codes of a refused identity or call (STS and Lambda spell them differently)
REFUSED = frozenset({"AccessDenied", "AccessDeniedException", "UnrecognizedClientException",
                     "InvalidClientTokenId", "ExpiredToken", "ExpiredTokenException",
                     "SignatureDoesNotMatch"})
PERMISSIONS = "sts:GetCallerIdentity and lambda:GetAccountSettings"
# Optional: without it the memory limit is inferred (a heuristic, and the output says why)
QUOTAS_PERMISSION = "servicequotas:ListServiceQuotas"

MEMORY_WHY = {
    "service-quotas": "Service Quotas' Lambda quota {name!r} for this account",
    "heuristic-new-account": (
        f"inferred, a heuristic ({{why}}): the concurrency quota is below Lambda's default "
        f"{DEFAULT_ACCOUNT_CONCURRENCY:,}, the sign of a new account's reduced quotas, whose "
        f"function memory has been held at {NEW_ACCOUNT_MEMORY_MB:,} MB; AWS raises both with "
        "use: once a larger function deploys, rerun with --max-memory 10240"),
    "heuristic-lambda-maximum": (
        "inferred, a heuristic ({why}): Lambda's maximum; if a deploy fails with "
        "'MemorySize ... less than or equal to 3008', rerun with --max-memory 3008"),
    "given": "as --max-memory gave it",
}


Clients = tuple[Any, Any, Any]  # (sts, lambda, service-quotas) boto3 clients


def add_account_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--region", default=DEFAULT_REGION,
                        help=f"the region to read and deploy in (default {DEFAULT_REGION})")
    parser.add_argument("--profile", default=None,
                        help="AWS named profile (default: the standard credential chain)")
    parser.add_argument("--max-memory", type=int, default=None,
                        help="record this function-memory limit in MB (128-10240) instead "
                             "of the one Service Quotas reports or, without it, inferred")
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help=f"where to write the limits (default {DEFAULT_OUT})")
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")


def aws_clients(region: str, profile: str | None) -> Clients:
    """STS, Lambda and Service Quotas clients of ``profile`` (None: the default chain) in
    ``region``."""
    import boto3  # only when the command runs: the planner imports no AWS SDK otherwise

    session = boto3.session.Session(profile_name=profile, region_name=region)
    return session.client("sts"), session.client("lambda"), session.client("service-quotas")


def memory_quota(quotas_client: Any) -> tuple[int | None, str]:
    """Lambda's function-memory quota as Service Quotas applies it to this account, and its
    name; (None, why not) when it lists none or refuses (module docstring)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        for page in quotas_client.get_paginator("list_service_quotas").paginate(
                ServiceCode="lambda"):
            for quota in page.get("Quotas", []):
                name, value = str(quota.get("QuotaName", "")), quota.get("Value")
                if "memory" in name.lower() and isinstance(value, (int, float)) and \
                        LAMBDA_MIN_MEMORY_MB <= value <= DEFAULT_MAX_MEMORY_MB:
                    return int(value), name
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code", "ClientError"))
        return None, f"Service Quotas refused {QUOTAS_PERMISSION} ({code})"
    except BotoCoreError as error:
        return None, f"Service Quotas could not be read ({type(error).__name__})"
    return None, "Service Quotas lists no Lambda memory quota for this account"


def read_limits(clients: Clients, region: str, *, max_memory_mb: int | None = None,
                today: str | None = None) -> AccountLimits:
    """The account's limits in ``region`` (module docstring); botocore errors propagate."""
    sts, lambda_client, quotas_client = clients
    account_id = str(sts.get_caller_identity()["Account"])
    limit = lambda_client.get_account_settings()["AccountLimit"]
    quota = int(limit["ConcurrentExecutions"])
    unreserved = int(limit.get("UnreservedConcurrentExecutions", quota))
    memory, source, note = _memory(quotas_client, quota, max_memory_mb)
    return AccountLimits(account_id=account_id, region=region, max_memory_mb=memory,
                         max_concurrency=unreserved, concurrent_executions=quota,
                         memory_source=source, memory_note=note,
                         read_on=today or datetime.now(UTC).date().isoformat())


def _memory(quotas_client: Any, concurrency: int, given: int | None) -> tuple[int, str, str]:
    """(MB, memory_source, what the output says of it): given, read, or inferred."""
    if given is not None:
        return given, "given", MEMORY_WHY["given"]
    read, name_or_why = memory_quota(quotas_client)
    if read is not None:
        return read, "service-quotas", MEMORY_WHY["service-quotas"].format(name=name_or_why)
    if concurrency < DEFAULT_ACCOUNT_CONCURRENCY:
        source, memory = "heuristic-new-account", NEW_ACCOUNT_MEMORY_MB
    else:
        source, memory = "heuristic-lambda-maximum", DEFAULT_MAX_MEMORY_MB
    return memory, source, MEMORY_WHY[source].format(why=name_or_why)


def fetch_limits(args: argparse.Namespace) -> AccountLimits:
    """:func:`read_limits` with every AWS or input failure as the option to fix."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        NoCredentialsError,
        ProfileNotFound,
    )

    try:
        region = require_region("region", args.region)
    except PlanError as error:
        raise CliError("--region", error.detail) from error
    try:
        return read_limits(aws_clients(region, args.profile), region,
                           max_memory_mb=args.max_memory)
    except NoCredentialsError as error:
        raise CliError("--profile", "no AWS credentials found (NoCredentialsError): configure "
                                    "them (aws configure, AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
                                    "AWS_SECRET_ACCESS_KEY) or pass --profile NAME") from error
    except ProfileNotFound as error:
        raise CliError("--profile", f"{error}: name a profile of ~/.aws/config") from error
    except ClientError as error:
        raise _refused(error, region) from error
    except BotoCoreError as error:  # no endpoint, no network
        raise CliError("--region", f"cannot reach AWS in {region}: {error}") from error
    except ModelInputError as error:
        raise _bad_limit(error, region) from error


def _refused(error: Any, region: str) -> CliError:
    code = str(error.response.get("Error", {}).get("Code", ""))
    operation = getattr(error, "operation_name", "the call")
    if code in REFUSED:
        return CliError("--profile", f"{operation} was refused ({code}): the identity needs "
                                     f"{PERMISSIONS} in {region}; use a profile that has them")
    return CliError("--region", f"{operation} failed in {region}: {error}")


def _bad_limit(error: ModelInputError, region: str) -> CliError:
    if error.field == "max_memory_mb":
        return CliError("--max-memory", error.detail)
    return CliError("--region", f"the account's {error.field} in {region} "
                                f"{error.detail}: nothing can be planned there; raise the "
                                f"quota '{QUOTA_NAME}' (Service Quotas code {QUOTA_CODE})")


def describe(limits: AccountLimits, out: str) -> list[str]:
    return [
        f"account {limits.account_id} in {limits.region} (read {limits.read_on}):",
        f"  concurrency: quota '{QUOTA_NAME}' {limits.concurrent_executions:,}, unreserved "
        f"{limits.max_concurrency:,}, so W <= {limits.max_concurrency // 2:,} (a run needs 2·W)",
        f"  function memory: up to {limits.max_memory_mb:,} MB: {limits.memory_note}",
        f"wrote {out}; plan with --account {out} (the same as --max-memory "
        f"{limits.max_memory_mb} --max-concurrency {limits.max_concurrency})"]


def command_account(args: argparse.Namespace, emit: Callable[[str], None]) -> int:
    check_writable("--out", args.out)  # before any AWS call
    limits = fetch_limits(args)
    write_atomically("--out", args.out, json.dumps(limits.to_dict(), indent=2) + "\n")
    if args.json:
        emit(json.dumps({"status": "ok", "account": limits.to_dict(), "out": args.out,
                         "flags": ["--max-memory", str(limits.max_memory_mb),
                                   "--max-concurrency", str(limits.max_concurrency)]}))
    else:
        for line in describe(limits, args.out):
            emit(line)
    return EXIT_OK
