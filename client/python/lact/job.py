"""Job: one submitted job, its Submit call running on a background thread.

The thread sends the JobSpec, then for every JobAccepted (a second one
comes if the job runs again after a worker died) moves the job's bytes with
JobTransfers, while Progress messages and the final JobDone arrive on the
coordinator's stream. Job's methods may be called from any thread.
"""

import dataclasses
import secrets
import threading
import time
from typing import Any, Dict, List, Optional

import grpc

from . import codec
from .errors import LactError, from_rpc_error
from .transfers import JobTransfers
from .v1 import coordinator_pb2

_STAGES = coordinator_pb2.Progress.Stage

# How often a Submit call lost to its coordinator going away is made again:
# after 0.1 s, doubling to at most 2 s, until the job's deadline.
_FIRST_BACKOFF, _MOST_BACKOFF = 0.1, 2.0
# How long a Submit call that its coordinator never answered (it went away
# as the call was sent), one that had answered the client before, waits
# for a coordinator to listen again: a restart's length. Made again with
# its request_id, the call follows the job if the first admitted it, and
# admits it otherwise.
_UNANSWERED_WAITS = 30.0
# On every status of the coordinator's own, and on the answers of one that
# keeps its jobs across restarts (proto/metadata_keys.h).
_COORDINATOR_STATUS_KEY = "lact-coordinator-status"
_KEEPS_JOBS_KEY = "lact-coordinator-keeps-jobs"


