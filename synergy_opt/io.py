"""JSON <-> types for ``synergy-round/1`` and ``synergy-allocation/1`` (docs/formats.md 1-2).

Every problem with an input file becomes one :class:`InputError` whose message names the
file, the field path and the problem, e.g.
``round.json: jobs[3].sensitivity.throughput: row 2 has 4 values, expected 3``.
The command line prints that line and exits with code 2; nothing here prints.

Writing goes through :func:`synergy_opt.outputs.write_text_atomic` (temporary file in the
same folder, then ``os.replace``) so a crash, a kill or a full disk never leaves a
half-written result behind.
"""

from __future__ import annotations

import functools
import json
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

# Re-exported: InputError's home is synergy_opt.errors (below every module).
from synergy_opt.errors import InputError as InputError
from synergy_opt.errors import ValidationError
from synergy_opt.limits import (
    ALLOC_CPUS,
    ALLOC_GPUS,
    ALLOC_MEM_GB,
    ALLOC_THROUGHPUT,
    GRID_CPUS,
    GRID_MEM_GB,
    JOB_COUNT,
    JOB_GPUS,
    JOBS,
    JSON_DEPTH,
    SERVER_CPUS,
    SERVER_GPUS,
    SERVER_MEM_GB,
    SERVERS,
    SOLVE_SECONDS,
    SPLIT_PENALTY,
    THROUGHPUT,
    Limit,
    json_kind,
)
from synergy_opt.outputs import write_text_atomic as write_text_atomic
from synergy_opt.types import (
    Allocation,
    Cluster,
    Job,
    JobAllocation,
    PlacementPart,
    RoundInstance,
    Server,
    ThroughputMatrix,
    intern_matrices,
)

ROUND_FORMAT = "synergy-round/1"
ALLOCATION_FORMAT = "synergy-allocation/1"

T = TypeVar("T")


# --------------------------------------------------------------------------- field readers


