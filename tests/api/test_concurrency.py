"""Concurrent ingest against a live server, with real threads and real connections.

Overlapping batches that share new runs in different orders, the same batch sent twice
at once, the same manifest sent by many clients at once, a lock held by another writer
longer than the lock timeout, and a client hanging up in the middle of its body.
On PostgreSQL (CI runs the suite there first) and on SQLite (then there).
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.db import connection
from django.db.models import Max, Min

from manifests import ops
from manifests.models import Call, Run
from tests.support import manifest

pytestmark = pytest.mark.django_db(transaction=True)


def post(base: str, key: str, body: Any) -> tuple[int, dict, dict[str, str]]:
    """One POST on its own connection, as separate clients would send it."""
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    try:
        conn.request("POST", "/api/v1/manifests", json.dumps(body).encode(),
                     {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        response = conn.getresponse()
        raw = response.read()
        data = json.loads(raw) if raw.startswith(b"{") else {"raw": raw.decode(errors="replace")}
        return response.status, data, dict(response.getheaders())
    finally:
        conn.close()


def at_once(n: int, send: Callable[[int], Any]) -> list[Any]:
    """Run ``send(k)`` in n threads released together by a barrier; re-raise any error."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[k] = send(k)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    return results


def storm_manifest(round_: int, n: int) -> dict:
    """Call n of a round; the same (round, n) always gives the same content, so a
    re-send is a duplicate. Six new runs per round, with calls spread over two hours, so
    later batches widen a run's span both ways."""
    run = f"round-{round_}/run-{n % 6}"
    offset = (n * 7919) % 7200 - 3600
    return manifest(f"round-{round_}/call-{n}", run_id=run, step=n, items=2, seconds=offset)


def test_it_keeps_run_times_exact_under_overlapping_concurrent_batches(live_server, key):
    rng = random.Random(14)
    sent: set[str] = set()
    statuses: Counter[int] = Counter()
    outcomes: Counter[str] = Counter()
    for round_ in range(4):
        # 8 threads, 25 manifests each out of 120: the batches overlap, and each meets the
        # six new runs of the round in its own order.
        batches = [[storm_manifest(round_, n) for n in rng.sample(range(120), 25)] for _ in range(8)]
        for batch in batches:
            sent.update(m["call_id"] for m in batch)
        for status, body, _ in at_once(8, lambda k, b=batches: post(live_server.url, key, {"manifests": b[k]})):
            statuses[status] += 1
            for r in body.get("results", []):
                outcomes[r["status"]] += 1

    assert statuses == {200: 32}, statuses
    assert outcomes["accepted"] == len(sent) and outcomes["rejected"] == 0
    assert outcomes["duplicate"] == 32 * 25 - len(sent)
    assert Call.objects.count() == len(sent)
    spans = Call.objects.values("run_id").annotate(first=Min("started_at"), last=Max("started_at"))
    expected = {s["run_id"]: (s["first"], s["last"]) for s in spans}
    runs = {r.pk: (r.first_seen, r.last_seen) for r in Run.objects.all()}
    assert len(runs) == 24
    assert runs == expected


def test_it_answers_one_accepted_and_one_duplicate_per_manifest_to_a_batch_sent_twice_at_once(live_server, key):
    for attempt in range(5):
        batch = {"manifests": [storm_manifest(100 + attempt, n) for n in range(30)]}
        replies = at_once(2, lambda k, b=batch: post(live_server.url, key, b))
        assert [status for status, _, _ in replies] == [200, 200]
        for index in range(30):
            pair = sorted(body["results"][index]["status"] for _, body, _ in replies)
            assert pair == ["accepted", "duplicate"], (attempt, index, pair)
    assert Call.objects.count() == 150


def test_it_stores_one_row_when_many_clients_send_the_same_manifest_at_once(live_server, key):
    for attempt in range(3):
        sent = manifest(f"same-{attempt}", run_id=f"same-run-{attempt}")
        replies = at_once(20, lambda k, m=sent: post(live_server.url, key, m))
        assert Counter(status for status, _, _ in replies) == {200: 20}
        outcomes = Counter(body["results"][0]["status"] for _, body, _ in replies)
        assert outcomes == {"accepted": 1, "duplicate": 19}
        assert Call.objects.filter(call_id=f"same-{attempt}").count() == 1
    assert Run.objects.count() == 3


class HeldLock:
    """Another writer holding the lock a batch needs, on its own real connection."""

    def __init__(self, run_pk: int) -> None:
        self.run_pk = run_pk

    def __enter__(self) -> HeldLock:
        if connection.vendor == "postgresql":
            import psycopg

            s = connection.settings_dict
            self.conn = psycopg.connect(host=s["HOST"] or "127.0.0.1", port=s["PORT"] or 5432, user=s["USER"],
                                        password=s["PASSWORD"] or None, dbname=s["NAME"])
            self.conn.execute("SELECT 1 FROM manifests_run WHERE id = %s FOR UPDATE", [self.run_pk])
        else:
            import sqlite3

            self.conn = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
            self.conn.execute("BEGIN IMMEDIATE")
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.rollback()
        self.conn.close()


def test_it_answers_503_with_retry_after_when_a_lock_is_held_too_long(live_server, key, settings):
    settings.CTXVIEW_INGEST_LOCK_TIMEOUT_MS = 200
    assert post(live_server.url, key, manifest("first", run_id="busy-run"))[0] == 200
    with HeldLock(Run.objects.get(run_id="busy-run").pk):
        status, body, headers = post(live_server.url, key, manifest("second", run_id="busy-run", step=1))
    assert status == 503
    assert int(headers["Retry-After"]) >= 1
    assert body["errors"][0]["path"] == "$" and "busy" in body["error"]
    assert not Call.objects.filter(call_id="second").exists()
    # Once the other writer is done, the client's retry is stored.
    status, body, _ = post(live_server.url, key, manifest("second", run_id="busy-run", step=1))
    assert status == 200 and body["accepted"] == 1


def test_it_logs_a_client_disconnect_mid_body_at_info_and_counts_it(live_server, key, caplog):
    caplog.set_level(logging.INFO)
    parts = urlsplit(live_server.url)
    body = json.dumps({"manifests": [manifest(f"cut-{n}") for n in range(50)]}).encode()
    sock = socket.create_connection((parts.hostname, parts.port))
    head = (f"POST /api/v1/manifests HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    sock.sendall(head + body[: len(body) // 3])
    time.sleep(0.5)  # the server is now reading the body
    # Reset, not a polite close: what a killed client or a cut network looks like.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()

    deadline = time.monotonic() + 30
    while ops.counter(ops.CLIENT_DISCONNECTS) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ops.counter(ops.CLIENT_DISCONNECTS) == 1
    lines = [r for r in caplog.records if "client disconnected" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO and lines[0].exc_info is None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not Call.objects.exists()
    health = json.loads(_get(live_server.url))
    assert health["client_disconnects"] == 1


def _get(base: str, path: str = "/healthz") -> bytes:
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        assert response.status == 200
        return response.read()
    finally:
        conn.close()
