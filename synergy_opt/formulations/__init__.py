"""Declarative Pyomo models of Synergy-OPT, built from plain data (no solving inside).

* :mod:`~synergy_opt.formulations.super_machine` -- LP/MIP (1)-(5): one (cpu, mem)
  configuration per job on one pooled machine (the paper's upper bound).
* :mod:`~synergy_opt.formulations.placement` -- the placement LP mapping chosen demands onto
  real servers; a vertex splits at most 3s jobs.
* :mod:`~synergy_opt.formulations.joint` -- configuration choice and integral placement in
  one MIP, for clusters of a few servers (beyond the paper).
* :mod:`~synergy_opt.formulations.fast` -- the same super-machine and placement models built
  directly as sparse matrices (class aggregation, dominance pruning), proven equal by tests.

Each Pyomo module has a pure ``_model_data(...) -> dict`` and a ``build_<name>(...)``; the
Markdown files in the top-level ``formulations/`` state the same models under the same names.
Pyomo is imported only by the three model modules, so the fast path starts quickly.
"""
