"""A complete agent loop with ctxkit: build each call's context within budget, call a (fake)
model, record what went into the context and why, and send it to ctxview.

    make run                                   # another terminal; prints an API key for "Demo"
    CTXVIEW_API_KEY=ctx_... .venv/bin/python sdk/examples/agent_loop.py
    # then open http://127.0.0.1:8000/p/demo/runs/<the run id it prints>/ (login demo / demo-password)

``CTXVIEW_HOST`` defaults to http://127.0.0.1:8000. Without ``CTXVIEW_API_KEY`` the loop runs
offline: it builds and validates every manifest and prints a summary, sending nothing.

Each step: clear old tool results (when that frees enough), compact the history when the
window is 80 % full (with invariant checks), allocate the budget over the segments, lay them
out HEAD/MIDDLE/TAIL, read the key fields back, call the model, normalise its usage, build the
manifest and ``capture()`` it (a queue put: sending happens on a background thread).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

from ctxkit import (
    Client,
    ContextBuilder,
    Manifest,
    Record,
    Segment,
    clear_tool_results,
    compact,
    estimate_tokens,
    should_compact,
)
from ctxkit.fixtures import HISTORY, KEY_FIELDS, SYSTEM, TASK, TOOL_LOG, TOOLS, WEB_PAGE
from ctxkit.manifest import Claim, Outcome

MODEL = "claude-sonnet-4-5"
BUDGET = 2400  # the window this agent allows itself per call
RESERVE = 480  # output reserve: the request's max_tokens; input never takes it
HISTORY_WINDOW = 700  # compact the history when it fills 80 % of this
CHANNELS = ("mini_program", "offline", "app", "web")


def initial_history() -> list[Record]:
    """The conversation so far, one Record per line of the fixture history."""
    records = []
    for n, line in enumerate(HISTORY.split("\n"), start=1):
        head, _, text = line.partition(": ")
        if head.startswith("tool("):
            name = head[5:-1]
            records.append(Record(id=f"m{n}", role="tool", text=text, tool_name=name, ref=f"trace:m{n}"))
        else:
            records.append(Record(id=f"m{n}", role=head, text=text))
    return records


def render(records: list[Record]) -> str:
    """The history as the model reads it: live records only, one per line."""
    return "\n".join(f"{r.tool_name or r.role}: {r.text}" for r in records if r.live)


def fake_model(prompt: str, prefix: tuple[str, int], last_prefix: str | None, step: int, final: bool) -> dict[str, Any]:
    """An Anthropic-shaped Messages response. The prefix (hash, tokens) is read from the cache
    when its hash is the previous call's. Cached tokens are reported beside input_tokens, as
    Anthropic does; ctxkit's normalize_usage adds them back in."""
    total = estimate_tokens(prompt)
    prefix_hash, prefix_tokens = prefix
    prefix_tokens = min(total, prefix_tokens)
    hit = prefix_hash == last_prefix
    answer = (
        "结论：2024 Q3 全渠道退款率 0.0321（来源 log#sha256:4be1c0d2）。"
        if final
        else f"调用 bi_query 统计 {CHANNELS[step % len(CHANNELS)]} 渠道。"
    )
    return {
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": answer}],
        "stop_reason": "end_turn" if final else "tool_use",
        "usage": {
            "input_tokens": total - prefix_tokens,
            "cache_read_input_tokens": prefix_tokens if hit else 0,
            "cache_creation_input_tokens": 0 if hit else prefix_tokens,
            "output_tokens": estimate_tokens(answer),
        },
    }


