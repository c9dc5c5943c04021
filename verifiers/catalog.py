"""The built-in verifiers by name, and the module that defines (and registers) each: a table of
names only, so the params schema checks a reward's name without importing any verifier. The
registry imports a verifier's module the first time that verifier is asked for.

A new verifier is its module (a class under ``@register``) and a line in each table here."""

BUILTIN: dict[str, str] = {
    "code": "verifiers.code",
    "format": "verifiers.format",
    "math": "verifiers.math",
}


# The row tasks each built-in verifier judges, stated here only: its class's ``tasks`` reads its row
# (``tasks = BUILTIN_TASKS[name]``), so which verifier judges a row, and so which a stage builds, is known
# without importing any.
BUILTIN_TASKS: dict[str, frozenset[str]] = {
    "code": frozenset({"code"}),
    "format": frozenset({"math"}),
    "math": frozenset({"math"}),
}


def builtin_names() -> list[str]:
    """The names of the built-in verifiers, sorted."""
    return sorted(BUILTIN)
