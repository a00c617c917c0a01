"""Tool-schema compression keeps risk, required parameters and enums.

Descriptions may be shortened; required parameters, enums, risks and result states may not: a
warning in any sentence of a description (irreversible, destructive, costly, privacy) must survive compression.
"""

from __future__ import annotations

import json

from ctxkit.context.operators import compress_schema
from ctxkit.context.ops_schema import risk_sentences
from ctxkit.context.tokens import estimate_tokens


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
