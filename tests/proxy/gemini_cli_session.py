"""A scripted session of the real Gemini CLI (tests/clients/gemini_cli, pinned) against the
stand-in Gemini API (tests/proxy/gemini_cli_standin.py), through whatever base URL is given
(the proxy): ``GOOGLE_GEMINI_BASE_URL``, the dummy ``GEMINI_API_KEY``,
``GEMINI_CLI_TRUST_WORKSPACE=true`` and a scratch HOME whose ``.gemini/settings.json`` selects
the API-key auth. Two turns in one HOME: ``gemini -p "read <note> ..."`` (the model asks for
``read_file``, the CLI reads the note and sends it back, the model answers), then
``gemini --resume latest -p "..."`` on the same session. Each run also makes the CLI's side
requests on its small model (``:generateContent``).

:func:`run_compressed_session` goes on with a compression and the same read after it. The CLI
compresses at the start of a turn when the last prompt's tokens pass ``model.compressionThreshold``
of the model's window (a resumed session counts its history): a third run with the threshold at
:data:`TINY_THRESHOLD` compresses (two requests for the ``<state_snapshot>``, then the turn on the
compressed history), a fourth, with the threshold back to its default, reads the note again.
``gemini -p "/compress"`` does not serve: headless, the command starts the compression without
waiting for it and sends "/compress" to the model as a prompt; the process ends with the
compressed history neither used nor written to the chat.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

CLI_DIR = Path(__file__).resolve().parents[1] / "clients" / "gemini_cli"
KEY = "AIzaSyGEMINIDUMMYKEYDUMMYKEYDUMMYKEY00"
NOTE = "The refund rate is 0.0321.\nRefunds are approved by the finance desk.\n"
# A fraction of the window that any resumed history passes: the CLI compresses before the turn.
TINY_THRESHOLD = 0.00001
SETTINGS = {"security": {"auth": {"selectedType": "gemini-api-key"}}, "privacy": {"usageStatisticsEnabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}


def environment(base_url: str, home: Path) -> dict[str, str]:
    """The CLI's environment: offline but for ``base_url``, with the dummy key."""
    settings = home / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps(SETTINGS))
    return {"PATH": os.environ["PATH"], "HOME": str(home), "GOOGLE_GEMINI_BASE_URL": base_url,
            "GEMINI_API_KEY": KEY, "GEMINI_CLI_TRUST_WORKSPACE": "true", "NO_COLOR": "1",
            # One process: no relaunch of itself with a larger heap.
            "GEMINI_CLI_NO_RELAUNCH": "true"}


def gemini(args: list[str], *, work: Path, env: dict[str, str]) -> str:
    """One ``gemini`` run in headless mode; what it printed."""
    out = subprocess.run([str(CLI_DIR / "node_modules" / ".bin" / "gemini"), *args], cwd=work, env=env,
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        raise RuntimeError(f"gemini {args[-1]!r} exited {out.returncode}: {out.stderr[-2000:]}")
    return out.stdout.strip()


def run_session(base_url: str, folder: Path) -> tuple[Path, list[str]]:
    """The two turns with ``folder``/work as the working directory and ``folder``/home as HOME;
    the note's path and each turn's printed answer."""
    work, home = folder / "work", folder / "home"
    work.mkdir(parents=True, exist_ok=True)
    note = work / "note.txt"
    note.write_text(NOTE)
    env = environment(base_url, home)
    return note, [gemini(["-p", f"read {note} and tell me what it says"], work=work, env=env),
                  gemini(["--resume", "latest", "-p", "who approves the refunds?"], work=work, env=env)]


def run_compressed_session(base_url: str, folder: Path) -> tuple[Path, list[str]]:
    """:func:`run_session`'s two turns, a third that the CLI opens by compressing the session,
    and a fourth that reads the note again; the note's path and each turn's printed answer."""
    note, answers = run_session(base_url, folder)
    work, home = folder / "work", folder / "home"
    env = environment(base_url, home)
    settings = home / ".gemini" / "settings.json"
    settings.write_text(json.dumps({**SETTINGS, "model": {"compressionThreshold": TINY_THRESHOLD}}))
    answers.append(gemini(["--resume", "latest", "-p", "carry on"], work=work, env=env))
    settings.write_text(json.dumps(SETTINGS))
    answers.append(gemini(["--resume", "latest", "-p", f"read {note} again"], work=work, env=env))
    return note, answers
