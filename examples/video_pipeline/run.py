#!/usr/bin/env python3
"""A stream of video clips through lact, two jobs in flight.

    PYTHONPATH=build/python /usr/bin/python3 examples/video_pipeline/run.py --out OUT
    (--quick: the reduced size the tests run)

1. Clips are rendered procedurally (discs moving over a drifting gradient),
   T frames of S x S pixels each.
2. Each frame's 8 x 8 patches become tokens: 192 pixel values and the
   patch's place in the clip (frame, row, column), zero-padded to the
   model's input width (256 for preset:small); a clip of 1,024 frames of
   256 x 256 is 1,048,576 tokens.
3. The clips go to the service as a pipeline: while clip k's job runs,
   clip k + 1 is rendered and submitted, so it is staged behind clip k on
   the same workers (its bytes sent while clip k computes) and its compute
   starts the moment clip k's ends.
4. Each job's output tokens are decoded back to frames by a linear readout
   (ridge regression) calibrated on the clip's key frame, whose pixels a
   codec would send: its other frames come from the service's tokens alone.
   Every clip's frames, rendered and decoded, side by side in a PNG; the
   decoded frames' PSNR (key frame excluded), each job's compute, each
   worker's idle time before it, and the pipeline's sustained rate in
   summary.json.
"""

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

import lact

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from local_cluster import LocalCluster  # noqa: E402

PATCH = 8
PIXELS = PATCH * PATCH * 3


def render_clip(rng, frames: int, size: int) -> np.ndarray:
    """[frames, size, size, 3] float32 in [0, 1]: discs moving over a gradient."""
    t = np.arange(frames, dtype=np.float32)[:, None, None]
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    phase = rng.uniform(0, 2 * np.pi, 3).astype(np.float32)
    video = np.empty((frames, size, size, 3), np.float32)
    for c in range(3):
        video[..., c] = 0.35 + 0.25 * np.sin(2 * np.pi * (xx + yy) + phase[c] + t * 0.02)
    for _ in range(3):
        y0, x0 = rng.uniform(0.2, 0.8, 2)
        vy, vx = rng.uniform(-0.004, 0.004, 2)
        radius = rng.uniform(0.06, 0.15)
        colour = rng.uniform(0, 1, 3).astype(np.float32)
        cy = (y0 + vy * t) % 1.0
        cx = (x0 + vx * t) % 1.0
        inside = (yy - cy) ** 2 + (xx - cx) ** 2 < radius ** 2
        video[inside] = colour
    return video


def clip_tokens(video: np.ndarray, width: int) -> np.ndarray:
    """[frames * (S/8)^2, width] float32: each patch's pixels and its place."""
    frames, size = video.shape[0], video.shape[1]
    n = size // PATCH
    patches = video.reshape(frames, n, PATCH, n, PATCH, 3).transpose(0, 1, 3, 2, 4, 5)
    patches = patches.reshape(frames * n * n, PIXELS)
    f, r, c = np.meshgrid(np.arange(frames), np.arange(n), np.arange(n), indexing="ij")
    place = np.stack([f.ravel() / max(1, frames - 1), r.ravel() / n, c.ravel() / n], axis=1)
    tokens = np.zeros((patches.shape[0], width), np.float32)
    tokens[:, :PIXELS] = 2 * patches - 1
    tokens[:, PIXELS:PIXELS + 3] = place
    return tokens


def frames_from_patches(patches: np.ndarray, frames: int, size: int) -> np.ndarray:
    n = size // PATCH
    video = patches.reshape(frames, n, n, PATCH, PATCH, 3).transpose(0, 1, 3, 2, 4, 5)
    return np.clip(video.reshape(frames, size, size, 3), 0, 1)


def fit_readout(outputs: np.ndarray, patches: np.ndarray, rows: int = 65536,
                ridge: float = 1.0) -> np.ndarray:
    """Ridge regression from output tokens (with a bias) to patch pixels."""
    pick = np.random.default_rng(0).choice(len(outputs), min(rows, len(outputs)), replace=False)
    x = np.hstack([outputs[pick], np.ones((len(pick), 1), np.float32)]).astype(np.float64)
    gram = x.T @ x + ridge * len(pick) * np.eye(x.shape[1]) / x.shape[1]
    return np.linalg.solve(gram, x.T @ patches[pick].astype(np.float64)).astype(np.float32)


def decode(outputs: np.ndarray, readout: np.ndarray) -> np.ndarray:
    return np.hstack([outputs, np.ones((len(outputs), 1), np.float32)]) @ readout


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    return float(10 * np.log10(1.0 / max(1e-12, float(np.mean((a - b) ** 2)))))


