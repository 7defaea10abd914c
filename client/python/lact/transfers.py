"""JobTransfers: one JobAccepted's bytes, to and from its workers.

Each shard whose ShardRange.transfer is set gets its own thread and its own
ShardDataService.Transfer stream (data.proto): the TransferTicket, the shard's
context rows (set 0, offsets from the shard's first row), on rank 0 each
query set k as set k + 1, then the end of the send side; the worker answers
the shard's float32 output rows (set 0, offsets global in the context), on
rank 0 the query outputs and the fused state in pieces, and last a
TransferComplete: the messages, bytes and CRC-32C of what it sent, which
the stream's own tally must match. A shard whose stream ended after a
matching completion message is complete whatever status the stream ended
with; one without it is not, even if it ended OK. Fetch mode asks
ShardDataService.FetchResult for what a finished job's workers retained instead.

Token chunks go out without protobuf messages: each TransferRequest is
written in protobuf's wire format straight from the tokens' array, one copy
(the message's bytes, which gRPC takes), so that the upload runs at the
rate of the C++ client's. Output chunks come back the same way: their
fields are read from the message's bytes and their rows copied once, into
the result (every other message is parsed by protobuf).

Not thread-safe itself: one owner starts, cancels and joins it. Results are
complete only after join() returned without raising.
"""

import collections
import threading
import time

import grpc
import numpy as np

from . import checksum
from .errors import LactError, from_rpc_error
from .v1 import data_pb2


_TRANSFER_METHOD = "/lact.v1.ShardDataService/Transfer"
_FETCH_METHOD = "/lact.v1.ShardDataService/FetchResult"

OutputChunk = collections.namedtuple("OutputChunk", "set offset data")


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def chunk_request(set_index: int, offset: int, data) -> bytes:
    """TransferRequest{chunk: TokenChunk{set, offset, data}} in protobuf's wire
    format, as SerializeToString writes it; ``data`` is any buffer (a numpy
    array's rows), copied once into the result."""
    size = memoryview(data).nbytes
    fields = b""
    if set_index:
        fields += b"\x08" + _varint(set_index)  # TokenChunk.set = 1, varint
    if offset:
        fields += b"\x10" + _varint(offset)  # TokenChunk.offset = 2, varint
    if size:
        fields += b"\x1a" + _varint(size)  # TokenChunk.data = 3, bytes
    head = b"\x12" + _varint(len(fields) + size) + fields  # TransferRequest.chunk = 2
    return b"".join((head, data))


def _read_varint(raw: bytes, pos: int):
    """(value, position after it) of the varint at raw[pos]; ValueError if it
    runs past the end or past 64 bits."""
    value = shift = 0
    while shift < 64:
        byte = raw[pos]  # IndexError past the end
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise ValueError("varint longer than 64 bits")


def output_chunk(raw: bytes):
    """The OutputChunk (set, offset, data: a memoryview of ``raw``, no copy)
    of a TransferResponse in protobuf's wire format that is an output
    TokenChunk with only the fields set, offset and data; None for any other
    message, or one this reading is not sure of (protobuf parses those)."""
    try:
        if len(raw) < 2 or raw[0] != 0x0A:  # TransferResponse.output = 1, bytes
            return None
        size, pos = _read_varint(raw, 1)
        if pos + size != len(raw):
            return None
        set_index, offset, data = 0, 0, memoryview(raw)[pos:pos]
        while pos < len(raw):
            tag = raw[pos]
            if tag == 0x08:  # TokenChunk.set = 1, varint
                set_index, pos = _read_varint(raw, pos + 1)
            elif tag == 0x10:  # TokenChunk.offset = 2, varint
                offset, pos = _read_varint(raw, pos + 1)
            elif tag == 0x1A:  # TokenChunk.data = 3, bytes
                size, pos = _read_varint(raw, pos + 1)
                if pos + size > len(raw):
                    return None
                data, pos = memoryview(raw)[pos:pos + size], pos + size
            else:
                return None
    except (IndexError, ValueError):
        return None
    if set_index >= 1 << 31 or offset >= 1 << 63:  # negative: protobuf decides
        return None
    return OutputChunk(set_index, offset, data)


def _serialize_request(request) -> bytes:
    """A TransferRequest message, or one chunk_request already in wire format."""
    return request if isinstance(request, bytes) else request.SerializeToString()


def _internal(message: str) -> LactError:
    return LactError(grpc.StatusCode.INTERNAL, message)


