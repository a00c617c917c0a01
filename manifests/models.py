"""ctxview's tables: projects and keys, and the normalized manifest.

A manifest is stored twice on purpose: normalized (runs, calls, items, evidence,
compactions, invariants, context edits) for the dashboard's queries, and raw (the
canonical JSON of the validated manifest) so nothing the agent sent is lost and
analysis can be re-run when its rules change.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models
from django.utils import timezone

from ctxkit import figures
from ctxkit.manifest import MAX_PATH

if TYPE_CHECKING:
    from django.contrib.auth.models import User

KEY_PREFIX = "ctx_"


class Project(models.Model):
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=200, unique=True)
    created = models.DateTimeField(default=timezone.now)
    members: models.ManyToManyField[User, Membership] = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="projects"
    )
    # The signed-in user's role, set by selectors.projects.project_for for the pages (not a column).
    role: str
    # Cache-hit regression alerts (docs/analysis.md): a signed POST to webhook_url when the
    # rolling hit rate of an agent/model falls more than regression_threshold_points below
    # its baseline; both windows are regression_window_calls calls long.
    webhook_url = models.URLField(max_length=500, blank=True, help_text="POSTed a signed JSON body per regression")
    webhook_secret = models.CharField(
        max_length=200, blank=True, help_text="HMAC-SHA256 key of the X-Ctxview-Signature header"
    )
    regression_threshold_points = models.FloatField(
        default=20.0, help_text="A drop of more than this many hit-rate points against the baseline is a regression"
    )
    regression_window_calls = models.PositiveIntegerField(
        default=20, help_text="Calls in the rolling window and in the baseline window before it"
    )
    # Raw rows (calls, items, evidence, ...) older than this are deleted daily
    # (manifests/storage/retention.py); rollups keep CTXVIEW_ROLLUP_RETENTION_DAYS. Empty: the
    # CTXVIEW_RETENTION_DAYS default.
    retention_days = models.PositiveIntegerField(
        null=True, blank=True, help_text="Days raw calls are kept; empty for the server's default"
    )

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    # owner: everything, including the settings (keys, members, webhook); member: the
    # dashboard and a read-only view of the settings; viewer: the dashboard only.
    OWNER = "owner"
    MEMBER = "member"
    VIEWER = "viewer"
    ROLES = [(OWNER, "Owner"), (MEMBER, "Member"), (VIEWER, "Viewer")]

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
    # The settings scope: read and change the project's alert rules and watched facts through the API.
    can_configure = models.BooleanField(default=False)
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
    # No single-column index on project: run_unique_per_project leads with it (migration 0013).
    project = models.ForeignKey(Project, on_delete=models.CASCADE, db_index=False, related_name="runs")
    run_id = models.CharField(max_length=200)
    agent = models.CharField(max_length=200, default="default")
    model = models.CharField(max_length=200, blank=True)
    parent_run_id = models.CharField(max_length=200, null=True, blank=True)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    # Where the agent worked (the manifest's workspace): each is the first non-empty value the
    # run's calls sent, in the order they arrived (ingest.rows.runs_statement).
    cwd = models.CharField(max_length=MAX_PATH, blank=True, default="", help_text="The agent's working directory")
    git_branch = models.CharField(max_length=200, blank=True, default="", help_text="The git branch checked out there")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "run_id"], name="run_unique_per_project")]
        indexes = [
            models.Index(fields=["project", "-last_seen"], name="run_project_recent"),
            # The filter bar's agent and model lists, read by skipping through it (selectors/projects.py).
            models.Index(fields=["project", "agent", "model"], name="run_project_agent_model"),
            # The runs list filtered by folder or branch, newest first, and the lists of both
            # (read by skipping through them, as the agent and model lists are).
            models.Index(fields=["project", "cwd", "-last_seen"], name="run_project_cwd_recent"),
            models.Index(fields=["project", "git_branch", "-last_seen"], name="run_project_branch_recent"),
        ]

    def __str__(self) -> str:
        return self.run_id


class Call(models.Model):
    """One model call: the manifest's scalar fields, plus the raw manifest."""

    # Its attributions with their lost-at calls, set by the API's call view for its serializer (not a column).
    attribution_rows: list[Attribution]

    # No single-column indexes of their own: call_project_* and call_run_step lead with these
    # columns, and every index is paid by every call written (migration 0013).
    project = models.ForeignKey(Project, on_delete=models.CASCADE, db_index=False, related_name="calls")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, db_index=False, related_name="calls")
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
    cache_ttl_seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text="The prompt-cache TTL the agent recorded (manifest cache_ttl_seconds)"
    )
    # Usage, normal form (input includes cached reads and writes)
    input_tokens = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    cache_write_1h_tokens = models.BigIntegerField(default=0, help_text="Part of the cache writes with a 1-hour TTL")
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
    # Poison isolation (docs/analysis.md): a call whose analysis raised is set aside with its
    # error, so it never blocks its siblings or the sweep; `manage.py reanalyse_calls
    # --quarantined` tries it again after a fix.
    quarantined_at = models.DateTimeField(null=True, blank=True)
    analysis_error = models.TextField(blank=True)

    class Meta:
        # No unique (project, call_id) here: on PostgreSQL this table is partitioned by
        # started_at, and a partitioned table's unique keys must hold the partition key.
        # CallKey (below) is the idempotency registry that keeps call_id unique per project.
        indexes = [
            # Pattern operators: the search box's "call id begins with" (LIKE 'x%') reads this
            # index under any collation (a plain b-tree serves LIKE only under "C"); it still
            # serves equality. PostgreSQL only; other databases ignore opclasses.
            models.Index(fields=["project", "call_id"], name="call_project_call_id",
                         opclasses=["int8_ops", "varchar_pattern_ops"]),
            models.Index(fields=["project", "started_at"], name="call_project_time"),
            models.Index(fields=["run", "step"], name="call_run_step"),
            models.Index(fields=["project", "prefix_hash"], name="call_project_prefix"),
            models.Index(fields=["project", "agent", "model", "started_at"], name="call_project_agent_model"),
            models.Index(fields=["received_at"], name="call_unanalysed", condition=models.Q(analyzed_at__isnull=True)),
        ]

    def __str__(self) -> str:
        return self.call_id

    @property
    def uncached_input_tokens(self) -> int:
        return figures.uncached_tokens(self)

    @property
    def cache_hit_ratio(self) -> float | None:
        return figures.hit_rate(self.cache_read_tokens, self.input_tokens)


