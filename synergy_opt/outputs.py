"""Where results are written: the one atomic writer and the output-path preflight.

Every file a command writes goes through :func:`atomic_path` (a temporary sibling, then
``os.replace``), so a crash, a kill or a full disk never leaves a half-written result: the
old file (if any) stays whole and the temporary one is removed.  A failed write becomes one
:class:`OutputError` line naming the path and the reason.

Before any work, a command hands its inputs and outputs to :func:`preflight`, which refuses
(one line, exit code 2)

* an output that cannot be written: an empty path, a folder where a file is expected (or a
  file where a folder is expected), a path below a file, a device such as ``/dev/full``, a
  folder without write permission;
* an output that is one of the command's inputs, or another of its outputs (compared by
  resolved path, so ``./a.json``, ``a.json`` and a symbolic link to it are the same file).
  A folder output counts every file the command will write inside it, so
  ``simulate --trace d/jobs.csv -o d`` is refused while ``--trace d/mine.csv -o d`` is not.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from synergy_opt.errors import InputError

#: The path that means standard output for the commands that can write there.
STDOUT = "-"


class OutputError(InputError):
    """An output that cannot or must not be written; one line naming the path, exit code 2.

    A subclass of :class:`~synergy_opt.errors.InputError` because the user fixes it the same
    way (by changing what they typed), and the command line maps both to exit code 2.
    """


@dataclass(frozen=True, slots=True)
class Output:
    """One output of a command, as the user named it.

    ``folder`` outputs list the ``files`` (relative paths) the command writes inside them and
    the ``trees`` (sub-folders) it owns wholly, e.g. a sweep's ``cells``: any input inside a
    tree is at risk, whatever its name.  ``stdout`` says the command prints to standard
    output when the path is ``-``; elsewhere ``-`` is refused rather than taken as a file name.
    """

    option: str
    path: str
    folder: bool = False
    files: tuple[str, ...] = ()
    trees: tuple[str, ...] = ()
    stdout: bool = False

    def targets(self) -> tuple[Path, ...]:
        """Every file this output writes."""
        if not self.folder:
            return (Path(self.path),)
        return tuple(Path(self.path) / f for f in self.files)


def _reason(e: OSError) -> str:
    return e.strerror or type(e).__name__


def _resolved(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.path.abspath(path))


def _identity(path: str | os.PathLike[str]) -> set[object]:
    """Keys naming the file at ``path``: its resolved path and, when it exists, its inode."""
    keys: set[object] = {_resolved(path)}
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return keys
    keys.add((st.st_dev, st.st_ino))
    return keys


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """True when ``a`` and ``b`` name one file (resolved paths, or one inode when both exist)."""
    return bool(_identity(a) & _identity(b))


def _inside(path: str | os.PathLike[str], folder: str | os.PathLike[str]) -> bool:
    p, f = _resolved(path), _resolved(folder)
    return p == f or p.startswith(f.rstrip(os.sep) + os.sep)


def _nearest_existing(path: Path) -> Path:
    """``path`` or its closest existing ancestor (a relative path ends at ``.``)."""
    p = path
    while not os.path.lexists(p):
        parent = p.parent
        if parent == p:
            break
        p = parent
    return p


def _check_creatable(path: Path, shown: str | os.PathLike[str], option: str) -> None:
    """``path``'s nearest existing ancestor is a folder in which we may create entries."""
    base = _nearest_existing(path)
    try:
        if not base.is_dir():
            raise OutputError(f"{shown}: {base} is a file, not a folder ({option})")
    except OSError as e:
        raise OutputError(f"{shown}: {_reason(e)} ({option})") from None
    if not os.access(base, os.W_OK | os.X_OK):
        raise OutputError(f"{shown}: cannot create files in {base}: permission denied ({option})")


def check_file_target(target: str | os.PathLike[str], option: str, stdout: bool = False) -> None:
    """Refuse a file output that cannot be written (see the module docstring).

    ``stdout``: the command prints to standard output for ``-``, so messages say so.
    """
    t = Path(target)
    if str(target) == "":
        raise OutputError(f"{option}: empty path; give a file name")
    if str(target).endswith(os.sep):
        raise OutputError(f"{target}: names a folder, expected a file ({option})")
    try:
        st = os.stat(t)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        st = None  # an ancestor is a file: reported below, naming it
    except OSError as e:
        raise OutputError(f"{target}: {_reason(e)} ({option})") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise OutputError(f"{target}: is a folder, expected a file ({option})")
        if not stat.S_ISREG(st.st_mode):
            hint = "a file name, or - for standard output" if stdout else "a file name"
            raise OutputError(
                f"{target}: not a regular file (a device, pipe or socket); give {hint} ({option})"
            )
    _check_creatable(t.parent, target, option)


def check_folder_target(folder: str | os.PathLike[str], option: str) -> None:
    """Refuse a folder output that is a file, lies below a file or cannot be created."""
    if str(folder) == "":
        raise OutputError(f"{option}: empty path; give a folder name")
    f = Path(folder)
    try:
        if os.path.lexists(f) and not f.is_dir():
            kind = "a file" if f.is_file() else "not a folder"
            raise OutputError(f"{folder}: is {kind}, expected a folder ({option})")
    except OSError as e:
        raise OutputError(f"{folder}: {_reason(e)} ({option})") from None
    _check_creatable(f, folder, option)


