"""lact: a Python client of the lact service (LaCT-BiMamba jobs over gRPC),
and the model's PyTorch twin.

    import lact
    c = lact.Client("127.0.0.1:PORT")
    job = c.submit("preset:small", context, queries=[q], workers=2)
    for p in job.progress(): ...
    r = job.result()   # r.output, r.queries, r.state, r.stats, r.job_id

Every failure raises lact.LactError (``code``: grpc.StatusCode, ``message``).
The gRPC stubs (lact.v1) are generated from the repository's protos at
install time (setup.py) or by build_protos.py; they are never committed.

The client's names are imported on first use, so that ``lact.torch`` (the
twin) and ``lact.convert`` (the converters) need only numpy and torch: a
training machine without grpcio or the stubs imports them.
"""

import importlib

# Where each of the client's names is defined.
_CLIENT_NAMES = {
    "Client": "client", "FileRef": "client", "JobStatus": "client", "Model": "client",
    "Worker": "client",
    "bf16_bits": "codec", "bf16_to_float32": "codec", "round_bf16": "codec",
    "LactError": "errors",
    "Job": "job", "Progress": "job", "Result": "job",
    "show_progress": "progress_bar",
}

__all__ = sorted(_CLIENT_NAMES)


def __getattr__(name):
    module = _CLIENT_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'lact' has no attribute {name!r}")
    try:
        importlib.import_module(".v1.coordinator_pb2", __name__)
    except ImportError as e:
        raise ImportError(
            f"lact.{name} needs grpcio, protobuf and lact's gRPC stubs (lact.v1): install "
            "the package with its client extra ('lact[client]', client/python/README.md), "
            "or run client/python/build_protos.py OUT_DIR next to a copy of this package "
            f"({e})") from e
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
