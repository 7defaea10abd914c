#!/usr/bin/env python3
"""Novel views of small procedural scenes: a tiny LaCT-BiMamba model trained with
lact.torch on CPU, converted, served by `lact local`, queried for new views.

    PYTHONPATH=build/python /usr/bin/python3 examples/view_synthesis/run.py --out OUT
    (add --quick for the reduced size the tests run)

1. Scenes (scene.py) and their posed views become tokens as LaCT's view
   synthesis makes them (tokens.py): input views with their pixels, target views
   with their rays only.
2. The model learns, a batch of scenes per step, to give each target token its patch's
   colours (a sigmoid of its output) after its fast weights trained on the input
   views: the job's context is the input views, its query set the target view.
3. Its state dict is converted (`python -m lact.convert torch`) and served by
   `lact local`; for held-out scenes, a job per scene takes the input views and
   a Query against its retained state renders the target view.
4. Per scene a PNG: the input views, the true target view, the service's, and
   the baseline (the mean of the input views); PSNRs in summary.json.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import scene  # noqa: E402
import tokens  # noqa: E402
from local_cluster import LocalCluster  # noqa: E402
MODEL_NAME = "nvs-tiny"


def model_config(size_args):
    patch = size_args.patch
    return {"d_model": 64, "n_layers": 2, "d_input": patch * patch * tokens.CHANNELS,
            "d_output": patch * patch * 3,
            "ssm": {"expand": 2, "head_dim": 16, "d_state": 16, "conv_width": 4},
            "ttt": {"head_dim": 32, "inter_multi": 2, "base_lr": 0.1, "muon_steps": 0,
                    "chunk_tokens": 0},
            "mlp": {"hidden": 128}}


def example(seed, args):
    """One scene: its tokens, the target view, and the baseline."""
    rng = np.random.default_rng(seed)
    s = scene.random_scene(rng)
    images, fxfycxcy, c2w = scene.posed_views(rng, s, args.input_views + 1, args.size)
    return {"context": tokens.context_tokens(images[:-1], fxfycxcy[:-1], c2w[:-1], args.patch),
            "target": tokens.target_tokens(fxfycxcy[-1:], c2w[-1:], args.size, args.patch),
            "truth": images[-1], "inputs": images[:-1],
            "patches": tokens.patchify(images[-1:], args.patch).astype(np.float32),
            "baseline": images[:-1].mean(axis=0)}


def psnr(image, truth):
    return float(10 * np.log10(1.0 / np.mean((np.asarray(image) - truth) ** 2)))


def batch(step, args):
    """A training batch: `args.batch` scenes' tokens and target patches, stacked."""
    examples = [example(step * args.batch + b, args) for b in range(args.batch)]
    return {k: torch.from_numpy(np.stack([ex[k] for ex in examples]))
            for k in ("context", "target", "patches")}