class JobTransfers:
    """Moves the bytes of one JobAccepted (one run of a job).

    ``channel_for(address)`` gives the channel to a worker. ``context`` (a
    codec.Tokens in the job's dtype, or None to send no context rows) and
    ``queries`` (Tokens in the job's dtype) are sent; ``on_sent(rows)`` is
    told of context rows as they are handed to gRPC. ``fetch`` uses
    FetchResult (with accepted.fetch_ticket) instead of Transfer;
    ``without_outputs`` then fetches only rank 0's query outputs and state.
    After join(): ``output`` ([L, output_width] float32, None if the job's
    outputs go to output_ref), ``queries`` (list of [L_k, output_width]
    float32) and ``state`` (name -> float32 array of its shape).
    """

    def __init__(self, channel_for, accepted, context=None, queries=(), on_sent=None,
                 fetch=False, without_outputs=False):
        self._channel_for, self._accepted = channel_for, accepted
        self._context, self._queries, self._on_sent = context, list(queries), on_sent
        self._fetch, self._without_outputs = fetch, without_outputs
        width = accepted.output_width
        self.output = (np.empty((accepted.context_tokens, width), np.float32)
                       if accepted.output_in_band and not without_outputs else None)
        self.queries = [np.empty((n, width), np.float32) for n in accepted.query_tokens]
        self.state = {}
        self._state_flat = {}  # name -> (flat float32 array, shape, elements received)
        ranks = len(accepted.shards)
        self._rows = [collections.Counter() for _ in range(ranks)]  # per rank: set -> rows
        self._errors = [None] * ranks
        self._calls, self._threads = {}, []
        self._lock = threading.Lock()
        self._cancelled = False

    def start(self, deadline: float):
        """Starts one thread per shard; ``deadline`` is a time.monotonic() value."""
        for rank, shard in enumerate(self._accepted.shards):
            # Rank 0 keeps the fused state and query outputs even without bytes in band.
            if (shard.transfer or (self._fetch and rank == 0)) and \
                    not (self._without_outputs and rank != 0):
                thread = threading.Thread(target=self._run, args=(rank, deadline), daemon=True,
                                          name=f"lact-shard-{rank}")
                thread.start()
                self._threads.append(thread)

    def cancel(self):
        """Cancels every stream (those not yet open will not open)."""
        with self._lock:
            self._cancelled = True
            calls = list(self._calls.values())
        for call in calls:
            call.cancel()

    def join(self):
        """Waits for every stream; raises the first failed shard's LactError
        (rank order), or INTERNAL if the workers left results incomplete."""
        for thread in self._threads:
            thread.join()
        self._threads = []
        for error in self._errors:
            if error is not None:
                raise error
        self._check_complete()

    # One shard's stream, on its own thread.
    def _run(self, rank: int, deadline: float):
        shard = self._accepted.shards[rank]
        where = f"shard {rank} on worker {shard.worker}: "
        tally = None
        try:
            channel = self._channel_for(shard.worker)
            timeout = max(0.0, deadline - time.monotonic())
            with self._lock:
                if self._cancelled:
                    raise LactError(grpc.StatusCode.CANCELLED, where + "cancelled")
                if self._fetch:
                    request = data_pb2.FetchResultRequest(
                        job_id=self._accepted.job_id, rank=rank,
                        ticket=self._accepted.fetch_ticket, without_outputs=self._without_outputs)
                    fetch = channel.unary_stream(
                        _FETCH_METHOD, request_serializer=_serialize_request)
                    call = fetch(request, timeout=timeout)
                else:
                    transfer = channel.stream_stream(
                        _TRANSFER_METHOD, request_serializer=_serialize_request)
                    call = transfer(self._requests(rank), timeout=timeout)
                self._calls[rank] = call
            tally = _Tally()
            try:
                for raw in call:
                    if tally.complete:
                        raise _internal(where + "a message after the stream's completion message")
                    self._take(rank, raw, tally, where)
            except grpc.RpcError:
                if not tally.complete:
                    raise
                # Every result arrived and checked: the stream's end took nothing.
            if not tally.complete:
                raise LactError(grpc.StatusCode.DATA_LOSS, where + tally.missing())
        except grpc.RpcError as e:
            self._errors[rank] = from_rpc_error(e, where)
            if tally is not None and tally.messages > 0:
                error = self._errors[rank]
                self._errors[rank] = LactError(error.code, f"{error.message}; {tally.missing()}")
        except LactError as e:
            self._errors[rank] = e
            self.cancel_rank(rank)
        except Exception as e:  # a bug or a malformed message: fail the shard, not the thread
            self._errors[rank] = _internal(where + repr(e))
            self.cancel_rank(rank)

    def cancel_rank(self, rank: int):
        with self._lock:
            call = self._calls.get(rank)
        if call is not None:
            call.cancel()

    def _requests(self, rank: int):
        """TransferRequests of one shard: ticket, context rows, (rank 0) query sets."""
        a = self._accepted
        yield data_pb2.TransferRequest(
            ticket=data_pb2.TransferTicket(job_id=a.job_id, rank=rank, ticket=a.ticket))
        if self._context is not None:
            shard = a.shards[rank]
            for offset, rows, data in self._context.chunks(shard.begin, shard.tokens):
                if self._on_sent is not None:
                    self._on_sent(rows)
                yield chunk_request(0, offset, data)
        if rank == 0:
            for k, q in enumerate(self._queries):
                for offset, _, data in q.chunks():
                    yield chunk_request(k + 1, offset, data)

    def _take(self, rank: int, raw: bytes, tally, where: str):
        """One message of a shard's results stream, in protobuf's wire format."""
        chunk = output_chunk(raw)
        if chunk is None:
            response = data_pb2.TransferResponse.FromString(raw)
            kind = response.WhichOneof("kind")
            if kind == "complete":
                tally.check(response.complete, where)
                return
            if kind == "state" and rank == 0:
                tally.add(response.state.data)
                self._place_state(response.state)
                return
            if kind != "output":
                raise _internal(f"worker of shard {rank} sent an unexpected message ({kind})")
            chunk = OutputChunk(response.output.set, response.output.offset,
                                response.output.data)
        tally.add(chunk.data)
        self._place_output(rank, chunk)

    def _place_output(self, rank: int, chunk: OutputChunk):
        if chunk.set == 0 and self.output is not None:
            target = self.output
        elif rank == 0 and 1 <= chunk.set <= len(self.queries):
            target = self.queries[chunk.set - 1]
        else:
            raise _internal(f"worker of shard {rank} sent output for unexpected set {chunk.set}")
        self._rows[rank][chunk.set] += place_rows(target, chunk.offset, chunk.data, chunk.set)

    def _place_state(self, piece):
        entry = self._state_flat.get(piece.name)
        if entry is None:
            shape = tuple(piece.shape)
            entry = [np.empty(int(np.prod(shape, dtype=np.int64)), np.float32), shape, 0]
            self._state_flat[piece.name] = entry
        flat = entry[0]
        values = np.frombuffer(piece.data, dtype="<f4")
        if piece.offset < 0 or piece.offset + values.size > flat.size:
            raise _internal(f"state tensor '{piece.name}' piece outside its shape")
        flat[piece.offset:piece.offset + values.size] = values
        entry[2] += values.size
        self.state[piece.name] = flat.reshape(entry[1])

    def _check_complete(self):
        rows = sum(self._rows, collections.Counter())
        if self.output is not None and rows[0] != self.output.shape[0]:
            raise _internal(f"the workers sent {rows[0]} of {self.output.shape[0]} output rows")
        for k, q in enumerate(self.queries):
            if rows[k + 1] != q.shape[0]:
                raise _internal(f"the workers sent {rows[k + 1]} of {q.shape[0]} rows of "
                                f"query set {k}'s output")
        for name, (flat, _, received) in self._state_flat.items():
            if received != flat.size:
                raise _internal(f"state tensor '{name}' arrived with {received} of "
                                f"{flat.size} elements")