class CallKey(models.Model):
    """The idempotency registry: one row per stored call, unique on (project, call_id).

    A plain table on both databases. The calls table cannot hold this unique key on
    PostgreSQL (it is partitioned by time, and a partitioned table's unique keys must
    include the partition key), so ingest looks up and inserts here instead; the content
    hash tells a retry (duplicate) from a conflict. Retention deletes a call's key with it.
    """

    # Indexed by callkey_unique_per_project, which leads with it (migration 0013).
    project = models.ForeignKey(Project, on_delete=models.CASCADE, db_index=False, related_name="+")
    call_key = models.CharField(max_length=200, help_text="The manifest's call_id")
    content_hash = models.CharField(max_length=64)
    call = models.ForeignKey(Call, on_delete=models.CASCADE, db_constraint=False, related_name="+")
    # The call's time: with it a read by call_id touches one day's partition of each table.
    started_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "call_key"], name="callkey_unique_per_project")]


class Item(models.Model):
    """One candidate of a call's context and what was done with it."""

    # Foreign keys to the partitioned tables have no database constraint (a partitioned
    # table's primary key is (id, started_at), docs/scaling.md); ingest writes a call and
    # its children in one transaction and retention deletes them together.
    # No single-column indexes of their own: item_call_ordinal and item_project_hash lead
    # with these columns, and every index is paid by every item written (docs/performance.md).
    call = models.ForeignKey(Call, on_delete=models.CASCADE, db_constraint=False, db_index=False, related_name="items")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, db_index=False, related_name="+")
    # The call's started_at, copied: the partition key on PostgreSQL (docs/scaling.md).
    started_at = models.DateTimeField(help_text="The call's time: the partition key")
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
    label = models.CharField(max_length=200, null=True, blank=True,
                             help_text="What the agent calls it: a tool by its name, a message by role and turn")

    class Meta:
        indexes = [
            models.Index(fields=["call", "ordinal"], name="item_call_ordinal"),
            models.Index(fields=["project", "content_hash"], name="item_project_hash"),
        ]