def save_strip(path: Path, rendered: np.ndarray, decoded: np.ndarray, shown: int = 4):
    """`shown` frames spread over the clip: rendered above, decoded below."""
    picks = np.linspace(0, len(rendered) - 1, shown).astype(int)
    rows = [np.concatenate(list(v[picks]), axis=1) for v in (rendered, decoded)]
    Image.fromarray((np.concatenate(rows, axis=0) * 255).astype(np.uint8)).save(path)


def run_pipeline(client, args, out: Path) -> dict:
    """Renders, submits (two in flight), decodes; returns the summary."""
    rng = np.random.default_rng(args.seed)
    in_flight = collections.deque()  # (clip index, rendered frames, job)
    rows = []
    start = time.monotonic()
    for k in range(args.clips + 1):
        if k < args.clips:  # the next clip is prepared while the last one runs
            video = render_clip(rng, args.frames, args.size)
            job = client.submit(args.model, clip_tokens(video, args.width), workers=2,
                                dtype=args.dtype)
            in_flight.append((k, video, job))
        if len(in_flight) == 2 or (k == args.clips and in_flight):
            index, video, job = in_flight.popleft()
            result = job.result()
            n = args.size // PATCH
            truth = video.reshape(args.frames, n, PATCH, n, PATCH, 3).transpose(
                0, 1, 3, 2, 4, 5).reshape(-1, PIXELS)
            key = args.key_frames * n * n  # the key frames' tokens calibrate the readout
            readout = fit_readout(result.output[:key], truth[:key])
            decoded = frames_from_patches(decode(result.output, readout), args.frames, args.size)
            save_strip(out / f"clip_{index}.png", video, decoded)
            stats = result.stats
            later = slice(args.key_frames, None)
            rows.append({"clip": index, "psnr": psnr(decoded[later], video[later]),
                         # the key frame shown for every later frame
                         "repeat_key_psnr": psnr(video[args.key_frames - 1][None], video[later]),
                         "compute_seconds": stats["compute_seconds"],
                         "upload_seconds": stats["upload_seconds"],
                         "worker_idle_seconds": [float(x) for x in
                                                 stats.get("worker_idle_seconds", [])]})
            print(f"clip {index}: {len(result.output)} tokens, compute "
                  f"{stats['compute_seconds']:.1f} s, decoded PSNR {rows[-1]['psnr']:.1f} dB (the key "
                  f"frame repeated: {rows[-1]['repeat_key_psnr']:.1f} dB), "
                  f"workers idle before it {rows[-1]['worker_idle_seconds']}", flush=True)
    wall = time.monotonic() - start
    tokens = args.frames * (args.size // PATCH) ** 2
    compute = sorted(r["compute_seconds"] for r in rows)[len(rows) // 2]
    return {"clips": rows, "tokens_per_clip": tokens, "wall_seconds": wall,
            "sustained_tokens_per_second": args.clips * tokens / wall,
            "compute_only_tokens_per_second": tokens / compute,
            "max_idle_seconds": max((max(r["worker_idle_seconds"]) for r in rows[1:]
                                     if r["worker_idle_seconds"]), default=0.0)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--server", help="a running cluster; default: start `lact local`")
    parser.add_argument("--lact", default=str(Path(__file__).resolve().parents[2] / "build" /
                                              "bin" / "lact"))
    parser.add_argument("--model", default="preset:small")
    parser.add_argument("--width", type=int, default=256, help="the model's input width")
    parser.add_argument("--clips", type=int, default=4)
    parser.add_argument("--frames", type=int, default=1024)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--dtype", default="f32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--key-frames", type=int, default=1,
                        help="frames per clip whose pixels calibrate its readout")
    parser.add_argument("--quick", action="store_true", help="3 clips of 16 frames of 64 x 64")
    args = parser.parse_args()
    if args.quick:
        args.clips, args.frames, args.size, args.key_frames = 3, 16, 64, 4
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.server:
        summary = run_pipeline(lact.Client(args.server), args, out)
    else:
        with tempfile.TemporaryDirectory() as folder, \
                LocalCluster(args.lact, Path(folder), 2) as c:
            summary = run_pipeline(lact.Client(c.address), args, out)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"{args.clips} clips of {summary['tokens_per_clip']} tokens: sustained "
          f"{summary['sustained_tokens_per_second']:.0f} tokens/s, compute-only "
          f"{summary['compute_only_tokens_per_second']:.0f} tokens/s; workers idle between "
          f"clips at most {summary['max_idle_seconds']:.3f} s")


if __name__ == "__main__":
    sys.exit(main())
