"""synergy-opt: resource-sensitivity-aware scheduling of deep-learning jobs on GPU clusters.

The public API: data types (:mod:`synergy_opt.types`), JSON I/O (:mod:`synergy_opt.io`),
model profiles (:mod:`synergy_opt.profiles`), mechanisms by name
(:func:`synergy_opt.mechanisms.make_mechanism`) and the independent checker
(:func:`synergy_opt.check.check_allocation`).
"""

__version__ = "0.1.0"
