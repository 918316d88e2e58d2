"""The error types every layer raises for bad input, below every other module.

Two kinds, both ``ValueError`` subclasses so callers that only know ``ValueError`` still
catch them:

* :class:`ValidationError` - a value violates the data model; ``path`` names the field
  (``jobs[3].gpus``) without knowing which file it came from.  Raised by the data types and
  the schema readers.
* :class:`InputError` - a finished one-line message ``source: field: problem`` naming the
  file (and line, for CSV) the user wrote.  The command line prints it and exits with 2.

This module imports nothing from the package, so the simulator, the sweeps, the trace
converters and the readers can all raise these without importing each other.
"""

from __future__ import annotations


class ValidationError(ValueError):
    """A value violates the data model; ``path`` names the offending field."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path
        self.problem = problem


class InputError(ValueError):
    """Bad input, already phrased as one line: ``source: field: problem``."""


def blame(source: object, error: ValidationError) -> InputError:
    """Turn a field-level :class:`ValidationError` into a line naming ``source`` too."""
    return InputError(f"{source}: {error}")
