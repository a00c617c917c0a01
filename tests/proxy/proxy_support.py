"""Helpers of the proxy tests: a proxy on its own thread in front of an upstream, a sink that
keeps the manifests it is handed (validated against the manifest schema on the way in), and
raw HTTP requests through the proxy or straight to the upstream."""

from __future__ import annotations

import http.client
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from ctxkit.manifest import Manifest, decode_manifest
from ctxkit.proxy.capture import Capture
from ctxkit.proxy.config import ProxyConfig
from ctxkit.proxy.server import RunningProxy, start_in_thread


class KeptManifests:
    """A sink for Capture that keeps each manifest after a round trip through the schema: it
    is encoded as the Client would send it and decoded with the validating decoder the server
    uses; a manifest the schema rejects raises here and is counted by Capture as failed."""

    def __init__(self) -> None:
        self.manifests: list[Manifest] = []
        self.encoded: list[bytes] = []
        self.lock = threading.Lock()

    def capture(self, manifest: Manifest) -> bool:
        data = msgspec.json.encode(manifest)
        decoded = decode_manifest(data)
        with self.lock:
            self.encoded.append(data)
            self.manifests.append(decoded)
        return True

    def flush(self, timeout: float | None = None) -> bool:
        return True


def npm_ci(folder: Path) -> None:
    """Install the folder's locked npm packages once (node_modules is not committed)."""
    if not (folder / "node_modules").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=folder, check=True, capture_output=True,
                       timeout=600)


@contextmanager
def running_proxy(upstream_url: str, sink: Any, **config: Any) -> Iterator[RunningProxy]:
    capture = Capture(sink, include_text=config.pop("include_text", True), agent=config.pop("agent", ""))
    proxy = start_in_thread(ProxyConfig(port=0, anthropic_upstream=upstream_url, openai_upstream=upstream_url,
                                        gemini_upstream=upstream_url, **config), capture)
    try:
        yield proxy
    finally:
        proxy.stop()


def raw_request(url: str, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None, timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    """(status, headers in lower case, body) of one request over a fresh connection."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data
    finally:
        conn.close()