def preflight(
    inputs: Sequence[tuple[str, str | os.PathLike[str] | None]], outputs: Sequence[Output]
) -> None:
    """Refuse, before any work, outputs that cannot be written or would destroy an input.

    ``inputs`` are ``(option, path)`` pairs (``None`` and ``-`` are skipped); ``outputs``
    those the command will write (``-`` means standard output and is skipped).
    """
    for o in outputs:
        if o.path == STDOUT and not o.stdout:
            kind = "a folder" if o.folder else "a file"
            raise OutputError(f"{o.option} -: this command writes {kind}; give its path")
    outs = [o for o in outputs if o.path != STDOUT]
    for o in outs:
        if not o.folder:
            check_file_target(o.path, o.option, o.stdout)  # as typed: "", "name/" are not files
            continue
        check_folder_target(o.path, o.option)
        for t in o.targets():
            check_file_target(t, o.option)
    # Each file to be written, by every key naming it: one pass, however many files.
    written: dict[object, tuple[Output, Path]] = {}
    for o in outs:
        for t in o.targets():
            for key in _identity(t):
                prev = written.setdefault(key, (o, t))
                if prev != (o, t):
                    raise OutputError(
                        f"{t}: both {prev[0].option} and {o.option} would write it; "
                        "give them different paths"
                    )
    for option, path in inputs:
        if path is None or str(path) == STDOUT:
            continue
        hit = next((written[k] for k in _identity(path) if k in written), None)
        if hit is not None:
            o, t = hit
            harm = f"would write {t} over" if o.folder else "would overwrite"
            raise OutputError(
                f"{path}: {o.option} {o.path} {harm} this input ({option}); "
                "write the results elsewhere"
            )
        for o in outs:
            for tree in o.trees:
                if _inside(path, Path(o.path) / tree):
                    raise OutputError(
                        f"{path}: lies inside {Path(o.path) / tree}, which {o.option} "
                        f"{o.path} owns ({option}); move the input out of it"
                    )


# --------------------------------------------------------------------------- writing


def _umask() -> int:
    """The process umask (read by setting and restoring it; there is no getter)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` atomically.

    Whatever goes wrong (an exception in the block, a full disk, a missing permission), the
    temporary file is removed and ``path`` is left as it was.  ``OSError`` becomes one
    :class:`OutputError` line naming ``path``.  The body should ``fsync`` what it writes.
    """
    p = Path(path)
    tmp: str | None = None
    try:
        try:
            st = os.stat(p)
        except (FileNotFoundError, NotADirectoryError):
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            # os.replace would swap a device or folder for a regular file: never do that.
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise OutputError(f"{p}: cannot write: {kind}")
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=suffix, dir=p.parent)
        os.close(fd)
        # mkstemp creates 0600; give the result the permissions a plain open() would.
        os.chmod(tmp, 0o666 & ~_umask())
        yield Path(tmp)
        os.replace(tmp, p)
        tmp = None
    except OSError as e:
        raise OutputError(f"{p}: cannot write: {_reason(e)}") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8, ``\\n`` line ends) to ``path`` atomically and durably."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def write_stdout(text: str) -> None:
    """Write ``text`` to standard output now; a failed write (``> /dev/full``) is one line."""
    if sys.stdout is None:  # started with standard output closed (``>&-``)
        raise OutputError("standard output: cannot write: it is closed")
    try:
        sys.stdout.write(text)
    except OSError as e:
        _drop_stdout()
        raise OutputError(f"standard output: cannot write: {_reason(e)}") from None
    flush_stdout()


def flush_stdout() -> None:
    """Flush standard output; a failure is one :class:`OutputError` line.

    The unwritten bytes would otherwise be flushed again at exit and fail there with a
    traceback, so standard output is pointed at the null device after a failure.
    """
    if sys.stdout is None:  # closed from the start: print() wrote nothing, nothing to flush
        return
    try:
        sys.stdout.flush()
    except OSError as e:
        _drop_stdout()
        raise OutputError(f"standard output: cannot write: {_reason(e)}") from None


#: errno values of a write that failed because of where it was going.
_WRITE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EPIPE, errno.EIO, errno.EFBIG, errno.EDQUOT, errno.EBADF, errno.EINVAL}
)


def stdout_failure(e: OSError) -> OutputError | None:
    """The one-line error for ``e`` if it is a failed write to standard output, else None.

    Files are written through :func:`atomic_path`, whose errors name their path, so an
    ``OSError`` of a failed write (full disk, closed pipe, I/O error) without a file name
    reaching the command line comes from ``print``.  Anything else (a refused connection, a
    time-out) is not an output fault and is left alone.
    """
    if e.filename is not None or e.errno not in _WRITE_ERRNOS:
        return None
    _drop_stdout()
    return OutputError(f"standard output: cannot write: {_reason(e)}")


def _drop_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real file descriptor (captured output)
        pass
