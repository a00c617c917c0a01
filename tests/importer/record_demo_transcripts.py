"""Record manifests/demo/transcripts/ again: each real agent CLI (pinned in tests/clients) runs its
scripted session against its test stand-in, and the transcripts it wrote to disk are copied as
they are (``manifests.demo.imported`` reads them with ``ctxkit import``'s readers).

    make node-clients
    PYTHONPATH=sdk:. .venv/bin/python -m tests.importer.record_demo_transcripts

Each session runs in /tmp/ctxview-demo-<source> (removed first), so the paths in the transcripts
stay the same from one recording to the next.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from tests.proxy.claude_code_session import CLI_DIR as CLAUDE_CODE_DIR
from tests.proxy.claude_code_session import run_reread_session as run_claude_code
from tests.proxy.claude_code_standin import ClaudeCodeStandIn
from tests.proxy.codex_session import CLI_DIR as CODEX_DIR
from tests.proxy.codex_session import run_compacting_session as run_codex
from tests.proxy.codex_standin import CodexStandIn
from tests.proxy.gemini_cli_session import CLI_DIR as GEMINI_CLI_DIR
from tests.proxy.gemini_cli_session import run_compressed_session as run_gemini
from tests.proxy.gemini_cli_standin import GeminiStandIn
from tests.proxy.proxy_support import npm_ci

TRANSCRIPTS = Path(__file__).resolve().parents[2] / "manifests" / "demo" / "transcripts"


def claude_code(folder: Path) -> Path:
    """Claude Code's session (a Read, /compact, the same Read again, a sub-agent); the folder its
    transcripts are in."""
    npm_ci(CLAUDE_CODE_DIR)
    with ClaudeCodeStandIn(sized_usage=True) as provider:
        run_claude_code(provider.url, folder)
    return folder / "home" / ".claude" / "projects"


def codex(folder: Path) -> Path:
    """The Codex CLI's session (a compaction of its own, a re-read after it); its sessions folder."""
    npm_ci(CODEX_DIR)
    with CodexStandIn() as provider:
        run_codex(provider.url, folder)
    return folder / "home" / ".codex" / "sessions"


def gemini(folder: Path) -> Path:
    """Gemini CLI's session (a compression of its own, a re-read after it); its projects' folder."""
    npm_ci(GEMINI_CLI_DIR)
    with GeminiStandIn() as provider:
        run_gemini(provider.url, folder)
    return folder / "home" / ".gemini" / "tmp"


RECORDERS: dict[str, Callable[[Path], Path]] = {"claude-code": claude_code, "codex": codex, "gemini": gemini}


def main(names: list[str]) -> int:
    for name in names or list(RECORDERS):
        folder = Path(f"/tmp/ctxview-demo-{name}")
        shutil.rmtree(folder, ignore_errors=True)
        written = RECORDERS[name](folder)
        target = TRANSCRIPTS / name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(written, target)
        shutil.rmtree(folder, ignore_errors=True)
        files = [p for p in target.rglob("*") if p.is_file()]
        print(f"{target}: {len(files)} files, {sum(p.stat().st_size for p in files)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
