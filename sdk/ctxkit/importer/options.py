"""``ctxkit import`` and ``ctxkit watch``: options and entry points (the importer and the proxy's
mapping load on use, so ``ctxkit --help`` stays quick)."""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from ctxkit.record.transport import DEFAULT_HOST, ctxview_api_key, ctxview_host

if TYPE_CHECKING:
    from ctxkit.record.client import Client

__all__ = ["AGENTS", "add_arguments", "add_watch_arguments", "command", "watch_command"]


# One option per agent whose transcripts ctxkit reads: (the source's name in ctxkit.importer.SOURCES,
# its default folder in words).
AGENTS: tuple[tuple[str, str], ...] = (
    ("claude-code", "Claude Code's projects folder (default $CLAUDE_CONFIG_DIR/projects or ~/.claude/projects)"),
    ("codex", "Codex CLI's sessions folder (default $CODEX_HOME/sessions or ~/.codex/sessions)"),
    ("gemini", "Gemini CLI's chats folder (default $GEMINI_CLI_HOME/.gemini/tmp or ~/.gemini/tmp)"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for name, folder in AGENTS:
        parser.add_argument(f"--{name}", default=None, metavar="DIR", help=folder)
    parser.add_argument("--since", default=None, metavar="DATE", help="only calls from this date on (YYYY-MM-DD)")
    parser.add_argument("--project-dir", default=None, metavar="PATH", help="only the sessions of this repository")
    parser.add_argument("--host", default=None, help=f"server URL (env CTXVIEW_HOST, default {DEFAULT_HOST})")
    parser.add_argument("--api-key", default=None, help="API key with ingest scope (env CTXVIEW_API_KEY)")
    parser.add_argument("--no-text", action="store_true", help="record token counts and hashes, never text")


def add_watch_arguments(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser)
    parser.add_argument("--interval", type=float, default=0.5, metavar="SECONDS",
                        help="how often the files are looked at (default 0.5)")


def _folders(args: argparse.Namespace) -> list[tuple[str, str]] | str:
    """(source, folder) pairs to read: those named, else each agent's default folder that exists;
    a message when a named folder is not one."""
    from ctxkit.importer.sessions import SOURCES

    named = [(name, getattr(args, name.replace("-", "_"))) for name, _ in AGENTS
             if getattr(args, name.replace("-", "_"))]
    for _name, folder in named:
        if not os.path.isdir(folder):
            return f"{folder} is not a directory"
    if named:
        return named
    found = [(name, SOURCES[name].folder()) for name, _ in AGENTS if os.path.isdir(SOURCES[name].folder())]
    return found or "no transcripts in any agent's default folder (name one: " + \
        ", ".join(f"--{name} DIR" for name, _ in AGENTS) + ")"


class _Setup(NamedTuple):
    api_key: str
    host: str
    folders: list[tuple[str, str]]
    since: float


def _setup(args: argparse.Namespace, command: str) -> _Setup | None:
    """Key, host, folders and --since of an import or watch, or None after saying what is wrong."""
    api_key = ctxview_api_key(args.api_key)
    host = ctxview_host(args.host)
    if not api_key:
        print(f"ctxkit {command}: no API key (use --api-key or set CTXVIEW_API_KEY)", file=sys.stderr)
        return None
    folders = _folders(args)
    if isinstance(folders, str):
        print(f"ctxkit {command}: {folders}", file=sys.stderr)
        return None
    since = 0.0
    if args.since:
        try:
            since = datetime.fromisoformat(args.since).timestamp()
        except ValueError:
            print(f"ctxkit {command}: --since {args.since!r} is not a date (YYYY-MM-DD)", file=sys.stderr)
            return None
    return _Setup(api_key, host, folders, since)


def _client(setup: _Setup, reasons: Counter[str]) -> tuple[Client, str]:
    """The client (spooling to the per-user spool of this host and key) and its spool folder."""
    from ctxkit.record.client import Client
    from ctxkit.record.spool import default_spool_dir

    spool = default_spool_dir(setup.host, setup.api_key)
    return Client(setup.api_key, setup.host, spool_dir=spool,
                  on_error=lambda reason, count: reasons.update({reason: count})), spool


def _reasons(reasons: Counter[str]) -> str:
    return "".join(f" ({count} {reason})" for reason, count in reasons.most_common())


def command(args: argparse.Namespace) -> int:
    from ctxkit.importer.sessions import SOURCES, Summary, import_transcripts

    setup = _setup(args, "import")
    if setup is None:
        return 2
    reasons: Counter[str] = Counter()
    client, spool = _client(setup, reasons)
    summary = Summary()
    try:
        for name, folder in setup.folders:
            import_transcripts(SOURCES[name], folder, client, summary=summary, state_path=f"{spool}-import.json",
                               since=setup.since, project_dir=args.project_dir or "", include_text=not args.no_text,
                               progress=sys.stderr.isatty())
        client.flush(timeout=60.0)
    finally:
        client.shutdown(timeout=5.0)
    for problem in summary.malformed:
        print(f"skipped {problem}", file=sys.stderr)
    counts = client.stats()
    left = counts["spooled"] + counts["queued"]
    print(f"{summary.line()} rejected={counts['rejected']} spooled={counts['spooled']}{_reasons(reasons)}")
    return 1 if counts["rejected"] or left else 0


def watch_command(args: argparse.Namespace) -> int:
    from ctxkit.importer.sessions import SOURCES
    from ctxkit.importer.watch import Watcher, run

    setup = _setup(args, "watch")
    if setup is None:
        return 2
    reasons: Counter[str] = Counter()
    client, spool = _client(setup, reasons)
    watcher = Watcher([(SOURCES[name], folder) for name, folder in setup.folders], client,
                      state_path=f"{spool}-import.json", since=setup.since, project_dir=args.project_dir or "",
                      include_text=not args.no_text, out=sys.stdout)
    print("watching " + ", ".join(folder for _name, folder in setup.folders) + " (Ctrl-C ends)", flush=True)
    try:
        run(watcher, interval=args.interval)
    finally:
        client.shutdown(timeout=10.0)
    counts = client.stats()
    print(f"calls={watcher.sent} rejected={counts['rejected']} spooled={counts['spooled']}{_reasons(reasons)}")
    return 0
