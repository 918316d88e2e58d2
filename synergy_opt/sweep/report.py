"""Aggregate a sweep folder into one CSV table and the standard plots.

- ``report.csv``: one row per finished cell: its key, every option any cell sets (the
  spec's axes first), then the summary's metrics, flattened (``short_jobs.avg_jct_hours``).
  The columns that measure this machine (:data:`TIMING_COLUMNS`) come last, so tables from
  two runs of one sweep can be compared without them.  Rows are sorted by their options.
- ``speedup.csv``: the cells averaged over seeds, per option combination, with the
  speed-up of average and p99 JCT over PROPORTIONAL under the same options
  (PROPORTIONAL's JCT / this mechanism's JCT, from the seed-averaged JCTs).
- ``avg_jct.png``, ``p99_jct.png``, ``speedup.png``: those against load (the arrival rate,
  or ``x``), one line per mechanism, one panel per policy and per other varied option.
"""

from __future__ import annotations

import csv
import io as _io
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synergy_opt.errors import InputError, ValidationError
from synergy_opt.io import read_json, write_text_atomic
from synergy_opt.limits import SUMMARY_METRIC
from synergy_opt.sweep.runner import MANIFEST, MANIFEST_FORMAT, cells_dir
from synergy_opt.sweep.spec import OPTIONS, Cell, make_cell

#: Columns that depend on the machine and the moment, not on the simulation.
TIMING_COLUMNS: tuple[str, ...] = (
    "wall_seconds",
    "mechanism_seconds_per_round.mean",
    "mechanism_seconds_per_round.p99",
    "mechanism_seconds_per_round.max",
)
#: Summary fields already present as option columns (or constant).
_SKIP_METRICS = frozenset({"format", "policy", "mechanism", "seed"})
BASELINE = "proportional"
#: The files :func:`write_report` writes (the plots only with ``plots=True``): avg JCT, p99
#: JCT and speed-up against the x axis.
REPORT_CSV = "report.csv"
SPEEDUP_CSV = "speedup.csv"
PLOT_FILES: tuple[str, str, str] = ("avg_jct.png", "p99_jct.png", "speedup.png")


class ReportError(InputError):
    """A sweep folder that cannot be reported (missing, or a damaged cell)."""


# --------------------------------------------------------------------------- table


def _flatten(obj: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in obj.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, f"{name}."))
        elif isinstance(v, list):
            out[name] = ":".join(str(x) for x in v)
        else:
            out[name] = v
    return out


def _axes(root: Path) -> list[str]:
    """The spec's axis names from the manifest: none where there is no manifest (the
    cells are the record; the axes only order the columns), one ReportError naming the
    file and field where there is one but it is not a ``synergy-sweep/1`` manifest."""
    path = root / MANIFEST
    if not path.exists():
        return []
    try:
        manifest = read_json(path)
    except InputError as e:
        raise ReportError(str(e)) from None
    if not isinstance(manifest, dict):
        raise ReportError(f"{path}: expected an object (a {MANIFEST_FORMAT} manifest)")
    if manifest.get("format") != MANIFEST_FORMAT:
        raise ReportError(
            f"{path}: format: expected {MANIFEST_FORMAT!r}, got {manifest.get('format')!r}"
        )
    axes = manifest.get("axes", [])
    if not isinstance(axes, list) or not all(isinstance(a, str) for a in axes):
        raise ReportError(f"{path}: axes: expected a list of option names")
    return list(axes)


#: Summary fields the report computes with; a cell without them is damaged.
REQUIRED_METRICS: tuple[str, ...] = ("avg_jct_hours", "p99_jct_hours")


