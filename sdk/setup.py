"""Builds ctxkit's optional C accelerator (ctxkit/_speedups.c); everything else is in pyproject.toml.

``optional=True``: where no C compiler (or no Python headers) exists the build warns and goes on,
and ctxkit runs on its pure-Python path (docs/sdk.md, "Optional native accelerator").
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("ctxkit._speedups", ["ctxkit/_speedups.c"], optional=True)])
