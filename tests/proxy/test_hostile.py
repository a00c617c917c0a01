"""ctxkit proxy under broken and hostile traffic: whatever arrives is forwarded or answered as
the provider would answer it, the proxy keeps serving, and every manifest it records passes
the manifest schema (tests/proxy/proxy_support.KeptManifests decodes each with the server's
validating decoder). The upstream is tests/proxy/proxy_upstream.py; the clients are raw HTTP and the
real anthropic client."""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import time

import anthropic
import httpx2
import pytest

from ctxkit import Client
from tests.proxy.provider_standin import same_ids
from tests.proxy.proxy_support import KeptManifests, raw_request, running_proxy
from tests.proxy.proxy_upstream import HostileUpstream

MESSAGES = [{"role": "user", "content": "Why did refunds rise in week 47?"}]
SECRET_HEADERS = {"x-api-key": "sk-ant-api03-SECRETSECRETSECRETSECRET", "authorization": "Bearer tok-SECRET-123456789"}


@pytest.fixture(scope="module")
def upstream():
    with HostileUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def kept():
    return KeptManifests()


@pytest.fixture(scope="module")
def proxy(upstream, kept):
    with running_proxy(upstream.url, kept, max_record_bytes=1024 * 1024, read_timeout=30) as running:
        yield running


def _body(model: str, **extra) -> bytes:
    return json.dumps({"model": model, "max_tokens": 64, "messages": MESSAGES, **extra}).encode()


def _headers(run: str, **extra: str) -> dict[str, str]:
    return {"content-type": "application/json", "anthropic-version": "2023-06-01", "x-ctxview-run": run,
            **SECRET_HEADERS, **extra}


def _run(proxy, kept, run_id: str, count: int = 1, timeout: float = 5.0) -> list:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proxy.capture.flush(1)
        got = [m for m in kept.manifests if m.run_id == run_id]
        if len(got) >= count:
            return got
        time.sleep(0.02)
    return [m for m in kept.manifests if m.run_id == run_id]


