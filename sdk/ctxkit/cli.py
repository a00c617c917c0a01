"""The ``ctxkit`` command.

``ctxkit count FILE``
    bytes, characters, CJK characters, estimated tokens and the share of an 8k
    and a 128k window that the file would take.
``ctxkit send-spool [--dir DIR] [--host URL] [--api-key KEY]``
    send what a client spooled to disk (server down, process ended) now, and
    exit non-zero if anything is left. Host and key default to ``CTXVIEW_HOST``
    and ``CTXVIEW_API_KEY``; the folder to their default spool (the one the proxy
    and ``instrument()`` use).
``ctxkit check-prefix BEFORE AFTER [--host URL --key KEY] [--json]``
    compare the cacheable prefix of two recorded runs (two manifests files, or two
    run ids on a ctxview server) step by step; exit 1 naming the segment, the line
    and the extra cost per 1,000 calls when it changed, 0 when not
    (``ctxkit.prefixcheck``).
``ctxkit import [--claude-code DIR] [--since DATE] [--project-dir PATH] [--host URL] [--api-key KEY]``
    send the model calls of agents' transcripts on disk (each agent's default folder unless
    one is named) as manifests, through the proxy's mapping (``ctxkit.importer``); a rerun
    sends only new calls.
``ctxkit watch [the options of import] [--interval SECONDS]``
    follow the same folders and send each new call as its lines are written, until Ctrl-C
    or SIGTERM; it remembers how far it read, as import does.
``ctxkit proxy [--port 8788] [--no-text] ...``
    the local capture proxy (ctxkit.proxy; ``ctxkit proxy --help`` lists its options).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from ctxkit.record.transport import DEFAULT_HOST, ctxview_api_key, ctxview_host


def _count(args: argparse.Namespace) -> int:
    from ctxkit.context import tokens  # imported here: `send-spool` must not pay for (or depend on) it

    try:
        report = tokens.file_report(args.file)
    except OSError as exc:
        print(f"ctxkit count: {exc}", file=sys.stderr)
        return 2
    print(tokens.format_report(report))
    return 0


def _send_spool(args: argparse.Namespace) -> int:
    from ctxkit.record.client import Client

    api_key = ctxview_api_key(args.api_key)
    host = ctxview_host(args.host)
    if not api_key:
        print("ctxkit send-spool: no API key (use --api-key or set CTXVIEW_API_KEY)", file=sys.stderr)
        return 2
    if args.dir is None:
        from ctxkit.record.spool import default_spool_dir

        args.dir = default_spool_dir(host, api_key)
        if not os.path.isdir(args.dir):
            print(f"sent=0 rejected=0 skipped=0 segments_left=0 (nothing spooled in {args.dir})")
            return 0
    if not os.path.isdir(args.dir):
        print(f"ctxkit send-spool: {args.dir} is not a directory", file=sys.stderr)
        return 2
    client = Client(
        api_key,
        host,
        spool_dir=args.dir,
        replay=False,  # we drain here, on this thread, and report the counts
        max_retries=args.retries,
        timeout=args.timeout,
        backoff_cap=5.0,
    )
    try:
        counts = client.drain_spool()
    finally:
        client.shutdown(timeout=1.0)
    print(
        f"sent={counts['sent']} rejected={counts['rejected']} skipped={counts['skipped']} "
        f"segments_left={counts['left']}"
    )
    return 1 if counts["left"] else 0


def _check_prefix(args: argparse.Namespace) -> int:
    from ctxkit import prefixcheck

    return prefixcheck.command(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxkit", description="ctxkit: context manifests for ctxview.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the client does")
    sub = parser.add_subparsers(dest="command", required=True)

    count = sub.add_parser("count", help="estimate the tokens of a file and its share of a context window")
    count.add_argument("file")
    count.set_defaults(func=_count)

    send = sub.add_parser("send-spool", help="send manifests spooled on disk to the server")
    send.add_argument("--dir", default=None,
                      help="the client's spool_dir (default: the per-user spool of this host and key)")
    send.add_argument("--host", default=None, help=f"server URL (env CTXVIEW_HOST, default {DEFAULT_HOST})")
    send.add_argument("--api-key", default=None, help="API key (env CTXVIEW_API_KEY)")
    send.add_argument("--retries", type=int, default=3, help="retries per batch on transient errors")
    send.add_argument("--timeout", type=float, default=10.0, help="HTTP timeout in seconds")
    send.set_defaults(func=_send_spool)

    check = sub.add_parser("check-prefix", help="compare the cacheable prefix of two recorded runs (CI)")
    check.add_argument("before", help="manifests file (JSON lines) or, with --host, a run id: the baseline")
    check.add_argument("after", help="manifests file or run id: the run to check")
    check.add_argument("--host", default=None,
                       help="read both runs from this ctxview server (BEFORE and AFTER are run ids)")
    check.add_argument("--key", default=None, help="a read-scoped API key (env CTXVIEW_API_KEY)")
    check.add_argument("--before-run", default=None, help="the run to take from the BEFORE file")
    check.add_argument("--after-run", default=None, help="the run to take from the AFTER file")
    check.add_argument("--prices", default=None,
                       help="per 1k tokens, e.g. input=3,cache_read=0.3,cache_write=3.75 (default: the server's "
                            "price book, else its default row)")
    check.add_argument("--timeout", type=float, default=30.0, help="HTTP timeout in seconds")
    check.add_argument("--json", action="store_true", help="print the result as JSON")
    check.set_defaults(func=_check_prefix)

    from ctxkit.importer import options as import_options

    imports = sub.add_parser("import", help="send the model calls of agents' transcripts on disk")
    import_options.add_arguments(imports)
    imports.set_defaults(func=import_options.command)
    watch = sub.add_parser("watch", help="send each new call of agents' transcripts as it is written")
    import_options.add_watch_arguments(watch)
    watch.set_defaults(func=import_options.watch_command)

    from ctxkit.proxy import options as proxy_options  # argparse only: the proxy's aiohttp loads on use

    proxy = sub.add_parser("proxy", help="run the local capture proxy for any agent",
                           description=proxy_options.DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    proxy_options.add_arguments(proxy)
    proxy.set_defaults(func=proxy_options.command)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(name)s: %(message)s")
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
