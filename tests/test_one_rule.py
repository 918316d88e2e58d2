"""One copy of each rule (issue 12): the spread loop, the capped re-split, the forced-split floor.

Each rule used to be written out in several mechanisms; these pin the single functions now
shared, with hand-worked cases, so a change to one rule shows here rather than as a silent
divergence between mechanisms.
"""

from __future__ import annotations

import pytest

from synergy_opt.check import fair_share_floor, forced_split_factor
from synergy_opt.mechanisms.packing import most_free_first, split_cpus, split_within
from synergy_opt.profiles import shipped_profiles
from synergy_opt.types import Cluster, Job, RoundInstance, Server


def _job(jid: str, gpus: int, penalty: float = 0.8, types: tuple[str, ...] | None = None) -> Job:
    p = shipped_profiles().get("res18")
    return Job(jid, gpus, p.matrix(gpus), "res18", p.category, penalty, types)


def test_most_free_first_takes_the_fullest_servers_ties_by_index() -> None:
    free = [2, 5, 0, 5, 3]
    assert most_free_first(free, range(5), 7) == ([(1, 5), (3, 2)], 0)
    assert most_free_first(free, [4, 0, 2], 9) == ([(4, 3), (0, 2)], 4)  # 4 GPUs short
    assert most_free_first(free, [2], 1) == ([], 1)  # a full server gives nothing
    assert free == [2, 5, 0, 5, 3]  # the caller applies the plan


def test_split_within_never_grows_a_part_and_keeps_the_totals() -> None:
    # Memory 45 GB over three equal parts is 15 each, but the last part had only 10 GB: it is
    # capped there and the 5 GB deficit goes to the first part that has room.
    old = [(0, 1, 3, 30.0), (1, 1, 2, 20.0), (2, 1, 1, 10.0)]
    assert split_cpus(5, [1, 1, 1]) == [2, 2, 1]
    new = split_within(old, 5, 45.0)
    assert [p[2] for p in new] == [2, 2, 1]
    assert [p[3] for p in new] == [20.0, 15.0, 10.0]
    assert sum(p[3] for p in new) == pytest.approx(45.0)
    assert all(n[2] <= o[2] and n[3] <= o[3] + 1e-9 for n, o in zip(new, old, strict=True))
    old = [(0, 2, 2, 40.0), (1, 1, 4, 40.0)]  # proportional 5 -> (3, 2) would grow part 0
    assert split_within(old, 5, 60.0) == [(0, 2, 2, 40.0), (1, 1, 3, 20.0)]


def test_forced_split_factor_is_the_penalty_only_when_no_usable_server_fits() -> None:
    cluster = Cluster(
        (Server("a", 4, 24, 200.0, "V100"), Server("b", 8, 48, 400.0, "K80")),
    )
    inst = RoundInstance("t", cluster, (_job("j", 1),))
    assert forced_split_factor(inst, _job("fits", 8)) == 1.0
    assert forced_split_factor(inst, _job("big", 12)) == 0.8
    assert forced_split_factor(inst, _job("typed", 6, types=("V100",))) == 0.8
    assert forced_split_factor(inst, _job("typed", 4, types=("V100",))) == 1.0
    fair, required = fair_share_floor(inst, _job("big", 12))
    assert required == fair * 0.8
