"""ctxkit.Client against a real HTTP server on 127.0.0.1 (conftest.IngestServer) that implements
the ingestion contract and can be told to fail, hang, stop and restart on the same port."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any, cast

import msgspec
import pytest

from conftest import API_KEY, IngestServer, make_manifest, wait_until
from ctxkit.record.client import Client, backoff_delay, parse_retry_after
from ctxkit.record.spool import Spool, default_spool_dir


def dead_url() -> str:
    """A local port nobody listens on: connections are refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def clients() -> Iterator[Callable[..., Client]]:
    """Make clients with fast test defaults; shut them all down afterwards."""
    made: list[Client] = []

    def make(host: str, **kwargs: object) -> Client:
        options: dict = {"flush_interval": 0.05, "backoff_base": 0.001, "backoff_cap": 0.01, "timeout": 5.0}
        options.update(kwargs)
        client = Client(API_KEY, host, **options)
        made.append(client)
        return client

    yield make
    for client in made:
        client.shutdown(timeout=1.0)


def test_it_delivers_captured_manifests_and_counts_them(server: IngestServer, clients) -> None:
    client = clients(server.url)
    for n in range(5):
        assert client.capture(make_manifest(f"c{n}")) is True
    assert client.flush(5) is True
    assert server.ids() == {f"c{n}" for n in range(5)}
    stats = client.stats()
    assert (stats["captured"], stats["sent"], stats["dropped"], stats["rejected"]) == (5, 5, 0, 0)


def test_capture_never_raises_on_garbage_and_bad_items_do_not_sink_the_batch(server: IngestServer, clients) -> None:
    client = clients(server.url, flush_interval=5.0)
    garbage: list[Any] = [None, 42, object(), {"x": object()}, b"not json", b"[1, 2]"]  # none of them a manifest
    for thing in garbage:
        client.capture(thing)
    client.capture({"schema": "ctxview.manifest/v1", "call_id": "bad"})  # valid JSON, invalid manifest
    client.capture(make_manifest("good"))
    client.capture(b'{"a": 1}')  # a JSON object, but not a manifest
    assert client.flush(5) is True
    assert server.ids() == {"good"}
    stats = client.stats()
    assert stats["captured"] == 9
    assert stats["dropped"] == len(garbage)
    assert stats["rejected"] == 2  # rejected per item by the server, the valid one still stored
    assert stats["sent"] == 1


def test_capture_never_raises_with_a_dead_host_and_reports_the_drop(clients) -> None:
    errors: list[tuple[str, int]] = []
    client = clients(dead_url(), max_retries=1, on_error=lambda reason, n: errors.append((reason, n)))
    assert client.capture(make_manifest("c1")) is True
    assert client.flush(5) is True
    assert client.stats()["dropped"] == 1
    assert client.stats()["retries"] == 1
    assert errors and errors[0][0].startswith("dropped") and errors[0][1] == 1


def test_capture_returns_at_once_when_the_queue_is_full(server: IngestServer, clients) -> None:
    server.hang.clear()  # the worker's first request now hangs
    client = clients(server.url, max_queue=5, batch_size=1)
    client.capture(make_manifest("first"))
    assert server.arrived.wait(5)
    # The worker is stuck in a request; a capture that waited for queue space
    # would never return. Running the captures in a thread turns a hang into a
    # failure instead of a stuck suite (a liveness check, not a timing one).
    results: list[bool] = []
    worker = threading.Thread(
        target=lambda: results.extend(client.capture(make_manifest(f"c{n}")) for n in range(1000))
    )
    worker.start()
    worker.join(30)
    assert not worker.is_alive() and len(results) == 1000
    stats = client.stats()
    assert stats["queued"] == 5 and stats["dropped"] == 995
    server.hang.set()
    assert client.flush(5) is True
    assert len(server.ids()) == 6


def test_full_queue_goes_to_the_spool_and_is_replayed(server: IngestServer, clients, tmp_path) -> None:
    server.hang.clear()
    client = clients(server.url, max_queue=5, batch_size=50, spool_dir=tmp_path)
    client.capture(make_manifest("first"))
    assert server.arrived.wait(5)
    for n in range(200):
        client.capture(make_manifest(f"c{n}"))
    assert client.stats()["spooled"] == 195 and client.stats()["dropped"] == 0
    server.hang.set()
    assert client.flush(5) is True
    # The successful send triggers a background replay of the spool.
    assert server.wait_for(201)
    assert wait_until(lambda: client.stats()["replayed"] == 195)
    assert server.duplicates == 0


