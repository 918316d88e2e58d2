"""Matplotlib figures of simulation results (Agg backend: files only, no display needed).

- :func:`plot_jct_cdf`: the CDF of measured jobs' JCT, one line per run (mechanism/policy),
  as the paper plots it.
- :func:`plot_timeline`: GPU, CPU and memory utilisation and the queue length per round.

Figures are written atomically (temporary file, then rename) like every other output.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402

from synergy_opt.outputs import atomic_path  # noqa: E402
from synergy_opt.sim.engine import SimResult  # noqa: E402
from synergy_opt.sim.metrics import measured_jcts_h, time_series  # noqa: E402


def save_figure(fig: plt.Figure, path: str | os.PathLike[str]) -> Path:
    """Write ``fig`` as a PNG atomically, with reproducible bytes, and close it."""
    p = Path(path)
    try:
        with atomic_path(p, suffix=p.suffix) as tmp:
            # No "Software" entry: the PNG bytes depend on the figure alone.
            fig.savefig(tmp, dpi=110, bbox_inches="tight", metadata={"Software": None})
    finally:
        plt.close(fig)
    return p


def plot_jct_cdf(results: Mapping[str, SimResult], path: str | os.PathLike[str]) -> Path:
    """One CDF line of measured JCT (hours, log axis) per labelled result."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, res in results.items():
        jct = np.sort(np.asarray(measured_jcts_h(res)))
        if jct.size == 0:
            continue
        y = np.arange(1, jct.size + 1) / jct.size
        ax.step(jct, y, where="post", label=f"{label} (avg {jct.mean():.1f} h)")
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours)")
    ax.set_ylabel("fraction of measured jobs")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return save_figure(fig, path)


def plot_timeline(result: SimResult, path: str | os.PathLike[str]) -> Path:
    """Utilisation of each resource and the queue length over simulated time."""
    ts = time_series(result)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.2, 5.2), sharex=True)
    for key, label in (("gpu_util", "GPU"), ("cpu_util", "CPU"), ("mem_util", "memory")):
        top.plot(ts["t_hours"], ts[key], lw=0.8, label=label)
    top.set_ylabel("allocated / capacity")
    top.set_ylim(0, 1.05)
    top.legend(fontsize=8, loc="lower right")
    top.set_title(f"{result.policy} / {result.mechanism}")
    bottom.plot(ts["t_hours"], ts["queued"], lw=0.8, color="tab:red", label="waiting")
    bottom.plot(ts["t_hours"], ts["running"], lw=0.8, color="tab:green", label="running")
    bottom.set_xlabel("simulated time (hours)")
    bottom.set_ylabel("jobs")
    bottom.legend(fontsize=8, loc="upper left")
    return save_figure(fig, path)
