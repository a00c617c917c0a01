import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxview.settings")
application = get_wsgi_application()

# Load the URLconf (every view module, DRF, drf-spectacular) and the task module now, as each
# server worker starts, rather than inside its first request: otherwise that request waits
# about a second for the imports (docs/performance.md, "Ingest": 17 % of a 20-request bench).
from django.urls import get_resolver  # noqa: E402

get_resolver().url_patterns  # noqa: B018 - the attribute access is the import
import manifests.tasks  # noqa: E402, F401