class Evidence(models.Model):
    """A required piece of evidence and whether it reached the model."""

    # Indexed by evidence_call and evidence_project_key (below), not twice.
    call = models.ForeignKey(
        Call, on_delete=models.CASCADE, db_constraint=False, db_index=False, related_name="evidence"
    )
    project = models.ForeignKey(Project, on_delete=models.CASCADE, db_index=False, related_name="+")
    # The call's started_at, copied: the partition key on PostgreSQL (docs/scaling.md).
    started_at = models.DateTimeField(help_text="The call's time: the partition key")
    key = models.CharField(max_length=200)
    label = models.CharField(max_length=200, blank=True)
    literal = models.TextField(null=True, blank=True)
    expected_item = models.CharField(max_length=200, null=True, blank=True)
    present = models.BooleanField()
    found_in = models.CharField(max_length=200, null=True, blank=True)
    used = models.BooleanField(null=True)
    # A watched fact of the project (WatchedFact), written by the analysis, not sent in the
    # manifest: replaced whenever the call is analysed (docs/analysis.md, "Watched facts").
    watched = models.BooleanField(default=False, db_default=False)

    class Meta:
        indexes = [
            # Pattern operators for the search box's "key begins with" (see call_project_call_id).
            models.Index(fields=["project", "key"], name="evidence_project_key",
                         opclasses=["int8_ops", "varchar_pattern_ops"]),
            models.Index(fields=["call"], name="evidence_call"),
        ]


class Compaction(models.Model):
    call = models.ForeignKey(Call, on_delete=models.CASCADE, db_constraint=False, related_name="compactions")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    # The call's started_at, copied: the partition key on PostgreSQL (docs/scaling.md).
    started_at = models.DateTimeField(help_text="The call's time: the partition key")
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
    compaction = models.ForeignKey(Compaction, on_delete=models.CASCADE, db_constraint=False, related_name="invariants")
    # The call's started_at, copied: the partition key on PostgreSQL (docs/scaling.md).
    started_at = models.DateTimeField(help_text="The call's time: the partition key")
    name = models.CharField(max_length=64)
    ok = models.BooleanField()
    detail = models.TextField(blank=True)
    lost = models.JSONField(default=list, blank=True)
    # The check of the project's watched facts, written by the analysis (see Evidence.watched).
    watched = models.BooleanField(default=False, db_default=False)


class ContextEdit(models.Model):
    call = models.ForeignKey(Call, on_delete=models.CASCADE, db_constraint=False, related_name="context_edits")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    # The call's started_at, copied: the partition key on PostgreSQL (docs/scaling.md).
    started_at = models.DateTimeField(help_text="The call's time: the partition key")
    type = models.CharField(max_length=200)
    cleared_count = models.IntegerField(default=0)
    cleared_tokens = models.BigIntegerField(default=0)
    kept = models.IntegerField(null=True, blank=True)
    item_ids = models.JSONField(default=list, blank=True)


# --------------------------------------------------------------------------- #
# Analysis (manifests/analysis/): derived from the tables above by Celery tasks.
# Every row here can be deleted and recomputed from the stored calls; the
# analysis replaces rows, it never increments them, so running it twice changes
# nothing (docs/analysis.md).


_USD_HELP = "USD per million tokens; blank: the model's price in genai-prices' table"


class ModelPrice(models.Model):
    """Prices in relative units per 1k tokens (docs/analysis.md, "Prices and model facts") and cache facts per model.

    A call's model is matched against ``model_pattern`` (fnmatch, case-sensitive); the most
    specific matching row wins (fewest wildcards, then longest). With no row, the field
    defaults below apply, which are also the values of the ``*`` row created by migration.
    """

    model_pattern = models.CharField(max_length=200, unique=True, help_text="e.g. claude-sonnet-*; * matches any model")
    input_per_1k = models.FloatField(default=1.0)
    output_per_1k = models.FloatField(default=4.0)
    cache_read_per_1k = models.FloatField(default=0.1)
    cache_write_per_1k = models.FloatField(default=1.25)
    cache_ttl_seconds = models.PositiveIntegerField(default=300, help_text="The provider's prompt-cache TTL")
    min_cacheable_tokens = models.PositiveIntegerField(default=1024, help_text="Shortest prefix the provider caches")
    effective_limit_ratio = models.FloatField(
        default=0.25, help_text="Share of the window the model uses well (context rot: 1/4 to 1/10)"
    )
    # USD per million tokens, each replacing the model's own price in genai-prices' table; blank:
    # the table's (docs/analysis.md, "Cost in USD").
    input_usd_per_mtok = models.FloatField(null=True, blank=True, help_text=_USD_HELP)
    output_usd_per_mtok = models.FloatField(null=True, blank=True, help_text=_USD_HELP)
    cache_read_usd_per_mtok = models.FloatField(null=True, blank=True, help_text=_USD_HELP)
    cache_write_usd_per_mtok = models.FloatField(null=True, blank=True, help_text=_USD_HELP + " (5-minute TTL)")
    cache_write_1h_usd_per_mtok = models.FloatField(null=True, blank=True, help_text=_USD_HELP + " (1-hour TTL)")
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model_pattern"]

    def __str__(self) -> str:
        return self.model_pattern