class _Reader:
    """Typed access to a decoded JSON tree that raises :class:`ValidationError` with paths."""

    @staticmethod
    def join(path: str, key: str | int) -> str:
        if isinstance(key, int):
            return f"{path}[{key}]"
        return f"{path}.{key}" if path else key

    def obj(self, value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise ValidationError(path, f"expected an object, got {json_kind(value)}")
        return value

    def lst(self, value: Any, path: str) -> list[Any]:
        if not isinstance(value, list):
            raise ValidationError(path, f"expected a list, got {json_kind(value)}")
        return value

    def req(self, o: dict[str, Any], key: str, path: str) -> Any:
        if key not in o:
            raise ValidationError(self.join(path, key), "missing required field")
        return o[key]

    def string(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not value:
            raise ValidationError(path, f"expected a non-empty string, got {json_kind(value)}")
        check_text(value, path)
        return value

    def integer(self, value: Any, path: str, limit: Limit) -> int:
        """An integer within ``limit`` (a float with no fraction, like ``4.0``, counts)."""
        return int(self.bounded(value, path, limit))

    def number(self, value: Any, path: str, limit: Limit) -> float:
        """A finite number within ``limit`` (bounds compared before any float conversion)."""
        return float(self.bounded(value, path, limit))

    def bounded(self, value: Any, path: str, limit: Limit) -> int | float:
        try:
            return limit.check(value)
        except ValidationError as e:
            raise ValidationError(path, e.problem) from None

    def opt(
        self, o: dict[str, Any], key: str, path: str, read: Callable[[Any, str], T]
    ) -> T | None:
        if key not in o or o[key] is None:
            return None
        return read(o[key], self.join(path, key))


_R = _Reader()


def _wrap(path: str, build: Callable[[], T]) -> T:
    """Run a constructor and prefix any :class:`ValidationError` with ``path``."""
    try:
        return build()
    except ValidationError as e:
        raise ValidationError(_R.join(path, e.path) if e.path else path, e.problem) from None


# --------------------------------------------------------------------------- round instance


def cluster_from_dict(value: Any, path: str = "cluster") -> Cluster:
    """Parse the ``cluster`` object of a round instance (also used by ``--cluster``)."""
    o = _R.obj(value, path)
    entries = _R.lst(_R.req(o, "servers", path), _R.join(path, "servers"))
    servers: list[Server] = []
    names: set[str] = set()  # duplicate check in O(1) per server: 200,000 servers stay fast
    for i, entry in enumerate(entries):
        p = _R.join(_R.join(path, "servers"), i)
        e = _R.obj(entry, p)
        count = _R.opt(e, "count", p, lambda v, q: _R.integer(v, q, SERVERS)) or 1
        if len(servers) + count > SERVERS.high:
            raise ValidationError(
                _R.join(p, "count") if count > 1 else p,
                f"the cluster would have more than {SERVERS.high:_} servers "
                f"(limit {SERVERS.name}, docs/limits.md)",
            )
        gpus = _R.integer(_R.req(e, "gpus", p), _R.join(p, "gpus"), SERVER_GPUS)
        cpus = _R.integer(_R.req(e, "cpus", p), _R.join(p, "cpus"), SERVER_CPUS)
        mem = _R.number(_R.req(e, "mem_gb", p), _R.join(p, "mem_gb"), SERVER_MEM_GB)
        name = _R.opt(e, "name", p, _R.string)
        gpu_type = _R.opt(e, "gpu_type", p, _R.string)
        for k in range(count):
            # Unnamed servers take their position in the expanded list (s0, s1, ...);
            # a named entry with a count gets name-0, name-1, ...
            if name is None:
                sname = f"s{len(servers)}"
            else:
                sname = name if count == 1 else f"{name}-{k}"
            if sname in names:
                raise ValidationError(_R.join(p, "name"), f"duplicate server name {sname!r}")
            names.add(sname)
            servers.append(_wrap(p, functools.partial(Server, sname, gpus, cpus, mem, gpu_type)))
    return _wrap(path, lambda: Cluster(tuple(servers)))


def cluster_to_dict(cluster: Cluster) -> dict[str, Any]:
    """Serialise a cluster, one entry per server (names kept explicit)."""
    out = []
    for s in cluster.servers:
        d: dict[str, Any] = {"name": s.name, "gpus": s.gpus, "cpus": s.cpus, "mem_gb": s.mem_gb}
        if s.gpu_type is not None:
            d["gpu_type"] = s.gpu_type
        out.append(d)
    return {"servers": out}


def matrix_from_dict(
    value: Any,
    path: str,
    *,
    cpus_key: str = "cpus",
    mem_key: str = "mem_gb",
    throughput_key: str = "throughput",
) -> ThroughputMatrix:
    """Parse a ``sensitivity`` object (grid axes and throughput rows).

    The one validator of the sensitivity schema: round files use the default keys, profile
    files (``cpu_points``, ``mem_points_gb``) pass their own, so a fractional core count,
    a string number or a boolean throughput is refused the same way in both.
    """
    o = _R.obj(value, path)
    cp, mp, tp = (_R.join(path, k) for k in (cpus_key, mem_key, throughput_key))
    cpus_raw = _R.lst(_R.req(o, cpus_key, path), cp)
    mem_raw = _R.lst(_R.req(o, mem_key, path), mp)
    rows_raw = _R.lst(_R.req(o, throughput_key, path), tp)
    cpus = [_R.integer(c, _R.join(cp, i), GRID_CPUS) for i, c in enumerate(cpus_raw)]
    mem = [_R.number(m, _R.join(mp, i), GRID_MEM_GB) for i, m in enumerate(mem_raw)]
    rows: list[list[float]] = []
    for i, row in enumerate(rows_raw):
        r = _R.lst(row, _R.join(tp, i))
        rows.append([_R.number(w, f"{tp}[{i}][{k}]", THROUGHPUT) for k, w in enumerate(r)])
    keys = {"cpus": cpus_key, "mem_gb": mem_key, "throughput": throughput_key}

    def build() -> ThroughputMatrix:
        try:
            return ThroughputMatrix.from_lists(cpus, mem, rows)
        except ValidationError as e:  # name the field as the file spells it
            head, sep, rest = e.path.partition("[")
            raise ValidationError(keys.get(head, head) + sep + rest, e.problem) from None

    return _wrap(path, build)


def matrix_to_dict(w: ThroughputMatrix) -> dict[str, Any]:
    """Serialise a throughput matrix as docs/formats.md's ``sensitivity`` object."""
    return {
        "cpus": list(w.cpus),
        "mem_gb": list(w.mem_gb),
        "throughput": [list(r) for r in w.throughput],
    }


def job_from_dict(value: Any, path: str) -> Job:
    """Parse one entry of ``jobs[]``."""
    o = _R.obj(value, path)
    jid = _R.string(_R.req(o, "id", path), _R.join(path, "id"))
    gpus = _R.integer(_R.req(o, "gpus", path), _R.join(path, "gpus"), JOB_GPUS)
    w = matrix_from_dict(_R.req(o, "sensitivity", path), _R.join(path, "sensitivity"))
    model = _R.opt(o, "model", path, _R.string)
    category = _R.opt(o, "category", path, _R.string)
    penalty = _R.opt(o, "split_penalty", path, lambda v, q: _R.number(v, q, SPLIT_PENALTY))
    types_raw = _R.opt(o, "gpu_types", path, _R.lst)
    gpu_types = None
    if types_raw is not None:
        tp = _R.join(path, "gpu_types")
        gpu_types = tuple(_R.string(t, _R.join(tp, i)) for i, t in enumerate(types_raw))
    by_type = _R.opt(o, "sensitivity_by_type", path, _matrices_by_type)
    return _wrap(
        path,
        lambda: Job(
            jid, gpus, w, model, category, 1.0 if penalty is None else penalty, gpu_types, by_type
        ),
    )


def _matrices_by_type(value: Any, path: str) -> tuple[tuple[str, ThroughputMatrix], ...]:
    """Parse ``sensitivity_by_type``: GPU type -> a matrix of the ``sensitivity`` schema.

    Whether each type exists in the cluster is the instance's check (it knows the servers).
    """
    o = _R.obj(value, path)
    if not o:
        raise ValidationError(path, "must map at least one GPU type to a matrix")
    out = []
    for t, m in o.items():
        if not t:
            raise ValidationError(path, "a GPU type must be a non-empty string")
        check_text(t, path)
        out.append((t, matrix_from_dict(m, _R.join(path, t))))
    return tuple(out)


def job_to_dict(job: Job) -> dict[str, Any]:
    """Serialise a job; optional fields only when set."""
    d: dict[str, Any] = {"id": job.id, "gpus": job.gpus}
    if job.model is not None:
        d["model"] = job.model
    if job.category is not None:
        d["category"] = job.category
    if job.split_penalty != 1.0:
        d["split_penalty"] = job.split_penalty
    if job.gpu_types is not None:
        d["gpu_types"] = list(job.gpu_types)
    d["sensitivity"] = matrix_to_dict(job.sensitivity)
    if job.sensitivity_by_type is not None:
        d["sensitivity_by_type"] = {t: matrix_to_dict(w) for t, w in job.sensitivity_by_type}
    return d


def instance_from_dict(value: Any) -> RoundInstance:
    """Parse a decoded ``synergy-round/1`` document (raises :class:`ValidationError`)."""
    o = _R.obj(value, "")
    fmt = _R.req(o, "format", "")
    if fmt != ROUND_FORMAT:
        raise ValidationError("format", f"expected {ROUND_FORMAT!r}, got {json_kind(fmt)}")
    name = _R.opt(o, "name", "", _R.string) or "unnamed"
    cluster = cluster_from_dict(_R.req(o, "cluster", ""), "cluster")
    jobs_raw = _R.lst(_R.req(o, "jobs", ""), "jobs")
    if len(jobs_raw) > JOBS.high:
        raise ValidationError("jobs", f"lists {len(jobs_raw)} jobs, at most {JOBS.high:_}")
    jobs = [job_from_dict(j, f"jobs[{i}]") for i, j in enumerate(jobs_raw)]
    rule = _R.opt(o, "fair_share", "", _R.string)
    return _wrap("", lambda: RoundInstance(name, cluster, intern_matrices(jobs), rule))


def instance_to_dict(inst: RoundInstance) -> dict[str, Any]:
    """Serialise a round instance."""
    d: dict[str, Any] = {"format": ROUND_FORMAT, "name": inst.name}
    if inst.fair_share_rule is not None:
        d["fair_share"] = inst.fair_share_rule
    d["cluster"] = cluster_to_dict(inst.cluster)
    d["jobs"] = [job_to_dict(j) for j in inst.jobs]
    return d


# --------------------------------------------------------------------------- allocation


def allocation_to_dict(alloc: Allocation) -> dict[str, Any]:
    """Serialise an allocation exactly as docs/formats.md section 2 lays it out."""
    d: dict[str, Any] = {
        "format": ALLOCATION_FORMAT,
        "instance": alloc.instance,
        "mechanism": alloc.mechanism,
        "solver": alloc.solver,
        "jobs": [
            {
                "id": j.id,
                "gpus": j.gpus,
                "cpus": j.cpus,
                "mem_gb": j.mem_gb,
                "placement": [
                    {"server": p.server, "gpus": p.gpus, "cpus": p.cpus, "mem_gb": p.mem_gb}
                    for p in j.placement
                ],
                "throughput": j.throughput,
                "fair_share_throughput": j.fair_share_throughput,
            }
            for j in alloc.jobs
        ],
        "unscheduled": list(alloc.unscheduled),
        "total_throughput": alloc.total_throughput,
        "fragmented_jobs": alloc.fragmented_jobs,
        "upper_bound": alloc.upper_bound,
        "solve_seconds": alloc.solve_seconds,
    }
    if alloc.notes:
        d["notes"] = list(alloc.notes)
    return d


def allocation_from_dict(value: Any) -> Allocation:
    """Parse a ``synergy-allocation/1`` document; structure only, the checker judges values."""
    o = _R.obj(value, "")
    fmt = _R.req(o, "format", "")
    if fmt != ALLOCATION_FORMAT:
        raise ValidationError("format", f"expected {ALLOCATION_FORMAT!r}, got {json_kind(fmt)}")
    jobs: list[JobAllocation] = []
    for i, jv in enumerate(_R.lst(_R.req(o, "jobs", ""), "jobs")):
        p = f"jobs[{i}]"
        jo = _R.obj(jv, p)
        parts = []
        pp = _R.join(p, "placement")
        for k, part in enumerate(_R.lst(_R.req(jo, "placement", p), pp)):
            q = _R.join(pp, k)
            po = _R.obj(part, q)
            parts.append(
                PlacementPart(
                    server=_R.string(_R.req(po, "server", q), _R.join(q, "server")),
                    gpus=_R.integer(_R.req(po, "gpus", q), _R.join(q, "gpus"), ALLOC_GPUS),
                    cpus=_R.integer(_R.req(po, "cpus", q), _R.join(q, "cpus"), ALLOC_CPUS),
                    mem_gb=_R.number(_R.req(po, "mem_gb", q), _R.join(q, "mem_gb"), ALLOC_MEM_GB),
                )
            )
        jobs.append(
            JobAllocation(
                id=_R.string(_R.req(jo, "id", p), _R.join(p, "id")),
                gpus=_R.integer(_R.req(jo, "gpus", p), _R.join(p, "gpus"), ALLOC_GPUS),
                cpus=_R.integer(_R.req(jo, "cpus", p), _R.join(p, "cpus"), ALLOC_CPUS),
                mem_gb=_R.number(_R.req(jo, "mem_gb", p), _R.join(p, "mem_gb"), ALLOC_MEM_GB),
                placement=tuple(parts),
                throughput=_R.number(
                    _R.req(jo, "throughput", p), _R.join(p, "throughput"), ALLOC_THROUGHPUT
                ),
                fair_share_throughput=_R.number(
                    _R.req(jo, "fair_share_throughput", p),
                    _R.join(p, "fair_share_throughput"),
                    ALLOC_THROUGHPUT,
                ),
            )
        )
    unsched = _R.lst(_R.req(o, "unscheduled", ""), "unscheduled")
    notes = _R.opt(o, "notes", "", _R.lst) or []
    for i, n in enumerate(notes):
        if isinstance(n, str):
            check_text(n, f"notes[{i}]")
    return Allocation(
        instance=_R.opt(o, "instance", "", _R.string) or "unnamed",
        mechanism=_R.string(_R.req(o, "mechanism", ""), "mechanism"),
        jobs=tuple(jobs),
        unscheduled=tuple(_R.string(u, f"unscheduled[{i}]") for i, u in enumerate(unsched)),
        total_throughput=_R.number(
            _R.req(o, "total_throughput", ""), "total_throughput", ALLOC_THROUGHPUT
        ),
        fragmented_jobs=_R.integer(_R.req(o, "fragmented_jobs", ""), "fragmented_jobs", JOB_COUNT),
        solver=_R.opt(o, "solver", "", _R.string),
        upper_bound=_R.opt(o, "upper_bound", "", lambda v, q: _R.number(v, q, ALLOC_THROUGHPUT)),
        solve_seconds=_R.opt(o, "solve_seconds", "", lambda v, q: _R.number(v, q, SOLVE_SECONDS))
        or 0.0,
        notes=tuple(str(n) for n in notes),
    )


# --------------------------------------------------------------------------- files


def read_text(path: str | os.PathLike[str], expected: str) -> str:
    """A text file's contents (UTF-8, BOM dropped, line endings kept as they are).

    Every failure becomes one :class:`InputError` line naming the file; ``expected`` says
    what the file should have been (``"a JSON file"``, ``"a CSV trace"``, ...).
    """
    p = Path(path)
    try:
        with open(p, encoding="utf-8-sig", newline="") as f:
            # a device never ends (/dev/zero, /dev/urandom) or waits on a user (/dev/tty);
            # pipes stay readable (``solve <(...)``)
            mode = os.fstat(f.fileno()).st_mode
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                raise InputError(f"{p}: is a device, expected {expected}")
            return f.read()
    except FileNotFoundError:
        raise InputError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{p}: is a directory, expected {expected}") from None
    except UnicodeDecodeError:
        raise InputError(f"{p}: not UTF-8 text") from None
    except OSError as e:
        raise InputError(f"{p}: cannot read ({e.strerror})") from None


def read_json(path: str | os.PathLike[str]) -> Any:
    """Decode a JSON file, turning every failure into one :class:`InputError` line.

    Besides syntax, refuses what Python's decoder would accept and later code would choke
    on: ``NaN``/``Infinity``, nesting deeper than ``JSON_DEPTH`` (checked in linear time
    before decoding, so 100,000 nested lists are one line, not a ``RecursionError``), and
    strings holding a lone surrogate (``"\\ud800"``), which no UTF-8 output can write.
    """
    p = Path(path)
    return decode_json(read_text(p, "a JSON file"), p)


def decode_json(text: str, source: object) -> Any:
    """:func:`read_json` for text already read (``source`` names it in messages)."""
    check_json_depth(text, source)
    try:
        data = json.loads(text, parse_constant=_mark_constant)
    except json.JSONDecodeError as e:
        raise InputError(
            f"{source}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno}"
        ) from None
    except RecursionError:  # pragma: no cover - the depth check runs first
        raise InputError(f"{source}: not valid JSON: nested too deeply") from None
    except ValueError as e:
        raise InputError(f"{source}: not valid JSON: {e}") from None
    if "NaN" in text or "Infinity" in text:
        found = _first_constant(data)
        if found is not None:
            raise InputError(f"{source}: {found[0]}: {found[1]} is not a JSON number")
    if _SURROGATE_ESCAPE.search(text):
        try:
            check_tree_text(data)
        except ValidationError as e:
            raise InputError(f"{source}: {e}") from None
    return data


# A JSON string (escapes included) and the escape of a UTF-16 surrogate half.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def check_json_depth(text: str, source: object, limit: Limit = JSON_DEPTH) -> None:
    """InputError when brackets outside strings nest deeper than ``limit.high``.

    Linear time, no recursion: strings are blanked out by one regular expression, the
    remaining brackets become +1/-1 steps whose running sum is the depth.
    """
    if text.count("[") + text.count("{") <= limit.high:
        return
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    steps = np.frombuffer(brackets.encode("ascii"), dtype=np.uint8)
    depth = np.cumsum(np.where((steps == ord("[")) | (steps == ord("{")), 1, -1))
    if depth.size and int(depth.max()) > limit.high:
        raise InputError(
            f"{source}: JSON nested deeper than {int(limit.high)} levels "
            f"(limit {limit.name}, docs/limits.md)"
        )


def check_text(value: str, path: str) -> None:
    """ValidationError when ``value`` holds a lone surrogate (not Unicode text)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = value[e.start : e.end].encode("unicode_escape").decode("ascii")
        raise ValidationError(
            path, f"contains {bad}, a lone UTF-16 surrogate, which is not text"
        ) from None


def check_tree_text(data: Any, path: str = "") -> None:
    """:func:`check_text` on every string and key of a decoded JSON tree (iterative)."""
    stack: list[tuple[str, Any]] = [(path, data)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, str):
            check_text(v, where or "value")
        elif isinstance(v, dict):
            for k, x in v.items():
                check_text(k, _R.join(where, "(key)") if where else "(key)")
                stack.append((_R.join(where, k), x))
        elif isinstance(v, list):
            stack.extend((_R.join(where, i), x) for i, x in enumerate(v))


@dataclass(frozen=True, slots=True)
class _Constant:
    """``NaN``/``Infinity``/``-Infinity`` where the text had one: not JSON, which Python
    would decode silently; kept as a marker so the error can name the field."""

    name: str


def _mark_constant(name: str) -> _Constant:
    return _Constant(name)


def _first_constant(data: Any) -> tuple[str, str] | None:
    """(path, name) of the first :class:`_Constant` in document order (iterative)."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, _Constant):
            return where or "value", v.name
        if isinstance(v, dict):
            stack.extend(reversed([(_R.join(where, k), x) for k, x in v.items()]))
        elif isinstance(v, list):
            stack.extend(reversed([(_R.join(where, i), x) for i, x in enumerate(v)]))
    return None


def _load(path: str | os.PathLike[str], parse: Callable[[Any], T]) -> T:
    data = read_json(path)
    try:
        return parse(data)
    except ValidationError as e:
        raise InputError(f"{path}: {e}") from None


def load_instance(path: str | os.PathLike[str]) -> RoundInstance:
    """Read and validate a round instance file."""
    return _load(path, instance_from_dict)


def load_allocation(path: str | os.PathLike[str]) -> Allocation:
    """Read an allocation file (structure checked; values are the checker's job)."""
    return _load(path, allocation_from_dict)


def load_cluster(path: str | os.PathLike[str]) -> Cluster:
    """Read a cluster file: either a bare ``cluster`` object or a round instance."""
    data = read_json(path)
    try:
        if isinstance(data, dict) and "cluster" in data and "servers" not in data:
            return cluster_from_dict(data["cluster"], "cluster")
        return cluster_from_dict(data, "")
    except ValidationError as e:
        raise InputError(f"{path}: {e}") from None


def _encode(obj: Any, indent: int) -> str:
    # Lists of scalars (matrix rows, grid axes, id lists) stay on one line: instances with
    # hundreds of 9x5 matrices remain readable and diffable.
    pad = "  " * (indent + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [
            f"{pad}{json.dumps(str(k), ensure_ascii=False)}: {_encode(v, indent + 1)}"
            for k, v in obj.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + "  " * indent + "}"
    if isinstance(obj, list | tuple):
        if not obj:
            return "[]"
        if all(not isinstance(v, dict | list | tuple) for v in obj):
            return "[" + ", ".join(_encode(v, indent + 1) for v in obj) + "]"
        if all(
            isinstance(v, list | tuple) and all(not isinstance(x, dict | list | tuple) for x in v)
            for v in obj
        ):
            rows = [pad + _encode(v, indent + 1) for v in obj]
            return "[\n" + ",\n".join(rows) + "\n" + "  " * indent + "]"
        return (
            "[\n"
            + ",\n".join(pad + _encode(v, indent + 1) for v in obj)
            + "\n"
            + "  " * indent
            + "]"
        )
    return json.dumps(obj, ensure_ascii=False, allow_nan=False)


def dumps(obj: Any) -> str:
    """Canonical JSON text: two-space indentation, scalar lists on one line, final newline."""
    return _encode(obj, 0) + "\n"


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as canonical JSON, atomically."""
    write_text_atomic(path, dumps(obj))
