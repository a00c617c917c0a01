"""Tool schema compression (seed 001, 5.3.3): compact JSON, fewer docs, signatures, fewer tools.

Re-exported by ``ctxkit.context.operators``; see its docstring for the API.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from ctxkit.context.ops_common import OpRecord
from ctxkit.context.ops_extract import extract_lines
from ctxkit.context.ops_truncate import _json
from ctxkit.context.tokens import Estimator, estimate_tokens


def _tool_parts(tool: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(dict holding name/description, parameter schema) for OpenAI, Anthropic or flat tools."""
    holder = tool["function"] if isinstance(tool.get("function"), dict) else tool
    params = holder.get("parameters", holder.get("input_schema"))
    return holder, params if isinstance(params, dict) else None


def _strip_param_docs(schema: Any) -> None:
    if isinstance(schema, dict):
        description = schema.get("description")
        risks = risk_sentences(description) if isinstance(description, str) else []
        for key in ("description", "title", "examples", "default"):
            schema.pop(key, None)
        if risks:  # "if true, the order is deleted permanently" is the parameter's risk: kept
            schema["description"] = " ".join(risks)
        for sub in schema.values():
            if isinstance(sub, (dict, list)):  # a scalar holds nothing to strip: no call
                _strip_param_docs(sub)
    elif isinstance(schema, list):
        for sub in schema:
            if isinstance(sub, (dict, list)):
                _strip_param_docs(sub)


# Seed 004 (P1): "description 可压缩，required/enums/风险和结果状态不能丢". A sentence that warns
# of an irreversible, destructive, costly or privacy-affecting action survives every step.
_RISK_WORDS = (  # no escapes but \b and \w: see _RISK_ASCII
    r"\b(irreversibl\w*|cannot be undone|can't be undone|not be undone|permanent\w*|delet\w*|destr\w*|"
    r"drops?|overwrit\w*|wipes?|purg\w*|truncat\w*|erase\w*|charg\w*|bill\w*|payments?|pays?|costs?|costly|"
    r"spend\w*|refund\w*|money|transfers? funds|invoice\w*|privacy|private|personal data|PII|sensitive|"
    r"secrets?|credentials?|passwords?|publish\w*|sends? (?:an )?e-?mails?|production|prod)\b"
)
RISK = re.compile(
    _RISK_WORDS + r"|不可逆|无法撤销|不可撤销|不能撤销|永久|删除|销毁|覆盖|清空|扣款|收费|计费|付款|支付|转账|"
    r"费用|退款|隐私|个人信息|敏感|密钥|凭证|生产环境|对外发送",
    re.IGNORECASE,
)
# On ASCII text re.IGNORECASE is plain ASCII case folding and the Chinese words cannot occur, so the
# English words, lowercased and case-sensitive, match the lowercased text exactly when RISK matches
# the text, several times faster (re.IGNORECASE folds every character it compares). Other text
# keeps RISK: there "ſ" matches "s", "ı" "i" and the Kelvin sign "k", which lower() does not reproduce.
_RISK_ASCII = re.compile(_RISK_WORDS.lower())


def is_risky(sentence: str) -> bool:
    """``RISK.search(sentence) is not None``."""
    if sentence.isascii():
        return _RISK_ASCII.search(sentence.lower()) is not None
    return RISK.search(sentence) is not None
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])")


def _sentences(text: str) -> list[str]:
    return [p.strip() for p in _SENTENCE_END.split(text) if p.strip()]


def risk_sentences(text: str) -> list[str]:
    """The sentences of a tool description that state a risk (seed 004), in order."""
    if not is_risky(text):  # most descriptions: no sentence of them can be risky either (_first_sentence)
        return []
    return [sentence for sentence in _sentences(text) if is_risky(sentence)]


def _first_sentence(text: str) -> str:
    """``_sentences(text)[0]`` for a text with no risk wording, else ``text`` when it has no sentence.

    A sentence is the text between two split points, stripped: the characters beside it in the
    text are spaces, split punctuation inside it, or nothing, so for RISK's ``\b`` (its only
    look at neighbours) the sentence's edges are the same in the text. A risky sentence makes
    the text risky, so a text that is not needs no split into sentences (a regex split is
    most of a schema plan's cost). The first split point is the pattern's first match; the
    piece before it ends with the punctuation that split it, so only a blank text has none.
    """
    m = _SENTENCE_END.search(text)
    return (text if m is None else text[: m.start()]).strip() or text


def _short_with_risks(text: str) -> str:
    """The first sentence, plus every later sentence that states a risk."""
    if not is_risky(text):
        return _first_sentence(text)
    sentences = _sentences(text)
    if not sentences:
        return text
    kept = [sentences[0], *(x for x in sentences[1:] if is_risky(x))]
    return " ".join(kept)


