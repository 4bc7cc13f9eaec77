"""Finalize reads the workers' results in parallel, against the real S3 server (SeaweedFS).

W x segments x attempts GETs one by one can outlast finalize's 900 s in a wide, long run.
The reads must overlap (the first two GETs meet at a barrier, which a one-by-one reader never
reaches: no timing involved) and give the same result, in the same order, as one by one.
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

import pytest

from fasdl.contract.settings import Settings
from fasdl.run.results import segment_results, summarize
from local.servers.managed import SeaweedS3Server

WORKERS = 12
ATTEMPTS = {0: 1, 1: 2, 2: 1}  # segment index -> attempts: segment 1 was retried once


class MeetingClient:
    """The real client; its first two get_object calls wait for each other, and it records
    the most GETs in flight at once."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._meet = threading.Barrier(2, timeout=30)
        self._lock = threading.Lock()
        self._calls = 0
        self._in_flight = 0
        self.max_in_flight = 0

    def get_paginator(self, name: str) -> Any:
        return self._client.get_paginator(name)

    def get_object(self, **kwargs: Any) -> Any:
        with self._lock:
            self._calls += 1
            first_two = self._calls <= 2
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            if first_two:
                self._meet.wait()  # BrokenBarrierError if the reads were one by one
            return self._client.get_object(**kwargs)
        finally:
            with self._lock:
                self._in_flight -= 1


@pytest.fixture
def stored(seaweed_server: SeaweedS3Server) -> tuple[Settings, str, dict[str, Any]]:
    """Results of WORKERS workers over ATTEMPTS in a fresh run; the written bodies by key."""
    bucket = seaweed_server.buckets[0]
    settings = Settings(stack="test", channel="s3", deployment="test", datasets_bucket=bucket,
                        results_bucket=bucket, exchange_bucket=bucket)
    run_id = f"reads-{uuid.uuid4().hex[:8]}"
    client = seaweed_server.client()
    written: dict[str, Any] = {}
    for index, attempts in ATTEMPTS.items():
        for attempt in range(attempts):
            for worker in range(WORKERS):
                body = {"worker": worker, "loss_mean": index + worker / 100 + attempt,
                        "iterations_done": 8, "time": {"total_s": 1.0 + worker}}
                key = settings.segment_result_key(run_id, index, attempt, worker)
                client.put_object(Bucket=bucket, Key=key, Body=json.dumps(body).encode())
                written[key] = body
    return settings, run_id, written


def test_reads_overlap_and_match_one_by_one(
        seaweed_server: SeaweedS3Server,
        stored: tuple[Settings, str, dict[str, Any]]) -> None:
    settings, run_id, written = stored
    meeting = MeetingClient(seaweed_server.client())
    parallel = segment_results(meeting, settings, run_id)
    assert meeting.max_in_flight >= 2
    one_by_one = segment_results(seaweed_server.client(), settings, run_id, threads=1)
    assert parallel == one_by_one  # same groups, same order within each
    assert sorted(parallel) == [(0, 0), (1, 0), (1, 1), (2, 0)]
    for (index, attempt), items in parallel.items():  # listing order: by worker
        assert items == [written[settings.segment_result_key(run_id, index, attempt, w)]
                         for w in range(WORKERS)]
    summary = summarize(parallel, WORKERS)
    assert [(s["index"], s["attempt"]) for s in summary["segments"]] == [(0, 0), (1, 1),
                                                                         (2, 0)]
    assert summary["retried_attempts"] == 1


def test_a_damaged_result_still_fails_finalize(
        seaweed_server: SeaweedS3Server,
        stored: tuple[Settings, str, dict[str, Any]]) -> None:
    settings, run_id, _ = stored
    key = settings.segment_result_key(run_id, 1, 1, WORKERS - 1)
    seaweed_server.client().put_object(Bucket=settings.results_bucket, Key=key, Body=b"{torn")
    with pytest.raises(json.JSONDecodeError):
        segment_results(seaweed_server.client(), settings, run_id)
