"""lact: a Python client of the lact service (LaCT-BiMamba jobs over gRPC).

    import lact
    c = lact.Client("127.0.0.1:PORT")
    job = c.submit("preset:small", context, queries=[q], workers=2)
    for p in job.progress(): ...
    r = job.result()   # r.output, r.queries, r.state, r.stats, r.job_id

Every failure raises lact.LactError (``code``: grpc.StatusCode, ``message``).
The gRPC stubs (lact.v1) are generated from the repository's protos at
install time (setup.py) or by build_protos.py; they are never committed.
"""

try:
    from .v1 import coordinator_pb2 as _coordinator_pb2  # noqa: F401
except ImportError as e:  # pragma: no cover - a source checkout without stubs
    raise ImportError(
        "lact's gRPC stubs (lact.v1) are missing: pip install client/python, or run "
        "client/python/build_protos.py OUT_DIR next to a copy of this package") from e

from .client import Client, JobStatus, Model, Worker
from .codec import bf16_bits, bf16_to_float32, round_bf16
from .errors import LactError
from .job import Job, Progress, Result
from .progress_bar import show_progress

__all__ = ["Client", "Job", "JobStatus", "LactError", "Model", "Progress", "Result", "Worker",
           "bf16_bits", "bf16_to_float32", "round_bf16", "show_progress"]