@dataclass(frozen=True, slots=True)
class SchemaPlan:
    """The budget-independent half of :func:`compress_schema`: every step's rendering and cost.

    ``steps`` is None when the text is not a JSON list of tool objects (then extract_lines
    applies). ``tools`` is the list after the last step, for dropping trailing tools. Make it
    with :func:`plan_schema`, cut it with :func:`cut_schema` (the allocator keeps plans across
    calls); both must use the same estimator.
    """

    before: int
    steps: tuple[tuple[str, str, int], ...] | None  # (label, rendering after the step, its estimate)
    tools: tuple[dict[str, Any], ...] = ()


def _parse_tools(text: str) -> tuple[list[dict[str, Any]] | None, bool]:
    """The tools of a schema text (None when it is not a JSON list of objects), and whether the
    parsed JSON held a float (NaN and infinities included): see :func:`_compact`."""
    floats: list[str] = []
    try:
        tools = json.loads(text, parse_float=_float_seen(floats), parse_constant=_float_seen(floats))
    except ValueError:
        return None, False
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        return None, False
    return tools, bool(floats)


def _float_seen(seen: list[str]) -> Callable[[str], float]:
    def parse(token: str) -> float:
        seen.append(token)
        return float(token)

    return parse


_encode = msgspec.json.Encoder().encode


def _compact(value: Any, floats: bool) -> str:
    """``_json(value)`` (compact JSON, non-ASCII as it is) for a value parsed from JSON.

    msgspec writes such a value byte for byte as ``json.dumps`` does, about ten times faster
    (a schema plan renders its tools three times), except floats (``1e+16`` is ``1e16`` there,
    ``NaN`` ``null``) and lone surrogates (which it refuses): with a float, or on refusal,
    ``json.dumps`` itself. Dict keys from parsed JSON are strings, as msgspec needs them."""
    if not floats:
        try:
            return _encode(value).decode()
        except (UnicodeEncodeError, TypeError, OverflowError):
            pass
    return _json(value)


def _steps(tools: list[dict[str, Any]], estimate: Estimator, floats: bool = True) -> Iterator[tuple[str, str, int]]:
    """Apply the compression steps to ``tools`` in place, yielding (label, rendering, estimate) after each.
    ``floats``: whether the tools may hold a float (:func:`_compact`)."""

    def param_docs(t: dict[str, Any]) -> None:
        _strip_param_docs(_tool_parts(t)[1])

    def short_desc(t: dict[str, Any]) -> None:
        holder = _tool_parts(t)[0]
        if isinstance(holder.get("description"), str):
            holder["description"] = _short_with_risks(holder["description"])

    def no_desc(t: dict[str, Any]) -> None:
        holder = _tool_parts(t)[0]
        risks = risk_sentences(holder["description"]) if isinstance(holder.get("description"), str) else []
        if risks:
            holder["description"] = " ".join(risks)
        else:
            holder.pop("description", None)

    def required_only(t: dict[str, Any]) -> None:
        params = _tool_parts(t)[1]
        if params and isinstance(params.get("properties"), dict):
            required = set(params.get("required", []))
            params["properties"] = {k: v for k, v in params["properties"].items() if k in required}

    steps: list[tuple[str, Callable[[dict[str, Any]], None] | None, bool]] = [
        ("compact JSON", None, False),
        ("dropped parameter descriptions", param_docs, False),
        ("shortened tool descriptions", short_desc, False),
        ("rendered as signatures with short descriptions", None, True),
        ("dropped tool descriptions but their risk statements, kept name/parameters/required/enums", no_desc,
         True),
        ("dropped optional parameters", required_only, True),
    ]
    for label, step, signatures in steps:
        if step is not None:
            for tool in tools:
                step(tool)
        out = _signatures(tools) if signatures else _compact(tools, floats)
        yield label, out, estimate(out)


def _drop_tools(
    tools: list[dict[str, Any]], budget: int, before: int, done: list[str], estimate: Estimator
) -> tuple[str, OpRecord]:
    """Nothing fits after every step: drop trailing tools (from ``tools``, in place) until it does."""
    dropped: list[str] = []
    while tools and estimate(_signatures(tools)) > budget:
        dropped.insert(0, str(_tool_parts(tools.pop())[0].get("name", "?")))
    out = _signatures(tools) if tools else ""
    done.append(f"dropped tools {', '.join(dropped)}")
    return out, OpRecord("schema", before, estimate(out), "; ".join(done), {"steps": done, "dropped_tools": dropped})


def compress_schema(text: str, budget: int, *, estimate: Estimator = estimate_tokens) -> tuple[str, OpRecord]:
    """Compress a JSON list of tool schemas step by step until it fits (seed 5.3.3).

    Names, required parameters, types and enums survive longest: they are what a valid
    call needs. Non-JSON input falls back to :func:`extract_lines`.
    """
    before = estimate(text)
    if before <= budget:
        return text, OpRecord("schema", before, before, "fits")
    tools, floats = _parse_tools(text)
    if tools is None:
        return extract_lines(text, budget, estimate=estimate)
    done: list[str] = []
    for label, out, tokens in _steps(tools, estimate, floats):  # lazily: stop at the first step that fits
        done.append(label)
        if tokens <= budget:
            return out, OpRecord("schema", before, tokens, "; ".join(done), {"steps": done})
    return _drop_tools(tools, budget, before, done, estimate)


