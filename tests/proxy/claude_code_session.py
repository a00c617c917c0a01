"""A scripted session of the real Claude Code CLI (tests/clients/claude_code, pinned) against the stand-in
provider (tests/proxy/claude_code_standin.py), through whatever ``ANTHROPIC_BASE_URL`` is given (the
proxy): five ``claude -p`` runs sharing one HOME, so ``--continue`` resumes the same session.

1. ``read <note> and tell me what it says``: the model asks for the Read tool, the CLI reads the
   note, the model answers with its first line (two calls);
2. and 3. two more turns on that conversation;
4. ``/compact``: the CLI asks the model for a summary (its compaction request) and replaces the
   conversation with it; the stand-in's summary leaves out the note's refund rate;
5. one more turn, on the compacted history.

Six model calls in all; the sixth is the one after the compaction. The third turn appends a line
to the system prompt. ``EVIDENCE`` is declared on every call (``ANTHROPIC_CUSTOM_HEADERS``) so the
proxy checks whether the rate survived; the demo's recording leaves it out and watches the rate
as a fact instead. The note
is deleted before ``/compact``: Claude Code attaches the files it read again after its summary,
and a note still on disk would bring the rate back. ``--tools Read`` keeps the tool definitions
(and the recorded manifests) small.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

CLI_DIR = Path(__file__).resolve().parents[1] / "clients" / "claude_code"
KEY = "sk-ant-api03-CLAUDECODEDUMMYKEYDUMMYKEY"
NOTE = "The refund rate is 0.0321.\nRefunds are approved by the finance desk.\n"
EVIDENCE = {"refund_rate": "0.0321"}
APPENDED = "Keep every reply to one line."


def prompts(note: Path) -> list[list[str]]:
    return [
        ["-p", f"read {note} and tell me what it says"],
        ["-p", "--continue", "who approves the refunds?"],
        # A system prompt edited between two launches (the CLI re-renders it only with the
        # snapshot off): the cache cause of that call names the line.
        ["-p", "--continue", "--system-prompt-snapshot", "off", "--append-system-prompt", APPENDED,
         "draft a one-line reply to the customer"],
        ["-p", "--continue", "/compact"],
        ["-p", "--continue", "what was the refund rate again?"],
    ]


def environment(base_url: str, home: Path, *, declare_evidence: bool = True) -> dict[str, str]:
    """The CLI's environment: offline but for ``base_url``, the dummy key, and ``EVIDENCE``
    declared on every call unless ``declare_evidence`` is false."""
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "ANTHROPIC_BASE_URL": base_url,
           "ANTHROPIC_API_KEY": KEY, "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    if declare_evidence:
        env["ANTHROPIC_CUSTOM_HEADERS"] = f"X-Ctxview-Evidence: {json.dumps(EVIDENCE)}"
    return env


def claude(args: list[str], *, work: Path, env: dict[str, str], tools: str = "Read") -> str:
    """One ``claude`` run with the Read tool only (or ``tools``); what it printed."""
    out = subprocess.run([str(CLI_DIR / "node_modules" / ".bin" / "claude"), "--tools", tools, *args],
                         cwd=work, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        raise RuntimeError(f"claude {args[-1]!r} exited {out.returncode}: {out.stderr[-2000:]}")
    return out.stdout.strip()


def run_session(base_url: str, folder: Path, *, declare_evidence: bool = True) -> tuple[Path, list[str]]:
    """Run the five turns with ``folder``/work as the working directory and ``folder``/home as
    HOME; the note's path and each turn's printed answer."""
    work, home = folder / "work", folder / "home"
    work.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    note = work / "note.txt"
    note.write_text(NOTE)
    env = environment(base_url, home, declare_evidence=declare_evidence)
    answers = []
    for args in prompts(note):
        if args[-1] == "/compact":
            note.unlink()  # else Claude Code attaches the note again after its summary
        answers.append(claude(args, work=work, env=env))
    return note, answers


DELEGATED = "count the refund rules"


def run_reread_session(base_url: str, folder: Path) -> tuple[Path, list[str]]:
    """A session that loses a file to ``/compact`` and reads it again, then delegates, with the
    Read and Agent tools: ``read <note>`` (the Read call and the answer), ``/compact`` (its summary
    request), the same ``read <note>`` again (the re-read: two calls), and ``delegate: ...`` (the
    Agent call, the sub-agent's call, the answer). Eight model calls; the note is away during
    ``/compact`` (Claude Code attaches the files it read again after its summary otherwise)."""
    work, home = folder / "work", folder / "home"
    work.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    note = work / "note.txt"
    note.write_text(NOTE)
    env = environment(base_url, home, declare_evidence=False)
    answers = [claude(["-p", f"read {note} and tell me what it says"], work=work, env=env, tools="Read,Agent")]
    note.unlink()
    answers.append(claude(["-p", "--continue", "/compact"], work=work, env=env, tools="Read,Agent"))
    note.write_text(NOTE)
    for prompt in (f"read {note} and tell me what it says", f"delegate: {DELEGATED}"):
        answers.append(claude(["-p", "--continue", prompt], work=work, env=env, tools="Read,Agent"))
    return note, answers
