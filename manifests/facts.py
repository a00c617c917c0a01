"""Watched facts: what a fact may say, stated once as :class:`WatchedFactSerializer` (it
validates the API's JSON and the settings page's form with the JSON path of each bad field,
writes the API's answers and documents both), and the writes that create, update and delete
facts. The analysis checks calls for them (manifests/analysis/facts.py, docs/analysis.md "Watched facts").
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from rest_framework import serializers

from manifests.inputs import FieldError, Flag, InputError, InputSerializer, Text, validated
from manifests.models import FACT_KEY_PREFIX, Project, WatchedFact

MAX_FACTS_PER_PROJECT = 50
MAX_LABEL = 100
MAX_TEXT = 2000  # a manifest evidence literal's limit: the fact's text is its literal
MAX_REGEX = 500  # a pattern runs over every item's text of every call: kept short
MAX_AGENT = 200
# A repeated group that itself repeats, as in (a+)+ or (\w*\s?)*: the shape that makes a
# backtracking engine take exponential time on text that almost matches. Refused, since the
# analysis runs every pattern over every item text of the project's calls.
_NESTED_REPEAT = re.compile(r"\((?:[^()\\]|\\.)*[+*}](?:[^()\\]|\\.)*\)[+*{]")


class FactInputError(InputError):
    """Bad fact input; ``errors`` name each bad field by its path (``$.text``)."""


@dataclass(frozen=True)
class FactSpec:
    label: str
    text: str
    is_regex: bool = False
    agent: str = ""


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


class WatchedFactSerializer(InputSerializer):
    """A watched fact: what a client sends (the API's JSON, the settings page's form) and what
    the API answers (with ``id``, ``key`` and ``created``)."""

    noun = "fact"

    id = serializers.IntegerField(read_only=True)
    key = serializers.CharField(source="evidence_key", read_only=True,
                                help_text=f"The key of its evidence entries: {FACT_KEY_PREFIX}<label>")
    text = Text(lines=True, max_length=MAX_TEXT,
                help_text=f"The exact text, or a regular expression (at most {MAX_REGEX} characters) when is_regex",
                says="must be the fact's text (or a regular expression with is_regex), not empty",
                error_messages={"max_length": f"must be at most {MAX_TEXT} characters",
                                "control": "must not contain NUL"})
    is_regex = Flag(default=False)
    agent = Text(default="", allow_blank=True, allow_null=True, max_length=MAX_AGENT, help_text="empty: every agent",
                 says=f"must be an agent name of at most {MAX_AGENT} characters without control characters")
    created = serializers.DateTimeField(read_only=True)

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        # "label" is added here: as a class attribute it would stand for Field.label.
        fields = super().get_fields()
        label = Text(max_length=MAX_LABEL, help_text="A short name, unique in the project",
                     says=f"must be a name of 1 to {MAX_LABEL} characters without control characters")
        return {"id": fields.pop("id"), "label": label, **fields}

    def check(self, attrs: dict[str, Any]) -> Iterator[tuple[str, str]]:
        if attrs.get("agent") is None:
            attrs["agent"] = ""
        text = attrs.get("text")
        if text is None or not attrs.get("is_regex"):
            return
        if len(text) > MAX_REGEX:
            yield "text", f"must be at most {MAX_REGEX} characters for a regular expression"
        elif (why := regex_error(text)) is not None:
            yield "text", why


FIELDS = WatchedFactSerializer.writable()


def parse_fact(data: Any, *, root: str = "$.", from_form: bool = False) -> FactSpec:
    """A fact from a JSON object (the API) or a form's fields (``from_form``: a checkbox
    arrives as "on" or not at all). Raises FactInputError naming every bad field."""
    return FactSpec(**validated(WatchedFactSerializer, data, root=root, form=from_form, error=FactInputError))


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
    return dict(WatchedFactSerializer(fact).data)
