"""Errors as Step Functions reports a Lambda task's failure, and what the workflow does.

One table for the state machine (infra/workflow.py), the local emulator (local/) and the
tests. Stdlib only. Each name is what appears as ``Error`` in the Task's failure:

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
TRANSIENT = ("Lambda.ServiceException", "Lambda.AWSLambdaException",
             "Lambda.SdkClientException", "Lambda.ClientExecutionTimeoutException")

# ---- cause texts that classify Lambda.Unknown (and confirm the others) -------------------
TIMEOUT_CAUSE = "*Task timed out after*"
OUT_OF_MEMORY_CAUSE = "*OutOfMemory*"

SERVICE_ERRORS = (THROTTLED, NOT_READY, ENI_NOT_READY, *TRANSIENT)
