"""The library version (one place; the package ``__init__`` and the kernel cache key read it)."""

__version__ = "0.1.0.dev0"