class CallFigures(models.Model):
    """Per-call figures (docs/analysis.md, "Figures")."""

    call = models.OneToOneField(Call, on_delete=models.CASCADE, db_constraint=False, related_name="figures")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    started_at = models.DateTimeField(help_text="Copy of the call's time, for range queries")
    context_tokens = models.BigIntegerField(default=0, help_text="Tokens of the items that reached the model")
    uncached_input_tokens = models.BigIntegerField(default=0)
    cache_hit_ratio = models.FloatField(null=True, blank=True, help_text="None when the call had no input")
    window_utilization = models.FloatField(default=0.0)
    effective_limit = models.BigIntegerField(default=0)
    effective_share = models.FloatField(default=0.0)
    reserve_share = models.FloatField(default=0.0)
    headroom_tokens = models.BigIntegerField(default=0)
    duplicate_ratio = models.FloatField(default=0.0)
    duplicate_context_tokens = models.BigIntegerField(default=0)
    evidence_coverage = models.FloatField(null=True, blank=True)
    tool_tokens = models.BigIntegerField(default=0)
    tool_share = models.FloatField(default=0.0)
    untrusted_tokens = models.BigIntegerField(default=0)
    cost = models.FloatField(default=0.0)
    cost_usd = models.FloatField(null=True, blank=True, help_text="The cost in USD; null: the model has no USD price")
    evidence_positions = models.JSONField(default=dict, blank=True)

    class Meta:
        verbose_name_plural = "call figures"
        indexes = [
            models.Index(fields=["project", "started_at"], name="figures_project_time"),
            # The calls list sorted by a figure reads its page in this order (selectors/call_list.py).
            models.Index(fields=["project", "cache_hit_ratio", "call"], include=["started_at"],
                         name="figures_project_hit"),
            models.Index(fields=["project", "cost", "call"], include=["started_at"], name="figures_project_cost"),
        ]


class Attribution(models.Model):
    """Why a required piece of evidence did not help: one cause per missing evidence, plus
    risk flags; always with the item and the decision (action + reason) that caused it."""

    # The cause names are ctxkit.figures' (the one definition); missing causes first.
    NEVER_CANDIDATE = figures.NEVER_CANDIDATE
    LEFT_CANDIDATES = figures.LEFT_CANDIDATES
    BUDGET = figures.BUDGET
    TRUNCATED = figures.TRUNCATED
    COMPACTION = figures.COMPACTION
    NOT_USED = figures.NOT_USED
    MIDDLE_ZONE = figures.MIDDLE_ZONE
    TRUNCATED_PRESENT = figures.TRUNCATED_PRESENT
    CAUSES = [
        (NEVER_CANDIDATE, "Never a candidate"),
        (LEFT_CANDIDATES, "No longer a candidate"),
        (BUDGET, "Dropped or cut by the budget"),
        (TRUNCATED, "Truncated away"),
        (COMPACTION, "Lost in compaction or summary"),
        (NOT_USED, "Present but not used (risk)"),
        (MIDDLE_ZONE, "Placed in the middle zone (risk)"),
        (TRUNCATED_PRESENT, "Truncated but present (risk)"),
    ]

    # Its composite indexes lead with the project; a lone project index only tempts the planner
    # into reading every row of the project.
    project = models.ForeignKey(Project, on_delete=models.CASCADE, db_index=False, related_name="+")
    call = models.ForeignKey(Call, on_delete=models.CASCADE, db_constraint=False, related_name="attributions")
    evidence = models.ForeignKey(
        Evidence, on_delete=models.SET_NULL, null=True, blank=True, db_constraint=False, related_name="+"
    )
    evidence_key = models.CharField(max_length=200)
    cause = models.CharField(max_length=32, choices=CAUSES)
    fix = models.TextField()
    item_id = models.CharField(max_length=200, blank=True)
    action = models.CharField(max_length=32, blank=True)
    reason = models.TextField(blank=True)
    is_risk = models.BooleanField(default=False, help_text="The evidence reached the model; a risk, not a loss")
    # The earlier call of the run where the evidence was lost, when the cause was traced
    # back to it (docs/analysis.md, "Causes traced through the run"); null: lost here.
    lost_at = models.ForeignKey(
        Call, on_delete=models.SET_NULL, null=True, blank=True, db_constraint=False, related_name="+"
    )
    started_at = models.DateTimeField(help_text="Copy of the call's time, for range queries")
    # Copies of the call's run, agent and model, and its cost (CallFigures.cost) on the call's
    # first attribution of each cause (null on its others, so a sum over a cause counts each
    # call once), so the savings aggregate the attributions of a range from one index without
    # reading their calls.
    # A copy: the row goes with its call, so deleting a run never looks here (no index of its own).
    run = models.ForeignKey(Run, on_delete=models.DO_NOTHING, null=True, db_constraint=False, db_index=False,
                            related_name="+")
    agent = models.CharField(max_length=200, blank=True, default="")
    model = models.CharField(max_length=200, blank=True, default="")
    call_cost = models.FloatField(null=True, blank=True,
                                  help_text="The call's cost on its first attribution of this cause, else null")
    call_cost_usd = models.FloatField(null=True, blank=True,
                                      help_text="The call's cost in USD beside call_cost (null: no USD price)")

    class Meta:
        indexes = [
            models.Index(fields=["project", "started_at"], name="attribution_project_time"),
            models.Index(fields=["project", "cause", "started_at"],
                         include=["call", "run", "agent", "model", "call_cost", "call_cost_usd", "evidence_key"],
                         name="attribution_cause_cost"),
        ]


