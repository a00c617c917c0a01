"""``ctxkit proxy``'s options and entry point (no aiohttp import here: ``ctxkit --help`` and the
other subcommands work without the ``proxy`` extra)."""

from __future__ import annotations

import argparse
import logging
import sys

from ctxkit.proxy.config import (
    ANTHROPIC_UPSTREAM,
    DEFAULT_PORT,
    GEMINI_UPSTREAM,
    OPENAI_UPSTREAM,
    ProxyConfig,
)
from ctxkit.record.transport import DEFAULT_HOST, ctxview_api_key, ctxview_host

__all__ = ["DESCRIPTION", "add_arguments", "config_from_args", "command", "main", "run"]

DESCRIPTION = """\
A local capture proxy: point any agent at it with one environment variable and every model call
is forwarded unchanged to the provider and recorded as a ctxview context manifest.

  ANTHROPIC_BASE_URL=http://127.0.0.1:8788 claude          # Claude Code, Anthropic SDKs
  OPENAI_BASE_URL=http://127.0.0.1:8788/v1 my-agent        # OpenAI SDKs, any OpenAI-speaking tool
  GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8788 gemini      # Gemini CLI, Google GenAI SDKs

Recorded: POST /v1/messages (Anthropic, ?beta=true too), /v1/chat/completions and /v1/responses
(OpenAI), /v1beta/models/<model>:generateContent and :streamGenerateContent (Gemini, v1 too),
streamed or not. Everything else (count_tokens, countTokens, models, files, batches, ...) is
forwarded unrecorded. Credentials are forwarded, never recorded. Runs: the X-Ctxview-Run header,
else the client's session (Claude Code), else conversation continuity. Needs `pip install
ctxkit[proxy]`; see docs/integrations.md.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 exposes "
                             "the proxy, and the agents' keys going through it, to the network)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port serving both APIs (default {DEFAULT_PORT}; 0 picks a free one, printed on start)")
    parser.add_argument("--anthropic-upstream", default=ANTHROPIC_UPSTREAM, metavar="URL",
                        help=f"where Anthropic requests go; the request's path (/v1/...) is appended "
                             f"(default {ANTHROPIC_UPSTREAM})")
    parser.add_argument("--openai-upstream", default=OPENAI_UPSTREAM, metavar="URL",
                        help=f"where OpenAI requests go; the request's path (/v1/...) is appended "
                             f"(default {OPENAI_UPSTREAM})")
    parser.add_argument("--gemini-upstream", default=GEMINI_UPSTREAM, metavar="URL",
                        help=f"where Gemini requests go; the request's path (/v1beta/...) is appended "
                             f"(default {GEMINI_UPSTREAM})")
    parser.add_argument("--ctxview-host", default=None, metavar="URL",
                        help=f"ctxview server that receives the manifests (env CTXVIEW_HOST, "
                             f"default {DEFAULT_HOST})")
    parser.add_argument("--ctxview-api-key", default=None, metavar="KEY",
                        help="ctxview project key with ingest scope (env CTXVIEW_API_KEY; without one the "
                             "proxy forwards and records nothing)")
    parser.add_argument("--no-text", action="store_true",
                        help="record token counts and hashes only, never the text of a prompt")
    parser.add_argument("--agent", default="",
                        help="agent name for calls without an X-Ctxview-Agent header (default: the client's "
                             "product from its User-Agent, e.g. claude-cli)")
    parser.add_argument("--spool-dir", default=None, metavar="DIR",
                        help="where manifests wait while ctxview is unreachable, sent as soon as it answers "
                             "(default: a per-user folder, $XDG_STATE_HOME/ctxkit/spool or "
                             "~/.local/state/ctxkit/spool, one subfolder per ctxview host and key)")
    parser.add_argument("--no-spool", action="store_true",
                        help="keep nothing on disk: what cannot be sent while ctxview is away is dropped")
    parser.add_argument("--max-record-bytes", type=int, default=32 * 1024 * 1024, metavar="N",
                        help="a request body larger than this is forwarded but not recorded (default 32 MiB)")
    parser.add_argument("--connect-timeout", type=float, default=30.0, metavar="SECONDS",
                        help="connecting to the upstream (default 30)")
    parser.add_argument("--read-timeout", type=float, default=600.0, metavar="SECONDS",
                        help="longest silence from the upstream within a response (default 600)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each failure and what the client does")


def config_from_args(args: argparse.Namespace) -> ProxyConfig:
    return ProxyConfig(
        host=args.host, port=args.port, anthropic_upstream=args.anthropic_upstream,
        openai_upstream=args.openai_upstream, gemini_upstream=args.gemini_upstream,
        ctxview_host=ctxview_host(args.ctxview_host),
        ctxview_api_key=ctxview_api_key(args.ctxview_api_key),
        include_text=not args.no_text, agent=args.agent,
        spool_dir=None if args.no_spool else (args.spool_dir or True),
        max_record_bytes=args.max_record_bytes, connect_timeout=args.connect_timeout,
        read_timeout=args.read_timeout,
    )


def run(config: ProxyConfig) -> int:
    """Serve until interrupted; flush what was recorded on the way out."""
    import asyncio

    try:
        from ctxkit.proxy.server import serve
    except ImportError as exc:
        print(f"ctxkit proxy needs the proxy extra: pip install 'ctxkit[proxy]' ({exc})", file=sys.stderr)
        return 2
    from ctxkit.proxy.worker import CaptureProcess

    capture = None
    if config.ctxview_api_key:
        capture = CaptureProcess(api_key=config.ctxview_api_key, host=config.ctxview_host,
                                 spool_dir=config.spool_dir, include_text=config.include_text, agent=config.agent)
        target = f"recording to {config.ctxview_host}" + ("" if config.include_text else " (no text)")
        if config.spool_dir is None or config.spool_dir is False:
            target += "; no spool"
        else:
            from ctxkit.record.spool import default_spool_dir

            folder = default_spool_dir(config.ctxview_host, config.ctxview_api_key) if config.spool_dir is True \
                else config.spool_dir
            target += f"; spooling to {folder} while ctxview is away"
    else:
        target = "recording nothing: no CTXVIEW_API_KEY (or --ctxview-api-key)"

    def ready(port: int) -> None:
        print(f"ctxkit proxy listening on http://{config.host}:{port} -> anthropic {config.anthropic_upstream}, "
              f"openai {config.openai_upstream}; {target}", file=sys.stderr, flush=True)

    async def until_signalled() -> None:
        import signal

        loop, task = asyncio.get_running_loop(), asyncio.current_task()
        assert task is not None  # a coroutine run by asyncio.run
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, task.cancel)
        try:
            await serve(config, capture, ready)
        except asyncio.CancelledError:
            pass

    try:
        asyncio.run(until_signalled())
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(f"ctxkit proxy: cannot listen on {config.host}:{config.port}: {exc}", file=sys.stderr)
        return 1
    finally:
        if capture is not None:
            capture.close(10.0)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ctxkit proxy", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parser.parse_args(argv)
    return command(args)


def command(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    return run(config_from_args(args))
