"""Analysis of stored calls (docs/analysis.md): per-call figures (``figures``), drop attribution
(``attribution``), cache causes and the prefix registry (``cache``), regressions
(``regressions``), compaction review (``compaction_review``), rollups (``rollups``) and
webhooks (``notify``); ``pipeline`` runs them over calls in safe, rerunnable chunks.

The Celery tasks in manifests/tasks.py call :func:`analyze_calls` and :func:`sweep_unanalysed`;
this package never imports the tasks: a caller that wants webhooks sent passes ``notify``,
which runs after each commit.
"""

from manifests.analysis.pipeline import SweepResult, analyze_calls, sweep_unanalysed

__all__ = ["SweepResult", "analyze_calls", "sweep_unanalysed"]
