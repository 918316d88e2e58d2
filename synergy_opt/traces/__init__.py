"""Converters from public cluster traces to synergy-opt's job trace (docs/formats.md section 5).

Each converter is a function ``convert(inputs, options, profiles) -> Conversion`` registered
in :data:`CONVERTERS` under the name ``synergy-opt trace convert --from`` accepts; adding a
trace format is one module and one line here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from synergy_opt.profiles import ProfileLibrary
from synergy_opt.traces import alibaba, philly
from synergy_opt.traces.base import (
    Conversion,
    ConversionReport,
    ConvertOptions,
    TraceRowError,
)

Converter = Callable[[Sequence[str], ConvertOptions, ProfileLibrary | None], Conversion]

#: Trace formats by their ``--from`` name.
CONVERTERS: dict[str, Converter] = {
    "alibaba-gpu-2023": alibaba.convert,
    "philly": philly.convert,
}


def convert(
    kind: str,
    inputs: Sequence[str],
    options: ConvertOptions | None = None,
    profiles: ProfileLibrary | None = None,
) -> Conversion:
    """Convert ``inputs`` of trace format ``kind`` (a key of :data:`CONVERTERS`)."""
    try:
        conv = CONVERTERS[kind]
    except KeyError:
        raise KeyError(f"unknown trace format {kind!r}; known: {', '.join(CONVERTERS)}") from None
    return conv(inputs, options or ConvertOptions(), profiles)


__all__ = [
    "CONVERTERS",
    "Conversion",
    "ConversionReport",
    "ConvertOptions",
    "TraceRowError",
    "convert",
]
