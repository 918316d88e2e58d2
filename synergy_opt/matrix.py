"""A solver-neutral linear program in column-wise sparse form, and its builders.

This sits below both :mod:`synergy_opt.solve` (which solves it with HiGHS or OR-Tools) and the
formulations/mechanisms (which build it), so the solver layer need not import a formulation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# --------------------------------------------------------------------------- matrix model


@dataclass(frozen=True, slots=True, eq=False)
class MatrixModel:
    """A linear (mixed-integer) program in column-wise sparse form, solver-neutral.

    ``row_lower <= A x <= row_upper``, ``col_lower <= x <= col_upper``, ``integer[i]`` marks
    integer columns; ``maximize`` says the direction of ``cost @ x``.  ``row_names`` carry
    the equation each row states (``eq2[pool]``, ``pl3[s0]``), so infeasibility reports and
    duals trace back to the Markdown statement of the model.
    """

    cost: np.ndarray
    col_lower: np.ndarray
    col_upper: np.ndarray
    integer: np.ndarray
    row_lower: np.ndarray
    row_upper: np.ndarray
    a_start: np.ndarray
    a_index: np.ndarray
    a_value: np.ndarray
    maximize: bool = True
    name: str = "model"
    row_names: tuple[str, ...] = ()

    def row_name(self, row: int) -> str:
        """The equation name of ``row`` (``row[i]`` when the builder gave none)."""
        return self.row_names[row] if row < len(self.row_names) else f"row[{row}]"

    @property
    def num_cols(self) -> int:
        """Number of columns (variables)."""
        return int(self.cost.shape[0])

    @property
    def num_rows(self) -> int:
        """Number of rows (constraints)."""
        return int(self.row_lower.shape[0])

    @property
    def is_mip(self) -> bool:
        """Whether any column is integer."""
        return bool(self.integer.any())

    def relaxed(self) -> MatrixModel:
        """The same model with every column continuous (its LP relaxation)."""
        return MatrixModel(
            self.cost,
            self.col_lower,
            self.col_upper,
            np.zeros_like(self.integer),
            self.row_lower,
            self.row_upper,
            self.a_start,
            self.a_index,
            self.a_value,
            self.maximize,
            self.name + "_lp",
            self.row_names,
        )

    def rows(self) -> list[list[tuple[int, float]]]:
        """Row-wise view [(column, coefficient), ...] per row (for row-based solver APIs)."""
        out: list[list[tuple[int, float]]] = [[] for _ in range(self.num_rows)]
        for col in range(self.num_cols):
            for k in range(int(self.a_start[col]), int(self.a_start[col + 1])):
                out[int(self.a_index[k])].append((col, float(self.a_value[k])))
        return out


def csc_columns(
    columns: list[list[tuple[int, float]]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Compressed sparse columns (start, row index, value) from per-column [(row, coef)] lists."""
    start = np.zeros(len(columns) + 1, dtype=np.int32)
    idx: list[int] = []
    val: list[float] = []
    for i, col in enumerate(columns):
        for r, v in col:
            idx.append(r)
            val.append(v)
        start[i + 1] = len(idx)
    return start, np.asarray(idx, dtype=np.int32), np.asarray(val, dtype=np.float64)


def matrix_model(
    cols: list[list[tuple[int, float]]],
    cost: Sequence[float],
    upper: Sequence[float],
    integer: Sequence[bool],
    row_lower: Sequence[float],
    row_upper: Sequence[float],
    row_names: Sequence[str],
    *,
    maximize: bool,
    name: str,
) -> MatrixModel:
    """A :class:`MatrixModel` from column lists [(row, coefficient), ...], lower bounds 0."""
    if not len(row_names) == len(row_lower) == len(row_upper):
        raise ValueError("one name, lower and upper bound per row")
    start, idx, val = csc_columns(cols)
    n = len(cost)
    return MatrixModel(
        cost=np.asarray(cost, dtype=np.float64),
        col_lower=np.zeros(n),
        col_upper=np.asarray(upper, dtype=np.float64),
        integer=np.asarray(integer, dtype=bool).reshape(n),
        row_lower=np.asarray(row_lower, dtype=np.float64),
        row_upper=np.asarray(row_upper, dtype=np.float64),
        a_start=start,
        a_index=idx,
        a_value=val,
        maximize=maximize,
        name=name,
        row_names=tuple(row_names),
    )


def triplet_model(
    rows: Sequence[int],
    cols: Sequence[int],
    values: Sequence[float],
    cost: Sequence[float],
    upper: Sequence[float],
    integer: Sequence[bool],
    row_lower: Sequence[float],
    row_upper: Sequence[float],
    *,
    name: str,
    row_names: Sequence[str] = (),
) -> MatrixModel:
    """A maximising :class:`MatrixModel` from (row, column, coefficient) triplets, lower
    bounds 0: the row-wise builders (counting, patterns) write rows, solvers read columns."""
    ncol = len(cost)
    r = np.asarray(rows, dtype=np.int64)
    c = np.asarray(cols, dtype=np.int64)
    v = np.asarray(values, dtype=np.float64)
    order = np.lexsort((r, c))
    start = np.zeros(ncol + 1, dtype=np.int32)
    np.cumsum(np.bincount(c, minlength=ncol), out=start[1:])
    return MatrixModel(
        cost=np.asarray(cost, dtype=np.float64),
        col_lower=np.zeros(ncol),
        col_upper=np.asarray(upper, dtype=np.float64),
        integer=np.asarray(integer, dtype=bool),
        row_lower=np.asarray(row_lower, dtype=np.float64),
        row_upper=np.asarray(row_upper, dtype=np.float64),
        a_start=start,
        a_index=r[order].astype(np.int32),
        a_value=v[order],
        maximize=True,
        name=name,
        row_names=tuple(row_names),
    )
