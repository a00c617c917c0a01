"""``python -m ctxkit.proxy``: the same as ``ctxkit proxy``."""

import sys

from ctxkit.proxy.options import main

sys.exit(main())
