"""``python -m ctxkit.proxy``: the same as ``ctxkit proxy``."""

import sys

from ctxkit.proxy.options import main

if __name__ == "__main__":  # not when the recorder's child process imports the main module
    sys.exit(main())
