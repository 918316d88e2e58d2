"""A spread placement CP-SAT has refuted is not asked again (``packing_cp.SKIP_REFUTED``).

:func:`~synergy_opt.formulations.packing_cp.around_key` names the question "place the
spread jobs around these whole jobs" up to a permutation of the servers.  The claim the
skip rests on: two questions with one key have one verdict.  It is checked by brute
force on small packings (every way to put the whole jobs on the servers, each solved),
and the skip is checked to leave :func:`pack_from_contents`'s answer as it was.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from synergy_opt.formulations import packing_cp
from synergy_opt.formulations.packing_cp import around_key, pack_from_contents, solve_packing
from synergy_opt.formulations.packing_data import FreeGroup, PackingData, SpreadJob, WholeGroup
from synergy_opt.formulations.packing_lp import pattern_listing, whole_contents
from synergy_opt.solve import TerminationStatus
from synergy_opt.types import Job, ThroughputMatrix
from tests.test_packing_lp import _full_server_data


def _job(jid: str, gpus: int) -> Job:
    w = ThroughputMatrix(cpus=(1,), mem_gb=(1.0,), throughput=((1.0,),))
    return Job(jid, gpus, w)


def _small(spread_servers: tuple[int, ...] = (0, 1, 2, 3)) -> PackingData:
    """Four servers of two shapes, four 1-GPU whole jobs and two spread jobs, the second
    only on ``spread_servers``: tight enough that where the whole jobs sit decides it
    (where the second job may not go everywhere)."""
    whole = WholeGroup(tuple(_job(f"w{i}", 1) for i in range(4)), 1, 3, 30.0, (0, 1, 2, 3))
    spread = (
        SpreadJob(_job("a", 4), 5, 60.0, (0, 1, 2, 3)),
        SpreadJob(_job("b", 3), 5, 60.0, spread_servers),
    )
    servers = ((3, 6, 80.0), (3, 6, 80.0), (3, 5, 100.0), (3, 5, 100.0))
    return PackingData((whole,), spread, servers)


def _placements(data: PackingData) -> Iterator[dict[tuple[int, int], int]]:
    """Every way to put group 0's jobs on its servers (counts per server)."""
    (gr,) = data.groups
    for combo in itertools.combinations_with_replacement(gr.servers, len(gr.jobs)):
        yield {(0, s): combo.count(s) for s in set(combo)}


@pytest.mark.parametrize("spread_servers", [(0, 1, 2, 3), (0, 2, 3), (1, 3)])
def test_one_key_one_verdict(spread_servers: tuple[int, ...]) -> None:
    data = _small(spread_servers)
    verdicts: dict[object, set[bool]] = {}
    for whole in _placements(data):
        res = solve_packing(data, deterministic_s=5.0, whole=whole)
        assert res.status in (TerminationStatus.OPTIMAL, TerminationStatus.INFEASIBLE)
        key = around_key(data, whole)
        if key is None:  # the whole jobs themselves do not fit
            assert res.status is TerminationStatus.INFEASIBLE
            continue
        verdicts.setdefault(key, set()).add(res.plan is not None)
    assert all(len(v) == 1 for v in verdicts.values())
    assert len(verdicts) < sum(1 for _ in _placements(data))  # keys are shared
    if spread_servers != (0, 1, 2, 3):  # not trivial: some placements pack, some do not
        assert {True, False} <= set().union(*verdicts.values())


def test_servers_permuted_ask_the_same_question() -> None:
    data = _small()
    on_2 = {(0, 0): 2, (0, 1): 1, (0, 2): 1}
    on_3 = {(0, 0): 2, (0, 1): 1, (0, 3): 1}  # servers 2 and 3 have one shape
    assert around_key(data, on_2) == around_key(data, on_3) is not None
    spread_out = {(0, 0): 1, (0, 1): 1, (0, 2): 1, (0, 3): 1}  # other servers left: another
    assert around_key(data, on_2) != around_key(data, spread_out) is not None
    # where the second spread job may go is part of the question
    only = _small((0, 1, 2))
    assert around_key(only, on_2) != around_key(only, on_3)


def test_no_key_where_the_whole_jobs_decide_it() -> None:
    data = _small()
    assert around_key(data, {(0, 0): 4}) is None  # 4 GPUs on a 3-GPU server
    assert around_key(data, {(0, 0): 1, (0, 1): 2}) is None  # a whole job left out
    assert around_key(data, {(0, 0): 3, (0, 1): 2, (0, 2): -1}) is None  # a negative count
    narrow = PackingData(
        (WholeGroup(data.groups[0].jobs, 1, 3, 40.0, (0, 1)),), data.spread, data.servers
    )
    assert around_key(narrow, {(0, 0): 2, (0, 3): 2}) is None  # a server the group may not use
    free = PackingData(
        data.groups,
        data.spread,
        data.servers,
        (FreeGroup((_job("f", 1),), 1, ((0, 1, 1.0, 1.0),)),),
    )
    assert around_key(free, {(0, 0): 2, (0, 2): 2}) is None


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count :func:`solve_packing`'s calls from :func:`pack_from_contents`."""
    calls: list[int] = []
    real = packing_cp.solve_packing

    def spy(*args: object, **kwargs: object) -> packing_cp.PackingResult:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(packing_cp, "solve_packing", spy)
    return calls


@pytest.mark.parametrize("seed", [14, 18])
def test_the_skip_keeps_the_answer(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """Split penalties 128 GPUs, the full-server points: seed 18's eight integral contents
    ask four questions, none with a packing; seed 14 packs at attempt 6 after asking one
    question twice."""
    data = _full_server_data(seed)
    lst = pattern_listing(data)
    assert lst is not None
    keys = [around_key(data, w) for a in range(8) if (w := whole_contents(lst, a)) is not None]
    assert len(keys) == 8 and len(set(keys)) < 8
    got = {}
    asked = {}
    for skip in (False, True):
        monkeypatch.setattr(packing_cp, "SKIP_REFUTED", skip)
        calls = _counted(monkeypatch)
        found = pack_from_contents(data, lst, attempts=8, deterministic_s=0.2)
        got[skip] = None if found is None else (found[1], found[0].plan, found[0].resources)
        asked[skip] = len(calls)
        monkeypatch.undo()
    assert got[True] == got[False]
    last = 8 if got[False] is None else got[False][0] + 1
    assert asked[False] == last
    # every attempt before the last was refuted: a question asked before is skipped
    assert asked[True] == sum(1 for i in range(last) if keys[i] not in keys[:i])
    assert asked[True] < asked[False]
    if seed == 18:
        assert got[False] is None


def test_a_shared_set_carries_refutations_across_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _full_server_data(18)
    lst = pattern_listing(data)
    assert lst is not None
    refuted: set[packing_cp.AroundKey] = set()
    assert pack_from_contents(data, lst, attempts=8, deterministic_s=0.2, refuted=refuted) is None
    assert len(refuted) == 4
    calls = _counted(monkeypatch)
    assert pack_from_contents(data, lst, attempts=8, deterministic_s=0.2, refuted=refuted) is None
    assert calls == []  # every question asked again was proven to have no answer
