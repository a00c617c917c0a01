"""Writes for projects, members, API keys and the regression webhook. Ingestion lives in ingest.py."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from manifests.models import ApiKey, Membership, Project, hash_key, new_raw_key

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@transaction.atomic
def create_project(*, name: str, owner: User | None = None) -> Project:
    base = slugify(name) or "project"
    slug, n = base, 1
    while Project.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    project = Project.objects.create(name=name, slug=slug)
    if owner is not None:
        Membership.objects.create(project=project, user=owner, role=Membership.OWNER)
    return project


def add_member(*, project: Project, user: User, role: str = Membership.MEMBER) -> Membership:
    membership, _ = Membership.objects.update_or_create(project=project, user=user, defaults={"role": role})
    return membership


def create_api_key(
    *, project: Project, name: str = "default", can_ingest: bool = True, can_read: bool = False,
    can_configure: bool = False,
) -> tuple[ApiKey, str]:
    """Create a key; return it and the raw key, which is never stored or shown again."""
    raw = new_raw_key()
    key = ApiKey.objects.create(
        project=project,
        name=name,
        prefix=raw[:10],
        hashed=hash_key(raw),
        can_ingest=can_ingest,
        can_read=can_read,
        can_configure=can_configure,
    )
    return key, raw


def revoke_api_key(*, key: ApiKey) -> None:
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])


class SettingsError(Exception):
    """A project settings change that breaks a rule; ``field`` names the form field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def invite_member(*, project: Project, username: str, role: str) -> Membership:
    """Add an existing account to the project. (There is no e-mail here: an account is
    created by an administrator, then invited by its username.)"""
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise SettingsError("username", f"no account is named {username!r}: an administrator creates it first")
    if Membership.objects.filter(project=project, user=user).exists():
        raise SettingsError("username", f"{username} is already a member; change the role in the list")
    return Membership.objects.create(project=project, user=user, role=role)


def _keeps_an_owner(project: Project, membership: Membership, new_role: str | None) -> None:
    if membership.role == Membership.OWNER and new_role != Membership.OWNER:
        others = Membership.objects.filter(project=project, role=Membership.OWNER).exclude(pk=membership.pk)
        if not others.exists():
            raise SettingsError("role", "a project keeps at least one owner: make someone else owner first")


@transaction.atomic
def set_member_role(*, project: Project, membership_id: int, role: str) -> Membership:
    membership = Membership.objects.select_for_update().select_related("user").get(project=project, pk=membership_id)
    _keeps_an_owner(project, membership, role)
    membership.role = role
    membership.save(update_fields=["role"])
    return membership


@transaction.atomic
def remove_member(*, project: Project, membership_id: int) -> Membership:
    membership = Membership.objects.select_for_update().select_related("user").get(project=project, pk=membership_id)
    _keeps_an_owner(project, membership, None)
    membership.delete()
    return membership


def configure_webhook(
    *, project: Project, url: str, secret: str | None, threshold_points: float, window_calls: int
) -> Project:
    """Set the regression webhook and its threshold. ``secret=None`` keeps the current one."""
    project.webhook_url = url
    if secret is not None:
        project.webhook_secret = secret
    project.regression_threshold_points = threshold_points
    project.regression_window_calls = window_calls
    project.save(update_fields=["webhook_url", "webhook_secret", "regression_threshold_points",
                                "regression_window_calls"])
    return project


def new_webhook_secret() -> str:
    return secrets.token_urlsafe(24)
