"""ctxkit: build a model call's context within budget and record its manifest."""

from ctxkit.manifest import SCHEMA_V1, Manifest

__version__ = "0.1.0"
__all__ = ["SCHEMA_V1", "Manifest", "__version__"]