def _read_cell(folder: Path) -> tuple[Cell, dict[str, Any]]:
    """A finished cell's options and summary, or one ReportError naming file and field."""
    try:
        rec = read_json(folder / "cell.json")
        summary = read_json(folder / "summary.json")
    except InputError as e:
        raise ReportError(f"{e} (a damaged cell folder: delete it and rerun the sweep)") from None
    if not isinstance(rec, dict) or not isinstance(rec.get("options"), dict):
        raise ReportError(f"{folder / 'cell.json'}: options: expected an object")
    try:
        cell = make_cell(rec["options"], where=f"{folder / 'cell.json'}: options")
    except InputError as e:
        raise ReportError(str(e)) from None
    if not isinstance(summary, dict):
        raise ReportError(f"{folder / 'summary.json'}: expected an object")
    for name in REQUIRED_METRICS:
        if name not in summary:
            raise ReportError(f"{folder / 'summary.json'}: {name}: missing required field")
        try:
            SUMMARY_METRIC.check(summary[name])
        except ValidationError as e:
            raise ReportError(f"{folder / 'summary.json'}: {name}: {e.problem}") from None
    return cell, summary


def load_rows(root: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """One dict per finished cell: ``key``, its options (defaults filled in), flat metrics."""
    d = cells_dir(root)
    if not d.is_dir():
        raise ReportError(f"{root}: not a sweep folder (no {d.name}/ inside)")
    rows = []
    for p in sorted(d.iterdir()):
        if not p.is_dir() or p.name.startswith("."):
            continue
        cell, summary = _read_cell(p)
        row: dict[str, Any] = {"key": p.name, "_set": {k for k, _ in cell.options}}
        row.update(cell.as_dict())
        row.update(
            {
                k: v
                for k, v in _flatten(summary).items()
                if k not in _SKIP_METRICS and k not in OPTIONS
            }
        )
        rows.append(row)
    return rows


def option_columns(rows: Sequence[Mapping[str, Any]], axes: Sequence[str] = ()) -> list[str]:
    """Options to show: policy, mechanism, the axes, then any other option a cell sets."""
    used = set().union(*(r["_set"] for r in rows)) if rows else set()
    cols = ["policy", "mechanism", *[a for a in axes if a not in ("policy", "mechanism")]]
    cols += [k for k in OPTIONS if k in used and k not in cols]
    return cols


def metric_columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Metric columns in summary order (timing ones last)."""
    seen: dict[str, None] = {}
    for r in rows:
        for k in r:
            if k not in OPTIONS and k not in ("key", "_set") and k not in TIMING_COLUMNS:
                seen.setdefault(k, None)
    return [*seen, *[c for c in TIMING_COLUMNS if any(c in r for r in rows)]]


def _cell_text(v: Any, column: str = "") -> str:
    if v is None:
        return ""
    if isinstance(v, tuple):  # a window reads FIRST:LAST as on the command line; a split A/B/C
        return (":" if column == "window" else "/").join(_cell_text(x) for x in v)
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _sort_key(v: Any) -> tuple[int, Any]:
    if v is None:
        return (0, 0)
    if isinstance(v, bool | int | float):
        return (1, float(v))
    if isinstance(v, tuple):
        return (2, tuple(_sort_key(x) for x in v))
    return (3, str(v))


def table(root: str | os.PathLike[str], timing: bool = True) -> tuple[list[str], list[list[str]]]:
    """Header and rows of ``report.csv`` (``timing=False`` leaves the timing columns out)."""
    rows = load_rows(root)
    opts = option_columns(rows, _axes(Path(root)))
    metrics = [m for m in metric_columns(rows) if timing or m not in TIMING_COLUMNS]
    rows.sort(key=lambda r: (tuple(_sort_key(r[c]) for c in opts), r["key"]))
    header = ["key", *opts, *metrics]
    return header, [[_cell_text(r.get(c), c) for c in header] for r in rows]


def table_csv(root: str | os.PathLike[str], timing: bool = True) -> str:
    """``report.csv`` as text."""
    header, body = table(root, timing)
    buf = _io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(body)
    return buf.getvalue()


# --------------------------------------------------------------------------- aggregation


@dataclass(frozen=True, slots=True)
class Point:
    """Seed-averaged results of one option combination."""

    options: tuple[tuple[str, Any], ...]
    seeds: int
    avg_jct_hours: float
    p99_jct_hours: float
    speedup_avg: float | None
    speedup_p99: float | None

    def get(self, name: str) -> Any:
        """Value of option ``name`` for this point."""
        return dict(self.options)[name]


def aggregate(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> list[Point]:
    """Average the cells over ``seed``; add speed-ups over PROPORTIONAL with equal options."""
    keep = [c for c in columns if c != "seed"]
    groups: dict[tuple[tuple[str, Any], ...], list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[tuple((c, r[c]) for c in keep)].append(r)

    def mean(rs: Sequence[Mapping[str, Any]], metric: str) -> float:
        return math.fsum(float(r[metric]) for r in rs) / len(rs)

    means = {
        k: (mean(rs, "avg_jct_hours"), mean(rs, "p99_jct_hours"), len(rs))
        for k, rs in groups.items()
    }
    out = []
    for k, (avg, p99, n) in means.items():
        base_key = tuple((c, BASELINE if c == "mechanism" else v) for c, v in k)
        base = means.get(base_key)
        out.append(
            Point(
                k,
                n,
                avg,
                p99,
                base[0] / avg if base and avg > 0 else None,
                base[1] / p99 if base and p99 > 0 else None,
            )
        )
    out.sort(key=lambda p: tuple(_sort_key(v) for _, v in p.options))
    return out


def speedup_csv(points: Sequence[Point]) -> str:
    """``speedup.csv`` text."""
    buf = _io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    names = [c for c, _ in points[0].options] if points else []
    w.writerow([*names, "seeds", "avg_jct_hours", "p99_jct_hours", "speedup_avg", "speedup_p99"])
    for p in points:
        w.writerow(
            [
                *(_cell_text(v, c) for c, v in p.options),
                p.seeds,
                f"{p.avg_jct_hours:.6f}",
                f"{p.p99_jct_hours:.6f}",
                "" if p.speedup_avg is None else f"{p.speedup_avg:.6f}",
                "" if p.speedup_p99 is None else f"{p.speedup_p99:.6f}",
            ]
        )
    return buf.getvalue()


def varying(rows: Sequence[Mapping[str, Any]], columns: Iterable[str]) -> list[str]:
    """The columns whose value differs between rows."""
    return [c for c in columns if len({repr(r[c]) for r in rows}) > 1]


def pick_x(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], x: str | None) -> str | None:
    """The x axis: ``x`` if given, else the arrival rate or the first varied numeric option."""
    if x is not None:
        name = x.replace("-", "_")
        if name not in columns:
            raise ReportError(
                f"--x: {x!r} is not an option of this sweep; options: {', '.join(columns)}"
            )
        return name
    var = varying(rows, columns)
    if "arrival_rate" in var:
        return "arrival_rate"
    for c in var:
        if c not in ("seed", "policy", "mechanism") and all(
            isinstance(r[c], int | float) and not isinstance(r[c], bool) for r in rows
        ):
            return c
    return None


# --------------------------------------------------------------------------- plots


def _save(fig: Any, path: Path) -> None:
    # Imported here: matplotlib loads only when a report actually draws.
    from synergy_opt.sim.plots import save_figure

    save_figure(fig, path)


def plot_metric(
    points: Sequence[Point],
    x: str | None,
    panels: Sequence[str],
    metric: str,
    ylabel: str,
    path: Path,
    log_y: bool = False,
) -> Path:
    """``metric`` against ``x``: a panel per combination of ``panels``, a line per mechanism."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_panel: dict[tuple[Any, ...], dict[str, list[tuple[Any, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for p in points:
        val = getattr(p, metric)
        if val is None:
            continue
        key = tuple(p.get(c) for c in panels)
        by_panel[key][p.get("mechanism")].append((p.get(x) if x else 0, val))
    keys = sorted(by_panel, key=lambda k: tuple(_sort_key(v) for v in k)) or [()]
    ncols = min(len(keys), 3)
    nrows = math.ceil(len(keys) / ncols)
    fig, axs = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.4 * nrows), squeeze=False)
    for ax in axs.flat[len(keys) :]:
        ax.set_visible(False)
    for ax, key in zip(axs.flat, keys, strict=False):
        for mech, pts in sorted(by_panel.get(key, {}).items()):
            pts.sort(key=lambda t: _sort_key(t[0]))
            xs = [_cell_text(t[0]) if not isinstance(t[0], int | float) else t[0] for t in pts]
            ax.plot(xs, [t[1] for t in pts], marker="o", label=mech)
        ax.set_title(
            ", ".join(f"{c}={_cell_text(v)}" for c, v in zip(panels, key, strict=True)), fontsize=9
        )
        ax.set_xlabel(x or "")
        ax.set_ylabel(ylabel)
        if log_y:
            ax.set_yscale("log")
        if metric.startswith("speedup"):
            ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path)
    return path


