"""Errors as Step Functions reports a Lambda task's failure, and what the workflow does.

One table for the state machine (infra/workflow.py), the local emulator (local/) and the
tests. Stdlib and the runtime's contract only. Each name is what appears as ``Error`` in the
Task's failure:

- a **function error** (the invocation ran and failed) carries the ``errorType`` of Lambda's
  response: the handler's exception class name, or Lambda's own ``Sandbox.Timedout`` (timeout),
  ``Runtime.ExitError`` (the process exited), ``Runtime.OutOfMemory`` (killed at its memory
  size) [1, 2];
- a **service error** (the Invoke call itself failed) is ``Lambda.<ExceptionName>`` of the
  Invoke API [3, 4];
- the optimized ``lambda:invoke`` integration reports unhandled errors, out-of-memory and
  timeouts included, as ``Lambda.Unknown`` [4]; the workflow tells them apart by the cause text.

[1] https://docs.aws.amazon.com/lambda/latest/dg/troubleshooting-invocation.html
[2] https://docs.aws.amazon.com/lambda/latest/dg/python-exceptions.html
[3] https://docs.aws.amazon.com/lambda/latest/api/API_Invoke.html (Errors)
[4] https://docs.aws.amazon.com/step-functions/latest/dg/bp-lambda-serviceexception.html
"""

from __future__ import annotations

from fasdl.contract.errors import ENI_LIMIT as ENI_LIMIT
from fasdl.contract.errors import SUBNET_IP_LIMIT as SUBNET_IP_LIMIT
from fasdl.contract.errors import VPC_FAILURE_ADVICE

# ---- function errors --------------------------------------------------------------------
TIMEOUT = "Sandbox.Timedout"          # the function ran past its timeout
EXIT = "Runtime.ExitError"            # the runtime process exited (crash, kill)
OUT_OF_MEMORY = "Runtime.OutOfMemory"  # killed for using more than its memory size
UNKNOWN = "Lambda.Unknown"            # optimized integration: any of the three above
TASK_TIMEOUT = "States.Timeout"        # the Task's own TimeoutSeconds expired

# ---- service errors of the Invoke call (nothing ran) -------------------------------------
THROTTLED = "Lambda.TooManyRequestsException"  # concurrency or request-rate limit
# A VPC function idle for weeks loses its network interfaces; the next invoke fails with this
# while Lambda recreates them ("the function is inactive and its VPC connection is no longer
# available"), and ENINotReady while one is still being created (API_Invoke.html).
NOT_READY = "Lambda.ResourceNotReadyException"
ENI_NOT_READY = "Lambda.ENINotReadyException"
# Invoking a function whose State is Pending ("The operation cannot be performed at this time.
# The function is currently in the following state: Pending", troubleshooting-invocation.html).
# Not retried: the trigger waits for an Active worker before the first Map (fasdl/aws/account.py).
CONFLICT = "Lambda.ResourceConflictException"
# Lambda could not set up a VPC function's network (HTTP 502, API_Invoke.html): EC2 throttled
# it ("Amazon EC2 throttled Lambda during Lambda function initialization"), or EC2 answered an
# unexpected error; both pass, so they join the transient 5xx's Retry (backoff from 2 s). Nothing
# ran. The VPC errors a retry cannot cure (no free IP addresses, the network-interface quota,
# missing permissions, a deleted subnet or security group) are not retried: the run fails with
# the name, and failure.json says what to do (fasdl.contract.errors.VPC_FAILURE_ADVICE).
EC2_THROTTLED = "Lambda.EC2ThrottledException"
EC2_UNEXPECTED = "Lambda.EC2UnexpectedException"
VPC_TRANSIENT = (EC2_THROTTLED, EC2_UNEXPECTED)
VPC_FAILURES = tuple(VPC_FAILURE_ADVICE)  # SUBNET_IP_LIMIT, ENI_LIMIT, ... (imported above)
TRANSIENT = ("Lambda.ServiceException", "Lambda.AWSLambdaException",
             "Lambda.SdkClientException", "Lambda.ClientExecutionTimeoutException",
             *VPC_TRANSIENT)

# ---- cause texts that classify Lambda.Unknown (and confirm the others) -------------------
TIMEOUT_CAUSE = "*Task timed out after*"
OUT_OF_MEMORY_CAUSE = "*OutOfMemory*"

SERVICE_ERRORS = (THROTTLED, NOT_READY, ENI_NOT_READY, *TRANSIENT, *VPC_FAILURES)
