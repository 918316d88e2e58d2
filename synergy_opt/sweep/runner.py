"""Run a sweep's cells here, in a process pool or on Dask, into one folder that survives kills.

Layout of a sweep folder ``DIR``::

    DIR/sweep.json              what was asked (name, axes, every cell's key)
    DIR/cells/<key>/            one finished cell: cell.json, summary.json, jobs.csv
    DIR/cells/.tmp-<key>-<id>/  a cell being written (never read; deleted on the next run)

Why it resumes cleanly after any kill (even ``kill -9``): a cell's files are written into a
temporary folder inside ``DIR/cells`` and the folder is renamed to its final name only
when complete; a rename within one file system is atomic, so a final folder is always
whole.  A rerun skips the cells whose final folder exists, deletes stale temporary folders
and runs the rest.  A cell's key is a function of its canonical options, so nothing is run
twice and no result is duplicated.  A lock file keeps two sweeps from writing one folder.

The cell function (``Cell -> {file name: text}``, by default
:func:`~synergy_opt.sweep.cell.simulate_cell`) runs unchanged in all three modes; only
the driver writes files, so Dask workers need not share the driver's file system.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synergy_opt.errors import InputError
from synergy_opt.io import dumps, write_json_atomic
from synergy_opt.outputs import OutputError
from synergy_opt.sweep.cell import cell_record, simulate_cell, validate_spec
from synergy_opt.sweep.spec import Cell, SweepSpec

log = logging.getLogger(__name__)

CellFunction = Callable[[Cell], Mapping[str, str]]

CELLS = "cells"
TMP_PREFIX = ".tmp-"
MANIFEST = "sweep.json"
#: The manifest's ``format`` (docs/formats.md section 7).
MANIFEST_FORMAT = "synergy-sweep/1"
LOCK = ".sweep.lock"


class SweepError(InputError):
    """The sweep cannot start (folder locked, Dask unreachable); one line, exit code 2."""


@dataclass(frozen=True, slots=True)
class SweepOutcome:
    """What one invocation did."""

    total: int
    skipped: int
    ran: int
    failed: tuple[tuple[str, str], ...]
    seconds: float

    @property
    def complete(self) -> bool:
        """True when every cell of the spec now has its folder."""
        return self.skipped + self.ran == self.total


# --------------------------------------------------------------------------- folder


def cells_dir(root: str | os.PathLike[str]) -> Path:
    """Where the cell folders of sweep folder ``root`` live."""
    return Path(root) / CELLS


def cell_folder(root: str | os.PathLike[str], cell: Cell) -> Path:
    """The final folder of ``cell`` in sweep folder ``root`` (it exists once the cell is done)."""
    return cells_dir(root) / cell.key


def finished_keys(root: str | os.PathLike[str]) -> set[str]:
    """Keys of the cells whose final folder exists."""
    d = cells_dir(root)
    if not d.is_dir():
        return set()
    return {p.name for p in d.iterdir() if p.is_dir() and not p.name.startswith(".")}


def remove_stale(root: str | os.PathLike[str]) -> int:
    """Delete temporary folders left by an interrupted run; returns how many."""
    d = cells_dir(root)
    if not d.is_dir():
        return 0
    stale = [p for p in d.iterdir() if p.name.startswith(TMP_PREFIX)]
    for p in stale:
        shutil.rmtree(p, ignore_errors=True)
    return len(stale)


def _write_file(path: Path, text: str) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def store_cell(root: str | os.PathLike[str], cell: Cell, files: Mapping[str, str]) -> bool:
    """Write ``files`` and ``cell.json`` as ``root/cells/<key>`` atomically.

    Returns False (and writes nothing) when the final folder already exists.
    """
    d = cells_dir(root)
    final = d / cell.key
    if final.exists():
        return False
    tmp = d / f"{TMP_PREFIX}{cell.key}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir(parents=True)
        for name, text in files.items():
            if "/" in name or name.startswith("."):
                raise ValueError(f"cell file name {name!r} must be a plain name")
            _write_file(tmp / name, text)
        _write_file(tmp / "cell.json", dumps(cell_record(cell)))
        try:
            os.rename(tmp, final)
        except OSError:
            if final.exists():  # someone else finished it first; theirs is equally whole
                return False
            raise
        dfd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(dfd)  # make the rename itself durable
        finally:
            os.close(dfd)
        return True
    except OSError as e:  # a full disk or a lost permission: one line, nothing partial kept
        raise OutputError(f"{final}: cannot write: {e.strerror or e}") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


class _Lock:
    """An exclusive advisory lock on ``DIR/.sweep.lock`` (released by the OS on any exit)."""

    def __init__(self, root: Path) -> None:
        try:
            root.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(root / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise OutputError(f"{root}: cannot write: {e.strerror or e}") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise SweepError(f"{root}: another sweep is writing this folder") from None

    def release(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


# --------------------------------------------------------------------------- progress


class Progress:
    """A one-line bar on standard error (redrawn on a terminal, a line per 10% otherwise)."""

    def __init__(self, total: int, skipped: int, enabled: bool, label: str = "sweep") -> None:
        self.total, self.done, self.failed = total, skipped, 0
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.label = label
        self.t0 = time.monotonic()
        self._last_decile = -1
        self.show()

    def step(self, ok: bool) -> None:
        self.done += 1
        self.failed += 0 if ok else 1
        self.show()

    def show(self) -> None:
        if not self.enabled or self.total == 0:
            return
        frac = self.done / self.total
        decile = int(10 * frac)
        if not self.tty and decile == self._last_decile and self.done < self.total:
            return
        self._last_decile = decile
        bar = "#" * int(25 * frac)
        fail = f", {self.failed} failed" if self.failed else ""
        line = (
            f"{self.label} [{bar:<25}] {self.done}/{self.total} cells{fail}, "
            f"{time.monotonic() - self.t0:.0f} s"
        )
        if self.tty:
            sys.stderr.write("\r" + line + ("\n" if self.done >= self.total else ""))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


# --------------------------------------------------------------------------- execution

Result = tuple[bool, Any]  # (True, files) or (False, one-line error)


def guarded(fn: CellFunction, cell: Cell) -> Result:
    """Run ``fn(cell)``; a failure becomes a message (always picklable) instead of raising."""
    try:
        return True, dict(fn(cell))
    except Exception as e:  # noqa: BLE001  (one failed cell must not stop the sweep)
        return False, f"{type(e).__name__}: {e}"


def _run_inline(cells: Sequence[Cell], fn: CellFunction) -> Iterator[tuple[Cell, Result]]:
    for cell in cells:
        yield cell, guarded(fn, cell)


def _run_pool(
    cells: Sequence[Cell], fn: CellFunction, workers: int
) -> Iterator[tuple[Cell, Result]]:
    with ProcessPoolExecutor(max_workers=workers) as pool:
        pending: dict[Future[Result], Cell] = {pool.submit(guarded, fn, c): c for c in cells}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    cell = pending.pop(fut)
                    try:
                        result = fut.result()
                    except BrokenProcessPool as e:  # a worker died (killed, out of memory)
                        raise SweepError(
                            f"a worker process died ({e}); rerun the same command to resume"
                        ) from None
                    yield cell, result
        finally:
            for fut in pending:
                fut.cancel()


def _dask_client(address: str, workers: int) -> Any:
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise SweepError(
            "--dask: needs dask[distributed] (pip install 'synergy-opt[dist]')"
        ) from None
    if not log.isEnabledFor(logging.DEBUG):
        # Dask logs every worker's start and stop at INFO; a sweep's own progress bar says enough.
        logging.getLogger("distributed").setLevel(logging.WARNING)
    if address == "local":
        cluster = LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0"
        )
        return Client(cluster)
    try:
        return Client(address, timeout=10)
    except (OSError, TimeoutError) as e:
        raise SweepError(f"--dask: cannot reach the scheduler at {address}: {e}") from None


def _run_dask(
    cells: Sequence[Cell], fn: CellFunction, address: str, workers: int
) -> Iterator[tuple[Cell, Result]]:
    from distributed import as_completed

    client = _dask_client(address, workers)
    try:
        futures = {
            client.submit(guarded, fn, c, key=f"sweep-cell-{c.key}", pure=False): c for c in cells
        }
        try:
            for fut in as_completed(list(futures)):
                try:
                    result = fut.result()
                except Exception as e:  # noqa: BLE001  (a lost worker fails its cell only)
                    result = (False, f"{type(e).__name__}: {e}")
                yield futures[fut], result
        finally:
            client.cancel(list(futures))
    finally:
        cluster = client.cluster
        client.close()
        if address == "local" and cluster is not None:
            cluster.close()


def run_cells(
    cells: Sequence[Cell],
    root: str | os.PathLike[str],
    *,
    fn: CellFunction = simulate_cell,
    workers: int | None = None,
    dask: str | None = None,
    progress: bool = False,
    manifest: Mapping[str, Any] | None = None,
) -> SweepOutcome:
    """Run every cell of ``cells`` that has no folder under ``root`` yet, and store it.

    Parameters
    ----------
    cells
        The cells (duplicates are run once).
    root
        The sweep folder (created).
    fn
        The cell function; it must be importable by name for the pool and Dask modes.
    workers
        Processes on this machine (default: all cores; 1 runs in this process).  With
        ``dask="local"``, the number of LocalCluster workers.
    dask
        ``None`` (this machine), ``"local"`` (start a LocalCluster) or a scheduler address.
    progress
        Draw a progress bar on standard error.
    manifest
        Extra fields for ``sweep.json`` (the spec's name and axes).
    """
    t0 = time.monotonic()
    root_p = Path(root)
    unique = list(dict.fromkeys(cells))
    lock = _Lock(root_p)
    try:
        stale = remove_stale(root_p)
        if stale:
            log.info("removed %d unfinished cell folder(s) of an interrupted run", stale)
        write_json_atomic(
            root_p / MANIFEST,
            {"format": MANIFEST_FORMAT, **(manifest or {}), "cells": [c.key for c in unique]},
        )
        done = finished_keys(root_p)
        todo = [c for c in unique if c.key not in done]
        skipped = len(unique) - len(todo)
        n_workers = max(1, workers if workers is not None else (os.cpu_count() or 1))
        bar = Progress(len(unique), skipped, progress)
        if dask is not None:
            results = _run_dask(todo, fn, dask, n_workers) if todo else iter(())
        elif n_workers == 1 or len(todo) <= 1:
            results = _run_inline(todo, fn)
        else:
            results = _run_pool(todo, fn, min(n_workers, len(todo)))
        ran = 0
        failed: list[tuple[str, str]] = []
        for cell, (ok, value) in results:
            if ok:
                store_cell(root_p, cell, value)
                ran += 1
            else:
                failed.append((cell.key, value))
                log.error("cell %s failed: %s", cell.key, value)
            bar.step(ok)
        return SweepOutcome(len(unique), skipped, ran, tuple(failed), time.monotonic() - t0)
    finally:
        lock.release()


def run_sweep(
    spec: SweepSpec,
    root: str | os.PathLike[str],
    *,
    fn: CellFunction = simulate_cell,
    workers: int | None = None,
    dask: str | None = None,
    progress: bool = False,
    validate: bool = True,
) -> SweepOutcome:
    """Run ``spec``'s cross product into ``root`` (resuming whatever is already there).

    With ``validate`` (the default for simulations), every cell's options are checked
    before any cell runs, so a bad value fails fast with one line naming the spec file and
    the field (:func:`~synergy_opt.sweep.cell.validate_spec`).
    """
    cells = spec.cells()
    if validate:
        validate_spec(spec)
    return run_cells(
        cells,
        root,
        fn=fn,
        workers=workers,
        dask=dask,
        progress=progress,
        manifest={"name": spec.name, "axes": list(spec.axis_names)},
    )