def plan_schema(text: str, *, estimate: Estimator = estimate_tokens) -> SchemaPlan:
    """Every step of :func:`compress_schema` on ``text``, rendered and counted once."""
    tools, floats = _parse_tools(text)
    if tools is None:
        return SchemaPlan(estimate(text), None)
    steps = tuple(_steps(tools, estimate, floats))
    return SchemaPlan(estimate(text), steps, tuple(tools))


def cut_schema(
    plan: SchemaPlan, text: str, budget: int, *, estimate: Estimator = estimate_tokens
) -> tuple[str, OpRecord]:
    """``compress_schema(text, budget)`` from the plan of ``text``: the first step that fits."""
    if plan.before <= budget:
        return text, OpRecord("schema", plan.before, plan.before, "fits")
    if plan.steps is None:
        return extract_lines(text, budget, estimate=estimate)
    done: list[str] = []
    for label, out, tokens in plan.steps:
        done.append(label)
        if tokens <= budget:
            return out, OpRecord("schema", plan.before, tokens, "; ".join(done), {"steps": done})
    return _drop_tools(list(plan.tools), budget, plan.before, done, estimate)


class LazySchemaPlan:
    """A :class:`SchemaPlan` whose steps are rendered only as far as a cut needs them.

    The allocator keeps one per tool schema text across calls and threads. A tight budget
    usually fits at a middle step, so the later steps (and, where the compact JSON fits, all
    but the first) are never rendered. Steps are appended whole under a lock, one thread at a
    time advancing the rendering; a thread reading steps already rendered takes no lock. Made
    for the default estimator (the counts are ``estimate_tokens``'s: a memo of it is the same).
    """

    __slots__ = ("before", "_lock", "_rendered", "_steps", "_tools")

    def __init__(self, text: str, before: int) -> None:
        self.before = before
        tools, floats = _parse_tools(text)
        self._tools = tools
        self._steps = _steps(tools, estimate_tokens, floats) if tools is not None else None
        self._rendered: list[tuple[str, str, int]] = []
        self._lock = threading.Lock()

    def step(self, k: int) -> tuple[str, str, int] | None:
        """The ``k``-th step (label, rendering, tokens), rendering it if needed; None past the last."""
        rendered = self._rendered
        if k < len(rendered):
            return rendered[k]
        with self._lock:
            while len(rendered) <= k:
                nxt = next(self._steps, None)  # type: ignore[arg-type]
                if nxt is None:
                    return None
                rendered.append(nxt)
            return rendered[k]

    def cut(self, text: str, budget: int, estimate: Estimator) -> tuple[str, OpRecord]:
        """``compress_schema(text, budget, estimate=estimate)`` (``cut_schema`` of the full plan)."""
        before = self.before
        if before <= budget:
            return text, OpRecord("schema", before, before, "fits")
        if self._steps is None:
            return extract_lines(text, budget, estimate=estimate)
        done: list[str] = []
        k = 0
        while (step := self.step(k)) is not None:
            label, out, tokens = step
            done.append(label)
            if tokens <= budget:
                return out, OpRecord("schema", before, tokens, "; ".join(done), {"steps": done})
            k += 1
        with self._lock:  # every step rendered: the tools no longer change
            tools = list(self._tools)  # type: ignore[arg-type]
        return _drop_tools(tools, budget, before, done, estimate)


def _signatures(tools: list[dict[str, Any]]) -> str:
    """One line per tool: ``name(req: type, opt?: type, mode: "a"|"b") - description``."""
    lines = []
    for tool in tools:
        holder, params = _tool_parts(tool)
        props = params.get("properties", {}) if params else {}
        required = set(params.get("required", [])) if params else set()
        args: list[str] = []
        notes: list[str] = []
        for pname, spec in props.items():
            spec = spec if isinstance(spec, dict) else {}
            kind = "|".join(json.dumps(v, ensure_ascii=False) for v in spec["enum"]) if "enum" in spec else \
                str(spec.get("type", "any"))
            args.append(f"{pname}{'' if pname in required else '?'}: {kind}")
            if isinstance(spec.get("description"), str):  # only risk statements are left by then
                notes.append(f"{pname}: {spec['description']}")
        desc = holder.get("description")
        tail = f" [{'; '.join(notes)}]" if notes else ""
        lines.append(f"{holder.get('name', '?')}({', '.join(args)})" + (f" - {desc}" if desc else "") + tail)
    return "\n".join(lines)