def test_it_batches_by_count(server: IngestServer, clients) -> None:
    client = clients(server.url, batch_size=10, flush_interval=30.0)
    for n in range(35):
        client.capture(make_manifest(f"c{n}"))
    assert client.flush(5) is True
    assert [r["count"] for r in server.requests] == [10, 10, 10, 5]


def test_it_batches_by_bytes(server: IngestServer, clients) -> None:
    one = len(msgspec.json.encode(make_manifest("c00", items=20)))
    limit = int(one * 3.5)
    client = clients(server.url, batch_size=100, max_batch_bytes=limit, flush_interval=30.0, gzip=False)
    for n in range(10):
        client.capture(make_manifest(f"c{n:02d}", items=20))
    assert client.flush(5) is True
    counts = [r["count"] for r in server.requests]
    assert sum(counts) == 10 and len(server.ids()) == 10
    assert max(counts) == 3 and len(counts) == 4
    assert all(r["raw_size"] <= limit for r in server.requests)


def test_it_sends_after_the_interval_without_flush(server: IngestServer, clients) -> None:
    client = clients(server.url, batch_size=100, flush_interval=0.1)
    for n in range(3):
        client.capture(make_manifest(f"c{n}"))
    assert server.wait_for(3, timeout=3)
    assert [r["count"] for r in server.requests] == [3]


def test_body_is_gzipped_unless_disabled(server: IngestServer, clients) -> None:
    zipped = clients(server.url)
    zipped.capture(make_manifest("z"))
    assert zipped.flush(5)
    plain = clients(server.url, gzip=False)
    plain.capture(make_manifest("p"))
    assert plain.flush(5)
    assert [r["encoding"] for r in server.requests] == ["gzip", None]
    assert server.ids() == {"z", "p"}  # the server could decode both


@pytest.mark.parametrize("status", [503, 429])
def test_it_retries_transient_answers_honouring_retry_after(server: IngestServer, clients, status: int) -> None:
    server.fail_next(1, status, retry_after="0.5")
    client = clients(server.url)
    client.capture(make_manifest("c1"))
    start = time.monotonic()
    assert client.flush(5) is True
    assert time.monotonic() - start >= 0.45  # the jittered backoff alone is at most 0.01 s
    assert server.ids() == {"c1"}
    assert client.stats()["retries"] == 1 and client.stats()["sent"] == 1


def test_it_retries_5xx_and_408_with_capped_backoff(server: IngestServer, clients) -> None:
    server.fail_next(1, 502)
    server.fail_next(1, 408)
    server.fail_next(1, 500)
    client = clients(server.url, max_retries=5)
    client.capture(make_manifest("c1"))
    start = time.monotonic()
    assert client.flush(5) is True
    # Backoff is capped at 0.01 s here; uncapped exponential delays would
    # take far longer than this liveness bound.
    assert time.monotonic() - start < 10.0
    assert client.stats()["retries"] == 3 and server.ids() == {"c1"}


def test_it_gives_up_after_max_retries_and_counts_the_drop(server: IngestServer, clients) -> None:
    server.fail_next(10, 503)
    client = clients(server.url, max_retries=2)
    client.capture(make_manifest("c1"))
    assert client.flush(5) is True
    assert len(server.requests) == 3
    assert client.stats()["dropped"] == 1 and client.stats()["retries"] == 2


def test_it_does_not_retry_a_400(server: IngestServer, clients) -> None:
    server.fail_next(1, 400)
    client = clients(server.url)
    client.capture(make_manifest("c1"))
    assert client.flush(5) is True
    assert len(server.requests) == 1
    stats = client.stats()
    assert (stats["rejected"], stats["retries"], stats["sent"]) == (1, 0, 0)


def test_a_bad_key_is_rejected_and_logged_once(server: IngestServer, clients, caplog) -> None:
    client = Client("wrong", server.url, flush_interval=0.01, batch_size=1)
    caplog.set_level(logging.DEBUG, logger="ctxkit")
    for n in range(3):
        client.capture(make_manifest(f"c{n}"))
        assert client.flush(5)
    client.shutdown(1)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "401" in r.getMessage()]
    assert len(warnings) == 1
    assert client.stats()["rejected"] == 3 and len(server.requests) == 3


