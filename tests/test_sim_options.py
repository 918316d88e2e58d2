"""One options builder: the command line and a sweep cell with the same options build the same run.

``synergy_opt.sim.options`` is the single place options become a cluster, a SimConfig, a
generated workload and mechanism options; ``simulate``/``compare`` and sweep cells both go
through it.  These tests pin that the two front ends agree value for value.
"""

from __future__ import annotations

import pytest

from synergy_opt.cli import build_parser
from synergy_opt.commands.simopts import (
    build_config,
    build_trace,
    mechanism_options,
    option_getter,
)
from synergy_opt.profiles import shipped_profiles
from synergy_opt.sim import options
from synergy_opt.sweep.cell import cell_options, sim_config, workload_spec
from synergy_opt.sweep.spec import make_cell

#: (command-line arguments, the same options as a sweep cell)
CASES = [
    ([], {}),
    (
        [
            "--servers", "3", "--gpus-per-server", "4", "--cpus-per-server", "10",
            "--mem-per-server-gb", "250", "--workload", "multi-gpu", "--jobs", "40",
            "--arrival-rate", "20", "--split", "50,25,25", "--seed", "7", "--window", "2:30",
            "--round-seconds", "120", "--preemption-cost-s", "10", "--run-to-completion",
            "--semantics", "artifact", "--time-scale", "0.5", "--max-jobs", "35",
            "--solver", "ortools", "--time-limit", "3", "--threads", "2",
        ],
        {
            "servers": 3, "gpus_per_server": 4, "cpus_per_server": 10,
            "mem_per_server_gb": 250, "workload": "multi-gpu", "jobs": 40, "arrival_rate": 20,
            "split": "50,25,25", "seed": 7, "window": "2:30", "round_seconds": 120,
            "preemption_cost_s": 10, "run_to_completion": True, "semantics": "artifact",
            "time_scale": 0.5, "max_jobs": 35, "solver": "ortools", "time_limit": 3,
            "threads": 2,
        },
    ),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "raw"), CASES)
def test_command_line_and_cell_build_the_same_run(argv: list[str], raw: dict[str, object]) -> None:
    args = build_parser().parse_args(["simulate", *argv])
    cell = make_cell(raw)  # type: ignore[arg-type]
    assert build_config(args) == sim_config(cell)
    assert options.workload_spec(option_getter(args)) == workload_spec(cell)
    assert mechanism_options(args) == options.mechanism_options(cell_options(cell))
    lib = shipped_profiles()
    assert build_trace(args, lib) == options.generate_trace(cell_options(cell), lib)


def test_cpus_per_gpu_sets_the_cores_of_each_server() -> None:
    cell = make_cell({"servers": 2, "gpus_per_server": 4, "cpus_per_gpu": 2.5})
    cluster = sim_config(cell).cluster
    assert [s.cpus for s in cluster.servers] == [10, 10]
    assert options.cores_per_server(cell_options(cell)) == 10


def test_a_differing_option_gives_a_different_config() -> None:
    args = build_parser().parse_args(["simulate", "--round-seconds", "60"])
    assert build_config(args) != sim_config(make_cell({}))
