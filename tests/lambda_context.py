"""A Lambda context for calling handlers in-process, as the Lambda runtime would.

Handlers are decorated with Powertools' ``@logger.inject_lambda_context``, which reads the
function's name, memory, ARN and the request id from the context: Lambda always passes one.
"""

from __future__ import annotations

import itertools
import time

_REQUESTS = itertools.count(1)


class FakeLambdaContext:
    """The attributes and method of the Python runtime's context that handlers and Powertools
    use; ``remaining_ms`` counts down from construction like an invocation's timeout
    (``memory_mb`` None: a handler falls back to AWS_LAMBDA_FUNCTION_MEMORY_SIZE)."""

    def __init__(self, remaining_ms: int = 600_000, *, function_name: str = "fasdl-test",
                 memory_mb: int | None = 1024) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = memory_mb
        self.invoked_function_arn = (
            f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}")
        self.aws_request_id = f"test-request-{next(_REQUESTS)}"
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "test"
        self._deadline = time.monotonic() + remaining_ms / 1000

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))
