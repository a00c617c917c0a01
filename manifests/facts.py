"""Watched facts: what a fact may say (validated with the JSON path of each bad field) and the
writes that create, update and delete facts. The settings page and the API share both; the
analysis checks calls for them (manifests/analysis/facts.py, docs/analysis.md "Watched facts").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from manifests.models import Project, WatchedFact

MAX_FACTS_PER_PROJECT = 50
MAX_LABEL = 100
MAX_TEXT = 2000  # a manifest evidence literal's limit: the fact's text is its literal
MAX_REGEX = 500  # a pattern runs over every item's text of every call: kept short
MAX_AGENT = 200
_CONTROL = re.compile("[\x00-\x1f\x7f]")
# A repeated group that itself repeats, as in (a+)+ or (\w*\s?)*: the shape that makes a
# backtracking engine take exponential time on text that almost matches. Refused, since the
# analysis runs every pattern over every item text of the project's calls.
_NESTED_REPEAT = re.compile(r"\((?:[^()\\]|\\.)*[+*}](?:[^()\\]|\\.)*\)[+*{]")

FIELDS = ("label", "text", "is_regex", "agent")


@dataclass(frozen=True)
class FieldError:
    path: str
    message: str


class FactInputError(ValueError):
    """Bad fact input; ``errors`` name each bad field by its path (``$.text``)."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(f"{e.path}: {e.message}" for e in errors))
        self.errors = errors


@dataclass(frozen=True)
class FactSpec:
    label: str
    text: str
    is_regex: bool = False
    agent: str = ""


def _flag(value: Any, *, from_form: bool) -> bool | None:
    if isinstance(value, bool):
        return value
    if from_form and isinstance(value, str):
        return value.strip().lower() in ("on", "true", "1", "yes")
    return None


def regex_error(pattern: str) -> str | None:
    """Why ``pattern`` cannot be a watched fact's regular expression; None when it can."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        return f"is not a valid regular expression: {exc.msg}{where}"
    except (RecursionError, OverflowError, ValueError):
        return "is not a valid regular expression"
    if _NESTED_REPEAT.search(pattern):
        return ("repeats a group that repeats inside, as in (a+)+, which can take exponential time; "
                "repeat only its parts")
    if compiled.search("") is not None:
        return "matches the empty text, so every call would hold it; make it match the fact itself"
    return None


def parse_fact(data: Any, *, root: str = "$.", from_form: bool = False) -> FactSpec:
    """A fact from a JSON object (the API) or a form's fields (``from_form``: a checkbox
    arrives as "on" or not at all). Raises FactInputError naming every bad field."""
    if not isinstance(data, Mapping):
        raise FactInputError([FieldError(root.rstrip("."), "send a JSON object with the fact's fields")])
    errors: list[FieldError] = []

    def bad(name: str, message: str) -> None:
        errors.append(FieldError(f"{root}{name}", message))

    if not from_form:
        for name in data:
            if name not in FIELDS:
                bad(str(name)[:MAX_LABEL], f"unknown field; a fact has {', '.join(FIELDS)}")

    label = data.get("label", "")
    if not isinstance(label, str) or not label.strip() or len(label.strip()) > MAX_LABEL or _CONTROL.search(label):
        bad("label", f"must be a name of 1 to {MAX_LABEL} characters without control characters")
        label = ""
    label = label.strip()

    is_regex = _flag(data.get("is_regex", False), from_form=from_form)
    if is_regex is None:
        bad("is_regex", "must be true or false")
        is_regex = False

    text = data.get("text", "")
    limit = MAX_REGEX if is_regex else MAX_TEXT
    if not isinstance(text, str) or not text.strip():
        bad("text", "must be the fact's text (or a regular expression with is_regex), not empty")
        text = ""
    elif len(text) > limit:
        bad("text", f"must be at most {limit} characters{' for a regular expression' if is_regex else ''}")
    elif "\x00" in text:
        bad("text", "must not contain NUL")
    elif is_regex and (why := regex_error(text)) is not None:
        bad("text", why)

    agent = data.get("agent", "")
    if agent is None:
        agent = ""
    if not isinstance(agent, str) or len(agent) > MAX_AGENT or _CONTROL.search(agent):
        bad("agent", f"must be an agent name of at most {MAX_AGENT} characters without control characters")
        agent = ""

    if errors:
        raise FactInputError(errors)
    return FactSpec(label=label, text=text, is_regex=is_regex, agent=agent.strip())


def _label_taken(label: str) -> FactInputError:
    return FactInputError([FieldError("$.label", f"the project already watches a fact labelled {label!r}")])


@transaction.atomic
def create_fact(*, project: Project, spec: FactSpec) -> WatchedFact:
    """Watch a fact. It applies to calls analysed from now on; ``manage.py reanalyse_calls``
    applies it to the calls stored before."""
    # Locked: two concurrent creations cannot both pass the limit or take one label.
    Project.objects.select_for_update().filter(pk=project.pk).first()
    if WatchedFact.objects.filter(project=project).count() >= MAX_FACTS_PER_PROJECT:
        raise FactInputError([FieldError("$", f"a project watches at most {MAX_FACTS_PER_PROJECT} facts")])
    if WatchedFact.objects.filter(project=project, label=spec.label).exists():
        raise _label_taken(spec.label)
    return WatchedFact.objects.create(project=project, label=spec.label, text=spec.text, is_regex=spec.is_regex,
                                      agent=spec.agent)


def update_fact(*, project: Project, fact_id: int, spec: FactSpec) -> WatchedFact | None:
    """Change a fact of ``project``; None when it has no such fact."""
    fact = WatchedFact.objects.filter(project=project, pk=fact_id).first()
    if fact is None:
        return None
    fact.label, fact.text, fact.is_regex, fact.agent = spec.label, spec.text, spec.is_regex, spec.agent
    try:
        with transaction.atomic():
            fact.save(update_fields=["label", "text", "is_regex", "agent"])
    except IntegrityError:
        raise _label_taken(spec.label) from None
    return fact


def delete_fact(*, project: Project, fact_id: int) -> bool:
    """Stop watching a fact of ``project``; False when it has no such fact. What the analysis
    derived from it stays on the calls analysed so far, until they are analysed again."""
    deleted, _ = WatchedFact.objects.filter(project=project, pk=fact_id).delete()
    return deleted > 0


def as_dict(fact: WatchedFact) -> dict[str, Any]:
    """A fact as the API answers it."""
    return {
        "id": fact.pk,
        "label": fact.label,
        "key": fact.evidence_key,
        "text": fact.text,
        "is_regex": fact.is_regex,
        "agent": fact.agent,
        "created": fact.created.isoformat(),
    }
