"""A call's history, parsed once and read by the run resolver and the compaction watch.

The history is what the call sends of the conversation (its provider says where: Anthropic's
and Chat Completions' ``messages``, Responses' ``input``, Gemini's ``contents``); each entry is
read once into a :class:`~ctxkit.providers.common.Message`. From them: the running hashes that tell which earlier
conversation a call extends (:attr:`History.chain`), and where a compaction summary stands
(:attr:`History.summary`): an entry that is a provider's compaction, or the first user message
when it holds one (a provider's compaction block, or a text that opens like an agent's summary,
ctxkit.agents), or a later user message holding the summary of an agent that puts it after the
messages it keeps (Codex).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ctxkit.agents import agent_context, summary_strategy, summary_trigger
from ctxkit.providers import Provider, for_api
from ctxkit.providers.common import Message
from ctxkit.proxy.lru import ObjectMemo

__all__ = ["Entries", "History", "Summary"]

# What one history entry reads as: the digest of its compared form (ctxkit.providers' ``normal``)
# and its view as a message.
Entries = ObjectMemo[tuple[bytes, Message]]


@dataclass(frozen=True, slots=True)
class Summary:
    """Where a history's compaction summary stands: the entry's index, the strategy
    (``client_summary``, ``anthropic_compaction``, ``openai_compaction``) and the trigger
    (``manual``, ``auto``, ``provider`` or ``""``)."""

    at: int
    strategy: str
    trigger: str


class History:
    """The history of one call of ``api``."""

    def __init__(self, api: str, request: dict[str, Any], entries: Entries | None = None) -> None:
        """``entries``: what earlier calls read of the entries this one repeats (the same objects,
        as ``ctxkit import`` hands them), read again only when new."""
        self.provider: Provider = for_api(api)
        self.request = request
        self.entries: list[Any] = self.provider.history(api, request)
        self._known = entries

    def _digest(self, entry: Any) -> bytes:
        text = json.dumps(self.provider.normal(entry), sort_keys=True, ensure_ascii=False, separators=(",", ":"),
                          default=str)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()

    def _read_entry(self, entry: Any) -> tuple[bytes, Message]:
        return self._digest(entry), self.provider.message(entry)

    @cached_property
    def _read(self) -> list[tuple[bytes, Message]]:
        known = self._known
        assert known is not None
        return [known.get(entry, self._read_entry) for entry in self.entries]

    def __len__(self) -> int:
        return len(self.entries)

    @cached_property
    def messages(self) -> list[Message]:
        """Each entry as the provider reads it (read once, when first asked)."""
        if self._known is not None:
            return [message for _digest, message in self._read]
        return [self.provider.message(entry) for entry in self.entries]

    @cached_property
    def chain(self) -> list[str]:
        """Running hashes: entry i identifies entries[:i + 1] (as the provider compares them)."""
        digests = ([digest for digest, _message in self._read] if self._known is not None
                   else [self._digest(entry) for entry in self.entries])
        out = []
        running = hashlib.sha256()
        for digest in digests:
            running.update(digest)
            out.append(running.copy().hexdigest()[:32])
        return out

    @cached_property
    def first_user(self) -> Message | None:
        return next((m for m in self.messages if m.role == "user"), None)

    @cached_property
    def summary(self) -> Summary | None:
        """Where the summary stands, or None when the first user message holds none (nor a later
        one a summary that agents put after the messages they keep, ctxkit.agents)."""
        first = True
        for index, message in enumerate(self.messages):
            if first and message.compaction and message.role in ("", "user"):
                return Summary(index, message.compaction, "provider")
            if message.role != "user":
                continue
            for text in message.texts:
                strategy = summary_strategy(text, first=first)
                if strategy:  # Claude Code's /compact command may sit in any later user message
                    later = "\n".join("\n".join(m.texts) for m in self.messages[index:] if m.role == "user")
                    return Summary(index, strategy, summary_trigger(later))
            first = False
        return None

    @cached_property
    def summary_text(self) -> str:
        """The first user message's text when it holds a compaction summary, else ``""``."""
        first = self.first_user
        if first is None:
            return ""
        if first.compaction or any(summary_strategy(text) for text in first.texts):
            return "\n".join(first.texts)
        return ""

    def kept_turns(self, after: int) -> int:
        """The user turns kept verbatim around entry ``after`` (the summary): its user messages
        with text after it, but for the last user message when that is the prompt the agent just
        added (not a tool result); and when the summary stands after the first user message
        (Codex keeps the user's messages before it), those before it that are the user's own
        (not the context an agent writes itself)."""
        users = [m for m in self.messages[after + 1:] if m.role == "user"]
        turns = sum(1 for m in users if m.says)
        turns = turns - 1 if users and users[-1].says else turns
        first = self.first_user
        if first is not None and first is not self.messages[after]:
            turns += sum(1 for m in self.messages[:after] if m.role == "user" and m.says
                         and not any(agent_context(text) for text in m.texts))
        return turns
