"""A small, real CPU-bound data pipeline to profile: decode and augment synthetic JPEGs.

This is the input stage of an image-classification job (the stage whose data stalls
Synergy exists to relieve): each sample is a JPEG decoded with Pillow, randomly cropped and
resized, randomly flipped, brightness-jittered and normalised to float32 with numpy.  The
samples are split statically over ``--workers`` processes, so throughput grows with the
worker count until it runs out of cores -- which is what profiling must discover.

Run ``python -m synergy_opt.profiling.workload --workers N`` ; it prints ``workers``,
``samples`` and ``seconds`` lines and, last, ``throughput: <samples/s> samples/s`` (the
line format :class:`~synergy_opt.profiling.backends.CommandBackend` reads).  To profile it:

    synergy-opt profile -o p.json \
        --command "python -m synergy_opt.profiling.workload --workers {cpus}"

The images are synthetic (seeded gradients, blobs and noise), so nothing is downloaded.
Only the timed section counts: encoding the source images, starting the processes and one
warm-up sample per worker happen before the clock starts.
"""

from __future__ import annotations

import argparse
import io
import multiprocessing as mp
import queue
import sys
import time
from collections.abc import Sequence
from multiprocessing.synchronize import Barrier

import numpy as np
from PIL import Image

from synergy_opt.argtypes import positive_int

#: ImageNet channel statistics (the usual torchvision normalisation constants).
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
#: Longest wait for every worker to be ready (imports and one warm-up sample).
STARTUP_TIMEOUT_S = 120.0


def synthetic_jpegs(count: int, size: int, seed: int) -> list[bytes]:
    """``count`` distinct ``size`` x ``size`` RGB images encoded as JPEG (quality 90)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    out = []
    for _ in range(count):
        img = np.empty((size, size, 3), dtype=np.float32)
        for ch in range(3):
            a, b, c = rng.uniform(-1, 1, 3)
            img[..., ch] = 128 + 60 * np.sin(6 * (a * xx + b * yy) + c)
        for _ in range(4):  # a few soft blobs so crops differ
            cx, cy, r = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.05, 0.3)
            mask = np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * r * r))
            img += mask[..., None] * rng.uniform(-80, 80, 3)
        img += rng.normal(0, 8, img.shape)
        buf = io.BytesIO()
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB").save(
            buf, format="JPEG", quality=90
        )
        out.append(buf.getvalue())
    return out


def augment(data: bytes, out_size: int, rng: np.random.Generator) -> np.ndarray:
    """Decode one JPEG and apply the training-time augmentations; returns CHW float32."""
    img = Image.open(io.BytesIO(data)).convert("RGB")
    w, h = img.size
    scale = rng.uniform(0.35, 1.0)  # random-resized crop, as in ImageNet training
    cw = max(8, int(w * np.sqrt(scale)))
    ch = max(8, int(h * np.sqrt(scale)))
    x0 = int(rng.integers(0, w - cw + 1))
    y0 = int(rng.integers(0, h - ch + 1))
    img = img.resize(
        (out_size, out_size), Image.Resampling.BILINEAR, box=(x0, y0, x0 + cw, y0 + ch)
    )
    arr = np.asarray(img, dtype=np.float32) * (1.0 / 255.0)
    if rng.random() < 0.5:
        arr = arr[:, ::-1, :]
    arr = np.clip(arr * rng.uniform(0.8, 1.2), 0.0, 1.0)  # brightness jitter
    arr = (arr - MEAN) / STD
    return np.ascontiguousarray(arr.transpose(2, 0, 1))


def _worker(
    wid: int,
    images: list[bytes],
    indices: range,
    out_size: int,
    seed: int,
    start: Barrier,
    results: mp.Queue,  # type: ignore[type-arg]
) -> None:
    rng = np.random.default_rng([seed, wid])
    augment(images[0], out_size, rng)  # warm-up: imports, allocator, decoder tables
    start.wait(timeout=STARTUP_TIMEOUT_S)
    checksum = 0.0
    for i in indices:
        checksum += float(augment(images[i % len(images)], out_size, rng)[0, 0, 0])
    results.put((wid, len(indices), checksum))


def run(workers: int, samples: int, image_size: int, out_size: int, seed: int) -> tuple[int, float]:
    """Process ``samples`` samples on ``workers`` processes; returns (samples, seconds)."""
    images = synthetic_jpegs(32, image_size, seed)
    ctx = mp.get_context("fork") if sys.platform.startswith("linux") else mp.get_context()
    start = ctx.Barrier(workers + 1)
    results = ctx.Queue()
    shares = [range(k, samples, workers) for k in range(workers)]
    procs = [
        ctx.Process(
            target=_worker,
            args=(k, images, shares[k], out_size, seed, start, results),
            daemon=True,
        )
        for k in range(workers)
    ]
    for p in procs:
        p.start()
    start.wait(timeout=STARTUP_TIMEOUT_S)  # BrokenBarrierError if a worker died starting
    t0 = time.perf_counter()
    done = 0
    waiting = len(procs)
    while waiting:
        try:
            _, n, _ = results.get(timeout=1.0)
        except queue.Empty:
            # A worker that died never reports: fail instead of waiting forever.
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"a worker exited with status {dead[0]}") from None
            continue
        done += n
        waiting -= 1
    elapsed = time.perf_counter() - t0
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"worker exited with status {p.exitcode}")
    return done, elapsed


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; prints the throughput line last."""
    p = argparse.ArgumentParser(
        prog="python -m synergy_opt.profiling.workload", description=__doc__.splitlines()[0]
    )
    p.add_argument("--workers", type=positive_int, required=True, help="decode/augment processes")
    p.add_argument("--samples", type=positive_int, default=1200, help="samples in the timed run")
    p.add_argument("--image-size", type=positive_int, default=160, help="source JPEG side (px)")
    p.add_argument("--out-size", type=positive_int, default=112, help="augmented sample side (px)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    done, seconds = run(args.workers, args.samples, args.image_size, args.out_size, args.seed)
    out = sys.stdout
    out.write(f"workers: {args.workers}\nsamples: {done}\nseconds: {seconds:.4f}\n")
    out.write(f"throughput: {done / seconds:.2f} samples/s\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
