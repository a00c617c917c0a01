"""What the configurable resources' serializers share (alert rules, watched facts, the
webhook, price rows): each resource is stated once, as a DRF serializer, and that one
serializer validates the API's JSON, validates the settings page's form and documents both in
the OpenAPI schema (drf-spectacular reads its fields, limits included).

The fields here take JSON's types as they are (a number is not a string, text is not a
number, true is not "yes"); a form's fields arrive as text, which they accept when the
serializer's context says ``form``. A serializer built on :class:`InputSerializer` names
every bad field at once, by its JSON path, and refuses fields it does not have; its writable
fields are stored under their own names (no ``source``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import URLValidator
from rest_framework import serializers
from rest_framework.fields import SkipField, empty
from rest_framework.settings import api_settings

CONTROL = re.compile("[\x00-\x1f\x7f]")
NUL = re.compile("\x00")
# The form context's key: numbers and checkboxes arrive as text, empty fields are omitted.
FORM = "form"
# How much of an unknown field's name its error repeats.
MAX_FIELD_NAME = 200
# A checkbox's values that mean "checked".
CHECKED = ("on", "true", "1", "yes")


@dataclass(frozen=True)
class FieldError:
    path: str
    message: str


class InputError(ValueError):
    """Bad input; ``errors`` name each bad field by its path (``$.threshold``)."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(f"{e.path}: {e.message}" for e in errors))
        self.errors = errors


def from_form(field: serializers.Field[Any, Any, Any, Any]) -> bool:  # any kind of field
    return bool(field.context.get(FORM))


def _said(says: str, keys: tuple[str, ...], overrides: dict[str, str] | None) -> dict[str, Any]:
    return {**dict.fromkeys(keys, says), **(overrides or {})}


class Text(serializers.CharField):
    """Text as JSON sends it (a string, never a number) of at most ``max_length`` characters.
    A name (the default) has no control characters and loses its outer spaces; a passage
    (``lines``) keeps its line breaks and spaces and refuses only NUL."""

    default_error_messages: ClassVar[dict[str, Any]] = {"control": "must not contain control characters"}
    KEYS = ("required", "null", "blank", "invalid", "control", "max_length")

    def __init__(self, *, says: str, lines: bool = False, error_messages: dict[str, str] | None = None,
                 **kwargs: Any) -> None:
        self.lines = lines
        super().__init__(trim_whitespace=False, error_messages=_said(says, self.KEYS, error_messages), **kwargs)

    def run_validation(self, data: Any = empty) -> Any:
        # Before CharField's, which would take 5 as "5".
        if data is not empty and data is not None and not isinstance(data, str):
            self.fail("invalid")
        return super().run_validation(data)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        if (NUL if self.lines else CONTROL).search(data):
            self.fail("control")
        if self.max_length is not None and len(data) > self.max_length:
            self.fail("max_length")
        if not data.strip() and not self.allow_blank:
            self.fail("blank")
        return data if self.lines else data.strip()


class Url(Text):
    """An http or https URL (https:// assumed when no scheme is given); empty when ``allow_blank``."""

    validate_url = URLValidator(schemes=["http", "https"])

    def to_internal_value(self, data: Any) -> str:
        url = super().to_internal_value(data)
        if url and "://" not in url:
            url = f"https://{url}"
        if url:
            try:
                self.validate_url(url)
            except DjangoValidationError:
                self.fail("invalid")
            if self.max_length is not None and len(url) > self.max_length:
                self.fail("max_length")
        return url


def _number(field: serializers.Field[Any, Any, Any, Any], data: Any) -> float:
    if isinstance(data, str) and from_form(field):
        try:
            data = float(data.strip())
        except ValueError:
            field.fail("invalid")
    if isinstance(data, bool) or not isinstance(data, int | float) or not math.isfinite(data):
        field.fail("invalid")
    return float(data)