def run_agent(*, steps: int = 4, run_id: str = "agent-loop", client: Client | None = None) -> list[Manifest]:
    """Run the loop; return the manifests (captured to ``client`` when one is given)."""
    builder = ContextBuilder(budget=BUDGET, reserve=RESERVE, key_fields=KEY_FIELDS)
    history = initial_history()
    manifests: list[Manifest] = []
    last_prefix: str | None = None
    for step in range(steps):
        started = datetime.now(UTC)
        final = step == steps - 1

        # 1. Light compaction first: clear old tool results, only when it frees enough to pay
        #    for the cache prefix it breaks.
        cleared = clear_tool_results(history, keep_last=2, clear_at_least=40)
        history = cleared.records
        # 2. Compact on window occupancy (never on turn count); check what must survive.
        compactions = []
        occupied = sum(estimate_tokens(r.text) for r in history if r.live)
        if should_compact(occupied, HISTORY_WINDOW):
            result = compact(
                history,
                keep_last=2,
                constraints=["不要再访问外网"],
                required_evidence=["429", "除以 100"],
                trigger=f"history occupancy {occupied}/{HISTORY_WINDOW} >= 0.80",
            )
            history = result.new_history
            compactions.append(result)

        # 3. Allocate, lay out and read back.
        newest_tool = next((r for r in reversed(history) if r.kind == "tool_result" and r.live), None)
        segments = [
            Segment(name="system", kind="system", text=SYSTEM, priority=100, policy="pin"),
            # Pinned, not compressed to a grant that varies per call: HEAD must stay byte-stable
            # for the prompt cache (compress big schemas once, offline, instead).
            Segment(name="tools", kind="tools", text=TOOLS, priority=60, policy="pin"),
            Segment(name="task", kind="task", text=TASK, priority=95, policy="pin"),
            Segment(name="retrieval", kind="retrieval", text=WEB_PAGE, priority=50, policy="extract",
                    min_tokens=24, source_ref="web#sha256:9f2c1a7b", near_dupes=True),
            Segment(name="history", kind="history", text=render(history), priority=40, policy="summarize",
                    min_tokens=40, source_ref=f"session:{run_id}"),
            Segment(name="tool_result", kind="tool_result", text=newest_tool.text if newest_tool else "",
                    priority=30, policy="truncate", min_tokens=48, source_ref=newest_tool.ref if newest_tool else None),
            Segment(name="question", kind="user", text="继续：按渠道汇总退款率并给出结论。", priority=90, policy="pin"),
        ]
        built = builder.build(segments)

        # 4. Call the model (fake here) with the context in layout order.
        assert built.layout is not None  # priority mode always lays the context out
        prefix = (built.layout.prefix_hash, built.layout.prefix_tokens)
        response = fake_model(built.text(), prefix, last_prefix, step, final)
        last_prefix = prefix[0]

        # 5. One call turns the build and the raw usage into a manifest.
        outcome = Outcome(status="ok", finish_reason=response["stop_reason"])
        if final:
            outcome.claims = [Claim(text=response["content"][0]["text"], evidence_keys=["refund_rate"])]
        manifest = built.manifest(
            call_id=f"{run_id}-step-{step}",  # no "/": call ids appear in URL paths
            run_id=run_id,
            step=step,
            model=MODEL,
            provider="anthropic",
            agent="refund-analyst",
            usage=response,  # the whole response: normalize_usage finds and normalises its usage
            compactions=compactions,
            edits=[cleared],  # skipped automatically when nothing was cleared
            records=history,  # cleared and folded history records become items of their own
            started_at=started,
            ended_at=datetime.now(UTC),
            outcome=outcome,
        )
        manifests.append(manifest)
        if client is not None:
            client.capture(manifest)  # never blocks, never raises

        # 6. The agent acts: the model's tool call and its (untrusted) result join the history.
        turn = 100 + step
        history.append(Record(id=f"s{step}-a", role="assistant", text=response["content"][0]["text"], turn=turn))
        if not final:
            channel = CHANNELS[step % len(CHANNELS)]
            log = TOOL_LOG.replace("quarter=2024Q3", f"quarter=2024Q3 channel={channel}")
            history.append(Record(id=f"s{step}-t", role="tool", text=log, tool_name="bi_query",
                                  ref=f"log#step-{step}", turn=turn))
    return manifests


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--run-id", default=f"agent-loop-{int(time.time())}")
    args = parser.parse_args(argv)
    host = os.environ.get("CTXVIEW_HOST", "http://127.0.0.1:8000")
    key = os.environ.get("CTXVIEW_API_KEY", "")
    client = Client(key, host) if key else None

    manifests = run_agent(steps=args.steps, run_id=args.run_id, client=client)
    for m in manifests:
        missing = [e.key for e in m.evidence if not e.present]
        actions = ", ".join(f"{i.id}={i.action}" for i in m.items)
        print(f"{m.call_id}: input={m.usage.input_tokens} cached={m.usage.cache_read_tokens} "
              f"compactions={len(m.compactions)} edits={len(m.context_edits)} missing={missing or 'none'}")
        print(f"    {actions}")
    if client is None:
        print("offline: set CTXVIEW_API_KEY (printed by `make run`) to send these manifests")
        return 0
    flushed = client.flush(timeout=10)
    client.shutdown(timeout=2)
    stats = client.stats()
    print(f"flushed={flushed} sent={stats['sent']} rejected={stats['rejected']} spooled={stats['spooled']} "
          f"dropped={stats['dropped']}")
    print(f"dashboard: {host.rstrip('/')}/p/demo/runs/{args.run_id}/  (login demo / demo-password)")
    return 0 if stats["sent"] == len(manifests) else 1


if __name__ == "__main__":
    sys.exit(main())
