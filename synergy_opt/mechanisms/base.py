"""The mechanism protocol, its options, and the registry that picks mechanisms by name.

A mechanism turns one :class:`~synergy_opt.types.RoundInstance` into an
:class:`~synergy_opt.types.Allocation`.  Everything that chooses a mechanism (command line,
simulator, sweeps, notebooks) goes through :func:`make_mechanism`, so a new mechanism is one
module with one ``@register`` and no edits elsewhere.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from synergy_opt.types import Allocation, RoundInstance


@dataclass(frozen=True, slots=True)
class MechanismOptions:
    """Knobs shared by all mechanisms; heuristics ignore the solver ones."""

    solver: str = "highs"
    time_limit_s: float | None = None
    threads: int | None = None
    #: ``opt``: most jobs it may spread over servers (never more than 3 per server).
    max_fragmented: int | None = None


@runtime_checkable
class Mechanism(Protocol):
    """One round's allocator."""

    name: str

    def allocate(self, inst: RoundInstance) -> Allocation:
        """Allocate the round; jobs not placed go to ``unscheduled``."""
        ...


MechanismFactory = Callable[[MechanismOptions], Mechanism]


@dataclass(frozen=True, slots=True)
class MechanismInfo:
    """A registry entry: the factory and what the mechanism promises.

    Tests and benches choose their mechanism lists from these flags instead of hand-written
    tuples, so a new mechanism is covered by every test its promises call for.
    """

    name: str
    factory: MechanismFactory
    #: Every scheduled job keeps at least its fair-share throughput (checker ``fair_share``).
    keeps_fair_share: bool = False
    #: The answer is the proven optimum of the round (up to the solver's gap and time limit).
    exact: bool = False
    #: Calls an LP/MIP solver (honours ``solver``, ``time_limit_s``, ``threads``).
    uses_solver: bool = False
    doc: str = ""


_REGISTRY: dict[str, MechanismInfo] = {}
#: Former names still accepted (old sweep specs, scripts), mapped to today's mechanism.
_ALIASES: dict[str, str] = {}

logger = logging.getLogger(__name__)


def register(
    name: str,
    *,
    keeps_fair_share: bool = False,
    exact: bool = False,
    uses_solver: bool = False,
    doc: str = "",
) -> Callable[[MechanismFactory], MechanismFactory]:
    """Class/function decorator adding a mechanism factory under ``name`` with its promises."""

    def deco(factory: MechanismFactory) -> MechanismFactory:
        if name in _REGISTRY or name in _ALIASES:
            raise ValueError(f"mechanism {name!r} registered twice")
        _REGISTRY[name] = MechanismInfo(name, factory, keeps_fair_share, exact, uses_solver, doc)
        return factory

    return deco


def register_alias(old: str, new: str) -> None:
    """Keep accepting a former mechanism name ``old`` as ``new`` (not listed by name)."""
    if old in _REGISTRY or old in _ALIASES:
        raise ValueError(f"mechanism {old!r} registered twice")
    _ALIASES[old] = new


def canonical_name(name: str) -> str:
    """Today's name for ``name`` (itself unless it is a former name)."""
    return _ALIASES.get(name, name)


def is_mechanism(name: str) -> bool:
    """Whether ``name`` is a registered mechanism or a former name of one."""
    return canonical_name(name) in _REGISTRY


def mechanism_names(
    *,
    keeps_fair_share: bool | None = None,
    exact: bool | None = None,
    uses_solver: bool | None = None,
) -> tuple[str, ...]:
    """Registered mechanism names, sorted; each given flag must match the entry's."""
    want = {"keeps_fair_share": keeps_fair_share, "exact": exact, "uses_solver": uses_solver}
    return tuple(
        sorted(
            name
            for name, info in _REGISTRY.items()
            if all(v is None or getattr(info, k) is v for k, v in want.items())
        )
    )


def mechanism_info(name: str) -> MechanismInfo:
    """The registry entry of ``name`` (former names accepted); ``KeyError`` names the known."""
    try:
        return _REGISTRY[canonical_name(name)]
    except KeyError:
        raise KeyError(
            f"unknown mechanism {name!r}; known: {', '.join(mechanism_names())}"
        ) from None


def make_mechanism(name: str, options: MechanismOptions | None = None) -> Mechanism:
    """Instantiate the mechanism called ``name``; ``KeyError`` names the known ones."""
    if name in _ALIASES:
        logger.warning("mechanism %r is now called %r", name, _ALIASES[name])
        name = _ALIASES[name]
    return mechanism_info(name).factory(options or MechanismOptions())