def _eventually(condition, timeout: float = 5.0) -> bool:
    """The exchange is handed to the recorder just after the agent has its answer: poll."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _alive(proxy) -> None:
    status, _, body = raw_request(proxy.url, "POST", "/v1/messages", _body("claude-sonnet-4-5"), _headers("alive"))
    assert status == 200 and json.loads(body)["type"] == "message"


def test_malformed_json_reaches_the_provider_and_its_400_comes_back(proxy, upstream, kept):
    bad = b'{"model": "claude-sonnet-4-5", "messages": [{"role": '
    direct = raw_request(upstream.url, "POST", "/v1/messages", bad, _headers("malformed"))
    unreadable = proxy.capture.stats["unreadable"]
    through = raw_request(proxy.url, "POST", "/v1/messages", bad, _headers("malformed"))
    assert through[0] == direct[0] == 400 and through[2] == direct[2]
    assert through[1]["request-id"] == "req_bad"
    assert upstream.received[-1][2] == bad  # forwarded byte for byte
    # No call to show: counted, not recorded.
    assert _eventually(lambda: proxy.capture.stats["unreadable"] == unreadable + 1)
    assert not [m for m in kept.manifests if m.run_id == "malformed"]
    _alive(proxy)


def test_non_utf8_bytes_are_forwarded_unchanged(proxy, upstream):
    body = b'{"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": [{"role": "user", "content": "\xff\xfe\x80"}]}'
    direct = raw_request(upstream.url, "POST", "/v1/messages", body, _headers("latin"))
    through = raw_request(proxy.url, "POST", "/v1/messages", body, _headers("latin"))
    assert upstream.received[-1][2] == body
    assert (through[0], through[2]) == (direct[0], direct[2])
    _alive(proxy)


def test_a_body_over_the_record_limit_is_streamed_through_unrecorded(proxy, upstream, kept):
    big = _body("claude-sonnet-4-5", system="x" * (3 * 1024 * 1024))
    status, _, answer = raw_request(proxy.url, "POST", "/v1/messages", big, _headers("huge"))
    assert status == 200 and json.loads(answer)["usage"]["input_tokens"] == 50
    assert upstream.received[-1][2] == big
    # Under the limit it is recorded; over it, forwarded only.
    raw_request(proxy.url, "POST", "/v1/messages", _body("claude-sonnet-4-5", system="x" * 1000),
                _headers("huge-but-fits"))
    assert len(_run(proxy, kept, "huge-but-fits")) == 1
    assert not [m for m in kept.manifests if m.run_id == "huge"]


def test_status_529_passes_through_unchanged_and_is_recorded_as_an_error(proxy, upstream, kept):
    direct = raw_request(upstream.url, "POST", "/v1/messages", _body("overloaded"), _headers("overloaded"))
    through = raw_request(proxy.url, "POST", "/v1/messages", _body("overloaded"), _headers("overloaded"))
    assert through[0] == direct[0] == 529 and through[2] == direct[2]
    assert (through[1]["request-id"], through[1]["x-should-retry"]) == ("req_529", "true")
    (call,) = _run(proxy, kept, "overloaded")
    assert call.outcome.status == "error"
    assert "error: ProviderError (HTTP 529)" in call.warnings and "provider error: overloaded_error" in call.warnings


def test_an_error_event_inside_a_stream_records_an_error_call(proxy, kept):
    status, _, body = raw_request(proxy.url, "POST", "/v1/messages", _body("stream-error", stream=True),
                                  _headers("stream-error"))
    assert status == 200 and b"event: error" in body
    (call,) = _run(proxy, kept, "stream-error")
    assert call.outcome.status == "error" and "provider error in the stream: overloaded_error" in call.warnings
    assert call.usage.cache_read_tokens == 1800  # from message_start, before the error


def test_a_recorded_call_offers_only_encodings_the_proxy_can_read(proxy, upstream):
    headers = _headers("encodings", **{"accept-encoding": "gzip, deflate, br, zstd"})
    raw_request(proxy.url, "POST", "/v1/messages", _body("claude-sonnet-4-5"), headers)
    assert upstream.received[-1][1]["accept-encoding"] == "gzip, deflate"
    raw_request(proxy.url, "GET", "/v1/models", None, headers)  # not recorded: unchanged
    assert upstream.received[-1][1]["accept-encoding"] == "gzip, deflate, br, zstd"


def test_a_gzip_response_stays_compressed_for_the_agent_and_is_decoded_for_the_manifest(proxy, upstream, kept):
    headers = _headers("gzip", **{"accept-encoding": "gzip"})
    direct = raw_request(upstream.url, "POST", "/v1/messages", _body("gzip"), headers)
    through = raw_request(proxy.url, "POST", "/v1/messages", _body("gzip"), headers)
    assert through[1]["content-encoding"] == "gzip" and through[2][:2] == direct[2][:2] == b"\x1f\x8b"
    answer = json.loads(gzip.decompress(through[2]))
    assert same_ids(answer) == same_ids(json.loads(gzip.decompress(direct[2])))  # each answer has its own id
    (call,) = _run(proxy, kept, "gzip")
    assert (call.usage.input_tokens, call.outcome.finish_reason, call.call_id) == (1950, "end_turn", answer["id"])


def test_headers_end_to_end_pass_hop_by_hop_and_ctxview_ones_do_not(proxy, upstream, kept):
    sent = _headers("headers", **{"x-ctxview-agent": "header-agent", "x-trace": "t-1", "connection": "keep-alive"})
    status, got, _ = raw_request(proxy.url, "POST", "/v1/messages", _body("headers"), sent)
    assert status == 200
    assert (got["request-id"], got["x-custom"], got["anthropic-ratelimit-requests-remaining"]) == (
        "req_headers", "kept", "99")
    assert "x-hop" not in got and "keep-alive" not in got
    _, upstream_saw, _ = upstream.received[-1]
    # Credentials reach the provider unchanged; the proxy's own headers do not.
    assert upstream_saw["x-api-key"] == SECRET_HEADERS["x-api-key"]
    assert upstream_saw["authorization"] == SECRET_HEADERS["authorization"]
    assert upstream_saw["x-trace"] == "t-1" and upstream_saw["anthropic-version"] == "2023-06-01"
    assert "x-ctxview-run" not in upstream_saw and "x-ctxview-agent" not in upstream_saw
    assert "via" not in upstream_saw and "x-forwarded-for" not in upstream_saw
    assert upstream_saw["accept-encoding"] == "identity"  # http.client's own; the proxy adds none
    (call,) = _run(proxy, kept, "headers")
    assert call.agent == "header-agent"
    # No credential in anything recorded.
    for data in kept.encoded:
        assert b"SECRETSECRET" not in data and b"tok-SECRET" not in data


@pytest.mark.parametrize(("model", "stream"), [("bare", False), ("bare", True), ("untyped", False)])
def test_it_adds_no_header_the_upstream_did_not_send(proxy, upstream, kept, model, stream):
    body = _body(model, stream=True) if stream else _body(model)
    direct = _raw_head(upstream.url, body, _headers(f"{model}-direct"))
    through = _raw_head(proxy.url, body, _headers(f"{model}-{stream}"))
    # The same status line and header lines, framing (Content-Length / Transfer-Encoding) included.
    assert (through[0], sorted(through[1:])) == (direct[0], sorted(direct[1:]))
    names = [line.split(":")[0].lower() for line in through[1:]]
    assert "date" not in names and "server" not in names
    assert ("content-type" in names) == (model == "bare")
    (call,) = _run(proxy, kept, f"{model}-{stream}")
    assert call.outcome.status == "ok"


def _raw_head(url: str, body: bytes, headers: dict[str, str]) -> list[str]:
    """The status and header lines of one answer as they came over the wire (the body is read
    to its end, so that the call completes)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        conn.request("POST", "/v1/messages", body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        return [f"{response.version} {response.status} {response.reason}",
                *(f"{name}: {value}" for name, value in response.getheaders())]
    finally:
        conn.close()


def test_it_forwards_a_recorded_request_body_before_the_agent_has_sent_all_of_it(proxy, upstream, kept):
    upstream.first_half.clear()
    body = _body("claude-sonnet-4-5", system="s" * 20_000)
    half = len(body) // 2
    host, port = proxy.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        head = "".join(f"{k}: {v}\r\n" for k, v in _headers("trickle").items())
        sock.sendall(f"POST /v1/messages?trickle=1 HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                     f"{head}\r\n".encode() + body[:half])
        # The upstream has the first half while the agent still holds back the second.
        assert upstream.first_half.wait(5), "the proxy waited for the whole body before forwarding it"
        sock.sendall(body[half:])
        answer = b""
        while not answer.endswith(b"}"):
            chunk = sock.recv(65536)
            assert chunk, "the proxy closed the connection before the answer ended"
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200") and upstream.received[-1][2] == body
    (call,) = _run(proxy, kept, "trickle")  # recorded from the copy kept on the way
    assert call.outcome.status == "ok" and call.usage.cache_read_tokens == 1800


def test_an_upstream_reset_mid_stream_cuts_the_agent_stream_too_and_the_proxy_goes_on(proxy, upstream, kept):
    direct = anthropic.Anthropic(api_key="sk-test", base_url=upstream.url, max_retries=0)
    through = anthropic.Anthropic(api_key="sk-test", base_url=proxy.url, max_retries=0,
                                  default_headers={"x-ctxview-run": "reset"})

    def read(client) -> tuple[list[str], BaseException | None]:
        seen: list[str] = []
        try:
            for event in client.messages.create(model="reset-mid-stream", max_tokens=5, messages=MESSAGES,
                                                stream=True):
                seen.append(event.type)
        except (httpx2.HTTPError, anthropic.APIError) as exc:
            return seen, exc
        return seen, None

    direct_seen, direct_error = read(direct)
    through_seen, through_error = read(through)
    assert direct_error is not None and through_error is not None  # neither ends cleanly
    assert through_seen == direct_seen == ["message_start", "content_block_start", "content_block_delta"]
    (call,) = _run(proxy, kept, "reset")
    assert call.outcome.status == "error" and call.usage.cache_read_tokens == 1800
    assert any("ended the response early" in w for w in call.warnings)
    _alive(proxy)


def test_a_client_gone_mid_stream_cancels_the_upstream_request(proxy, upstream, kept):
    upstream.reader_gone.clear()
    host, port = proxy.url.removeprefix("http://").split(":")
    body = _body("slow-stream", stream=True)
    sock = socket.create_connection((host, int(port)), timeout=5)
    head = "".join(f"{k}: {v}\r\n" for k, v in _headers("gone").items())
    sock.sendall(f"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body)
    seen = b""
    while b"message_start" not in seen:
        chunk = sock.recv(65536)
        assert chunk, "the proxy closed the connection before the first event"
        seen += chunk
    sock.close()
    assert upstream.reader_gone.wait(5), "the upstream kept streaming to a proxy whose client left"
    (call,) = _run(proxy, kept, "gone")
    assert call.outcome.status == "error" and "the client disconnected before the response ended" in call.warnings
    _alive(proxy)


def test_an_unreachable_upstream_answers_502_in_the_provider_shape(kept):
    spare = socket.socket()
    spare.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{spare.getsockname()[1]}"
    spare.close()  # nothing listens there now
    with running_proxy(dead, kept, connect_timeout=2) as proxy:
        status, answer_headers, body = raw_request(proxy.url, "POST", "/v1/messages", _body("claude-sonnet-4-5"),
                                                   _headers("unreachable"))
        assert status == 502 and set(answer_headers) == {"content-type", "content-length"}
        error = json.loads(body)
        assert error["type"] == "error" and error["error"]["type"] == "api_error"
        assert dead in error["error"]["message"]
        status, _, body = raw_request(proxy.url, "POST", "/v1/chat/completions",
                                      json.dumps({"model": "gpt-4o", "messages": MESSAGES}).encode(),
                                      {"content-type": "application/json", "authorization": "Bearer sk-x",
                                       "x-ctxview-run": "unreachable-openai"})
        assert status == 502 and json.loads(body)["error"]["code"] == "proxy_upstream_error"
        (call,) = _run(proxy, kept, "unreachable")
        assert call.outcome.status == "error" and any("did not answer" in w for w in call.warnings)
        # The SDK sees a 502 as it would a provider's: an InternalServerError, retried by default.
        client = anthropic.Anthropic(api_key="sk-test", base_url=proxy.url, max_retries=0)
        with pytest.raises(anthropic.InternalServerError):
            client.messages.create(model="claude-sonnet-4-6", max_tokens=5, messages=MESSAGES)


ODD_BODIES = [
    {"model": ["not", "a", "string"], "max_tokens": 5, "messages": MESSAGES},
    {"model": "m", "max_tokens": "many", "messages": MESSAGES},
    {"model": "m", "messages": {"role": "user"}},
    {"model": "m", "messages": [{"role": "user", "content": 42}, "text", None]},
    {"model": "m", "system": 7, "tools": "none", "messages": MESSAGES},
    {"model": "m", "metadata": {"user_id": "{not json"}, "messages": MESSAGES},
    {"model": "m", "metadata": "x", "messages": [{"role": "user", "content": [{"type": "image"}, 3]}]},
    {"model": "m" * 5000, "messages": [{"role": "x" * 300, "content": "\ud800 lone surrogate"}]},
]


@pytest.mark.parametrize("index", range(len(ODD_BODIES)))
def test_odd_but_json_bodies_are_forwarded_and_recorded_as_valid_manifests(proxy, upstream, kept, index):
    body = json.dumps(ODD_BODIES[index]).encode()
    status, _, _ = raw_request(proxy.url, "POST", "/v1/messages", body, _headers(f"odd-{index}"))
    assert status == 200 and upstream.received[-1][2] == body
    # Recorded (what the mapping cannot read is left out, its JSON path in a warning), and the
    # manifest passed the schema on its way into the sink.
    (call,) = _run(proxy, kept, f"odd-{index}")
    assert call.outcome.status == "ok"
    _alive(proxy)


def test_ctxview_down_changes_nothing_for_the_agent(upstream):
    # Nothing listens on port 9 (discard): every send fails and is retried or dropped in the background.
    down = Client("ctx_nobody", "http://127.0.0.1:9", max_retries=0, timeout=0.2)
    with running_proxy(upstream.url, down) as proxy:
        direct = raw_request(upstream.url, "POST", "/v1/messages", _body("claude-sonnet-4-5"), _headers("down"))
        through = raw_request(proxy.url, "POST", "/v1/messages", _body("claude-sonnet-4-5"), _headers("down"))
        assert (through[0], same_ids(through[2])) == (direct[0], same_ids(direct[2]))
        assert _eventually(lambda: down.stats()["captured"] == 1)
        proxy.capture.flush(5)
    assert down.stats()["sent"] == 0
    down.shutdown(timeout=1)


def test_it_forwards_secrets_unchanged_and_records_them_masked(proxy, upstream, kept):
    env = "DB_PASSWORD=ViSZ7uO7GJ,8aAHecM\npassword: correct horse battery staple\npassword=hunter2"
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 64,
                       "messages": [{"role": "user", "content": f"the .env reads:\n{env}"}]}).encode()
    status, _, _ = raw_request(proxy.url, "POST", "/v1/messages", body, _headers("secret-shapes"))
    assert status == 200 and upstream.received[-1][2] == body  # the provider gets the original bytes
    (call,) = _run(proxy, kept, "secret-shapes")
    texts = "\n".join(item.text or "" for item in call.items)
    assert "the .env reads:\nDB_PASSWORD=[masked:secret]\npassword: [masked:secret]\npassword=[masked:secret]" \
        in texts
    (recorded,) = [data for data in kept.encoded if b'"secret-shapes"' in data]
    for secret in (b"ViSZ7uO7GJ", b"8aAHecM", b"correct horse", b"hunter2"):
        assert secret not in recorded
