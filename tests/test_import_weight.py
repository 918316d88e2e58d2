"""Importing the mechanisms loads neither Pyomo nor OR-Tools: every command line call and
every child process that runs ``opt`` pays for what the import loads (the two were 0.9 s of
1.5 s).  Pyomo is for the reference models, OR-Tools for the packing, loaded where used."""

from __future__ import annotations

import subprocess
import sys


def _loaded_after(statement: str) -> set[str]:
    """Top-level module names present after ``statement`` in a fresh interpreter."""
    names = "sorted({m.split('.')[0] for m in sys.modules})"
    code = f"{statement}\nimport sys\nprint(' '.join({names}))"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120
    )
    return set(out.stdout.split())


def test_the_mechanisms_import_without_pyomo_or_ortools() -> None:
    loaded = _loaded_after("import synergy_opt.mechanisms, synergy_opt.cli")
    assert "synergy_opt" in loaded
    assert "pyomo" not in loaded
    assert "ortools" not in loaded


def test_the_reference_models_still_bring_pyomo() -> None:
    # the check above is not vacuous: the Pyomo reference of the packing does load it
    assert "pyomo" in _loaded_after("import synergy_opt.formulations.packing")
    assert "ortools" in _loaded_after("import synergy_opt.formulations.packing_cp")


def test_making_an_opt_loads_the_packing_solver_before_any_round() -> None:
    """Loaded at the first packing instead, OR-Tools' import ran on a round's clock: a 1-s
    ``opt`` on split penalties 128 GPUs seed 16 stopped short of the optimum it reaches."""
    loaded = _loaded_after(
        "from synergy_opt.mechanisms import make_mechanism\nmake_mechanism('opt')"
    )
    assert "ortools" in loaded
    assert "pyomo" not in loaded