class _Tally:
    """What one stream's results carried, as its TransferComplete states it."""

    def __init__(self):
        self.messages, self.bytes, self.crc, self.complete = 0, 0, 0, False

    def add(self, data):
        """Counts one output or state message's ``data`` (any buffer)."""
        self.messages += 1
        self.bytes += len(data)
        self.crc = checksum.crc32c(data, self.crc)

    def check(self, stated, where: str):
        if stated.messages != self.messages or stated.bytes != self.bytes:
            raise LactError(grpc.StatusCode.DATA_LOSS,
                            f"{where}the worker says it sent {stated.messages} messages of "
                            f"{stated.bytes} bytes; {self.messages} messages of {self.bytes} "
                            "bytes arrived; its results are not complete")
        if stated.crc32c != self.crc:
            raise LactError(grpc.StatusCode.DATA_LOSS,
                            f"{where}the CRC-32C of the {self.bytes} bytes that arrived is "
                            f"{self.crc:08x}, the worker's of what it sent {stated.crc32c:08x}: "
                            "bytes changed on the way; its results are not complete")
        self.complete = True

    def missing(self) -> str:
        return (f"its results stopped after {self.messages} messages ({self.bytes} bytes) "
                "without their completion message, so they are not complete")


def place_rows(target: np.ndarray, offset: int, data, set_index: int) -> int:
    """Copies float32 rows ``data`` into target[offset:]; returns their count.
    Rows outside ``target`` or a partial row: LactError INTERNAL."""
    width = target.shape[1]
    values = np.frombuffer(data, dtype="<f4")
    rows = values.size // width if width else 0
    if offset < 0 or len(data) % (4 * width) != 0 or offset + rows > target.shape[0]:
        raise _internal(f"a server sent output rows outside set {set_index}")
    target[offset:offset + rows] = values.reshape(rows, width)
    return rows