class CacheEvent(models.Model):
    """A call's prompt-cache outcome against the previous call of its run (for a run's first call
    that read nothing, the previous run's call: docs/analysis.md), with its cause."""

    HIT = "hit"
    PREFIX_CHANGED = "prefix_changed"
    TTL_EXPIRED = "ttl_expired"
    COLD_START = "cold_start"
    BELOW_MINIMUM = "below_minimum"
    CAUSES = [
        (HIT, "Hit"),
        (PREFIX_CHANGED, "Prefix changed"),
        (TTL_EXPIRED, "TTL expired"),
        (COLD_START, "Cold start"),
        (BELOW_MINIMUM, "Below the minimum cacheable prefix"),
    ]

    # Its composite indexes lead with the project; a lone project index only tempts the planner
    # into reading every row of the project.
    project = models.ForeignKey(Project, on_delete=models.CASCADE, db_index=False, related_name="+")
    call = models.OneToOneField(Call, on_delete=models.CASCADE, db_constraint=False, related_name="cache_event")
    previous_call = models.ForeignKey(
        Call, on_delete=models.SET_NULL, null=True, blank=True, db_constraint=False, related_name="+"
    )
    cause = models.CharField(max_length=32, choices=CAUSES)
    changed_segment = models.CharField(max_length=200, blank=True)
    gap_seconds = models.FloatField(null=True, blank=True)
    hit_ratio = models.FloatField(null=True, blank=True, help_text="None when the call had no input")
    previous_hit_ratio = models.FloatField(null=True, blank=True)
    prefix_hash = models.CharField(max_length=128, blank=True)
    previous_prefix_hash = models.CharField(max_length=128, blank=True)
    detail = models.TextField(blank=True, help_text="The cause in a sentence")
    started_at = models.DateTimeField(help_text="Copy of the call's time, for range queries")
    # Copies of the call's run, agent and model, and what the miss cost (ctxkit.figures.cache_saving
    # at the model's price row when analysed), so the cache view and the savings aggregate the
    # events of a range from one index without reading their calls.
    # A copy: the row goes with its call, so deleting a run never looks here (no index of its own).
    run = models.ForeignKey(Run, on_delete=models.DO_NOTHING, null=True, db_constraint=False, db_index=False,
                            related_name="+")
    agent = models.CharField(max_length=200, blank=True, default="")
    model = models.CharField(max_length=200, blank=True, default="")
    saving = models.FloatField(default=0.0, help_text="Cost units a hit would have saved")
    saving_usd = models.FloatField(null=True, blank=True, help_text="USD a hit would have saved (null: no USD price)")

    class Meta:
        indexes = [models.Index(fields=["project", "cause", "started_at"], include=["run", "agent", "model", "saving",
                                                                                      "saving_usd"],
                                name="cacheevent_cause_saving")]


