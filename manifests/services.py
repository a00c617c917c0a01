"""Writes for projects, members and API keys. Ingestion lives in ingest.py."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from manifests.models import ApiKey, Membership, Project, hash_key, new_raw_key


@transaction.atomic
def create_project(*, name: str, owner: AbstractBaseUser | None = None) -> Project:
    base = slugify(name) or "project"
    slug, n = base, 1
    while Project.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    project = Project.objects.create(name=name, slug=slug)
    if owner is not None:
        Membership.objects.create(project=project, user=owner, role=Membership.OWNER)
    return project


def add_member(*, project: Project, user: AbstractBaseUser, role: str = Membership.MEMBER) -> Membership:
    membership, _ = Membership.objects.update_or_create(project=project, user=user, defaults={"role": role})
    return membership


def create_api_key(
    *, project: Project, name: str = "default", can_ingest: bool = True, can_read: bool = False
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
    )
    return key, raw


def revoke_api_key(*, key: ApiKey) -> None:
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
