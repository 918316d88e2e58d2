"""Round mechanisms behind one protocol, chosen by name.

Importing this package registers every built-in mechanism; callers use
:func:`make_mechanism` and :func:`mechanism_names` and never import a mechanism class.
"""

from synergy_opt.mechanisms import greedy, opt, proportional, tetris, tune  # noqa: F401  (registration)
from synergy_opt.mechanisms.base import (
    Mechanism,
    MechanismOptions,
    make_mechanism,
    mechanism_names,
    register,
)

__all__ = ["Mechanism", "MechanismOptions", "make_mechanism", "mechanism_names", "register"]