class Regression(models.Model):
    """A drop of the rolling cache-hit rate of one agent/model against its baseline."""

    # The prefix segment that changed, set by selectors.overview.regressions for the page (not a column).
    segment: str

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="regressions")
    agent = models.CharField(max_length=200)
    model = models.CharField(max_length=200)
    detected_at = models.DateTimeField(help_text="Time of the call where the drop crossed the threshold")
    call = models.ForeignKey(
        Call,
        on_delete=models.CASCADE,
        db_constraint=False,
        related_name="+",
        help_text="The call where the rolling rate crossed the threshold",
    )
    first_call = models.ForeignKey(
        Call,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        db_constraint=False,
        related_name="+",
        help_text="The first call of the streak without the baseline prefix",
    )
    window_calls = models.PositiveIntegerField()
    threshold_points = models.FloatField()
    baseline_rate = models.FloatField()
    current_rate = models.FloatField()
    drop_points = models.FloatField()
    prefix_before = models.CharField(max_length=128, blank=True)
    prefix_after = models.CharField(max_length=128, blank=True)
    segments_before = models.JSONField(default=list, blank=True)
    segments_after = models.JSONField(default=list, blank=True)
    changed_segment = models.CharField(max_length=200, blank=True)
    cause = models.CharField(max_length=32, help_text="A CacheEvent cause: prefix_changed, ttl_expired, ...")
    notified_at = models.DateTimeField(null=True, blank=True)
    notify_attempts = models.PositiveIntegerField(default=0)
    last_notify_attempt = models.DateTimeField(null=True, blank=True)
    notify_error = models.TextField(blank=True)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "agent", "model", "call"], name="regression_unique_per_call")
        ]
        indexes = [models.Index(fields=["project", "-detected_at"], name="regression_project_recent")]


