"""A scripted session of the real Codex CLI (tests/clients/codex, pinned) against the stand-in
Responses API (tests/proxy/codex_standin.py), through whatever base URL is given (the proxy).

``$CODEX_HOME/config.toml`` names a model provider whose ``base_url`` is that URL plus ``/v1``,
whose key is read from ``OPENAI_API_KEY`` and whose wire API is ``responses``. Two turns in one
HOME: ``codex exec --skip-git-repo-check "read <note> ..."`` (the model asks for
``exec_command`` with ``cat <note>``, the CLI runs it and sends the output back, the model
answers: two calls), then ``codex exec resume --last "..."`` on the same session (one call).

:func:`run_compacting_session` makes Codex compact by itself: its ``config.toml`` sets
``model_auto_compact_token_limit`` (:data:`COMPACT_LIMIT`) above what the first turn holds and
below what it holds once a long ledger's output is added, so in the second turn, after the
function call reading the ledger, Codex sends its compaction request and goes on with the
compacted history; the third turn reads the note again (a re-read: the compaction lost its result).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

CLI_DIR = Path(__file__).resolve().parents[1] / "clients" / "codex"
KEY = "sk-proj-CODEXDUMMYKEYDUMMYKEYDUMMYKEY"
MODEL = "gpt-5-codex"
NOTE = "The refund rate is 0.0321.\nRefunds are approved by the finance desk.\n"
# About 2,300 tokens of output as the stand-in counts (4 characters a token): the first turn's
# requests hold about 10,100 tokens, the ledger's output takes the history past the limit.
LEDGER = "".join(f"Ledger line {n}: nothing to report.\n" for n in range(250))
COMPACT_LIMIT = 11_500
BRANCH = "feature/refunds"
CONFIG = """model = "{model}"
model_provider = "standin"

[model_providers.standin]
name = "stand-in"
base_url = "{base_url}/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
"""


def environment(base_url: str, home: Path, compact_limit: int = 0) -> dict[str, str]:
    """The CLI's environment: a scratch HOME whose ``.codex/config.toml`` points at ``base_url``
    (and compacts past ``compact_limit`` tokens, when given)."""
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    config = CONFIG.format(model=MODEL, base_url=base_url)
    if compact_limit:
        config = f"model_auto_compact_token_limit = {compact_limit}\n{config}"
    (codex_home / "config.toml").write_text(config)
    return {"PATH": os.environ["PATH"], "HOME": str(home), "CODEX_HOME": str(codex_home), "OPENAI_API_KEY": KEY}


def codex(args: list[str], *, work: Path, env: dict[str, str]) -> str:
    """One ``codex exec`` run; its last message (what it printed on stdout)."""
    out = subprocess.run([str(CLI_DIR / "node_modules" / ".bin" / "codex"), "exec", *args], cwd=work, env=env,
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        raise RuntimeError(f"codex {args[-1]!r} exited {out.returncode}: {out.stderr[-2000:]}")
    return out.stdout.strip()


def run_session(base_url: str, folder: Path) -> tuple[Path, list[str]]:
    """The two turns with ``folder``/work as the working directory and ``folder``/home as HOME;
    the note's path and each turn's printed answer."""
    work, home = folder / "work", folder / "home"
    work.mkdir(parents=True, exist_ok=True)
    note = work / "note.txt"
    note.write_text(NOTE)
    env = environment(base_url, home)
    return note, [codex(["--skip-git-repo-check", f"read {note} and tell me what it says"], work=work, env=env),
                  codex(["resume", "--last", "--skip-git-repo-check", "who approves the refunds?"], work=work,
                        env=env)]


def run_compacting_session(base_url: str, folder: Path) -> tuple[Path, list[str]]:
    """Three turns in a git checkout on :data:`BRANCH` (``folder``/work): read the note, read the
    ledger (Codex compacts after the function call), read the note again; the note's path and
    each turn's printed answer."""
    work, home = folder / "work", folder / "home"
    work.mkdir(parents=True, exist_ok=True)
    git = {"PATH": os.environ["PATH"], "HOME": str(home), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    note, ledger = work / "note.txt", work / "ledger.txt"
    note.write_text(NOTE)
    ledger.write_text(LEDGER)
    for args in (["init", "-q", "-b", BRANCH], ["add", "."], ["commit", "-q", "-m", "notes"]):
        subprocess.run(["git", *args], cwd=work, env=git, check=True, capture_output=True)
    env = environment(base_url, home, COMPACT_LIMIT)
    resume = ["resume", "--last", "--skip-git-repo-check"]
    return note, [codex(["--skip-git-repo-check", f"read {note} and tell me what it says"], work=work, env=env),
                  codex([*resume, f"read {ledger} and tell me what it says"], work=work, env=env),
                  codex([*resume, f"read {note} again"], work=work, env=env)]
