"""Client: the lact Coordinator service, and the workers' ShardData service
for bulk bytes, from Python.

Every call has a deadline (its ``timeout``, or the defaults below, as the
C++ client and the CLI use) and raises LactError on failure. A Client may be
used from several threads; close() (or ``with``) closes its channels.
"""

import dataclasses
import json
import os
import threading
import time
from typing import Any, Dict, List, Optional

import grpc

from . import codec, native
from .errors import LactError, from_rpc_error, invalid
from .job import Job, Progress, Result, message_dict, results_from
from .transfers import JobTransfers
from .v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc

DEFAULT_JOB_TIMEOUT = 24 * 3600.0
DEFAULT_QUERY_TIMEOUT = 3600.0
DEFAULT_WATCH_TIMEOUT = 24 * 3600.0
DEFAULT_FETCH_TIMEOUT = 3600.0
UNARY_TIMEOUT = 30.0

# gRPC's retries of the coordinator's calls that only read: one that fails
# UNAVAILABLE before any answer (the coordinator went away as it was sent)
# is made again after 0.1 s doubling to 1 s, at most 5 attempts; as the
# calls wait for the channel to be ready, an attempt rides a restart out.
_READS_RETRY_CONFIG = json.dumps({"methodConfig": [{
    "name": [{"service": "lact.v1.CoordinatorService", "method": m}
             for m in ("GetJob", "ListJobs", "ListModels", "ListWorkers")],
    "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "1s",
                    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]})

# Every lact channel receives messages up to 64 MiB (common/wire_limits.h)
# and pings as the servers expect (proto/keepalive.h).
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # A coordinator back from a restart is reached within 2 s, not after
    # gRPC's default backoff of up to 2 minutes.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.service_config", _READS_RETRY_CONFIG),
    # Bulk bytes in 4 MiB frames with 32 MiB in flight per stream, as the
    # C++ client sends them (proto/bulk_transport.cc).
    ("grpc.http2.max_frame_size", 4 << 20),
    ("grpc.http2.lookahead_bytes", 32 << 20),
]
_MIN_TOKEN_BYTES = 16  # proto/auth.h kMinSecretBytes


@dataclasses.dataclass(frozen=True)
class FileRef:
    """A file inside the cluster's --data-root (the tenant's folder of it when
    the cluster takes tokens) that the workers read or write themselves:
    submit's ``context`` (``tensor`` names a .safetensors file's tensor) or
    ``output`` (an .npy; one that exists is replaced only with ``replace``).
    The C++ client's FileRef (client/job_io.h) has the same fields."""
    path: str
    tensor: str = ""
    replace: bool = False


@dataclasses.dataclass(frozen=True)
class Model:
    """A model the cluster serves: its name for submit(), how many healthy
    workers hold it, and its config (docs/model.md, Configuration) as a dict."""
    name: str
    workers: int
    config: Dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Worker:
    """A worker the coordinator knows (ListWorkers): ``healthy`` (leasable
    now), ``leased`` (a job holds it), ``draining`` (it got SIGTERM and
    takes no new work), ``seconds_since_heartbeat``, ``models`` it holds."""
    address: str
    backend: str
    healthy: bool
    leased: bool
    draining: bool
    seconds_since_heartbeat: float
    models: List[str]
    id: str


@dataclasses.dataclass(frozen=True)
class JobStatus:
    """A job as GetJob/WatchJob/CancelJob/ListJobs tell it. ``status``:
    "QUEUED", "RUNNING", "SUCCEEDED", "FAILED" or "CANCELLED"; ``error``: why
    it failed; ``results_retained``: FetchResult still returns its in-band
    results (``outputs_retained``: the context's outputs among them; without
    them, the query outputs and state); ``results_dropped``: why results are
    no longer retained (the worker's words); ``progress``: the latest while it runs (or None); ``stats``:
    JobStats as a dict; ``proto``: the JobInfo message itself."""
    job_id: str
    model: str
    status: str
    error: str
    context_tokens: int
    workers: int
    state_retained: bool
    results_retained: bool
    results_dropped: str
    expires_unix_seconds: int
    progress: Optional[Progress]
    stats: Dict[str, Any]
    proto: Any
    outputs_retained: bool = False

    @classmethod
    def from_proto(cls, info) -> "JobStatus":
        return cls(info.job_id, info.model, coordinator_pb2.JobInfo.Status.Name(info.status),
                   info.error, info.context_tokens, info.workers, info.state_retained,
                   info.results_retained, info.results_dropped, info.expires_unix_seconds,
                   Progress.from_proto(info.progress) if info.HasField("progress") else None,
                   message_dict(info.stats), info, info.outputs_retained)


