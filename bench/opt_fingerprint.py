"""Fingerprints of mechanisms' answers on generated rounds: is a change exact?

python bench/opt_fingerprint.py [--mechanisms opt] [--families a,b] [--sizes 32,128,512]
    [--seeds 6] [-o FILE] [--against FILE]

A speed change to ``opt`` (or any mechanism) should leave every answer as it was.  This runs
each mechanism, fresh, on every generated round of the chosen families, sizes and seeds
(``synergy_opt.generate.family_round``), and hashes its allocation as ``solve`` writes it,
``solve_seconds`` left out.  ``-o FILE`` keeps the fingerprints (JSON, written atomically);
``--against FILE`` compares with fingerprints kept earlier and lists the rounds whose answer
changed (exit status 1 if any did).  The README's "byte-identical on 108 rounds" checks are
this tool's default run (six families, 32/128/512 GPUs, seeds 0-5).

Only mechanisms whose answers do not depend on the clock are accepted: those without a
solver, and ``opt`` without a time limit (its MIPs stop at node limits).  ``opt-exact``
stops at a time limit by default and may return another of several optimal allocations, so
it is refused.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import time
from pathlib import Path

from synergy_opt.errors import ValidationError
from synergy_opt.generate import FAMILIES, family_round
from synergy_opt.io import allocation_to_dict, dumps, write_json_atomic
from synergy_opt.mechanisms import make_mechanism
from synergy_opt.mechanisms.base import canonical_name, is_mechanism, mechanism_info

#: Hex digits of SHA-256 kept per answer (64 bits: a collision among a few hundred rounds
#: is out of reach).
DIGITS: int = 16
#: Mechanisms with a solver whose answers are still reproducible byte for byte.
REPRODUCIBLE_SOLVER_MECHANISMS: frozenset[str] = frozenset({"opt"})


def fingerprint(mechanism: str, family: str, gpus: int, seed: int) -> str:
    """The hash of ``mechanism``'s answer (fresh, no time limit) on one generated round."""
    alloc = make_mechanism(mechanism).allocate(family_round(family, gpus, seed))
    doc = allocation_to_dict(alloc)
    doc.pop("solve_seconds")
    return hashlib.sha256(dumps(doc).encode()).hexdigest()[:DIGITS]


def fingerprints(
    mechanisms: tuple[str, ...], families: tuple[str, ...], sizes: tuple[int, ...], seeds: int
) -> dict[str, str]:
    """``{"mechanism/family/gpus/seed": hash}`` over every combination, in that order."""
    return {
        f"{m}/{f}/{g}/{s}": fingerprint(m, f, g, s)
        for m in mechanisms
        for f in families
        for g in sizes
        for s in range(seeds)
    }


def compare(new: dict[str, str], old: dict[str, str]) -> tuple[list[str], list[str]]:
    """The rounds of ``new`` whose hash differs from ``old``'s, and those ``old`` lacks."""
    changed = [k for k, v in new.items() if k in old and old[k] != v]
    unknown = [k for k in new if k not in old]
    return changed, unknown


def read_fingerprints(path: Path) -> dict[str, str]:
    """Fingerprints kept by ``-o``; :class:`ValidationError` naming what is wrong."""
    try:
        value = json.loads(path.read_text())
    except OSError as e:
        raise ValidationError("--against", f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ValidationError(
            "--against", f"{path} is not JSON ({e.msg}, line {e.lineno})"
        ) from None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValidationError("--against", f"{path}: expected an object of round -> hash strings")
    return value


def _names(text: str, known: tuple[str, ...] | None, what: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [n for n in names if (n not in known if known is not None else not is_mechanism(n))]
    if not names or bad:
        raise ValidationError(what, f"unknown {', '.join(bad) or repr(text)}")
    return names


def parse(argv: list[str] | None) -> argparse.Namespace:
    """Arguments, checked (a bad one: a one-line error, exit status 2)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mechanisms", default="opt", help="comma-separated (opt)")
    ap.add_argument("--families", default=",".join(FAMILIES), help="comma-separated (all)")
    ap.add_argument("--sizes", default="32,128,512", help="GPU counts, multiples of 32")
    ap.add_argument("--seeds", type=int, default=6, help="seeds 0..N-1 per family and size (6)")
    ap.add_argument("-o", "--output", type=Path, help="keep the fingerprints in this JSON file")
    ap.add_argument("--against", type=Path, help="compare with fingerprints kept earlier")
    args = ap.parse_args(argv)
    try:
        args.mechanisms = tuple(
            canonical_name(m) for m in _names(args.mechanisms, None, "--mechanisms")
        )
        for m in args.mechanisms:
            info = mechanism_info(m)
            if info.uses_solver and info.name not in REPRODUCIBLE_SOLVER_MECHANISMS:
                raise ValidationError("--mechanisms", f"{m}'s answers depend on the clock")
        args.families = _names(args.families, FAMILIES, "--families")
        try:
            args.sizes = tuple(int(x) for x in args.sizes.split(","))
        except ValueError:
            raise ValidationError(
                "--sizes", f"expected GPU counts like 32,128, got {args.sizes!r}"
            ) from None
        if not args.sizes or any(g < 32 or g % 32 for g in args.sizes):
            raise ValidationError("--sizes", "family rounds come in multiples of 32 GPUs")
        if args.seeds < 1:
            raise ValidationError("--seeds", "must be >= 1")
        args.old = read_fingerprints(args.against) if args.against is not None else None
    except ValidationError as e:
        ap.error(str(e))
    return args


def main(argv: list[str] | None = None) -> int:
    """Fingerprint, keep and compare; 1 if an answer changed."""
    args = parse(argv)
    logging.disable(logging.WARNING)  # fallbacks' notes are part of the hashed answer
    t0 = time.perf_counter()
    new = fingerprints(args.mechanisms, args.families, args.sizes, args.seeds)
    if args.output is not None:
        write_json_atomic(args.output, new)
    changed = unknown = []
    if args.old is not None:
        changed, unknown = compare(new, args.old)
        for k in changed:
            print(f"changed: {k}")
    print(
        f"{len(new)} rounds, "
        + (
            f"{len(changed)} changed, {len(unknown)} not in {args.against}, "
            if args.old is not None
            else ""
        )
        + f"{time.perf_counter() - t0:.0f} s",
        flush=True,
    )
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