class PrefixEntry(models.Model):
    """The prefix registry: every distinct prefix hash of a project."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="prefixes")
    prefix_hash = models.CharField(max_length=128)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    calls = models.BigIntegerField(default=0)
    tokens = models.BigIntegerField(default=0)
    segments = models.JSONField(default=list, blank=True)

    class Meta:
        verbose_name_plural = "prefix entries"
        constraints = [models.UniqueConstraint(fields=["project", "prefix_hash"], name="prefix_unique_per_project")]


class CompactionFigures(models.Model):
    """Compaction review: compression ratio r, field distortion d, what was lost."""

    compaction = models.OneToOneField(Compaction, on_delete=models.CASCADE, db_constraint=False, related_name="figures")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    call = models.ForeignKey(Call, on_delete=models.CASCADE, db_constraint=False, related_name="+")
    started_at = models.DateTimeField(help_text="Copy of the call's time, for range queries")
    ratio_r = models.FloatField(null=True, blank=True, help_text="tokens_after / tokens_before")
    distortion_d = models.FloatField(null=True, blank=True, help_text="Share of the checked invariants that failed")
    checked = models.PositiveIntegerField(default=0)
    failed = models.BooleanField(default=False)
    lost_fields = models.JSONField(default=list, blank=True)
    failed_names = models.JSONField(default=list, blank=True)

    class Meta:
        verbose_name_plural = "compaction figures"
        indexes = [models.Index(fields=["project", "failed", "started_at"], name="compfig_project_failed")]


class ReRead(models.Model):
    """A re-read after loss (docs/analysis.md, "Re-reads"): a tool call repeating one whose
    result the context lost in between, on the call whose context first holds the new result."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    call = models.ForeignKey(Call, on_delete=models.CASCADE, db_constraint=False, db_index=False, related_name="+")
    started_at = models.DateTimeField(help_text="Copy of the call's time, for range queries")
    run = models.ForeignKey(Run, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+")
    step = models.IntegerField(help_text="Copy of the call's step")
    group = models.CharField(max_length=200, help_text="The re-read tool call's id")
    result_item = models.CharField(max_length=200)
    tool = models.CharField(max_length=200, blank=True, default="")
    tokens = models.BigIntegerField(default=0, help_text="ctxkit.figures.reread_tokens")
    # The earlier calls may expire before this row's own call: their pointers are cleared then.
    earlier_call = models.ForeignKey(Call, on_delete=models.SET_NULL, null=True, db_constraint=False,
                                     related_name="+", help_text="The last call that held the earlier result")
    earlier_item = models.CharField(max_length=200)
    lost_call = models.ForeignKey(Call, on_delete=models.SET_NULL, null=True, db_constraint=False, db_index=False,
                                  related_name="+", help_text="The first call that no longer held it")
    cause = models.CharField(max_length=16, help_text="compaction, context_edit, truncate or drop")
    cause_ref = models.CharField(max_length=200, blank=True, default="",
                                 help_text="The compaction event id or the context edit type")

    class Meta:
        indexes = [
            models.Index(fields=["call"], name="reread_call"),
            models.Index(fields=["lost_call"], include=["tokens", "cause_ref"], name="reread_lost_call"),
            models.Index(fields=["run", "step"], name="reread_run_step"),
        ]


class Rollup(models.Model):
    """Hourly and daily totals per project / agent / model, recomputed from the source rows
    of each touched bucket (never incremented), so reprocessing cannot double-count."""

    HOUR = "hour"
    DAY = "day"
    BUCKETS = [(HOUR, "Hour"), (DAY, "Day")]

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="rollups")
    bucket = models.CharField(max_length=4, choices=BUCKETS)
    start = models.DateTimeField()
    agent = models.CharField(max_length=200)
    model = models.CharField(max_length=200)
    calls = models.BigIntegerField(default=0)
    items = models.BigIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    uncached_input_tokens = models.BigIntegerField(default=0)
    cost = models.FloatField(default=0.0)
    cost_usd = models.FloatField(default=0.0, help_text="USD of the calls whose model has a USD price")
    verified_successes = models.BigIntegerField(default=0)
    evidence_total = models.BigIntegerField(default=0)
    evidence_present = models.BigIntegerField(default=0)
    compactions = models.BigIntegerField(default=0)
    invariant_failures = models.BigIntegerField(default=0)
    attributions = models.JSONField(default=dict, blank=True, help_text="{cause: count}")
    cache_causes = models.JSONField(default=dict, blank=True, help_text="{cache event cause: count}")
    tokens_by_kind = models.JSONField(default=dict, blank=True, help_text="{item kind: tokens in context}")
    prefix_changes = models.BigIntegerField(default=0)
    computed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "bucket", "start", "agent", "model"], name="rollup_unique")
        ]
        indexes = [models.Index(fields=["project", "bucket", "start"], name="rollup_project_range")]

    @property
    def hit_rate(self) -> float | None:
        return figures.hit_rate(self.cache_read_tokens, self.input_tokens)

    @property
    def evidence_coverage(self) -> float | None:
        return figures.coverage(self.evidence_present, self.evidence_total)

    @property
    def cost_per_verified_success(self) -> float | None:
        return self.cost / self.verified_successes if self.verified_successes else None

    @property
    def cost_usd_per_verified_success(self) -> float | None:
        return self.cost_usd / self.verified_successes if self.verified_successes else None