def _read_file(path: str, what: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        raise invalid(f"cannot read {what} '{path}': {e.strerror}") from None


class Client:
    """A client of the coordinator at ``address`` ("host:port").

    ``token``: the bearer token of a cluster that requires one, else the
    first line of ``token_file`` or of $LACT_TOKEN_FILE. ``tls_ca``: a PEM
    file of the CA that signs the cluster's certificates (else $LACT_TLS_CA):
    every call then goes over TLS, to the coordinator and to the workers.
    The token goes to the coordinator only; workers take the job's ticket.
    """

    def __init__(self, address: str, token: str = None, tls_ca: str = None,
                 token_file: str = None):
        token_file = token_file or os.environ.get("LACT_TOKEN_FILE") or None
        if token is None and token_file:
            lines = _read_file(token_file, "token file").splitlines()
            token = lines[0].strip() if lines else ""
            if len(token) < _MIN_TOKEN_BYTES:
                raise invalid(f"the token in '{token_file}' is {len(token)} bytes; "
                              f"need at least {_MIN_TOKEN_BYTES}")
        tls_ca = tls_ca or os.environ.get("LACT_TLS_CA") or None
        self._credentials, self._tls_roots = None, None
        if tls_ca:
            pem = _read_file(tls_ca, "--tls-ca")
            if "-----BEGIN CERTIFICATE-----" not in pem:
                raise invalid(f"tls_ca '{tls_ca}' is not a PEM certificate file")
            self._tls_roots = pem.encode()
            self._credentials = grpc.ssl_channel_credentials(root_certificates=self._tls_roots)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._address = address
        self._lock = threading.Lock()
        self._channels: Dict[str, grpc.Channel] = {}
        self._coordinator = coordinator_pb2_grpc.CoordinatorServiceStub(self._channel_for(address))
        self._keeps_jobs = False  # an answer said the coordinator keeps its jobs (--state-dir)
        self._heard = False  # the coordinator has answered a call of this client

    def _channel_for(self, address: str) -> grpc.Channel:
        """The (shared) channel to ``address``, TLS if the client has a CA."""
        with self._lock:
            channel = self._channels.get(address)
            if channel is None:
                channel = (grpc.secure_channel(address, self._credentials, CHANNEL_OPTIONS)
                           if self._credentials else
                           grpc.insecure_channel(address, CHANNEL_OPTIONS))
                self._channels[address] = channel
            return channel

    def _coordinator_listens(self, timeout: float) -> bool:
        """Whether a coordinator answers within ``timeout`` s (a ListModels
        call that waits for the channel)."""
        try:
            self._coordinator.ListModels(coordinator_pb2.ListModelsRequest(), timeout=timeout,
                                         metadata=self._metadata, wait_for_ready=True)
        except grpc.RpcError as e:
            return e.code() not in (grpc.StatusCode.UNAVAILABLE,
                                    grpc.StatusCode.DEADLINE_EXCEEDED)
        return True

    def _submit_transfers(self, accepted, context, queries, on_sent):
        """The transfers of a Submit's JobAccepted: through liblact_transfer.so
        where it is found (lact.native), else through gRPC's Python library."""
        if native.available():
            return native.NativeTransfers(accepted, context, queries, self._tls_roots, on_sent)
        return JobTransfers(self._channel_for, accepted, context, queries, on_sent=on_sent)

    def close(self):
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # Jobs.
    def submit(self, model: str, context, queries=(), *, output: FileRef = None,
               workers: int = 0, muon_steps: int = None, chunk_tokens: int = None,
               dtype: str = None, timeout: float = None, retain_seconds: int = 0,
               return_state: bool = True, shard_tokens=(), cancel_on_disconnect: bool = False,
               tenant: str = "") -> Job:
        """Submits a job and returns its Job at once (the Submit call runs on).

        ``context``: [L, width] numpy array or torch tensor (float32,
        float16, torch bfloat16), sent in band, or a FileRef the workers
        read (a .npy or .safetensors file). ``queries``: [L_k, width] each.
        ``output``: None, the outputs come back in ``Result.output``; or a
        FileRef (.npy) the workers write them to, and ``Result.output`` is
        None. ``dtype``: "f32"|"bf16"|"f16" on the wire; None = the
        context's own (f32 for float32 numpy; for a file, the query sets'
        own). ``timeout``: seconds bounding the whole job (default a day).
        Options are named as the CLI's flags. Raises LactError
        INVALID_ARGUMENT for inputs refused before sending.
        """
        queries = list(queries)
        by_reference = isinstance(context, FileRef)
        if context is None or (output is not None and not isinstance(output, FileRef)):
            raise invalid("give the context as an array or a FileRef, and the output as None "
                          "(in band) or a FileRef")
        tokens = None if by_reference else codec.as_tokens(context, dtype, "context")
        job_dtype = tokens.dtype if tokens else codec.check_dtype(dtype or "f32")
        query_tokens = [codec.as_tokens(q, job_dtype, f"query set {k}")
                        for k, q in enumerate(queries)]
        width = tokens.width if tokens else (query_tokens[0].width if query_tokens else 0)
        for k, q in enumerate(query_tokens):
            if q.width != width:
                raise invalid(f"query set {k} has width {q.width}; it must be {width} like the "
                              + ("context" if tokens else "first query set"))
        options = common_pb2.JobOptions()
        if muon_steps is not None:
            options.muon_steps = muon_steps
        if chunk_tokens is not None:
            options.chunk_tokens = chunk_tokens
        spec = coordinator_pb2.JobSpec(
            model=model, context_tokens=tokens.tokens if tokens else 0,
            token_width=width if tokens else 0,
            query_tokens=[q.tokens for q in query_tokens],
            dtype=codec.DTYPES[job_dtype] if tokens else common_pb2.DTYPE_UNSPECIFIED,
            workers=workers, options=options, return_state=return_state,
            retain_seconds=retain_seconds, shard_tokens=list(shard_tokens),
            cancel_on_disconnect=cancel_on_disconnect, tenant=tenant)
        if by_reference:
            spec.context_ref.path, spec.context_ref.tensor = context.path, context.tensor
        if output is not None:
            spec.output_ref.path, spec.output_ref.replace = output.path, output.replace
        first = queries[0] if by_reference and queries else None if by_reference else context
        return Job(self, spec, tokens, query_tokens, codec.is_torch(first),
                   timeout or DEFAULT_JOB_TIMEOUT)

    def query(self, job_id: str, queries, dtype: str = None, timeout: float = None) -> list:
        """Runs query sets against a finished job's retained state; returns one
        [L_k, output_width] float32 array per set, in order (torch if the
        first set was torch). ``dtype`` None: the first set's own."""
        queries = list(queries)
        if not queries:
            raise invalid("no query sets")
        sets = [codec.as_tokens(queries[0], dtype, "query set 0")]
        sets += [codec.as_tokens(q, sets[0].dtype, f"query set {k + 1}")
                 for k, q in enumerate(queries[1:])]
        for k, q in enumerate(sets):
            if q.width != sets[0].width:
                raise invalid(f"query set {k} has width {q.width}; all must have one width")
        spec = coordinator_pb2.QuerySpec(job_id=job_id, query_tokens=[q.tokens for q in sets],
                                         token_width=sets[0].width,
                                         dtype=codec.DTYPES[sets[0].dtype])

        # The coordinator names the worker keeping the state; the sets and their
        # outputs go to and from it over one Transfer stream, as a Submit's do.
        timeout = timeout or DEFAULT_QUERY_TIMEOUT
        deadline = time.monotonic() + timeout
        transfers = None
        try:
            for response in self._coordinator.Query(coordinator_pb2.QueryRequest(spec=spec),
                                                    timeout=timeout, metadata=self._metadata):
                if response.WhichOneof("kind") == "accepted" and transfers is None:
                    transfers = JobTransfers(self._channel_for, response.accepted, None, sets)
                    transfers.start(deadline)
        except grpc.RpcError as e:
            # The query's own status says more than a broken transfer.
            if transfers is not None:
                transfers.cancel()
                try:
                    transfers.join()
                except LactError:
                    pass
            raise from_rpc_error(e) from None
        if transfers is None:
            raise LactError(grpc.StatusCode.INTERNAL, "the server ended the query unaccepted")
        transfers.join()
        return [codec.to_user(o, codec.is_torch(queries[0])) for o in transfers.queries]

    def fetch(self, job_id: str, timeout: float = None) -> Result:
        """A finished job's retained results (outputs sent in band, query
        outputs, the fused state), straight from its workers; numpy arrays.
        FAILED_PRECONDITION if the job did not succeed; NOT_FOUND if its
        results are no longer retained, saying why (expired, evicted,
        deleted) in the words of the worker that dropped them, whether the
        coordinator or that worker answers."""
        info = self.status(job_id).proto
        if info.status != coordinator_pb2.JobInfo.SUCCEEDED:
            raise LactError(grpc.StatusCode.FAILED_PRECONDITION,
                            f"job {job_id} is {coordinator_pb2.JobInfo.Status.Name(info.status)}"
                            f"{': ' + info.error if info.error else ''}; only a succeeded job "
                            "has results")
        if not info.state_retained:
            raise LactError(grpc.StatusCode.NOT_FOUND,
                            f"job {job_id}'s results are no longer retained: "
                            f"{info.results_dropped or 'the job kept none'}")
        # Once the context's outputs are gone (or never were in band), rank 0's
        # query outputs and state remain.
        transfers = JobTransfers(self._channel_for, info.accepted, fetch=True,
                                   without_outputs=not info.outputs_retained)
        transfers.start(time.monotonic() + (timeout or DEFAULT_FETCH_TIMEOUT))
        transfers.join()
        return results_from(transfers, job_id, False, info.stats, info.accepted.shards)

    # Unary calls and WatchJob.
    def _unary(self, method, request):
        try:
            response = method(request, timeout=UNARY_TIMEOUT, metadata=self._metadata,
                              wait_for_ready=True)
        except grpc.RpcError as e:
            error = from_rpc_error(e)
            if error.code == grpc.StatusCode.DEADLINE_EXCEEDED:
                error = LactError(error.code, f"{error.message}: no answer from "
                                  f"{self._address} within {UNARY_TIMEOUT:.0f} s (is a "
                                  "coordinator running there? a cluster with TLS needs tls_ca)")
            raise error from None
        self._heard = True
        return response

    def status(self, job_id: str) -> JobStatus:
        """GetJob: the job as the coordinator knows it now."""
        return JobStatus.from_proto(self._unary(self._coordinator.GetJob,
                                                coordinator_pb2.GetJobRequest(job_id=job_id)))

    def jobs(self) -> List[JobStatus]:
        """ListJobs: every job the coordinator remembers."""
        response = self._unary(self._coordinator.ListJobs, coordinator_pb2.ListJobsRequest())
        return [JobStatus.from_proto(j) for j in response.jobs]

    def cancel(self, job_id: str) -> JobStatus:
        """CancelJob (FAILED_PRECONDITION if it already ended)."""
        return JobStatus.from_proto(self._unary(self._coordinator.CancelJob,
                                                coordinator_pb2.CancelJobRequest(job_id=job_id)))

    def delete(self, job_id: str) -> None:
        """DeleteJob: forgets the job (cancelling it if it runs) and what its workers retained."""
        self._unary(self._coordinator.DeleteJob, coordinator_pb2.DeleteJobRequest(job_id=job_id))

    def models(self) -> List[Model]:
        """ListModels: the models the healthy workers hold."""
        response = self._unary(self._coordinator.ListModels, coordinator_pb2.ListModelsRequest())
        return [Model(m.name, m.workers, json.loads(m.config_json or "{}"))
                for m in response.models]

    def workers(self) -> List[Worker]:
        """ListWorkers: every worker the coordinator knows, healthy or not."""
        response = self._unary(self._coordinator.ListWorkers,
                               coordinator_pb2.ListWorkersRequest())
        return [Worker(w.address, w.backend, w.healthy, w.leased, w.draining,
                       w.seconds_since_heartbeat, list(w.models), w.id)
                for w in response.workers]

    def watch(self, job_id: str, timeout: float = None):
        """WatchJob: yields JobStatus now and at every change until the job has
        ended (the last one's status is final)."""
        try:
            for info in self._coordinator.WatchJob(
                    coordinator_pb2.WatchJobRequest(job_id=job_id),
                    timeout=timeout or DEFAULT_WATCH_TIMEOUT, metadata=self._metadata,
                    wait_for_ready=True):
                yield JobStatus.from_proto(info)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
