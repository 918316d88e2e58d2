"""Run a call in a child process and kill it if it outlives a hard deadline.

Why: HiGHS does not check its time limit everywhere.  A table-2 run of ``opt-exact`` (HiGHS
1.16.0, split-penalty round, 128 GPUs) sat for more than ten minutes of CPU in
``HPresolve::strengthenInequalities``, inside the presolve of a RENS sub-MIP inside a RINS
sub-MIP, under a 20-s time limit; the same round in a fresh process finished in 20 s.  A call
that cannot be interrupted from inside the process can only be stopped by running it in
another one.

Children come from multiprocessing's *forkserver*: a clean server process (no solver threads,
so forking it is safe) with numpy and highspy already imported forks one child per call in
about 30 ms; the server itself starts once per process (about a second, started early by
:func:`warm_up`).  Children never import the caller's main script (multiprocessing would
re-run a script without a ``__main__`` guard, i.e. the user's whole experiment, in every
child): they only need this package.  Where that is not possible (no forkserver on the
platform, or this process is a daemon, which may not have children) the call runs
in-process, unguarded.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import pickle
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Children are started one at a time: :func:`_main_left_out` swaps attributes of the
#: ``__main__`` module, which two threads starting children at once would leave swapped.
_start_lock = threading.Lock()

#: What the forkserver imports once, so that each child starts with them loaded.
PRELOAD: tuple[str, ...] = (
    "numpy",
    "highspy",
    "synergy_opt.solve",
    "synergy_opt.formulations.counting_fast",
)


class DeadlineExceeded(RuntimeError):
    """The child outlived its deadline and was killed."""


class ChildFailed(RuntimeError):
    """The child died without an answer, or raised an exception that does not pickle (its
    text is kept)."""


def _context() -> Any | None:
    """The forkserver context, or ``None`` where children are not possible here."""
    if "forkserver" not in mp.get_all_start_methods() or mp.current_process().daemon:
        return None
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))
    return ctx


def usable_cores() -> int:
    """Cores this process may run on (its affinity where the platform says): a child
    beside the caller's own work gains time only with two or more."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - platforms without affinity
        return os.cpu_count() or 1


def guard_available() -> bool:
    """Whether :func:`run_with_deadline` really runs calls in a child here."""
    return _context() is not None


