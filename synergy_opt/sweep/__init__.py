"""Parameter sweeps: a TOML spec's cross product of simulations, resumable, local or on Dask.

Public API::

    from synergy_opt.sweep import load_spec, run_sweep, write_report, load_rows

    spec = load_spec("instances/sweeps/smoke.toml")
    run_sweep(spec, "out/smoke", workers=2)          # resumes whatever is already there
    files = write_report("out/smoke")                # report.csv, speedup.csv, plots

Modules: ``spec`` (TOML -> frozen :class:`Cell` values), ``cell`` (one cell = one
simulation, a pure function returning its files' text), ``runner`` (atomic cell folders,
resume, process pool or Dask), ``report`` (one CSV table and the standard plots).
"""

from synergy_opt.sweep.cell import simulate_cell, validate_cell, validate_spec
from synergy_opt.sweep.report import (
    TIMING_COLUMNS,
    Point,
    ReportError,
    aggregate,
    format_speedups,
    load_rows,
    table,
    table_csv,
    write_report,
)
from synergy_opt.sweep.runner import (
    SweepError,
    SweepOutcome,
    cell_folder,
    finished_keys,
    run_cells,
    run_sweep,
)
from synergy_opt.sweep.spec import (
    OPTIONS,
    Cell,
    SpecError,
    SweepSpec,
    load_spec,
    make_cell,
    spec_from_dict,
)

__all__ = [
    "OPTIONS",
    "TIMING_COLUMNS",
    "Cell",
    "Point",
    "ReportError",
    "SpecError",
    "SweepError",
    "SweepOutcome",
    "SweepSpec",
    "aggregate",
    "cell_folder",
    "finished_keys",
    "format_speedups",
    "load_rows",
    "load_spec",
    "make_cell",
    "run_cells",
    "run_sweep",
    "simulate_cell",
    "spec_from_dict",
    "table",
    "table_csv",
    "validate_cell",
    "validate_spec",
    "write_report",
]