class Number(serializers.FloatField):
    """A finite number (a form's text too)."""

    KEYS = ("required", "null", "invalid", "max_value", "min_value")

    def __init__(self, *, says: str, error_messages: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(error_messages=_said(says, self.KEYS, error_messages), **kwargs)

    def to_internal_value(self, data: Any) -> float:
        return _number(self, data)


class Whole(serializers.IntegerField):
    """A whole number (2 or 2.0; a form's text too)."""

    KEYS = ("required", "null", "invalid", "max_value", "min_value")

    def __init__(self, *, says: str, error_messages: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(error_messages=_said(says, self.KEYS, error_messages), **kwargs)

    def to_internal_value(self, data: Any) -> int:
        value = _number(self, data)
        if value != int(value):
            self.fail("invalid")
        return int(value)


class Flag(serializers.BooleanField):
    """true or false (a form's checkbox: "on" when checked, absent when not)."""

    KEYS = ("required", "null", "invalid")

    def __init__(self, *, says: str = "must be true or false", **kwargs: Any) -> None:
        super().__init__(error_messages=_said(says, self.KEYS, None), **kwargs)

    def to_internal_value(self, data: Any) -> bool:
        if isinstance(data, bool):
            return data
        if from_form(self) and isinstance(data, str):
            return data.strip().lower() in CHECKED
        self.fail("invalid")


class Choice(serializers.ChoiceField):
    """One of ``choices``; the message lists them."""

    KEYS = ("required", "null", "invalid_choice")

    def __init__(self, choices: list[tuple[str, str]], **kwargs: Any) -> None:
        says = f"must be one of {', '.join(value for value, _ in choices)}"
        super().__init__(choices, error_messages=_said(says, self.KEYS, None), **kwargs)


class InputSerializer(serializers.Serializer[Any]):  # each resource its own instances
    """A resource's serializer: every bad field named at once (a field's own checks, then
    :meth:`check`'s checks across fields, which see only the fields that passed), and a
    field the resource does not have refused by name."""

    # What the resource is called in messages ("unknown field; a rule has ...").
    noun: ClassVar[str] = "resource"

    @classmethod
    def writable(cls) -> tuple[str, ...]:
        """The fields a client sends."""
        return tuple(name for name, field in cls().fields.items() if not field.read_only)

    def check(self, attrs: dict[str, Any]) -> Iterator[tuple[str, str]]:
        """(field, message) for each check across fields that fails; may fill defaults in ``attrs``."""
        return iter(())

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, Mapping):
            raise serializers.ValidationError(
                {api_settings.NON_FIELD_ERRORS_KEY: [f"send a JSON object with the {self.noun}'s fields"]})
        writable = tuple(name for name, field in self.fields.items() if not field.read_only)
        errors: dict[str, list[str]] = {}
        if not self.context.get(FORM):
            for name in data:
                if name not in writable:
                    errors[str(name)[:MAX_FIELD_NAME]] = [f"unknown field; a {self.noun} has {', '.join(writable)}"]
        attrs: dict[str, Any] = {}
        for name in writable:
            field = self.fields[name]
            try:
                attrs[name] = field.run_validation(field.get_value(data))
            except serializers.ValidationError as exc:
                detail = exc.detail
                errors[name] = [str(m) for m in detail] if isinstance(detail, list) else [str(detail)]
            except SkipField:
                pass
        for name, message in self.check(attrs):
            errors.setdefault(name, [message])
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


def validated(serializer_class: type[InputSerializer], data: Any, *, root: str, form: bool,
              error: type[InputError], partial: bool = False) -> dict[str, Any]:
    """``data`` checked by ``serializer_class``: a JSON object (the API) or a form's fields
    (``form``: numbers and checkboxes as text, an empty field counts as omitted). Raises
    ``error`` naming every bad field by its path under ``root`` ("$." for the API's body,
    "" for a form); ``partial`` checks only the fields ``data`` has."""
    if not isinstance(data, Mapping):
        raise error([FieldError(root.rstrip("."), f"send a JSON object with the {serializer_class.noun}'s fields")])
    if form:
        data = {k: v for k, v in data.items() if v not in ("", None)}
    serializer = serializer_class(data=data, context={FORM: form}, partial=partial)
    if not serializer.is_valid():
        raise error(errors_of(serializer.errors, root))
    return dict(serializer.validated_data)


def errors_of(detail: Mapping[str, Any], root: str) -> list[FieldError]:
    found = []
    for name, messages in detail.items():
        path = root.rstrip(".") if name == api_settings.NON_FIELD_ERRORS_KEY else f"{root}{name}"
        for message in messages if isinstance(messages, list) else [messages]:
            found.append(FieldError(path, str(message)))
    return found
