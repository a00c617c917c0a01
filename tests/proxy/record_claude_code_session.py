"""Record manifests/demo/claude_code_session.jsonl again: the scripted Claude Code session
(tests/proxy/claude_code_session.py: the real CLI, five turns, ``/compact``) through ``ctxkit proxy``
against the stand-in provider, and the manifests the proxy produced, one per line.

    PYTHONPATH=sdk:. .venv/bin/python -m tests.proxy.record_claude_code_session

Needs ``npm ci --prefix tests/clients/claude_code`` once. The session runs in /tmp/ctxview-demo-claude-code
(removed first) so the paths in the recorded text stay the same from one recording to the next.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from tests.proxy.claude_code_session import CLI_DIR, KEY, run_session
from tests.proxy.claude_code_standin import ClaudeCodeStandIn
from tests.proxy.proxy_support import KeptManifests, npm_ci, running_proxy

FOLDER = Path("/tmp/ctxview-demo-claude-code")
FIXTURE = Path(__file__).resolve().parents[2] / "manifests" / "demo" / "claude_code_session.jsonl"
CALLS = 6


def record() -> bytes:
    """The session's manifests as JSON lines, in step order."""
    npm_ci(CLI_DIR)
    shutil.rmtree(FOLDER, ignore_errors=True)
    sink = KeptManifests()
    with ClaudeCodeStandIn(sized_usage=True) as provider, running_proxy(provider.url, sink) as proxy:
        run_session(proxy.url, FOLDER, declare_evidence=False)
        proxy.capture.flush(10)
    shutil.rmtree(FOLDER, ignore_errors=True)
    if len(sink.encoded) != CALLS or len(sink.manifests[-1].compactions) != 1:
        raise RuntimeError(f"the proxy recorded {len(sink.encoded)} calls, not {CALLS} ending in a compaction")
    lines = [line for _, line in sorted(zip((m.step for m in sink.manifests), sink.encoded, strict=True))]
    data = b"\n".join(lines) + b"\n"
    if KEY.encode() in data or b"sk-ant-" in data:
        raise RuntimeError("an API key reached the manifests")
    return data


def main() -> int:
    data = record()
    FIXTURE.write_bytes(data)
    print(f"{FIXTURE}: {len(data)} bytes, {CALLS} calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
