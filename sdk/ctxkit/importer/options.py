"""``ctxkit import``'s options and entry point (the importer and the proxy's mapping load on use, so
``ctxkit --help`` stays quick)."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime

from ctxkit.proxy.config import DEFAULT_CTXVIEW_HOST as DEFAULT_HOST

__all__ = ["AGENTS", "add_arguments", "command"]


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


def command(args: argparse.Namespace) -> int:
    from ctxkit.importer.sessions import SOURCES, Summary, import_transcripts
    from ctxkit.record.client import Client
    from ctxkit.record.spool import default_spool_dir

    api_key = args.api_key or os.environ.get("CTXVIEW_API_KEY", "")
    host = args.host or os.environ.get("CTXVIEW_HOST", "") or DEFAULT_HOST
    if not api_key:
        print("ctxkit import: no API key (use --api-key or set CTXVIEW_API_KEY)", file=sys.stderr)
        return 2
    folders = _folders(args)
    if isinstance(folders, str):
        print(f"ctxkit import: {folders}", file=sys.stderr)
        return 2
    since = 0.0
    if args.since:
        try:
            since = datetime.fromisoformat(args.since).timestamp()
        except ValueError:
            print(f"ctxkit import: --since {args.since!r} is not a date (YYYY-MM-DD)", file=sys.stderr)
            return 2
    spool = default_spool_dir(host, api_key)
    client = Client(api_key, host, spool_dir=spool)
    summary = Summary()
    try:
        for name, folder in folders:
            import_transcripts(SOURCES[name], folder, client, summary=summary, state_path=f"{spool}-import.json",
                               since=since, project_dir=args.project_dir or "", include_text=not args.no_text,
                               progress=sys.stderr.isatty())
        client.flush(timeout=60.0)
    finally:
        client.shutdown(timeout=5.0)
    for problem in summary.malformed:
        print(f"skipped {problem}", file=sys.stderr)
    counts = client.stats()
    left = counts["spooled"] + counts["queued"]
    print(f"{summary.line()} rejected={counts['rejected']} spooled={counts['spooled']}")
    return 1 if counts["rejected"] or left else 0
