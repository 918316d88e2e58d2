"""Round mechanisms behind one protocol, chosen by name.

Importing this package registers every built-in mechanism; callers use
:func:`make_mechanism` and :func:`mechanism_names` and never import a mechanism class.
"""

from synergy_opt.mechanisms import (  # noqa: F401  (registration)
    greedy,
    opt,
    opt_exact,
    proportional,
    tetris,
    tune,
    type_aware,
)
from synergy_opt.mechanisms.base import (
    Mechanism,
    MechanismOptions,
    canonical_name,
    is_mechanism,
    make_mechanism,
    mechanism_names,
    register,
)

__all__ = [
    "Mechanism",
    "MechanismOptions",
    "canonical_name",
    "is_mechanism",
    "make_mechanism",
    "mechanism_names",
    "register",
]
