"""ctxview's Celery app with one analysis chunk held open, for the fault tests
(tests/pipeline/test_worker.py): ``celery -A tests.pipeline.held_analysis worker``.

In the worker's process, the chunk numbered ``CTXVIEW_TEST_HOLD_CHUNK`` (from 0, counted over
the process's chunks) stops once it has written every row it derives and marked its rollup
buckets, inside its still open transaction: it writes ``CTXVIEW_TEST_HOLD_FILE`` (with the
process id) and sleeps ``CTXVIEW_TEST_HOLD_SECONDS``. A test waits for the file, then kills the
worker there, or lets the chunk go on after the pause. The production pipeline knows nothing of
this: the hold wraps ``rollups.mark``, the last write of a chunk, from outside.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

import django

from ctxview.celery import app

django.setup()

from manifests.analysis import rollups  # noqa: E402 - the models need the app registry set up

__all__ = ["app"]

_mark = rollups.mark
_chunks = itertools.count()


def _mark_then_hold(rows: Iterable[tuple[int, datetime, str, str]]) -> int:
    marked = _mark(rows)
    hold_file = os.environ.get("CTXVIEW_TEST_HOLD_FILE")
    if hold_file and next(_chunks) == int(os.environ.get("CTXVIEW_TEST_HOLD_CHUNK", "0")):
        Path(hold_file).write_text(str(os.getpid()))
        time.sleep(float(os.environ.get("CTXVIEW_TEST_HOLD_SECONDS", "60")))
    return marked


rollups.mark = _mark_then_hold