@contextmanager
def _main_left_out() -> Iterator[None]:
    """Hide the main module's file and spec while a child is prepared, so that the child
    does not re-import it (a user's script without a ``__main__`` guard would run again,
    and start its own children)."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    missing = object()
    file = main.__dict__.pop("__file__", missing)
    spec = main.__dict__.get("__spec__")
    main.__spec__ = None
    try:
        yield
    finally:
        main.__spec__ = spec
        if file is not missing:
            main.__file__ = file


def warm_up() -> None:
    """Start the forkserver now (in the background of the caller's own work)."""
    ctx = _context()
    if ctx is None:
        return
    from multiprocessing import forkserver

    with _main_left_out():
        forkserver.ensure_running()


def _child(conn: Connection, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """Run ``fn(*args)`` and send ``(True, result)`` or ``(False, exception)``; an exception
    that does not pickle goes back as a :class:`ChildFailed` with its text."""
    try:
        out: tuple[bool, Any] = (True, fn(*args))
    except BaseException as e:  # noqa: BLE001 - everything goes back to the parent
        try:
            pickle.dumps(e)
            failed: BaseException = e
        except Exception:  # noqa: BLE001 - any pickling failure
            failed = ChildFailed(f"{type(e).__name__}: {e}")
        out = (False, failed)
    try:
        conn.send(out)
    finally:
        conn.close()


class Child:
    """A call running in a child process (:func:`start_child`): wait for its answer with
    :meth:`result`, or :meth:`kill` it.  Where no child can be started the call has
    already run in-process and :meth:`result` returns (or raises) what it gave."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self._name = getattr(fn, "__name__", repr(fn))
        self._t0 = time.perf_counter()
        self._done: tuple[bool, Any] | None = None
        self._proc: Any | None = None
        self._recv: Connection | None = None
        ctx = _context()
        if ctx is None:
            try:
                self._done = (True, fn(*args))
            except Exception as e:  # noqa: BLE001 - raised again by result(), as in a child
                self._done = (False, e)
            return
        recv, send = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_child, args=(send, fn, args), daemon=True)
        with _start_lock, _main_left_out():
            self._proc.start()
        send.close()
        self._recv = recv

    def ready(self) -> bool:
        """Whether the call has answered (or failed), so that :meth:`result` returns at
        once; False once killed without an answer."""
        if self._done is not None:
            return True
        return self._recv is not None and self._recv.poll(0)

    def result(self, timeout_s: float) -> Any:
        """The call's result, waiting at most ``timeout_s`` seconds for it; raises
        :class:`DeadlineExceeded` (the child killed) or :class:`ChildFailed`, or the
        call's own exception."""
        if self._done is None:
            assert self._recv is not None
            try:
                if not self._recv.poll(max(timeout_s, 0.0)):
                    raise DeadlineExceeded(
                        f"{self._name} still running after {time.perf_counter() - self._t0:.1f} s"
                    )
                try:
                    self._done = self._recv.recv()
                except EOFError as e:
                    assert self._proc is not None
                    self._proc.join(timeout=2.0)  # reaped, so that its exit code is known
                    raise ChildFailed(f"child exited with code {self._proc.exitcode}") from e
            finally:
                self.kill()
        ok, value = self._done
        if not ok:
            raise value
        return value

    def kill(self) -> None:
        """Stop the child (if it still runs) and release its pipe; idempotent."""
        if self._recv is not None:
            self._recv.close()
            self._recv = None
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.join(timeout=2.0 if self._done is not None else 0.0)  # an answered child exits
        if proc.is_alive():
            proc.kill()
            proc.join()
        log.debug("child %s: %.3f s", self._name, time.perf_counter() - self._t0)


def start_child(fn: Callable[..., Any], args: tuple[Any, ...]) -> Child:
    """``fn(*args)`` started in a child process, the caller going on meanwhile (``fn`` and
    ``args`` must pickle: a module-level function)."""
    return Child(fn, args)


class PendingChild:
    """A :class:`Child` started on a thread of its own after ``delay_s`` seconds, the caller
    going on at once: a child it may kill unused within them is never started (nor waited
    for: the first child of a process waits for the forkserver's imports, about 0.1 s on
    this machine).  :meth:`kill` does not wait either: a child killed while it is being
    started is killed by the thread that starts it (not a daemon thread, so it is done
    before the interpreter exits)."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], delay_s: float = 0.0) -> None:
        self._lock = threading.Lock()
        self._killed = threading.Event()
        self._child: Child | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._start, args=(fn, args, delay_s), name="start-child"
        )
        self._thread.start()

    def _start(self, fn: Callable[..., Any], args: tuple[Any, ...], delay_s: float) -> None:
        if self._killed.wait(delay_s):
            return
        try:
            child = Child(fn, args)
        except BaseException as e:  # noqa: BLE001 - given to the caller by child()
            self._error = e
            return
        with self._lock:  # exactly one of this and kill() stops a child killed meanwhile
            self._child = child
            killed = self._killed.is_set()
        if killed:
            child.kill()

    def child(self) -> Child:
        """The started child (waiting for the delay and the start); raises
        :class:`ChildFailed` where it was killed first or the start failed."""
        self._thread.join()
        if self._child is None:
            why = "killed before it started" if self._error is None else repr(self._error)
            raise ChildFailed(f"the child did not start: {why}")
        return self._child

    def kill(self) -> None:
        """Stop the child: now if it has started, else it never starts (or is stopped as
        soon as it has); idempotent."""
        with self._lock:
            self._killed.set()
            child = self._child
        if child is not None:
            child.kill()


def run_with_deadline(fn: Callable[..., T], args: tuple[Any, ...], deadline_s: float) -> T:
    """``fn(*args)`` in a child process, killed after ``deadline_s`` seconds.

    ``fn`` and ``args`` must pickle (a module-level function).  An exception ``fn`` raises
    in the child is raised here, as if it had run in-process (which it does where no child
    can be started, see the module).  Raises :class:`DeadlineExceeded` when the child is
    killed and :class:`ChildFailed` when it died without an answer.
    """
    value: T = start_child(fn, args).result(deadline_s)
    return value
