"""The proxy's settings (one object, made from the command line by ctxkit.proxy.options)."""

from __future__ import annotations

from dataclasses import dataclass

from ctxkit.record.transport import DEFAULT_HOST

__all__ = ["ProxyConfig", "DEFAULT_PORT", "ANTHROPIC_UPSTREAM", "OPENAI_UPSTREAM", "GEMINI_UPSTREAM"]

DEFAULT_PORT = 8788
ANTHROPIC_UPSTREAM = "https://api.anthropic.com"
OPENAI_UPSTREAM = "https://api.openai.com"
GEMINI_UPSTREAM = "https://generativelanguage.googleapis.com"


@dataclass
class ProxyConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    anthropic_upstream: str = ANTHROPIC_UPSTREAM
    openai_upstream: str = OPENAI_UPSTREAM
    gemini_upstream: str = GEMINI_UPSTREAM
    ctxview_host: str = DEFAULT_HOST
    ctxview_api_key: str = ""
    include_text: bool = True
    agent: str = ""
    spool_dir: str | bool | None = True  # True: the per-user default folder; None: no spool
    max_record_bytes: int = 32 * 1024 * 1024
    connect_timeout: float = 30.0
    read_timeout: float = 600.0

    def upstream(self, name: str) -> str:
        """The URL of a provider's upstream (``name``: its ``UPSTREAM``, ctxkit.providers)."""
        return str(getattr(self, f"{name}_upstream"))