class RollupMark(models.Model):
    """An hour bucket (project, hour, agent, model) whose rollup is stale: written by the
    analysis in the transaction that analysed its calls, deleted by the refresh that
    recomputed the bucket (manifests/analysis/rollups.py, docs/analysis.md "Rollups").

    Append-only on purpose, with no unique key: a batch adds a row even when its bucket is
    already marked, and a refresh deletes exactly the rows it claimed. A unique key with
    ``ON CONFLICT DO NOTHING`` would let a mark made while a refresh runs fold into the row
    that refresh is about to delete, and the bucket would stay stale unnoticed."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    start = models.DateTimeField()
    agent = models.CharField(max_length=200)
    model = models.CharField(max_length=200)
    marked_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.project_id} {self.start:%Y-%m-%d %H:00} {self.agent}/{self.model}"


class OpsCounter(models.Model):
    """Operational counters shared by every server process (e.g. client disconnects while
    a body was read), incremented with one upsert and shown on /healthz."""

    name = models.CharField(max_length=64, primary_key=True)
    value = models.BigIntegerField(default=0)
    updated = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.name}={self.value}"


# --------------------------------------------------------------------------- #
# Alert rules (manifests/alerts/, docs/dashboard.md "Alert rules"): written by owners,
# evaluated by a beat task over the rollups; each rule keeps its own state.


class AlertRule(models.Model):
    """A condition over a project's recent calls, and whether it holds now.

    The state fields (``firing``, ``episode``, ...) are written by the evaluation only; an
    episode starts when the condition starts to hold and ends when it stops, and each
    start and end is one AlertEvent."""

    HIT_RATE_BELOW = "hit_rate_below"
    INVARIANT_FAILURES = "invariant_failures"
    EVIDENCE_LOST = "evidence_lost"
    COST_PER_SUCCESS_ABOVE = "cost_per_success_above"
    COST_USD_PER_SUCCESS_ABOVE = "cost_usd_per_success_above"
    KINDS = [
        (HIT_RATE_BELOW, "Cache hit rate below"),
        (INVARIANT_FAILURES, "Compaction invariant failures above"),
        (EVIDENCE_LOST, "Required evidence lost more than"),
        (COST_USD_PER_SUCCESS_ABOVE, "Cost per verified success above (USD)"),
        (COST_PER_SUCCESS_ABOVE, "Cost per verified success above (units)"),
    ]
    AUTO = "auto"
    JSON = "json"
    SLACK = "slack"
    DISCORD = "discord"
    FORMATS = [(AUTO, "Auto (by the webhook's host)"), (JSON, "JSON"), (SLACK, "Slack"), (DISCORD, "Discord")]

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="alert_rules")
    kind = models.CharField(max_length=32, choices=KINDS)
    agent = models.CharField(max_length=200, blank=True, help_text="Only this agent; empty: every agent")
    model = models.CharField(max_length=200, blank=True, help_text="Only this model; empty: every model")
    evidence_key = models.CharField(
        max_length=200, blank=True, help_text="evidence_lost only: the watched key; empty: any required evidence"
    )
    threshold = models.FloatField(help_text="A hit rate (0..1), a count, US dollars or cost units, by kind")
    window_hours = models.PositiveIntegerField(default=1)
    format = models.CharField(max_length=16, choices=FORMATS, default=AUTO)
    created = models.DateTimeField(default=timezone.now)
    # State, per rule
    firing = models.BooleanField(default=False)
    episode = models.PositiveIntegerField(default=0, help_text="Episodes started so far; the current one if firing")
    changed_at = models.DateTimeField(null=True, blank=True, help_text="When firing last changed")
    last_value = models.FloatField(null=True, blank=True, help_text="The figure at the last evaluation")
    evaluated_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.threshold:g}"


class AlertEvent(models.Model):
    """One start (``firing``) or end (``resolved``) of a rule's episode, and its delivery.
    Unique per (rule, episode, transition): an evaluation run twice writes it once."""

    FIRING = "firing"
    RESOLVED = "resolved"
    TRANSITIONS = [(FIRING, "Firing"), (RESOLVED, "Resolved")]

    # Indexed by alertevent_unique_transition, which leads with it.
    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, db_index=False, related_name="events")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    episode = models.PositiveIntegerField()
    transition = models.CharField(max_length=16, choices=TRANSITIONS)
    at = models.DateTimeField(help_text="The evaluation that saw the change")
    value = models.FloatField(null=True, blank=True)
    summary = models.TextField(help_text="The change in a sentence")
    notified_at = models.DateTimeField(null=True, blank=True)
    notify_attempts = models.PositiveIntegerField(default=0)
    last_notify_attempt = models.DateTimeField(null=True, blank=True)
    notify_error = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["rule", "episode", "transition"], name="alertevent_unique_transition")
        ]
        indexes = [models.Index(fields=["notified_at", "notify_attempts"], name="alertevent_unsent")]


# --------------------------------------------------------------------------- #
# Watched facts (manifests/facts.py, docs/analysis.md "Watched facts"): text the users
# declare must stay in the model's context; the analysis checks every call for them.

# The key of a watched fact's evidence entries: this prefix and the fact's label.
FACT_KEY_PREFIX = "fact:"


class WatchedFact(models.Model):
    """A fact that must stay in the context of a project's calls: an exact text, or a
    regular expression (``is_regex``), looked for in the text of the items in context."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="watched_facts")
    label = models.CharField(max_length=100, help_text="A short name, unique in the project")
    text = models.TextField(help_text="The exact text, or a regular expression when is_regex")
    is_regex = models.BooleanField(default=False)
    agent = models.CharField(max_length=200, blank=True, help_text="Only this agent; empty: every agent")
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "label"], name="watchedfact_unique_label")]

    def __str__(self) -> str:
        return self.label

    @property
    def evidence_key(self) -> str:
        """The key of the evidence entries the analysis writes for it."""
        return FACT_KEY_PREFIX + self.label
