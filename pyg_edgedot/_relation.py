"""Op group stub (filled in by its feature)."""
SCHEMAS = {}
FALLBACK = {}


def register_python_side() -> None:
    pass