@dataclass(frozen=True, slots=True)
class ReportFiles:
    """What :func:`write_report` wrote."""

    table: Path
    speedup: Path
    plots: tuple[Path, ...]
    cells: int
    points: tuple[Point, ...]


def write_report(
    root: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    x: str | None = None,
    plots: bool = True,
) -> ReportFiles:
    """Write ``report.csv``, ``speedup.csv`` and the plots into ``out`` (``root/report``)."""
    root_p = Path(root)
    out_p = Path(out) if out is not None else root_p / "report"
    rows = load_rows(root_p)
    if not rows:
        raise ReportError(f"{root}: no finished cell yet")
    opts = option_columns(rows, _axes(root_p))
    x_col = pick_x(rows, opts, x)
    points = aggregate(rows, opts)
    out_p.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_p / REPORT_CSV, table_csv(root_p))
    write_text_atomic(out_p / SPEEDUP_CSV, speedup_csv(points))
    written: list[Path] = []
    if plots:
        panels = [
            "policy",
            *[c for c in varying(rows, opts) if c not in ("policy", "mechanism", "seed", x_col)],
        ]
        written.append(
            plot_metric(
                points, x_col, panels, "avg_jct_hours", "average JCT (h)", out_p / PLOT_FILES[0]
            )
        )
        written.append(
            plot_metric(
                points,
                x_col,
                panels,
                "p99_jct_hours",
                "p99 JCT (h)",
                out_p / PLOT_FILES[1],
                log_y=True,
            )
        )
        written.append(
            plot_metric(
                [p for p in points if p.get("mechanism") != BASELINE],
                x_col,
                panels,
                "speedup_avg",
                f"avg JCT speed-up over {BASELINE}",
                out_p / PLOT_FILES[2],
            )
        )
    return ReportFiles(
        out_p / REPORT_CSV, out_p / SPEEDUP_CSV, tuple(written), len(rows), tuple(points)
    )


def format_speedups(points: Sequence[Point], x: str | None = None) -> str:
    """A short text table of the seed-averaged points (what ``synergy-opt report`` prints)."""
    names = [c for c, _ in points[0].options] if points else []
    shown = [
        c
        for c in names
        if len({repr(p.get(c)) for p in points}) > 1 or c in ("policy", "mechanism")
    ]
    head = [*shown, "seeds", "avg JCT h", "p99 JCT h", f"x over {BASELINE}"]
    body = [
        [
            *(_cell_text(p.get(c), c) for c in shown),
            str(p.seeds),
            f"{p.avg_jct_hours:.2f}",
            f"{p.p99_jct_hours:.2f}",
            "-" if p.speedup_avg is None else f"{p.speedup_avg:.2f}x",
        ]
        for p in points
    ]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in [head, *body]
    )
