"""ctxview's tables: projects and keys, and the normalized manifest.

A manifest is stored twice on purpose: normalized (runs, calls, items, evidence,
compactions, invariants, context edits) for the dashboard's queries, and raw (the
canonical JSON of the validated manifest) so nothing the agent sent is lost and
analysis can be re-run when its rules change.
"""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

KEY_PREFIX = "ctx_"


class Project(models.Model):
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=200, unique=True)
    created = models.DateTimeField(default=timezone.now)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="projects")

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    OWNER = "owner"
    MEMBER = "member"
    ROLES = [(OWNER, "Owner"), (MEMBER, "Member")]

    project = models.ForeignKey(Project, on_delete=models.CASCADE)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    role = models.CharField(max_length=20, choices=ROLES, default=MEMBER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "user"], name="membership_unique")]


def hash_key(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode()).hexdigest()


class ApiKey(models.Model):
    """A project API key. Only its SHA-256 is stored: the key is shown once."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=200, default="default")
    prefix = models.CharField(max_length=16, help_text="First characters, to recognise a key in lists")
    hashed = models.CharField(max_length=64, unique=True)
    can_ingest = models.BooleanField(default=True)
    can_read = models.BooleanField(default=False)
    created = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


def new_raw_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


class Run(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="runs")
    run_id = models.CharField(max_length=200)
    agent = models.CharField(max_length=200, default="default")
    model = models.CharField(max_length=200, blank=True)
    parent_run_id = models.CharField(max_length=200, null=True, blank=True)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "run_id"], name="run_unique_per_project")]
        indexes = [models.Index(fields=["project", "-last_seen"], name="run_project_recent")]

    def __str__(self) -> str:
        return self.run_id


class Call(models.Model):
    """One model call: the manifest's scalar fields, plus the raw manifest."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="calls")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="calls")
    call_id = models.CharField(max_length=200)
    step = models.IntegerField()
    parent_call_id = models.CharField(max_length=200, null=True, blank=True)
    agent = models.CharField(max_length=200)
    model = models.CharField(max_length=200)
    provider = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    builder_name = models.CharField(max_length=200, blank=True)
    builder_version = models.CharField(max_length=200, blank=True)
    # Budget
    window = models.BigIntegerField()
    output_reserve = models.BigIntegerField(default=0)
    safety_margin = models.BigIntegerField(default=0)
    input_cap = models.BigIntegerField()
    # Stable prefix
    prefix_hash = models.CharField(max_length=128, blank=True)
    prefix_tokens = models.BigIntegerField(default=0)
    prefix_segments = models.JSONField(default=list, blank=True)
    # Usage, normal form (input includes cached reads and writes)
    input_tokens = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    reasoning_tokens = models.BigIntegerField(null=True, blank=True)
    # Outcome
    status = models.CharField(max_length=200, blank=True)
    finish_reason = models.CharField(max_length=200, blank=True)
    verified = models.CharField(max_length=10, default="unknown")
    # Counts kept at ingest so lists need no joins
    item_count = models.IntegerField(default=0)
    evidence_count = models.IntegerField(default=0)
    evidence_missing = models.IntegerField(default=0)
    warnings = models.JSONField(default=list, blank=True)
    # Idempotency: the SHA-256 of the canonical manifest tells a retry (same
    # content: duplicate) from a conflict (same call_id, other content).
    content_hash = models.CharField(max_length=64)
    raw = models.TextField(help_text="The validated manifest, canonical JSON")
    received_at = models.DateTimeField(default=timezone.now)
    analyzed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "call_id"], name="call_unique_per_project")]
        indexes = [
            models.Index(fields=["project", "started_at"], name="call_project_time"),
            models.Index(fields=["run", "step"], name="call_run_step"),
            models.Index(fields=["project", "prefix_hash"], name="call_project_prefix"),
            models.Index(fields=["project", "agent", "model", "started_at"], name="call_project_agent_model"),
            models.Index(
                fields=["received_at"], name="call_unanalysed", condition=models.Q(analyzed_at__isnull=True)
            ),
        ]

    def __str__(self) -> str:
        return self.call_id

    @property
    def uncached_input_tokens(self) -> int:
        return max(0, self.input_tokens - self.cache_read_tokens - self.cache_write_tokens)

    @property
    def cache_hit_ratio(self) -> float:
        return self.cache_read_tokens / self.input_tokens if self.input_tokens else 0.0


class Item(models.Model):
    """One candidate of a call's context and what was done with it."""

    call = models.ForeignKey(Call, on_delete=models.CASCADE, related_name="items")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    ordinal = models.IntegerField(help_text="Order in the manifest")
    item_id = models.CharField(max_length=200)
    kind = models.CharField(max_length=32)
    action = models.CharField(max_length=32)
    trust = models.CharField(max_length=16, default="trusted")
    priority = models.IntegerField(default=0)
    pinned = models.BooleanField(default=False)
    zone = models.CharField(max_length=8, null=True, blank=True)
    position = models.IntegerField(null=True, blank=True)
    requested_tokens = models.BigIntegerField(default=0)
    granted_tokens = models.BigIntegerField(null=True, blank=True)
    used_tokens = models.BigIntegerField(null=True, blank=True)
    reason = models.TextField(blank=True)
    source_ref = models.TextField(null=True, blank=True)
    source_version = models.CharField(max_length=200, null=True, blank=True)
    content_hash = models.CharField(max_length=128, null=True, blank=True)
    group = models.CharField(max_length=200, null=True, blank=True)
    text = models.TextField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["call", "ordinal"], name="item_call_ordinal"),
            models.Index(fields=["project", "content_hash"], name="item_project_hash"),
        ]


class Evidence(models.Model):
    """A required piece of evidence and whether it reached the model."""

    call = models.ForeignKey(Call, on_delete=models.CASCADE, related_name="evidence")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    label = models.CharField(max_length=200, blank=True)
    literal = models.TextField(null=True, blank=True)
    expected_item = models.CharField(max_length=200, null=True, blank=True)
    present = models.BooleanField()
    found_in = models.CharField(max_length=200, null=True, blank=True)
    used = models.BooleanField(null=True)

    class Meta:
        indexes = [
            models.Index(fields=["project", "key"], name="evidence_project_key"),
            models.Index(fields=["call"], name="evidence_call"),
        ]


class Compaction(models.Model):
    call = models.ForeignKey(Call, on_delete=models.CASCADE, related_name="compactions")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    event_id = models.CharField(max_length=200)
    strategy = models.CharField(max_length=200)
    trigger = models.CharField(max_length=200, blank=True)
    tokens_before = models.BigIntegerField()
    tokens_after = models.BigIntegerField()
    kept_turns = models.IntegerField(null=True, blank=True)
    summary_item = models.CharField(max_length=200, null=True, blank=True)
    failed_invariants = models.IntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["project", "failed_invariants"], name="compaction_project_failed")]


class Invariant(models.Model):
    compaction = models.ForeignKey(Compaction, on_delete=models.CASCADE, related_name="invariants")
    name = models.CharField(max_length=64)
    ok = models.BooleanField()
    detail = models.TextField(blank=True)
    lost = models.JSONField(default=list, blank=True)


class ContextEdit(models.Model):
    call = models.ForeignKey(Call, on_delete=models.CASCADE, related_name="context_edits")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    type = models.CharField(max_length=200)
    cleared_count = models.IntegerField(default=0)
    cleared_tokens = models.BigIntegerField(default=0)
    kept = models.IntegerField(null=True, blank=True)
    item_ids = models.JSONField(default=list, blank=True)
