"""Where the agent worked, as the proxy reads it from Claude Code's requests: the working directory of
its environment section and the branch of its git status snapshot become the manifest's workspace.
The texts are Claude Code 2.1.332's, as it sent them from a git repository (recorded against the
stand-in, tests/proxy/claude_code_standin.py), and the ``<env>`` / ``gitStatus:`` system prompt
of earlier versions."""

from __future__ import annotations

import json
import time
from typing import Any

from capture_support import build_all

from ctxkit.manifest import Workspace
from ctxkit.proxy.capture import Exchange

HEADERS = {"x-claude-code-session-id": "9f1c-session", "user-agent": "claude-cli/2.1.332 (external, sdk-cli)"}
GIT_STATUS = (
    "<system-reminder>\nAs you answer the user's questions, you can use the following context:\n# gitStatus\n"
    "This is the git status at the start of the conversation. Note that this status is a snapshot in time, and will "
    "not update during the conversation.\n\nCurrent branch: feat/runmeta\n\nMain branch (you will usually use this "
    "for PRs): main\n\nStatus:\n(clean)\n\nRecent commits:\n6eb433f init\n\nClaude Code attached this context "
    "automatically; it isn't part of the user's message. It describes the user's own account and workspace, so they "
    "don't need it reported back.\n</system-reminder>\n")


def environment(cwd: str, repo: bool) -> str:
    return (f"# Environment\nYou have been invoked in the following environment: \n - Primary working directory: "
            f"{cwd}\n - Is a git repository: {'true' if repo else 'false'}\n - Platform: linux\n - Shell: bash\n"
            " - OS Version: Linux 6.18.44-fc-v1272\n\nYou are powered by the model named Opus 5.5. The exact model "
            "ID is claude-opus-5-5. Assistant knowledge cutoff is June 2026.\n\nToday's date is 2026-12-06.")


OLD_SYSTEM = (
    "You are Claude Code, Anthropic's official CLI for Claude.\n\nHere is useful information about the environment "
    "you are running in:\n<env>\nWorking directory: /home/dev/src/billing\nIs directory a git repo: Yes\n"
    "Platform: linux\nOS Version: Linux 6.8.0-45-generic\nToday's date: 2025-09-30\n</env>\n"
    "You are powered by the model named Sonnet 4.5.\n\ngitStatus: This is the git status at the start of the "
    "conversation. Note that this status is a snapshot in time, and will not update during the conversation.\n"
    "Current branch: fix/rounding\n\nMain branch (you will usually use this for PRs): main\n\nStatus:\n"
    "M src/rounding.py\n\nRecent commits:\n1a2b3c4 Round refunds half up")


def exchange(messages: list[Any], system: Any = "You are a Claude agent, built on Anthropic's Claude Agent SDK.",
             headers: dict[str, str] = HEADERS) -> Exchange:
    body = {"model": "claude-opus-5-5", "max_tokens": 512, "system": system, "messages": messages}
    response = {"id": f"msg_{time.monotonic_ns()}", "type": "message", "role": "assistant", "model": "claude-opus-5-5",
                "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 40, "output_tokens": 5}}
    return Exchange(api="anthropic.messages", request_body=json.dumps(body).encode(), headers=dict(headers),
                    started=time.time(), status=200, content_type="application/json",
                    chunks=[json.dumps(response).encode()])


def test_it_takes_the_folder_and_branch_from_a_claude_code_request() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": GIT_STATUS},
                                             {"type": "text", "text": "hello there"}]},
                {"role": "system", "content": [{"type": "text", "text": environment("/tmp/runmeta-exp/work", True)}]}]
    (manifest,) = build_all(exchange(messages))
    assert manifest.workspace == Workspace(cwd="/tmp/runmeta-exp/work", git_branch="feat/runmeta")


def test_it_takes_the_folder_alone_outside_a_repository() -> None:
    messages = [{"role": "user", "content": "read note.txt"},
                {"role": "system", "content": environment("/tmp/ctxview demo/work", False)}]
    (manifest,) = build_all(exchange(messages))
    assert manifest.workspace == Workspace(cwd="/tmp/ctxview demo/work")


def test_it_reads_the_system_prompt_of_earlier_versions() -> None:
    (manifest,) = build_all(exchange([{"role": "user", "content": "why do refunds round down?"}],
                                     system=[{"type": "text", "text": OLD_SYSTEM}]))
    assert manifest.workspace == Workspace(cwd="/home/dev/src/billing", git_branch="fix/rounding")


def test_it_takes_no_folder_or_branch_from_what_the_user_wrote() -> None:
    # A later user message quoting such lines is the user's text, not the agent's environment.
    quoted = "Current branch: evil\n# Environment\n - Primary working directory: /evil"
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                {"role": "user", "content": quoted}]
    (manifest,) = build_all(exchange(messages, system="You are a helpful agent."))
    assert manifest.workspace is None


def test_a_folder_the_schema_refuses_is_left_out_and_the_call_still_recorded() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": GIT_STATUS}, {"type": "text", "text": "hi"}]},
                {"role": "system", "content": environment("/tmp/" + "x" * 600, True)}]
    (manifest,) = build_all(exchange(messages))
    assert manifest.workspace == Workspace(git_branch="feat/runmeta")


def test_it_takes_the_folder_from_a_codex_request() -> None:
    # Codex 0.171.0's environment context, as its rollout in the demo holds it.
    context = ("<environment_context>\n  <cwd>/tmp/ctxview-demo-codex/work</cwd>\n  <shell>bash</shell>\n"
               "  <current_date>2026-12-06</current_date>\n  <timezone>Etc/UTC</timezone>\n</environment_context>")
    body = {"model": "gpt-5.5-codex", "instructions": "You are Codex.", "stream": False, "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "sandbox rules"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": context}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<cwd>/evil</cwd> hi"}]},
    ]}
    response = {"id": "resp_codex_1", "object": "response", "status": "completed", "model": "gpt-5.5-codex",
                "output": [{"type": "message", "role": "assistant", "id": "msg_1",
                            "content": [{"type": "output_text", "text": "ok"}]}],
                "usage": {"input_tokens": 40, "output_tokens": 2, "total_tokens": 42}}
    exchange = Exchange(api="openai.responses", request_body=json.dumps(body).encode(),
                        headers={"user-agent": "codex_exec/0.171.0 (Debian; x86_64)", "session-id": "c0dex"},
                        started=time.time(), status=200, content_type="application/json",
                        chunks=[json.dumps(response).encode()])
    (manifest,) = build_all(exchange)
    assert manifest.workspace == Workspace(cwd="/tmp/ctxview-demo-codex/work")
