"""Tool-schema compression keeps risk, required parameters and enums.

Descriptions may be shortened; required parameters, enums, risks and result states may not: a
warning in any sentence of a description (irreversible, destructive, costly, privacy) must survive compression.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit.context.allocator import Segment, allocate
from ctxkit.context.operators import compress_schema
from ctxkit.context.operators.schema import MINIMAL_FORM, RISK, is_risky, plan_schema, risk_kinds, risk_sentences
from ctxkit.context.tokens import estimate_tokens
from ctxkit.record.builder import ContextBuilder


def _tool(name: str, description: str, props: dict[str, dict[str, object]], required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": props, "required": required}}}


# A realistic operations tool set: a payment tool, a destructive admin tool, a mailer, a reader.
PAYMENTS = [
    _tool("refund_order", "Refund an order to the customer's original payment method. The order must be in state "
          "delivered or returned. This charges the merchant account and cannot be undone.",
          {"order_id": {"type": "string", "description": "Order id such as ord_123."},
           "amount_fen": {"type": "integer", "description": "Amount in fen (1/100 yuan)."},
           "reason": {"type": "string", "enum": ["damaged", "late", "other"], "description": "Refund reason code."},
           "note": {"type": "string", "description": "Free text shown to the customer."}},
          ["order_id", "amount_fen", "reason"]),
    _tool("drop_table", "Run maintenance on a warehouse table. Useful after schema migrations. It permanently "
          "deletes every row of the table in production.",
          {"table": {"type": "string", "description": "Fully qualified table name."},
           "dry_run": {"type": "boolean", "description": "Only print what would happen."}},
          ["table"]),
    _tool("send_report", "Render the weekly report. Attach the charts as PNG. The report is emailed to external "
          "partners and contains personal data (customer phone numbers).",
          {"to": {"type": "array", "description": "Recipients."},
           "format": {"type": "string", "enum": ["pdf", "html"], "description": "Output format."}},
          ["to", "format"]),
    _tool("bi_describe", "Describe the columns, units and refresh time of a BI dataset. Read only.",
          {"dataset": {"type": "string", "description": "Dataset URI such as bi://<domain>/<version>."},
           "columns": {"type": "array", "description": "Columns to describe."}},
          ["dataset"]),
]

ZH_TOOLS = [
    _tool("close_account", "注销用户账户。注销后数据永久删除，不可逆。", {"user_id": {"type": "string"}}, ["user_id"]),
    _tool("query_orders", "查询订单列表。结果分页返回。", {"cursor": {"type": "string"}}, []),
]


def _squeeze(tools: list[dict], slack: int = 0) -> str:
    text = json.dumps(tools, ensure_ascii=False, indent=2)
    # Tightest budget at which every tool still fits: the signatures-without-description step.
    for budget in range(10, estimate_tokens(text)):
        out, record = compress_schema(text, budget + slack)
        if not record.data.get("dropped_tools"):
            return out
    raise AssertionError("never fit")


def test_risk_statements_in_later_sentences_survive_the_tightest_fit() -> None:
    out = _squeeze(PAYMENTS)
    assert "cannot be undone" in out and "charges the merchant account" in out
    assert "permanently deletes every row of the table in production" in out
    assert "personal data" in out
    assert "Useful after schema migrations" not in out  # non-risk prose is still compressed away
    assert "Attach the charts" not in out


def test_required_parameters_and_enums_survive() -> None:
    out = _squeeze(PAYMENTS)
    assert "order_id: string" in out and "amount_fen: integer" in out
    assert '"damaged"|"late"|"other"' in out and '"pdf"|"html"' in out
    assert "note?" not in out  # optional parameters go before required ones


def test_chinese_risk_statements_survive() -> None:
    out = _squeeze(ZH_TOOLS)
    assert "永久删除，不可逆" in out
    assert "结果分页返回" not in out


def test_risky_parameter_descriptions_are_kept_when_parameter_docs_go() -> None:
    tools = [_tool("purge_cache", "Purge cached pages.",
                   {"hard": {"type": "boolean", "description": "Also wipes the origin copies; irreversible."},
                    "path": {"type": "string", "description": "Path prefix, for example /docs/."}},
                   ["path"])]
    text = json.dumps(tools, indent=2)
    out, record = compress_schema(text, estimate_tokens(json.dumps(tools, separators=(",", ":"))) - 8)
    assert "dropped parameter descriptions" in record.detail
    assert "irreversible" in out and "for example /docs/" not in out


def test_risk_sentence_detection() -> None:
    assert risk_sentences("Lists files. Deletes nothing. Charges $0.01 per call.") == \
        ["Deletes nothing.", "Charges $0.01 per call."]
    assert risk_sentences("查询余额。转账后无法撤销。") == ["转账后无法撤销。"]
    assert risk_sentences("Read the dataset schema.") == []


# A payment tool whose risk words keep two sentences in every step before the minimal form.
REFUND = _tool("refund", "Refund an order to the payment card. Risky: moves money and cannot be undone.",
               {"order_id": {"type": "string", "description": "Order id such as ord_123."},
                "mode": {"type": "string", "enum": ["full", "partial"], "description": "Full or part of the amount."},
                "note": {"type": "string", "description": "Shown to the customer."}},
               ["order_id", "mode"])
REFUND_MINIMAL = 'refund(order_id: string, mode: "full"|"partial") - Risky: moves money and cannot be undone.'


# Pieces of risk words in either case (and the characters IGNORECASE folds to ASCII letters), Chinese
# words, and what sits at a word's edge.
_RISK_PIECES = ["delete", "DELET", "Drop", "s", "ſ", "\u212a", "İ", "ı", "PII", "pii", "cannot be undone", "can't",
                "e-mail", "sends an email", "prod", "uct", "ion", "费用", "退款", "删", "除", "敏感", "é", "_", "1",
                " ", ".", "\n"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_RISK_PIECES), max_size=12).map("".join))
def test_it_finds_a_risk_where_the_whole_risk_pattern_does(sentence: str) -> None:
    assert is_risky(sentence) == (RISK.search(sentence) is not None)


def test_a_risky_tool_falls_back_to_its_minimal_form_before_it_is_dropped() -> None:
    """Name, required parameters, enum values and the risk statement: what a valid, safe call needs."""
    text = json.dumps([REFUND])
    steps = plan_schema(text).steps
    assert steps is not None
    before_minimal = {label: tokens for label, _, tokens in steps}["dropped optional parameters"]
    assert before_minimal > 25 >= estimate_tokens(REFUND_MINIMAL)  # the older steps cannot fit 25 tokens
    out, record = compress_schema(text, 25)
    assert out == REFUND_MINIMAL
    assert record.tokens_after == estimate_tokens(REFUND_MINIMAL) and "dropped_tools" not in record.data
    assert record.data["steps"][-1] == MINIMAL_FORM
    # Below the minimal form an unpinned tool is still dropped, and the record says which.
    out, record = compress_schema(text, estimate_tokens(REFUND_MINIMAL) - 1)
    assert out == "" and record.data["dropped_tools"] == ["refund"] and "over_budget" not in record.data


def test_the_minimal_form_states_each_kind_of_risk_once() -> None:
    """Of several risk sentences the fewest, shortest ones that still name every kind of risk stay."""
    tool = _tool("close_account", "Close a customer account. Its balance is refunded to the card on file. "
                 "Deletes the account's data permanently. This cannot be undone.",
                 {"user_id": {"type": "string", "description": "Also wipes exported personal data."}}, ["user_id"])
    steps = {label: out for label, out, _ in plan_schema(json.dumps([tool])).steps or ()}
    assert "Deletes the account's data permanently." in steps["dropped optional parameters"]
    assert steps[MINIMAL_FORM] == ("close_account(user_id: string) - Its balance is refunded to the card on file. "
                                   "This cannot be undone. [user_id: Also wipes exported personal data.]")
    # money, irreversible, destructive and privacy are each still stated
    assert risk_kinds(steps[MINIMAL_FORM]) == {"money", "irreversible", "destructive", "privacy"}


def test_a_pinned_tool_is_never_dropped_and_the_result_is_over_budget() -> None:
    text = json.dumps([REFUND, *PAYMENTS[3:]])  # refund and bi_describe (read only)
    tight = estimate_tokens(REFUND_MINIMAL) - 1
    out, record = compress_schema(text, tight, pinned={"refund"})
    assert out == REFUND_MINIMAL  # bi_describe went first; refund stays, over the budget
    assert record.data["dropped_tools"] == ["bi_describe"] and record.data["over_budget"] is True
    assert "over budget: pinned tools refund need 23 tokens" in record.detail


def test_a_schema_segment_with_a_pinned_tool_makes_the_plan_over_budget() -> None:
    tools = Segment(name="tools", kind="tools", text=json.dumps([REFUND]), priority=60, policy="schema",
                    pinned_lines=("refund",))
    task = Segment(name="task", kind="task", text="退款前必须核对订单状态。" * 2, policy="pin")
    plan = allocate([task, tools], budget=estimate_tokens(task.text) + 10)
    allocation = plan.get("tools")
    assert allocation.text == REFUND_MINIMAL and allocation.used == allocation.granted == 23
    assert plan.over_budget and any("pinned tools of tools (23 tokens)" in w for w in plan.warnings)
    unpinned = allocate([task, Segment(name="tools", kind="tools", text=json.dumps([REFUND]), priority=60,
                                       policy="schema")], budget=estimate_tokens(task.text) + 10)
    assert unpinned.get("tools").action == "drop" and not unpinned.over_budget

    built = ContextBuilder(budget=estimate_tokens(task.text) + 10, reserve=0).build([task, tools])
    assert built.over_budget and REFUND_MINIMAL in built.text()
    assert "pinned tools (tools: 23 tokens)" in (built.over_budget_reason or "")


def test_pinned_tools_get_their_floor_before_higher_priority_floors() -> None:
    tools = Segment(name="tools", kind="tools", text=json.dumps([REFUND]), priority=10, policy="schema",
                    pinned_lines=("refund",))
    notes = Segment(name="notes", kind="memory", text="用户偏好：中文输出，金额单位为分。" * 6, priority=90,
                    policy="extract", min_tokens=40)
    plan = allocate([notes, tools], budget=50)
    assert plan.get("tools").text == REFUND_MINIMAL and not plan.over_budget
    assert plan.get("tools").granted == 23 and plan.used <= plan.cap
