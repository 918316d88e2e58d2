"""The documented, seeded rule that gives a model profile to a trace task that names none.

Public traces record resource requests, not models, so every converted task needs a shipped
profile to have a sensitivity matrix.  The rule has two steps:

1. **Category.**  Alibaba pods: by the CPU cores requested per (whole) GPU, ``r``.  Users
   size CPU requests to what their input pipeline consumes, and in the shipped profiles the
   models that profit from many cores are the image models (best at 4-12 cores per GPU),
   speech sits in between (3-6) and language models are flat from 1 core.  Hence
   ``r >= 8`` -> ``image``, ``r < 4`` -> ``language``, otherwise ``speech``
   (:data:`IMAGE_MIN_CPUS_PER_GPU`, :data:`LANGUAGE_MAX_CPUS_PER_GPU`).  Philly jobs carry
   no CPU request, so their category is drawn from the split (image, language, speech)
   in percent, default the paper's 20/70/10.
2. **Model.**  Uniformly among the category's models of the paper's simulator zoo
   (:meth:`ProfileLibrary.by_category`).

Both random draws come from a hash of ``(seed, task id)``, not from a shared generator, so a
task's model does not depend on which other rows were present, skipped or reordered: the
same pod gets the same model in every variant of the pod list.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from synergy_opt.profiles import CATEGORIES, ModelProfile, ProfileLibrary

#: At or above this many requested cores per GPU a task is treated as an image model.
IMAGE_MIN_CPUS_PER_GPU: float = 8.0
#: Below this many requested cores per GPU a task is treated as a language model.
LANGUAGE_MAX_CPUS_PER_GPU: float = 4.0


def unit_draw(seed: int, key: str, salt: str) -> float:
    """A uniform number in [0, 1) determined by ``(seed, key, salt)`` alone."""
    h = hashlib.blake2b(f"{seed}\x1f{salt}\x1f{key}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2.0**64


def category_for_request(cpus_per_gpu: float) -> str:
    """Step 1 for a task with a CPU request: image / speech / language by cores per GPU."""
    if cpus_per_gpu >= IMAGE_MIN_CPUS_PER_GPU:
        return "image"
    if cpus_per_gpu < LANGUAGE_MAX_CPUS_PER_GPU:
        return "language"
    return "speech"


def category_by_split(seed: int, key: str, split: Sequence[float]) -> str:
    """Step 1 for a task without a CPU request: draw a category by the percentage split."""
    total = sum(split)
    u = unit_draw(seed, key, "category") * total
    acc = 0.0
    for cat, share in zip(CATEGORIES, split, strict=True):
        acc += share
        if u < acc:
            return cat
    return next(c for c, s in zip(CATEGORIES, split, strict=True) if s > 0)


def pick_model(profiles: ProfileLibrary, category: str, seed: int, key: str) -> ModelProfile:
    """Step 2: a model of ``category`` (simulator zoo first, any model of it otherwise)."""
    pool = profiles.by_category(category) or profiles.by_category(category, zoo_only=False)
    if not pool:
        # A user profile file may lack a category; fall back to the whole library rather
        # than fail on a trace that is otherwise fine.
        pool = profiles.profiles
    k = int(unit_draw(seed, key, "model") * len(pool))
    return pool[min(k, len(pool) - 1)]