def test_a_wrong_key_with_a_spool_keeps_the_manifests_for_a_good_key(server: IngestServer, clients, tmp_path) -> None:
    wrong = Client("wrong", server.url, spool_dir=tmp_path, flush_interval=0.01)
    for n in range(3):
        wrong.capture(make_manifest(f"c{n}"))
    assert wrong.shutdown(2) is True
    assert wrong.stats()["spooled"] == 3 and wrong.stats()["rejected"] == 0
    assert server.ids() == set()
    clients(server.url, spool_dir=tmp_path)
    assert server.wait_for(3)


def test_a_too_large_batch_is_split(server: IngestServer, clients) -> None:
    server.fail_next(1, 413)
    client = clients(server.url, flush_interval=30.0)
    for n in range(4):
        client.capture(make_manifest(f"c{n}"))
    assert client.flush(5) is True
    assert [r["count"] for r in server.requests] == [0, 2, 2]
    assert client.stats()["sent"] == 4 and client.stats()["rejected"] == 0


def test_parse_retry_after_reads_seconds_and_http_dates() -> None:
    now = time.time()
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after(" 0.5 ") == 0.5
    future = format_datetime(datetime.fromtimestamp(now, UTC) + timedelta(seconds=30), usegmt=True)
    retry = parse_retry_after(future, now=now)
    assert retry is not None and 28 <= retry <= 31
    past = format_datetime(datetime.fromtimestamp(now, UTC) - timedelta(seconds=30), usegmt=True)
    assert parse_retry_after(past, now=now) == 0.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None and parse_retry_after("nan") is None


def test_backoff_is_jittered_and_capped() -> None:
    delays = [backoff_delay(attempt, 0.5, 4.0) for attempt in range(10) for _ in range(50)]
    assert all(0 <= d <= 4.0 for d in delays)
    assert len({round(d, 6) for d in delays}) > 100  # full jitter, not a fixed schedule
    assert all(backoff_delay(0, 0.5, 4.0) <= 0.5 for _ in range(100))


def test_spools_during_an_outage_and_replays_after_restart(server: IngestServer, clients, tmp_path) -> None:
    server.stop()
    client = clients(server.url, spool_dir=tmp_path, max_retries=1, batch_size=20)
    for n in range(50):
        client.capture(make_manifest(f"c{n}"))
    assert client.flush(5) is True
    assert client.stats()["spooled"] == 50 and client.stats()["dropped"] == 0
    server.start()  # same port
    client.capture(make_manifest("after"))
    assert server.wait_for(51)
    assert server.ids() == {f"c{n}" for n in range(50)} | {"after"}
    assert server.duplicates == 0
    assert wait_until(lambda: client.stats()["replayed"] == 50)
    assert wait_until(lambda: not Spool(tmp_path).has_pending())


def test_it_replays_the_spool_as_soon_as_the_server_answers_not_on_its_timer(server: IngestServer, clients,
                                                                               tmp_path) -> None:
    server.stop()
    # The default replay timer (30 s) is far longer than this test waits: only the probe can do it.
    client = clients(server.url, spool_dir=tmp_path, replay_interval=30.0, probe_interval=0.2)
    for n in range(20):
        client.capture(make_manifest(f"c{n}"))
    assert client.flush(5) is True
    # No answer at all: to disk after one try each, not held in memory through the retries.
    assert client.stats()["spooled"] == 20 and client.stats()["retries"] == 0
    server.start()  # same port; nothing new is captured
    assert server.wait_for(20, timeout=3.0)
    assert server.ids() == {f"c{n}" for n in range(20)} and server.duplicates == 0


def test_a_server_that_answers_with_errors_is_retried_with_backoff_not_spooled_at_once(server: IngestServer,
                                                                                       clients, tmp_path) -> None:
    server.fail_next(2, 503)
    client = clients(server.url, spool_dir=tmp_path, max_retries=3)
    client.capture(make_manifest("c0"))
    assert client.flush(5) is True
    assert server.ids() == {"c0"} and client.stats()["retries"] == 2 and client.stats()["spooled"] == 0