def train(model, args):
    """Adam on a batch of scenes per step; returns the loss curve (mean per report)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, args.steps)
    curve, window, start = [], [], time.monotonic()
    for step in range(args.steps):
        b = batch(step, args)
        _, (query,), _ = model.run(b["context"], [b["target"]])  # [B, L, .]: one batched job
        loss = torch.mean((torch.sigmoid(query) - b["patches"]) ** 2)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        window.append(loss.item())
        if (step + 1) % args.report == 0 or step + 1 == args.steps:
            curve.append(float(np.mean(window)))
            print(f"step {step + 1}/{args.steps}: loss {curve[-1]:.4f} "
                  f"(PSNR {10 * np.log10(1 / curve[-1]):.2f} dB), "
                  f"{time.monotonic() - start:.0f} s", flush=True)
            window = []
    return curve


def convert(model, folder):
    """torch.save of the state dict, then `python -m lact.convert torch` into the
    model folder the cluster serves."""
    state = folder / "state.pt"
    torch.save(model.state_dict(), state)
    out = folder / "models" / f"{MODEL_NAME}.safetensors"
    out.parent.mkdir(exist_ok=True)
    subprocess.run([sys.executable, "-m", "lact.convert", "torch", str(state), str(out)],
                   check=True, stdout=subprocess.DEVNULL)
    return out.parent


def row_png(ex, rendered, path, scale=4):
    """inputs | truth | service | baseline, side by side, each `scale` times larger."""
    tiles = list(ex["inputs"]) + [ex["truth"], rendered, ex["baseline"]]
    gap = np.ones((ex["truth"].shape[0], 2, 3))
    strip = np.concatenate([t for tile in tiles for t in (tile, gap)][:-1], axis=1)
    image = Image.fromarray((np.clip(strip, 0, 1) * 255).round().astype(np.uint8))
    image.resize((image.width * scale, image.height * scale), Image.NEAREST).save(path)


def evaluate(model, cluster, args, out):
    """Held-out scenes through the service: PSNRs and the PNGs."""
    import lact  # the client; the twin and the training need only torch
    client = lact.Client(cluster.address)
    rows = []
    try:
        for k in range(args.test_scenes):
            ex = example(10_000_000 + k, args)
            job = client.submit(MODEL_NAME, ex["context"], return_state=False,
                                retain_seconds=600).result(timeout=300)
            (served,) = client.query(job.job_id, [ex["target"]], timeout=300)
            with torch.no_grad():
                _, (twin,), _ = model.run(ex["context"], [ex["target"]])
            rendered = tokens.unpatchify(1 / (1 + np.exp(-served)), 1, args.size, args.patch)[0]
            row_png(ex, rendered, out / f"scene_{k}.png")
            rows.append({"scene": k, "psnr": psnr(rendered, ex["truth"]),
                         "baseline_psnr": psnr(ex["baseline"], ex["truth"]),
                         "service_vs_twin": float(np.max(np.abs(served - twin.numpy()))
                                                  / np.max(np.abs(twin.numpy())))})
            print(f"scene {k}: PSNR {rows[-1]['psnr']:.2f} dB, mean input view "
                  f"{rows[-1]['baseline_psnr']:.2f} dB", flush=True)
    finally:
        client.close()
    return rows


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for the PNGs and summary.json")
    p.add_argument("--quick", action="store_true",
                   help="the reduced size the tests run: 40 steps of 2 scenes, 2 test scenes")
    p.add_argument("--steps", type=int, default=2000, help="training steps")
    p.add_argument("--batch", type=int, default=4, help="scenes per training step")
    p.add_argument("--test-scenes", type=int, default=6)
    p.add_argument("--size", type=int, default=32, help="view width and height in pixels")
    p.add_argument("--patch", type=int, default=4)
    p.add_argument("--input-views", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--report", type=int, default=100, help="steps per progress line")
    p.add_argument("--lact", default=str(HERE.parents[1] / "build" / "bin" / "lact"),
                   help="the lact command (default: this checkout's build)")
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.batch, args.test_scenes, args.report = 40, 2, 2, 10
    return args


def main(argv=None):
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    import lact.torch as lt
    model = lt.LactModel(model_config(args), dtype=torch.float32, seed=0)
    start = time.monotonic()
    curve = train(model, args)
    train_seconds = time.monotonic() - start
    with tempfile.TemporaryDirectory(prefix="lact-nvs-example-") as tmp:
        models = convert(model, Path(tmp))
        with LocalCluster(args.lact, Path(tmp), args.workers, models) as cluster:
            rows = evaluate(model, cluster, args, out)
    summary = {"steps": args.steps, "batch": args.batch, "train_seconds": round(train_seconds, 1),
               "loss_curve": curve, "scenes": rows,
               "mean_psnr": float(np.mean([r["psnr"] for r in rows])),
               "mean_baseline_psnr": float(np.mean([r["baseline_psnr"] for r in rows])),
               "config": model.config}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"{args.steps} steps of {args.batch} scenes in {train_seconds:.0f} s; held-out mean PSNR "
          f"{summary['mean_psnr']:.2f} dB against {summary['mean_baseline_psnr']:.2f} dB for "
          f"the mean input view; PNGs in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
