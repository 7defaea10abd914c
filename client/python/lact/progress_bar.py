"""show_progress: follow a Job on the terminal, with tqdm if it is installed."""

import sys


def _describe(p) -> str:
    if p.stage == "QUEUED":
        return f"queued ({p.queue_position - 1} jobs ahead)" if p.queue_position > 1 else \
            "queued (next in line)"
    if p.stage == "QUERIES":
        return "running query sets"
    if p.stage == "COORDINATOR_AWAY":
        return "waiting for the coordinator (the job runs on)"
    return p.stage.lower()


def show_progress(job, file=None):
    """Follows ``job`` until it ends, then returns job.result() (raising its
    LactError). Draws a tqdm bar (upload in tokens, then layers) when tqdm is
    importable, else prints one line per event to ``file`` (stderr)."""
    file = file or sys.stderr
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    bar, stage = None, None
    for p in job.progress():
        done, total = ((p.tokens_done, p.tokens_total) if p.stage == "UPLOAD"
                       else (p.layers_done, p.layers_total))
        if tqdm is None:
            rate = f", {p.tokens_per_second:,.0f} tokens/s" if p.tokens_per_second > 0 else ""
            eta = f", ETA {p.eta:.0f} s" if p.eta is not None else ""
            print(f"[{p.elapsed:6.1f} s] {_describe(p)} {done}/{total}{rate}{eta}", file=file,
                  flush=True)
            continue
        if p.stage != stage:
            if bar is not None:
                bar.close()
            bar, stage = tqdm(total=total or None, desc=_describe(p), file=file), p.stage
        bar.update(done - bar.n)
    if bar is not None:
        bar.close()
    return job.result()