def _coordinator_went_away(error: grpc.RpcError) -> bool:
    """Whether a Submit call lost its coordinator, rather than hearing its
    job's end or running out of time."""
    code = error.code() if hasattr(error, "code") else None
    if code in (None, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
        return False
    trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    return not any(key == _COORDINATOR_STATUS_KEY for key, _ in (trailing or ()))


@dataclasses.dataclass(frozen=True)
class Progress:
    """One progress event. ``stage``: "UPLOAD" (tokens_done of tokens_total
    context tokens handed to the workers: the client's own count), "QUEUED"
    (queue_position: 1 = next), "LAYERS" (layers_done of layers_total
    finished on every worker), "QUERIES", or "COORDINATOR_AWAY" (the
    coordinator went away, a restart: the client waits for it to answer
    again while the job runs on). ``elapsed``: seconds since submit.

    ``tokens_per_second``: the stage's rate so far, as the client saw it:
    context tokens sent (UPLOAD), or context tokens through every layer
    (LAYERS: tokens_total * layers_done / layers_total over the time since
    the upload ended); 0.0 when not known. ``eta``: seconds left in the
    stage at that rate (0.0 at its last event); None when not known."""
    stage: str
    tokens_done: int = 0
    tokens_total: int = 0
    layers_done: int = 0
    layers_total: int = 0
    elapsed: float = 0.0
    queue_position: int = 0
    job_id: str = ""
    tokens_per_second: float = 0.0
    eta: Optional[float] = None

    @classmethod
    def from_proto(cls, p, stage_seconds: Optional[float] = None) -> "Progress":
        """``stage_seconds``: how long the stage has run, for the rate and ETA of
        a LAYERS event."""
        rate, eta = 0.0, None
        if (_STAGES.Name(p.stage) == "LAYERS" and stage_seconds and stage_seconds > 0 and
                p.layers_done > 0 and p.layers_total > 0):
            rate = p.tokens_total * p.layers_done / p.layers_total / stage_seconds
            eta = stage_seconds * (p.layers_total - p.layers_done) / p.layers_done
        return cls(_STAGES.Name(p.stage), p.tokens_done, p.tokens_total, p.layers_done,
                   p.layers_total, p.elapsed_seconds, p.queue_position, p.job_id, rate, eta)


@dataclasses.dataclass
class Result:
    """A finished job's results. ``output``: [L, output_width] float32 (numpy,
    or torch if the context was a torch tensor; None if it went to a FileRef output);
    ``queries``: one such array per query set, in the order given; ``state``:
    name ("layers.0.ttt.w0", ...) -> float32 array (empty unless
    return_state); ``stats``: JobStats as a dict; ``shards``: the
    ShardRange protos the job ran on."""
    job_id: str
    output: Any = None
    queries: List[Any] = dataclasses.field(default_factory=list)
    state: Dict[str, Any] = dataclasses.field(default_factory=dict)
    stats: Dict[str, Any] = dataclasses.field(default_factory=dict)
    shards: list = dataclasses.field(default_factory=list)


def message_dict(message) -> Dict[str, Any]:
    """A flat proto message's fields (all of them, defaults included) as a dict."""
    return {f.name: (list(getattr(message, f.name)) if f.label == f.LABEL_REPEATED
                     else getattr(message, f.name)) for f in message.DESCRIPTOR.fields}


def results_from(transfers: JobTransfers, job_id: str, torch_out: bool, stats=None,
                 shards=()) -> Result:
    """The Result of joined transfers, converted for the caller."""
    return Result(
        job_id=job_id,
        output=None if transfers.output is None else codec.to_user(transfers.output, torch_out),
        queries=[codec.to_user(q, torch_out) for q in transfers.queries],
        state={k: codec.to_user(v, torch_out) for k, v in sorted(transfers.state.items())},
        stats=message_dict(stats) if stats is not None else {},
        shards=list(shards))


class Job:
    """A job submitted by Client.submit. Its Submit call (and the data
    transfers) run on a daemon thread started at once.

    ``id`` waits until the server named the job; ``progress()`` yields its
    Progress events; ``result()`` waits for the end and returns a Result or
    raises LactError (the Submit call's status first, as it says more than a
    broken transfer).
    """

    def __init__(self, client, spec, context, queries, torch_out: bool, timeout: float):
        self._client, self._spec = client, spec
        self._context, self._queries = context, queries  # codec.Tokens or None / list
        self._torch_out, self._timeout = torch_out, timeout
        self._cond = threading.Condition()
        self._id: Optional[str] = None
        self._events: List[Progress] = []
        self._finished = False
        self._result: Optional[Result] = None
        self._error: Optional[LactError] = None
        self._started = time.monotonic()
        self._upload = None  # [sent, total, last report time, start] while the client's count leads
        self._compute_from: Optional[float] = None  # when the workers had their context
        self._ticket = ""  # of the attempt whose transfers run
        if not spec.request_id:  # names the submission, for a call made again
            spec.request_id = secrets.token_hex(16)
        self._thread = threading.Thread(target=self._run, daemon=True, name="lact-submit")
        self._thread.start()

    @property
    def id(self) -> str:
        """The job's id; waits for it. Raises the job's LactError if it failed first."""
        with self._cond:
            self._cond.wait_for(lambda: self._id is not None or self._finished)
            if self._id is None:
                raise self._error
            return self._id

    def done(self) -> bool:
        with self._cond:
            return self._finished

    def progress(self):
        """Yields every Progress event from the first, as they come, until the
        job ends (normally or not: result() tells which). May be iterated
        again, or from several threads."""
        seen = 0
        while True:
            with self._cond:
                self._cond.wait_for(lambda: len(self._events) > seen or self._finished)
                batch = self._events[seen:]
                if not batch and self._finished:
                    return
            seen += len(batch)
            yield from batch

    def result(self, timeout: float = None) -> Result:
        """Waits for the job to end (at most ``timeout`` seconds: then
        LactError DEADLINE_EXCEEDED; the job goes on) and returns its Result."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._finished, timeout):
                raise LactError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                f"job still running after {timeout} s")
            if self._error is not None:
                raise self._error
            return self._result

    def cancel(self):
        """Asks the coordinator to cancel the job (Client.cancel); result() then
        raises LactError CANCELLED. Returns the JobStatus CancelJob answered."""
        return self._client.cancel(self.id)

    # The Submit call, on the job's thread. A call lost to the coordinator
    # going away (a restart) is made again, with the spec's request_id,
    # until the coordinator answers or the job's deadline: the call made
    # again follows the job the first admitted, its transfers running on;
    # what they did not bring (an attempt they missed), its workers kept.
    def _run(self):
        transfers, stats, shards, error = None, None, [], None
        deadline = self._started + self._timeout
        made_again, backoff = False, _FIRST_BACKOFF
        reached = self._client._heard  # the coordinator had answered this client
        while True:
            answered = False
            try:
                call = self._client._coordinator.Submit(
                    # Once the job has an id, a call made again never admits a second.
                    coordinator_pb2.SubmitRequest(spec=self._spec,
                                                  follow_only=made_again and self._id is not None),
                    timeout=max(0.0, deadline - time.monotonic()),
                    metadata=self._client._metadata, wait_for_ready=made_again)
                for response in call:
                    answered = self._client._heard = True
                    if any(k == _KEEPS_JOBS_KEY for k, _ in call.initial_metadata() or ()):
                        self._client._keeps_jobs = True
                    kind = response.WhichOneof("kind")
                    if kind == "accepted":
                        shards = list(response.accepted.shards)
                        transfers = self._accepted(response.accepted, transfers)
                    elif kind == "progress":
                        self._server_progress(response.progress)
                    elif kind == "done":
                        stats = response.done.stats
                break
            except grpc.RpcError as e:
                # Made again for a coordinator that keeps its jobs; also when
                # one that had answered this client before never answered the
                # call (it went away as the call was sent), once one listens.
                left = deadline - time.monotonic()
                again = _coordinator_went_away(e) and left > 0
                if again and not self._client._keeps_jobs:
                    again = (not answered and reached and
                             self._client._coordinator_listens(min(left, _UNANSWERED_WAITS)))
                if not again:
                    error = from_rpc_error(e)
                    break
                self._away()
                made_again = True
                time.sleep(backoff)
                backoff = min(2 * backoff, _MOST_BACKOFF)
        if transfers is None:
            error = error or LactError(grpc.StatusCode.INTERNAL, "the job ended without JobAccepted")
        elif error is not None:
            transfers.cancel()
        result = None
        try:
            if transfers is not None:
                transfers.join()
        except LactError as e:
            if error is None and made_again:
                result = self._fetch_kept(stats, shards)
            error = error or (None if result else e)
        if error is None and result is None:
            result = results_from(transfers, self._id, self._torch_out, stats, shards)
        with self._cond:
            self._error, self._result, self._finished = error, result, True
            self._cond.notify_all()

    def _fetch_kept(self, stats, shards) -> Optional[Result]:
        """The results a followed job's workers kept, or None."""
        try:
            r = self._client.fetch(self._id)
        except LactError:
            return None
        if self._torch_out:
            r.output = None if r.output is None else codec.to_user(r.output, True)
            r.queries = [codec.to_user(q, True) for q in r.queries]
            r.state = {k: codec.to_user(v, True) for k, v in r.state.items()}
        return r

    def _away(self):
        """A COORDINATOR_AWAY event: the coordinator went away; the job runs on."""
        with self._cond:
            self._events.append(Progress("COORDINATOR_AWAY", elapsed=time.monotonic() - self._started,
                                         job_id=self._id or ""))
            self._cond.notify_all()

    def _accepted(self, accepted, previous: Optional[JobTransfers]) -> JobTransfers:
        """Starts the transfers of a JobAccepted, cancelling a previous run's."""
        self._set_id(accepted.job_id)
        if previous is not None and accepted.ticket == self._ticket:
            return previous  # announced again by a call made again
        self._ticket = accepted.ticket
        if previous is not None:  # the job runs again on other workers
            previous.cancel()
            try:
                previous.join()
            except LactError:
                pass
        dtype = codec.DTYPE_NAMES.get(accepted.dtype, "f32")
        # A job running again from its spool needs no context rows.
        context = None if self._context is None or accepted.context_spooled else self._context
        queries = [q.as_dtype(dtype) for q in self._queries]
        transfers = self._client._submit_transfers(accepted, context, queries, self._context_sent)
        with self._cond:
            now = time.monotonic()
            if context is not None:
                self._upload = [0, accepted.context_tokens, 0.0, now]
            self._compute_from = None if context is not None else now
        transfers.start(self._started + self._timeout)
        return transfers

    def _set_id(self, job_id: str):
        with self._cond:
            if self._id is None and job_id:
                self._id = job_id
                self._cond.notify_all()

    def _server_progress(self, p):
        self._set_id(p.job_id)
        if p.stage == _STAGES.STAGE_UNSPECIFIED:
            return  # only the job's id
        with self._cond:
            now = time.monotonic()
            self._upload = None  # the server's progress takes over
            if self._compute_from is None:
                self._compute_from = now
            self._events.append(Progress.from_proto(p, now - self._compute_from))
            self._cond.notify_all()

    def _context_sent(self, rows: int):
        """UPLOAD events from the client's count: at most every 0.5 s, and at the end."""
        with self._cond:
            if self._upload is None:
                return
            self._upload[0] += rows
            sent, total, last, start = self._upload
            now = time.monotonic()
            if sent >= total:
                self._compute_from = now
            elif now - last < 0.5:
                return
            self._upload[2] = now
            rate = sent / (now - start) if now > start else 0.0
            self._events.append(Progress("UPLOAD", tokens_done=sent, tokens_total=total,
                                         elapsed=now - self._started, job_id=self._id or "",
                                         tokens_per_second=rate,
                                         eta=(total - sent) / rate if rate > 0 else None))
            self._cond.notify_all()
