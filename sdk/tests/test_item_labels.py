"""Items named as the agent names them (ctxkit.record.labels), through the one mapping of plain
requests: a tool by its name, a message by role and turn, a tool call and its result by the tool."""

from __future__ import annotations

from ctxkit.instrumentation.bodies import manifest_from_bodies
from ctxkit.record.labels import tool_name


def _labels(api: str, request: dict, response: dict) -> dict[str, str | None]:
    m = manifest_from_bodies(api, request, response=response, call_id="c", run_id="r", step=0, started=0)
    return {i.id: i.label for i in m.items}


def test_it_names_claude_code_tools_turns_and_tool_calls():
    request = {"model": "claude-sonnet-4-5", "max_tokens": 100,
               "system": [{"type": "text", "text": "You are Claude Code."}],
               "tools": [{"name": "Read",
                          "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}}},
                         {"name": "mcp__github__create_issue", "input_schema": {"type": "object"}}],
               "messages": [
                   {"role": "user", "content": [{"type": "text", "text": "<system-reminder>x</system-reminder>"},
                                                {"type": "text", "text": "read a.txt"}]},
                   {"role": "assistant", "content": [{"type": "text", "text": "Reading."},
                                                     {"type": "tool_use", "id": "toolu_1", "name": "Read",
                                                      "input": {"file_path": "a.txt"}}]},
                   # A result with a reminder beside it: one message, still the first turn.
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "A"},
                                                {"type": "text", "text": "<system-reminder>y</system-reminder>"}]},
                   {"role": "assistant", "content": "It says A."},
                   {"role": "system", "content": "Mid-conversation instructions."},
                   {"role": "user", "content": "now open an issue"},
               ]}
    labels = _labels("anthropic.messages", request, {"model": "claude-sonnet-4-5", "content": [],
                                                     "usage": {"input_tokens": 1, "output_tokens": 1}})
    assert labels == {
        "tools[0]": "Read", "tools[1]": "mcp__github__create_issue", "system[0]": "system",
        "messages[0].content[0]": "user · turn 1", "messages[0].content[1]": "user · turn 1",
        "messages[1].content[0]": "assistant · turn 1", "messages[1].content[1]": "Read call · turn 1",
        "messages[2].content[0]": "Read result · turn 1", "messages[2].content[1]": "user · turn 1",
        "messages[3].content[0]": "assistant · turn 1", "messages[4].content[0]": "system · turn 1",
        "messages[5].content[0]": "user · turn 2",
    }


def test_it_names_codex_developer_messages_functions_and_built_in_tools():
    request = {"model": "gpt-5-codex", "stream": True,
               "tools": [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
                         {"type": "namespace", "name": "multi_agent_v1", "tools": []},
                         {"type": "web_search", "external_web_access": False}],
               "input": [
                   {"type": "message", "role": "developer",
                    "content": [{"type": "input_text", "text": "You are Codex."}]},
                   {"type": "message", "role": "user",
                    "content": [{"type": "input_text", "text": "<environment_context>"}]},
                   {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "cat a.txt"}]},
                   {"type": "function_call", "call_id": "call_1", "name": "exec_command", "arguments": "{}"},
                   {"type": "function_call_output", "call_id": "call_1", "output": "A"},
                   {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A."}]},
                   {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "thanks"}]},
               ]}
    labels = _labels("openai.responses", request, {"model": "gpt-5-codex", "status": "completed", "output": [],
                                                   "usage": {"input_tokens": 1, "output_tokens": 1}})
    assert labels == {
        "tools[0]": "exec_command", "tools[1]": "multi_agent_v1", "tools[2]": "web_search",
        "input[0]": "system", "input[1]": "user · turn 1", "input[2]": "user · turn 1",
        "input[3]": "exec_command call · turn 1", "input[4]": "exec_command result · turn 1",
        "input[5]": "assistant · turn 1", "input[6]": "user · turn 2",
    }


def test_it_names_chat_completions_functions_by_their_function_name():
    request = {"model": "gpt-4o", "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {}}}],
               "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "look it up"},
                            {"role": "assistant", "content": None, "tool_calls": [
                                {"id": "call_9", "type": "function",
                                 "function": {"name": "lookup", "arguments": "{}"}}]},
                            {"role": "tool", "tool_call_id": "call_9", "content": "found"}]}
    labels = _labels("openai.chat", request, {"model": "gpt-4o", "choices": [],
                                              "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    assert labels["tools[0]"] == "lookup" and labels["messages[0]"] == "system"
    assert labels["messages[1]"] == "user · turn 1"
    assert labels["messages[2].tool_calls[0]"] == "lookup call · turn 1"
    assert labels["messages[3]"] == "lookup result · turn 1"


def test_it_reads_a_tool_name_only_from_json_that_holds_one():
    assert tool_name('{"function":{"name":"f"},"type":"function"}') == "f"
    assert tool_name('{"type":"web_search"}') == "web_search"
    assert tool_name("not json") == tool_name("[1]") == tool_name("{broken") == tool_name('{"name":""}') == ""


def test_it_maps_codex_reasoning_and_free_form_tool_items_as_the_model_and_tools_made_them():
    request = {"model": "gpt-5-codex", "stream": True, "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Patch the file."}],
         "encrypted_content": "gAAAAB"},
        {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_2", "name": "apply_patch",
         "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": "Done!"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"query": "x"}},
    ]}
    m = manifest_from_bodies("openai.responses", request, response={"model": "gpt-5-codex", "status": "completed",
                                                                     "output": [], "usage": {"input_tokens": 1}},
                             call_id="c", run_id="r", step=0, started=0)
    items = {i.id: (i.kind, i.label, i.text) for i in m.items}
    assert items["input[1]"] == ("history", "assistant · turn 1", "Patch the file.")  # not a user turn
    assert items["input[2]"][:2] == ("history", "apply_patch call · turn 1")
    assert items["input[3]"] == ("tool_result", "apply_patch result · turn 1", "Done!")
    assert items["input[4]"][0] == "history" and "gAAAAB" not in str(items)
    assert [i.kind for i in m.items] == ["task", "history", "history", "tool_result", "history"]
