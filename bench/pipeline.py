"""Pipeline benchmark: a stream of jobs through a local cluster of workers,
from the Python client and from the command line, one at a time (each job
submitted when the one before it ended) and two in flight (the next job
submitted while the one before it runs: it is staged behind it on the same
workers, its bytes sent while that one computes).

For each client, dtype and mode it prints the sustained rate (context tokens
of all jobs over the time from the first submit to the last result) against
the workers' compute-only rate measured in the same run (context tokens over
the median compute time, the slowest worker's, of the jobs run one at a
time, whose compute nothing else shared the machine with), each rank's
worker's idle time between one job's compute and the next (JobStats
worker_idle_seconds, of every job after the first), and the uploads' rate
(JobStats: from the first byte of each shard's stream reaching its worker
to the last), the Python client's beside the command line's.

The Python client moves its jobs' bytes through build/python's
liblact_transfer.so (lact.native), or, with LACT_NATIVE_TRANSFERS=0,
through gRPC's Python library; the output and the JSON say which.

The Python client's bf16 jobs send a torch.bfloat16 tensor, made once
before the stream (a pipeline that works in bf16 holds its tokens so);
--bf16-input float32 hands it the float32 array instead, which it rounds
to bf16 for every job. The command line reads the float32 .npy file and
rounds it itself.

Run: /usr/bin/python3 bench/pipeline.py [--tokens 1048576] [--jobs 3]
     [--model preset:small] [--dtypes f32,bf16] [--clients python,cli]
     [--modes serial,two] [--workers 2] [--bf16-input torch|float32]
     [--rounds 1] [--json FILE]
Needs a build (scripts/build): build/bin/lact and build/python.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
LACT = ROOT / "build" / "bin" / "lact"
sys.path.insert(0, str(ROOT / "build" / "python"))
import lact  # noqa: E402  (the package generated into build/python)
import lact.native  # noqa: E402


def start_cluster(workers: int, data_root: str) -> (subprocess.Popen, str):
    """`lact local` on a free port; returns it and its address."""
    local = subprocess.Popen([str(LACT), "local", "--workers", str(workers), "--port", "0",
                              "--data-root", data_root],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in local.stdout:
        if "coordinator at " in line:
            address = line.split("coordinator at ")[1].split()[0]
            threading.Thread(target=local.stdout.read, daemon=True).start()
            return local, address
    raise RuntimeError("lact local ended before it said where its coordinator is")


class Runner:
    """Runs one job and returns (submitted, ended, stats dict)."""

    def __init__(self, address: str, model: str, context: np.ndarray, npy: str, workers: int,
                 bf16_input: str):
        self.address, self.model, self.npy, self.workers = address, model, npy, workers
        self.contexts = {"f32": context, "bf16": context}
        if bf16_input == "torch":
            import torch
            self.contexts["bf16"] = torch.from_numpy(context).bfloat16()
        self.client = lact.Client(address)

    def python(self, dtype: str):
        submitted = time.monotonic()
        result = self.client.submit(self.model, self.contexts[dtype], workers=self.workers,
                                    dtype=dtype).result()
        return submitted, time.monotonic(), result.stats

    def cli(self, dtype: str):
        """`lact submit`, its outputs written to a file beside the context."""
        with tempfile.NamedTemporaryFile(dir=os.path.dirname(self.npy),
                                         suffix=".safetensors") as out_file:
            submitted = time.monotonic()
            out = subprocess.run([str(LACT), "submit", "--server", self.address, "--model",
                                  self.model, "--context", self.npy, "--workers",
                                  str(self.workers), "--dtype", dtype, "--out", out_file.name,
                                  "--json"], check=True, capture_output=True, text=True).stdout
            return submitted, time.monotonic(), json.loads(out)["stats"]


def run_stream(job, jobs: int, in_flight: int):
    """`jobs` runs of `job()`, at most `in_flight` at once, each started as
    soon as one ends; their (submitted, ended, stats) in submit order."""
    results = [None] * jobs
    slots = threading.Semaphore(in_flight)
    threads = []

    def one(k):
        try:
            results[k] = job()
        finally:
            slots.release()

    for k in range(jobs):
        slots.acquire()
        if k > 0 and in_flight > 1:
            time.sleep(0.5)  # the job before it takes its place in line first
        t = threading.Thread(target=one, args=(k,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    if any(r is None for r in results):
        raise RuntimeError("a job of the stream failed")
    return results


def summarize(results, tokens: int) -> dict:
    first = min(r[0] for r in results)
    last = max(r[1] for r in results)
    idle = [[float(x) for x in r[2].get("worker_idle_seconds", [])] for r in results[1:]]
    return {
        "jobs": len(results),
        "wall_seconds": last - first,
        "sustained_tokens_per_second": len(results) * tokens / (last - first),
        "compute_seconds": [r[2]["compute_seconds"] for r in results],
        "idle_between_jobs_seconds": idle,
        "max_idle_seconds": max((max(i) for i in idle if i), default=0.0),
        # The share of the stream's wall time the workers computed: robust to
        # a host whose speed drifts between rows, which the ratio is not.
        "busy_fraction": sum(r[2]["compute_seconds"] for r in results) / (last - first),
        "upload_mb_per_second": [r[2]["upload_mb_per_second"] for r in results],
        "upload_seconds": [r[2]["upload_seconds"] for r in results],
    }


def compare(rows, tokens: int):
    """Adds each row's compute-only rate (its dtype's jobs run one at a time
    in the same round, else its own) and its sustained rate's ratio to it,
    and prints the row."""
    for row in rows:
        serial = [c for r in rows if r["dtype"] == row["dtype"] and r["mode"] == "serial"
                  and r["round"] == row["round"] for c in r["compute_seconds"]]
        serial = serial or row["compute_seconds"]
        row["compute_only_tokens_per_second"] = tokens / statistics.median(serial)
        row["sustained_over_compute"] = (row["sustained_tokens_per_second"] /
                                         row["compute_only_tokens_per_second"])
        print(f"round {row['round']} {row['dtype']:4} {row['client']:6} {row['mode']:6}: "
              f"{row['jobs']} jobs of "
              f"{tokens} tokens in {row['wall_seconds']:.1f} s: sustained "
              f"{row['sustained_tokens_per_second']:.0f} tokens/s = "
              f"{row['sustained_over_compute']:.3f} of compute-only "
              f"{row['compute_only_tokens_per_second']:.0f}; computing "
              f"{row['busy_fraction']:.3f} of the time; idle between jobs "
              f"<= {row['max_idle_seconds']:.3f} s per worker; upload "
              f"{statistics.median(row['upload_mb_per_second']):.0f} MB/s (median)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=1 << 20)
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--model", default="preset:small")
    parser.add_argument("--dtypes", default="f32,bf16")
    parser.add_argument("--clients", default="python,cli")
    parser.add_argument("--modes", default="serial,two")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1,
                        help="times to run every row, each round's ratios against its own "
                        "one-at-a-time jobs (a host whose speed drifts moves both alike)")
    parser.add_argument("--bf16-input", choices=("torch", "float32"), default="torch",
                        help="what the Python client's bf16 jobs are given")
    parser.add_argument("--json", help="where to write the raw results")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as work:
        context = np.random.default_rng(0).standard_normal((args.tokens, 256), dtype=np.float32)
        npy = os.path.join(work, "context.npy")
        np.save(npy, context)
        local, address = start_cluster(args.workers, work)
        try:
            runner = Runner(address, args.model, context, npy, args.workers, args.bf16_input)
            warm = context[:65536] if args.tokens > 65536 else context
            runner.client.submit(args.model, warm, workers=args.workers).result()
            rows = []
            for round_index in range(args.rounds):
                for dtype in args.dtypes.split(","):
                    for client in args.clients.split(","):
                        for mode in args.modes.split(","):
                            job = lambda: getattr(runner, client)(dtype)  # noqa: E731
                            results = run_stream(job, args.jobs, 2 if mode == "two" else 1)
                            row = {"round": round_index, "dtype": dtype, "client": client,
                                   "mode": mode, **summarize(results, args.tokens)}
                            rows.append(row)
                            print(f"round {round_index} {dtype} {client} {mode}: "
                                  f"{row['wall_seconds']:.1f} s", file=sys.stderr, flush=True)
        finally:
            local.terminate()
            local.wait(timeout=60)
    compare(rows, args.tokens)
    rates = {}  # dtype -> client -> the uploads of its one-at-a-time jobs, every round
    for row in rows:
        if row["mode"] == "serial":
            rates.setdefault(row["dtype"], {}).setdefault(row["client"], []).extend(
                row["upload_mb_per_second"])
    uploads = {dtype: {client: statistics.median(r) for client, r in by_client.items()}
               for dtype, by_client in rates.items()}
    for dtype, by_client in uploads.items():
        if "python" in by_client and "cli" in by_client:
            print(f"{dtype:4} upload, one job at a time: python {by_client['python']:.0f} MB/s, "
                  f"cli {by_client['cli']:.0f} MB/s: python/cli = "
                  f"{by_client['python'] / by_client['cli']:.2f}")
    transfers = "liblact_transfer.so" if lact.native.available() else "grpcio"
    print(f"the Python client's transfers: {transfers}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tokens": args.tokens, "model": args.model, "workers": args.workers,
                       "bf16_input": args.bf16_input, "python_transfers": transfers,
                       "rows": rows, "upload_mb_per_second_serial": uploads}, f, indent=1)


if __name__ == "__main__":
    main()
