"""S3 channel: one object per key under ``s3://bucket/prefix``.

Readers GET known keys; a missing key (NoSuchKey/404) is normal while waiting and maps to
None. LIST is used only by :meth:`S3Channel.delete_prefix` (cleanup, never in the hot path).
Throttling and connection resets are retried by botocore's adaptive retry mode: standard
mode's retries (503 Slow Down among the throttling errors, exponential backoff) plus a
client-side rate limiter that slows this client's sending while it is throttled
(https://docs.aws.amazon.com/boto3/latest/guide/retries.html). S3 answers 503 Slow Down while
it partitions a prefix past its documented rates
(https://docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance.html): every
throttled response this channel's own client gets is counted
(:attr:`S3Channel.throttled_retries`, in the worker's result).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from fasdl.aws import sessions
from fasdl.aws.s3_errors import is_missing
from fasdl.exchange.channel.base import Channel, ChannelError

DELETE_BATCH = 1000  # the DeleteObjects limit
_CONFLICT_RETRIES = 5
# what S3 answers a request over its rate: 503 Slow Down (429 from S3-compatible servers)
THROTTLE_CODES = frozenset({"SlowDown", "503", "429"})
THROTTLE_STATUSES = frozenset({429, 503})


def s3_client_config(*, path_style: bool = False, max_attempts: int = 8,
                     max_pool_connections: int = 32, read_timeout_s: float = 120.0) -> Any:
    """The botocore Config every FasDL S3 client uses (also handy for raw clients in tests)."""
    return Config(
        retries={"mode": "adaptive", "max_attempts": max_attempts},
        s3={"addressing_style": "path" if path_style else "auto"},
        # No flexible checksums: they cost a pass over every payload and some S3-compatible
        # servers reject them; wire frames carry their own crc32.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        max_pool_connections=max_pool_connections,
        connect_timeout=10,
        read_timeout=read_timeout_s,
        tcp_keepalive=True,
    )


def _batched(items: Iterable[str], size: int) -> Iterator[list[str]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


class S3Channel(Channel):
    """Keys are stored as objects ``prefix + key`` in ``bucket`` (prefix used verbatim)."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        path_style: bool = False,
        region: str | None = None,
        max_attempts: int = 8,
        session: Any | None = None,
        client: Any | None = None,
    ) -> None:
        if not bucket:
            raise ValueError("S3Channel needs a bucket name")
        self.bucket = bucket
        self.prefix = prefix
        if client is None:
            config = s3_client_config(path_style=path_style, max_attempts=max_attempts)
            client = (session.client("s3", endpoint_url=endpoint_url, config=config,
                                     region_name=(region or session.region_name
                                                  or sessions.DEFAULT_REGION))
                      if session is not None else
                      sessions.client("s3", endpoint_url=endpoint_url, region=region,
                                      config=config))
            # only a client of its own: a shared one would count others' requests too
            client.meta.events.register("response-received.s3", self._count_throttled)
        self._client = client
        self.endpoint = f"{client.meta.endpoint_url}/{bucket}"
        self._throttled = 0
        self._throttled_lock = threading.Lock()  # the exchange's request threads all count

    def _count_throttled(self, response_dict: dict[str, Any] | None = None,
                         parsed_response: dict[str, Any] | None = None, **_: Any) -> None:
        """botocore's hook after every attempt, retried or not."""
        status = (response_dict or {}).get("status_code")
        code = (parsed_response or {}).get("Error", {}).get("Code")
        if status in THROTTLE_STATUSES or code in THROTTLE_CODES:
            with self._throttled_lock:
                self._throttled += 1

    @property
    def throttled_retries(self) -> int:
        """Responses S3 throttled (503 Slow Down) since this channel was made; botocore
        retried each while attempts were left."""
        return self._throttled

    def _fail(self, action: str, key: str, exc: Exception) -> ChannelError:
        return ChannelError(f"s3 {self.endpoint}: {action} {key!r} failed: {exc}")

    def put(self, key: str, data: bytes | bytearray) -> None:
        try:
            self._client.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=data)
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("put", key, exc) from exc

    def put_if_absent(self, key: str, data: bytes | bytearray) -> bool:
        """A conditional write (``If-None-Match: *``): S3 answers 412 PreconditionFailed when
        the key exists, and 409 ConditionalRequestConflict to one of two racing creates,
        which is retried (AWS S3 User Guide, "conditional writes")."""
        for _ in range(_CONFLICT_RETRIES):
            try:
                self._client.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=data,
                                        IfNoneMatch="*")
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code")
                if code in ("PreconditionFailed", "412"):
                    return False
                if code not in ("ConditionalRequestConflict", "409"):
                    raise self._fail("put_if_absent", key, exc) from exc
                continue
            except BotoCoreError as exc:
                raise self._fail("put_if_absent", key, exc) from exc
            return True
        raise ChannelError(f"s3 {self.endpoint}: put_if_absent {key!r}: still conflicting "
                           f"after {_CONFLICT_RETRIES} attempts")

    def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        """The value of ``key`` and its ETag (for :meth:`put_if_match`), or None."""
        try:
            response = self._client.get_object(Bucket=self.bucket, Key=self.prefix + key)
            body: bytes = response["Body"].read()
        except ClientError as exc:
            if is_missing(exc):
                return None
            raise self._fail("get", key, exc) from exc
        except BotoCoreError as exc:
            raise self._fail("get", key, exc) from exc
        return body, str(response["ETag"])

    def put_if_match(self, key: str, data: bytes | bytearray, etag: str) -> bool:
        """Replace ``key`` only if its ETag is still ``etag`` (``If-Match``); False when S3
        answers 412 PreconditionFailed (changed since), 404 (gone) or 409
        ConditionalRequestConflict (a concurrent conditional write: "fetch the object's ETag
        and retry", AWS S3 User Guide, "conditional writes"), nothing written by this call."""
        try:
            self._client.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=data,
                                    IfMatch=etag)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409") or \
                    is_missing(exc):
                return False
            raise self._fail("put_if_match", key, exc) from exc
        except BotoCoreError as exc:
            raise self._fail("put_if_match", key, exc) from exc
        return True

    def try_get(self, key: str) -> bytes | None:
        found = self.get_versioned(key)
        return None if found is None else found[0]

    def delete(self, keys: Iterable[str]) -> None:
        self._delete_full_keys(self.prefix + key for key in keys)

    def _delete_full_keys(self, full_keys: Iterable[str]) -> int:
        deleted = 0
        for batch in _batched(full_keys, DELETE_BATCH):
            try:
                response = self._client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": key} for key in batch], "Quiet": True},
                )
            except (BotoCoreError, ClientError) as exc:
                raise self._fail("delete", batch[0], exc) from exc
            errors = [e for e in response.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                first = errors[0]
                raise ChannelError(
                    f"s3 {self.endpoint}: delete failed for {len(errors)} keys, first "
                    f"{first.get('Key')!r}: {first.get('Code')} {first.get('Message')}"
                )
            deleted += len(batch)
        return deleted

    def _list(self, full_prefix: str) -> Iterator[str]:
        paginator = self._client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=full_prefix):
                for item in page.get("Contents", []):
                    yield item["Key"]
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("list", full_prefix, exc) from exc

    def list_keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix`` (without the channel's own prefix); cleanup only."""
        return [key[len(self.prefix):] for key in self._list(self.prefix + prefix)]

    def delete_prefix(self, prefix: str) -> int:
        # Materialize the listing first: deleting while paginating can skip keys.
        return self._delete_full_keys(list(self._list(self.prefix + prefix)))

    def close(self) -> None:
        self._client.close()