def test_spool_dir_true_is_the_per_user_folder_of_its_host_and_key(server: IngestServer, clients, tmp_path,
                                                                   monkeypatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    client = clients(server.url, spool_dir=True)
    assert client.spool is not None
    folder = client.spool.directory
    assert folder == default_spool_dir(server.url, API_KEY)
    assert os.path.dirname(folder) == str(tmp_path / "ctxkit" / "spool") and API_KEY not in folder
    # Another key or host: another folder, so nothing is replayed into the wrong project.
    assert default_spool_dir(server.url, "other-key") != folder != default_spool_dir("http://10.0.0.1:8000", API_KEY)
    assert clients(server.url, spool_dir=None).spool is None and clients(server.url, spool_dir=False).spool is None


def test_shutdown_says_how_many_manifests_wait_on_disk(clients, tmp_path, caplog) -> None:
    client = clients(dead_url(), spool_dir=tmp_path)
    for n in range(7):
        client.capture(make_manifest(f"c{n}"))
    with caplog.at_level(logging.WARNING, logger="ctxkit"):
        assert client.shutdown(2.0) is True
    assert f"7 manifests wait on disk in {tmp_path}" in caplog.text


def test_a_new_client_sends_what_the_previous_process_spooled(server: IngestServer, clients, tmp_path) -> None:
    server.stop()
    old = clients(server.url, spool_dir=tmp_path, max_retries=0)
    for n in range(30):
        old.capture(make_manifest(f"c{n}"))
    assert old.shutdown(2) is True
    assert old.stats()["spooled"] == 30
    server.start()
    new = clients(server.url, spool_dir=tmp_path)  # nothing captured: it replays on its own
    assert server.wait_for(30)
    assert server.ids() == {f"c{n}" for n in range(30)} and server.duplicates == 0
    assert wait_until(lambda: new.stats()["replayed"] == 30)


def test_shutdown_spools_what_is_still_being_retried(tmp_path, clients) -> None:
    client = clients(dead_url(), spool_dir=tmp_path, max_retries=5, backoff_base=30.0, backoff_cap=30.0)
    for n in range(3):
        client.capture(make_manifest(f"c{n}"))
    start = time.monotonic()
    assert client.shutdown(1.0) is True
    assert time.monotonic() - start < 15.0  # a 30 s backoff was pending: shutdown did not wait for it
    assert client.stats()["spooled"] == 3
    lines: list[bytes] = []
    Spool(tmp_path).drain(lambda batch: lines.extend(batch) or True)
    assert sorted(json.loads(line)["call_id"] for line in lines) == ["c0", "c1", "c2"]
    assert client.capture(make_manifest("late")) is True  # after shutdown: spooled, no error


def test_flush_returns_within_its_timeout_when_the_server_is_dead(clients) -> None:
    client = clients(dead_url(), max_retries=5, backoff_base=30.0, backoff_cap=30.0)
    client.capture(make_manifest("c1"))
    start = time.monotonic()
    assert client.flush(0.3) is False
    assert time.monotonic() - start < 15.0  # a 30 s backoff was pending: flush kept to its timeout
    start = time.monotonic()
    client.shutdown(0.5)
    assert time.monotonic() - start < 15.0
    assert client.stats()["dropped"] == 1


def test_a_forked_child_gets_its_own_worker(server: IngestServer, clients) -> None:
    client = clients(server.url)
    client.capture(make_manifest("parent-before"))
    assert client.flush(5)
    pid = os.fork()
    if pid == 0:  # child: the parent's worker thread does not exist here
        code = 1
        try:
            for n in range(3):
                client.capture(make_manifest(f"child-{n}"))
            stats = client.stats()
            if client.flush(5) and stats["captured"] == 3:
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    client.capture(make_manifest("parent-after"))
    assert client.flush(5)
    assert server.ids() == {"parent-before", "parent-after", "child-0", "child-1", "child-2"}
    assert client.stats()["captured"] == 2


def test_counters_add_up(server: IngestServer, clients, tmp_path) -> None:
    server.fail_next(1, 400)
    client = clients(server.url, spool_dir=tmp_path, batch_size=2, flush_interval=30.0, max_retries=0)
    client.capture(make_manifest("a"))
    client.capture(make_manifest("b"))  # batch 1: refused with 400
    assert client.flush(5)
    client.capture(cast(Any, None))  # not a manifest
    client.capture(make_manifest("c"))
    assert client.flush(5)
    server.fail_next(1, 503)
    client.capture(make_manifest("d"))
    assert client.flush(5)  # spooled after the 503 (no retries)
    stats = client.stats()
    assert stats["captured"] == 5
    assert (stats["rejected"], stats["dropped"], stats["sent"], stats["spooled"]) == (2, 1, 1, 1)
    assert stats["captured"] == stats["rejected"] + stats["dropped"] + stats["sent"] + stats["spooled"]
