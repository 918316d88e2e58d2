"""Sub-commands of ``synergy-opt``; each module exposes ``register(subparsers)``."""
