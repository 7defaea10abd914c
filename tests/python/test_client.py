"""End-to-end tests of the Python client (client/python/lact) against a real
`lact local` cluster, judged by the golden cases of ../shared/golden.

Run: /usr/bin/python3 -m unittest discover -s tests/python -v
Environment: LACT_BIN_DIR (default build/bin), LACT_GOLDEN_DIR (default
../shared/golden beside the repository), LACT_PROTO_DIR (default proto/).

The package is copied to a temporary folder and its gRPC stubs generated
beside it with client/python/build_protos.py, as an install would.

Tolerances are those of the C++ golden tests (tests/cpu_golden_test.cc,
tests/service_test.cc): max|got - want| / max|want| <= 1e-4 for float32 on
the wire. Tokens sent as bf16 or f16 are compared with 1e-4 against the
float32 job run on the same rounded tokens (the workers decode the wire
values exactly and compute in float32), and only loosely against the golden
values, which were computed from the unrounded tokens (see LOW_PRECISION_TOLERANCE).
"""

import importlib
import io
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path

import grpc
import numpy as np

try:
    import torch
except ImportError:  # the torch tests are skipped
    torch = None

import lact_package

ROOT = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("LACT_BIN_DIR", ROOT / "build" / "bin"))
GOLDEN_DIR = Path(os.environ.get("LACT_GOLDEN_DIR", ROOT.parent / "shared" / "golden"))
TOLERANCE = 1e-4
# bf16 keeps 8 significant bits: each input token moves by up to 2^-9 ~ 2e-3
# of itself, and these 1-2 layer models amplify that a few times (up to
# ~1.3e-2 on the golden cases). 5e-2 allows that and still fails a wrong
# decoding (byte order, f16 read as bf16, misplaced rows), whose error is O(1).
LOW_PRECISION_TOLERANCE = 5e-2

lact = None  # imported in setUpModule, from the generated copy
_TMP = None


def setUpModule():
    global lact, _TMP
    _TMP, lact = lact_package.install_copy("lact-pytest-", "lact")


def tearDownModule():
    lact_package.remove_copy(_TMP)


# --- golden files -----------------------------------------------------------

_ST_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4"}


def read_safetensors(path):
    """(name -> numpy array, __metadata__ dict) of a .safetensors file:
    8-byte little-endian header length, JSON header, then the raw data."""
    raw = Path(path).read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        data = raw[8 + length + begin:8 + length + end]
        if entry["dtype"] == "BF16":
            values = lact.bf16_to_float32(np.frombuffer(data, "<u2"))
        else:
            values = np.frombuffer(data, _ST_DTYPES[entry["dtype"]])
        tensors[name] = values.reshape(entry["shape"])
    return tensors, metadata


_MISSING = object()  # what sys.modules had no entry for


class GoldenCase:
    """One folder of the golden directory; the model is served as its name."""

    def __init__(self, name):
        folder = GOLDEN_DIR / name
        self.name = name
        self.context = np.load(folder / "context.npy")
        self.queries = [np.load(p) for p in sorted(folder.glob("query_*.npy"),
                                                   key=lambda p: int(p.stem.split("_")[1]))]
        self.expected, metadata = read_safetensors(folder / "expected.safetensors")
        self.options = json.loads(metadata.get("job.options", "{}"))  # muon_steps, chunk_tokens
        self.state_names = sorted(k for k in self.expected
                                  if k != "output" and not k.startswith("query_"))


def golden_case_names():
    return sorted(p.name for p in GOLDEN_DIR.iterdir() if (p / "expected.safetensors").exists())


def relative_error(got, want):
    """The golden metric: max|got - want| / max|want| (absolute when want is
    all zeros); infinity on a shape mismatch or a non-finite value."""
    if torch is not None and isinstance(got, torch.Tensor):
        got = got.numpy()
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape or not np.all(np.isfinite(got)):
        return float("inf")
    diff, scale = np.max(np.abs(got - want)), np.max(np.abs(want))
    return diff / scale if scale > 0 else diff


# --- the cluster --------------------------------------------------------------

class LocalCluster:
    """`lact local` in its own process group, until stop()."""

    def __init__(self, workers, *extra):
        self.dir = Path(tempfile.mkdtemp(prefix="lact-cluster-", dir=_TMP))
        self.models = self.dir / "models"
        self.data = self.dir / "data"
        self.models.mkdir()
        self.data.mkdir()
        for name in golden_case_names():
            shutil.copy(GOLDEN_DIR / name / "model.safetensors", self.models / f"{name}.safetensors")
        self.log_path = self.dir / "local.log"
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [str(BIN_DIR / "lact"), "local", "--workers", str(workers), "--threads-per-worker",
             "1", "--model-dir", str(self.models), "--data-root", str(self.data), *extra],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.address, self.tls_ca = self._wait_for("coordinator at "), None
        if "--tls" in extra:
            self.tls_ca = self._wait_for("trust --tls-ca ")

    def _wait_for(self, marker):
        """The word after `marker` in the cluster's output (60 s at most)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for line in self.log_path.read_text().splitlines():
                if marker in line:
                    return line.split(marker, 1)[1].split()[0]
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"lact local did not print '{marker}':\n{self.log_path.read_text()}")

    def child_listening_on(self, address):
        """The pid of this cluster's process (a worker) that listens on
        `address` ("host:port"), found through /proc."""
        port = int(address.rsplit(":", 1)[1])
        sockets = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    sockets.add(f"socket:[{fields[9]}]")
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                if int(stat.read_text().rsplit(")", 1)[1].split()[1]) != self.process.pid:
                    continue
                fds = list((stat.parent / "fd").iterdir())
                if any(os.readlink(fd) in sockets for fd in fds):
                    return int(stat.parent.name)
            except OSError:  # it exited meanwhile
                continue
        raise RuntimeError(f"no process of the cluster listens on {address}")

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)  # its own group: its workers
                self.process.wait()
        self.log.close()


# --- tests --------------------------------------------------------------------

class ClusterTest(unittest.TestCase):
    """Tests sharing one cluster of 2 workers serving the golden models."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = LocalCluster(2)
        cls.client = lact.Client(cls.cluster.address)
        cls.cases = [GoldenCase(n) for n in golden_case_names()]
        assert cls.cases, f"no golden cases in {GOLDEN_DIR}"

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.cluster.stop()

    def run_case(self, case, context, queries, **options):
        """Submits a golden case with its job options and returns the Result."""
        job = self.client.submit(case.name, context, queries, return_state=True,
                                 **case.options, **options)
        return job.result(timeout=60)

    def assert_golden(self, case, result, tolerance=TOLERANCE, what=""):
        want = case.expected
        self.assertLessEqual(relative_error(result.output, want["output"]), tolerance,
                             f"{case.name} {what} output")
        self.assertEqual(len(result.queries), len(case.queries))
        for k, q in enumerate(result.queries):
            self.assertLessEqual(relative_error(q, want[f"query_{k}"]), tolerance,
                                 f"{case.name} {what} query_{k}")
        self.assertEqual(sorted(result.state), case.state_names)
        for name in case.state_names:
            self.assertLessEqual(relative_error(result.state[name], want[name]), tolerance,
                                 f"{case.name} {what} {name}")

    def assert_close(self, got, want, what):
        """Two results of the same job, every tensor within TOLERANCE."""
        self.assertLessEqual(relative_error(got.output, want.output), TOLERANCE, what)
        for g, w in zip(got.queries, want.queries, strict=True):
            self.assertLessEqual(relative_error(g, w), TOLERANCE, what)
        self.assertEqual(sorted(got.state), sorted(want.state))
        for name in want.state:
            self.assertLessEqual(relative_error(got.state[name], want.state[name]), TOLERANCE,
                                 f"{what} {name}")

    def test_golden_numpy_f32(self):
        for case in self.cases:
            L = case.context.shape[0]
            for options in ({"workers": 2}, {"workers": 1}, {"shard_tokens": [1, L - 1]}):
                with self.subTest(case=case.name, **options):
                    result = self.run_case(case, case.context, case.queries, **options)
                    self.assertIsInstance(result.output, np.ndarray)
                    self.assertEqual(result.output.dtype, np.float32)
                    self.assert_golden(case, result, what=str(options))
                    self.assertTrue(result.job_id.startswith("job-"))
                    self.assertEqual(result.stats["layers"], len(
                        {n.split(".")[1] for n in case.state_names}))

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_golden_torch_f32(self):
        for case in self.cases:
            with self.subTest(case=case.name):
                result = self.run_case(case, torch.from_numpy(case.context),
                                       [torch.from_numpy(q) for q in case.queries], workers=2)
                self.assertIsInstance(result.output, torch.Tensor)
                self.assertEqual(result.output.dtype, torch.float32)
                self.assertIsInstance(result.state[case.state_names[0]], torch.Tensor)
                self.assert_golden(case, result)

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_golden_torch_bf16(self):
        for case in self.cases:
            with self.subTest(case=case.name):
                context = torch.from_numpy(case.context).bfloat16()
                queries = [torch.from_numpy(q).bfloat16() for q in case.queries]
                got = self.run_case(case, context, queries, workers=2)
                # The same tokens rounded here, sent as float32: the same computation.
                rounded = self.run_case(case, context.float(), [q.float() for q in queries],
                                        workers=2)
                self.assert_close(got, rounded, f"{case.name} bf16 vs rounded f32")
                self.assert_golden(case, got, LOW_PRECISION_TOLERANCE, "bf16")
                # numpy float32 encoded to bf16 by the client: the same bits as torch's.
                encoded = self.run_case(case, case.context, case.queries, workers=2,
                                        dtype="bf16")
                self.assert_close(encoded, got, f"{case.name} numpy bf16 vs torch bf16")

    def test_f16_tokens(self):
        case = self.cases[0]
        got = self.run_case(case, case.context.astype(np.float16),
                            [q.astype(np.float16) for q in case.queries], workers=2)
        rounded = self.run_case(case, case.context.astype(np.float16).astype(np.float32),
                                [q.astype(np.float16).astype(np.float32) for q in case.queries],
                                workers=2)
        self.assert_close(got, rounded, "f16 vs rounded f32")
        self.assert_golden(case, got, LOW_PRECISION_TOLERANCE, "f16")

    def test_bf16_encoding_rounds_to_nearest_even(self):
        # Ties go to the even neighbour (common/token_codec.cc), others to the nearest.
        bits = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0xBF808000, 0xBF80C000,
                         0], dtype="<u4")
        np.testing.assert_array_equal(lact.bf16_bits(bits.view("<f4")),
                                      [0x3F80, 0x3F82, 0x3F81, 0x3F80, 0xBF80, 0xBF81, 0])
        if torch is not None:
            x = np.random.default_rng(0).standard_normal(10000).astype(np.float32)
            torch_bits = torch.from_numpy(x).bfloat16().view(torch.int16).numpy().view("<u2")
            np.testing.assert_array_equal(lact.bf16_bits(x), torch_bits)

    def test_chunks_written_by_hand_are_what_protobuf_writes(self):
        # The client writes token chunks in the wire format itself, from the
        # array's rows; protobuf's own messages are the oracle.
        from lact import transfers
        from lact.v1 import common_pb2, data_pb2
        rows = np.random.default_rng(1).standard_normal((300, 7)).astype("<f4")
        for set_index, offset, n in [(0, 0, 1), (0, 5, 299), (3, 1 << 40, 128), (200, 127, 0)]:
            data = rows[:n]
            want = data_pb2.TransferRequest(chunk=common_pb2.TokenChunk(
                set=set_index, offset=offset, data=data.tobytes())).SerializeToString()
            self.assertEqual(transfers.chunk_request(set_index, offset, data), want,
                             (set_index, offset, n))

    def test_output_chunks_read_by_hand_are_what_protobuf_reads(self):
        # The client reads output chunks from the message's bytes itself;
        # protobuf's parse is the oracle, and every message the reading is
        # not sure of (another kind, unknown or negative fields, bytes after
        # the chunk, truncation) is left to protobuf (None).
        from lact import transfers
        from lact.v1 import common_pb2, data_pb2
        rows = np.random.default_rng(2).standard_normal((64, 5)).astype("<f4").tobytes()
        for set_index, offset, n in [(0, 0, 0), (0, 7, 20), (5, 1 << 40, 1280), (127, 128, 3)]:
            raw = data_pb2.TransferResponse(output=common_pb2.TokenChunk(
                set=set_index, offset=offset, data=rows[:n])).SerializeToString()
            want = data_pb2.TransferResponse.FromString(raw).output
            got = transfers.output_chunk(raw)
            self.assertIsNotNone(got, (set_index, offset, n))
            self.assertEqual((got.set, got.offset, bytes(got.data)),
                             (want.set, want.offset, want.data), (set_index, offset, n))
        chunk = data_pb2.TransferResponse(output=common_pb2.TokenChunk(set=1, offset=2,
                                                                       data=rows[:40]))
        raw = chunk.SerializeToString()
        others = [
            data_pb2.TransferResponse(complete=data_pb2.TransferComplete(messages=1, bytes=4)),
            data_pb2.TransferResponse(state=common_pb2.Tensor(name="w", shape=[1], data=rows[:4])),
            data_pb2.TransferResponse(output=common_pb2.TokenChunk(set=-1, data=rows[:4])),
            data_pb2.TransferResponse(output=common_pb2.TokenChunk(offset=-3, data=rows[:4])),
        ]
        for message in others:
            self.assertIsNone(transfers.output_chunk(message.SerializeToString()), message)
        unknown_field = raw[:1] + bytes([raw[1] + 2]) + raw[2:] + b"\x20\x01"
        for bad in [raw[:-1], raw + b"\x10\x01", unknown_field, raw[:3], b"", b"\x0a"]:
            self.assertIsNone(transfers.output_chunk(bad), bad[:8])

    def test_query_sets_later_and_fetch(self):
        case = max(self.cases, key=lambda c: len(c.queries))
        job = self.client.submit(case.name, case.context, workers=2, return_state=False,
                                 **case.options)
        result = job.result(timeout=60)
        self.assertEqual(result.queries, [])
        self.assertEqual(result.state, {})  # not asked for
        reversed_queries = case.queries[::-1]
        outputs = self.client.query(job.id, reversed_queries)
        for k, out in enumerate(outputs):
            want = case.expected[f"query_{len(case.queries) - 1 - k}"]
            self.assertLessEqual(relative_error(out, want), TOLERANCE, f"query {k}")
        if torch is not None:
            (out,) = self.client.query(job.id, [torch.from_numpy(case.queries[0])])
            self.assertIsInstance(out, torch.Tensor)
            self.assertLessEqual(relative_error(out, case.expected["query_0"]), TOLERANCE)
        status = self.client.status(job.id)
        self.assertEqual(status.status, "SUCCEEDED")
        self.assertEqual(status.model, case.name)
        self.assertTrue(status.state_retained)
        self.assertIn(job.id, [j.job_id for j in self.client.jobs()])
        fetched = self.client.fetch(job.id)
        self.assertEqual(fetched.job_id, job.id)
        np.testing.assert_array_equal(fetched.output, result.output)
        self.assertEqual(sorted(fetched.state), case.state_names)  # retained either way
        for name in case.state_names:
            self.assertLessEqual(relative_error(fetched.state[name], case.expected[name]),
                                 TOLERANCE, name)
        self.client.delete(job.id)
        with self.assertRaises(lact.LactError) as raised:
            self.client.query(job.id, case.queries[:1])
        self.assertEqual(raised.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_fetch_after_expiry_says_why(self):
        case = self.cases[0]
        job = self.client.submit(case.name, case.context, workers=2, retain_seconds=1,
                                 **case.options)
        job.result(timeout=60)
        time.sleep(1.5)  # both the coordinator and the workers retained it 1 s
        status = self.client.status(job.id)
        self.assertFalse(status.state_retained)
        self.assertEqual(status.results_dropped, "expired: its retention time passed")
        with self.assertRaises(lact.LactError) as raised:
            self.client.fetch(job.id)
        self.assertEqual(raised.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertIn("expired: its retention time passed", raised.exception.message)

    def test_progress_in_order(self):
        # With query sets: their runs must not report layers again.
        case = max(self.cases, key=lambda c: len(c.queries))
        self.assertTrue(case.queries)
        job = self.client.submit(case.name, case.context, case.queries, workers=2,
                                 **case.options)
        events = list(job.progress())
        result = job.result(timeout=60)
        stages = [e.stage for e in events]
        self.assertIn("UPLOAD", stages)
        self.assertIn("LAYERS", stages)
        first_layers = stages.index("LAYERS")
        self.assertEqual(set(stages[:first_layers]), {"UPLOAD"}, stages)
        self.assertEqual(set(stages[first_layers:]), {"LAYERS"}, stages)
        upload = events[first_layers - 1]
        self.assertEqual(upload.tokens_done, case.context.shape[0])
        self.assertEqual(upload.tokens_total, case.context.shape[0])
        self.assertGreater(upload.tokens_per_second, 0)
        self.assertEqual(upload.eta, 0.0)
        for e in events[first_layers:]:
            self.assertGreater(e.tokens_per_second, 0, e)
            self.assertIsNotNone(e.eta, e)
        self.assertEqual(events[-1].eta, 0.0)
        # The compute's rate can only exceed the whole job's (upload and
        # download included); seconds mistaken for ms would be 1000x below.
        self.assertGreaterEqual(events[-1].tokens_per_second,
                                0.9 * result.stats["tokens_per_second"])
        layers = [e.layers_done for e in events[first_layers:]]
        self.assertEqual(layers, sorted(layers))
        self.assertEqual(layers[-1], events[-1].layers_total)
        self.assertEqual(layers[-1], result.stats["layers"])
        self.assertEqual({e.job_id for e in events}, {result.job_id})
        self.assertEqual(list(job.progress()), events)  # may be read again

    def test_cancel_long_job(self):
        tokens = np.random.default_rng(7).standard_normal((65536, 256), dtype=np.float32)
        job = self.client.submit("preset:small", tokens, workers=2, dtype="bf16")
        status = self.client.cancel(job.id)
        self.assertEqual(status.job_id, job.id)
        with self.assertRaises(lact.LactError) as raised:
            job.result(timeout=60)
        self.assertEqual(raised.exception.code, grpc.StatusCode.CANCELLED,
                         raised.exception.message)
        self.assertIn("cancelled", raised.exception.message)
        final = list(self.client.watch(job.id, timeout=60))[-1]
        self.assertEqual(final.status, "CANCELLED")
        with self.assertRaises(lact.LactError) as raised:
            self.client.cancel(job.id)
        self.assertEqual(raised.exception.code, grpc.StatusCode.FAILED_PRECONDITION)

    def test_server_errors_carry_its_message(self):
        case = self.cases[0]
        job = self.client.submit("nope", case.context)
        with self.assertRaises(lact.LactError) as raised:
            job.result(timeout=60)
        self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("unknown model 'nope' (available: ", raised.exception.message)
        self.assertIn(case.name, raised.exception.message)
        with self.assertRaises(lact.LactError):
            job.id  # never admitted
        width = case.context.shape[1]
        with self.assertRaises(lact.LactError) as raised:
            self.client.submit(case.name, np.zeros((8, width - 1), np.float32)).result(60)
        self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn(f"token_width {width - 1} does not match model '{case.name}', which takes "
                      f"{width} features per token", raised.exception.message)
        bad = case.context.copy()
        bad[-1, 3] = np.nan  # on the last shard: its token index is global
        with self.assertRaises(lact.LactError) as raised:
            self.client.submit(case.name, bad, workers=2, **case.options).result(60)
        self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn(f"token {len(bad) - 1} feature 3 is nan; tokens must be finite",
                      raised.exception.message)
        with self.assertRaises(lact.LactError) as raised:
            self.client.status("job-none")
        self.assertEqual(raised.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_unreachable_server_is_named(self):
        client_module = importlib.import_module("lact.client")
        saved = client_module.UNARY_TIMEOUT
        client_module.UNARY_TIMEOUT = 1.0
        try:
            with self.assertRaises(lact.LactError) as raised:
                lact.Client("127.0.0.1:1").status("job-none")
        finally:
            client_module.UNARY_TIMEOUT = saved
        self.assertEqual(raised.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertIn("no answer from 127.0.0.1:1 within 1 s", raised.exception.message)

    def test_client_side_errors(self):
        case = self.cases[0]
        cases = [
            lambda: self.client.submit(case.name, case.context[0]),  # 1-D
            lambda: self.client.submit(case.name, case.context, [case.context[:, :-1]]),
            lambda: self.client.submit(case.name, case.context, dtype="f64"),
            lambda: self.client.submit(case.name, None),
            lambda: self.client.submit(case.name, case.context, output="out.npy"),
            lambda: self.client.query("job-x", []),
        ]
        for make in cases:
            with self.assertRaises(lact.LactError) as raised:
                make()
            self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)

    def test_models(self):
        models = {m.name: m for m in self.client.models()}
        for case in self.cases:
            self.assertEqual(models[case.name].workers, 2)
            self.assertIn("n_layers", models[case.name].config)
        self.assertIn("preset:small", models)

    def test_show_progress_without_tqdm(self):
        # The plain-text path (tqdm absent): one line per event, with the
        # stage, the counts, the rate and the ETA; then the job's result.
        tokens = np.random.default_rng(11).standard_normal((16384, 256), dtype=np.float32)
        saved = sys.modules.get("tqdm", _MISSING)
        sys.modules["tqdm"] = None  # `from tqdm import tqdm` now raises ImportError
        try:
            out = io.StringIO()
            result = lact.show_progress(self.client.submit("preset:small", tokens, workers=2),
                                        file=out)
        finally:
            if saved is _MISSING:
                del sys.modules["tqdm"]
            else:
                sys.modules["tqdm"] = saved
        text = out.getvalue()
        self.assertEqual(result.output.shape, (16384, 256))
        self.assertIn("upload 16384/16384", text)
        self.assertIn("layers 2/2", text)
        self.assertIn("tokens/s", text)
        self.assertIn("ETA 0 s", text)

    def test_workers(self):
        workers = self.client.workers()
        self.assertEqual(len(workers), 2)
        self.assertEqual(len({w.address for w in workers}), 2)
        for w in workers:
            self.assertEqual(w.backend, "cpu")
            self.assertTrue(w.healthy, w)
            self.assertFalse(w.draining, w)
            self.assertLess(w.seconds_since_heartbeat, 10.0, w)
            self.assertIn("preset:small", w.models)
            self.assertIn(self.cases[0].name, w.models)

    def test_by_reference(self):
        case = self.cases[0]
        np.save(self.cluster.data / "ctx.npy", case.context)
        job = self.client.submit(case.name, lact.FileRef("ctx.npy"), case.queries,
                                 output=lact.FileRef("out.npy"), workers=2, **case.options)
        result = job.result(timeout=60)
        self.assertIsNone(result.output)
        output = np.load(self.cluster.data / "out.npy")
        self.assertLessEqual(relative_error(output, case.expected["output"]), TOLERANCE)
        for k, q in enumerate(result.queries):
            self.assertLessEqual(relative_error(q, case.expected[f"query_{k}"]), TOLERANCE)


class TransferPathsTest(unittest.TestCase):
    """A Submit's bytes through liblact_transfer.so (lact.native: the C++
    client's transfers behind a C interface) and through gRPC's Python
    library give the same results, bit for bit; the library refuses inputs
    that do not fit their JobAccepted, naming what is wrong. Runs where the
    library is found ($LACT_TRANSFER_LIBRARY, as ctest sets it)."""

    @classmethod
    def setUpClass(cls):
        cls.native = importlib.import_module("lact.native")
        if not cls.native.available():
            if os.environ.get("LACT_TRANSFER_LIBRARY") and \
                    os.environ.get("LACT_NATIVE_TRANSFERS") != "0":
                raise AssertionError("LACT_TRANSFER_LIBRARY is set but lact.native did not load "
                                     + os.environ["LACT_TRANSFER_LIBRARY"])
            raise unittest.SkipTest("no liblact_transfer.so (LACT_TRANSFER_LIBRARY)")
        cls.cluster = LocalCluster(2)
        cls.client = lact.Client(cls.cluster.address)
        cls.case = GoldenCase(golden_case_names()[0])

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.cluster.stop()

    def submit(self, native, context, queries, **options):
        saved = self.native._LIB
        self.native._LIB = saved if native else None  # what available() reads
        try:
            transfers = self.client._submit_transfers
            self.assertEqual(type(transfers(coordinator_accepted(), None, [], None)).__name__,
                             "NativeTransfers" if native else "JobTransfers")
            return self.client.submit(self.case.name, context, queries, return_state=True,
                                      workers=2, **self.case.options, **options).result(60)
        finally:
            self.native._LIB = saved

    def test_both_paths_give_the_same_bits(self):
        context, queries = self.case.context, self.case.queries
        inputs = {"f32": (context, queries, {}),
                  "bf16": (context, queries, {"dtype": "bf16"}),
                  "f16": (context.astype(np.float16), [q.astype(np.float16) for q in queries], {}),
                  "uneven shards": (context, queries, {"shard_tokens": [1, len(context) - 1]})}
        for what, (c, q, options) in inputs.items():
            with self.subTest(what):
                native = self.submit(True, c, q, **options)
                python = self.submit(False, c, q, **options)
                assert_same_results(self, native, python)
                self.assertEqual(len(native.queries), len(q))
                if what == "f32":
                    self.assertLessEqual(relative_error(native.output,
                                                        self.case.expected["output"]), TOLERANCE)

    def transfer(self, accepted, context, queries=()):
        t = self.native.NativeTransfers(accepted, context, queries)
        t.start(time.monotonic() + 30)
        with self.assertRaises(lact.LactError) as raised:
            t.join()
        return raised.exception

    def test_inputs_that_do_not_fit_are_refused(self):
        codec = importlib.import_module("lact.codec")
        rows = codec.as_tokens(np.ones((8, 4), np.float32))
        cases = {
            "the context's rows are bf16 but the job's dtype is f32":
                (coordinator_accepted(dtype=1), codec.as_tokens(rows.wire, "bf16"), ()),
            "the context is [8, 4] but the job's is [9, 4]":
                (coordinator_accepted(context_tokens=9), rows, ()),
            "shard rows [4, +5) lie outside the context":
                (coordinator_accepted(shards=[(0, 4), (4, 5)]), rows, ()),
            "the job has 1 query sets; 0 were given":
                (coordinator_accepted(query_tokens=[2]), rows, ()),
            "the query sets are 3 wide but the job's tokens are 4":
                (coordinator_accepted(query_tokens=[2]), None, [codec.as_tokens(np.ones((2, 3)))]),
            "query set 0 has 3 tokens; the job's has 2":
                (coordinator_accepted(query_tokens=[2]), rows, [codec.as_tokens(np.ones((3, 4)))]),
        }
        for message, (accepted, context, queries) in cases.items():
            with self.subTest(message):
                error = self.transfer(accepted, context, queries)
                self.assertEqual(error.code, grpc.StatusCode.INVALID_ARGUMENT, error.message)
                self.assertIn(message, error.message)

    def test_unreachable_worker_is_named(self):
        codec = importlib.import_module("lact.codec")
        accepted = coordinator_accepted(shards=[(0, 8)], worker="127.0.0.1:1")
        error = self.transfer(accepted, codec.as_tokens(np.ones((8, 4), np.float32)))
        self.assertEqual(error.code, grpc.StatusCode.UNAVAILABLE, error.message)
        self.assertIn("shard 0 on worker 127.0.0.1:1", error.message)


def coordinator_accepted(context_tokens=8, dtype=1, shards=((0, 4), (4, 4)), query_tokens=(),
                         worker="127.0.0.1:1"):
    """A JobAccepted of an [8, 4] context for lact.native's checks (its
    workers are never reached unless the inputs fit)."""
    coordinator_pb2 = importlib.import_module("lact.v1.coordinator_pb2")
    return coordinator_pb2.JobAccepted(
        job_id="job-check", output_width=4, ticket="t", context_tokens=context_tokens,
        token_width=4, dtype=dtype, query_tokens=list(query_tokens), output_in_band=True,
        shards=[coordinator_pb2.ShardRange(worker=worker, begin=b, tokens=n, transfer=True)
                for b, n in shards])


def assert_same_results(test, result, undisturbed):
    """`result` holds the output, the first query set's output and the state
    of `undisturbed`, bit for bit."""
    np.testing.assert_array_equal(result.output, undisturbed.output)
    np.testing.assert_array_equal(result.queries[0], undisturbed.queries[0])
    test.assertEqual(sorted(result.state), sorted(undisturbed.state))
    for name, want in undisturbed.state.items():
        np.testing.assert_array_equal(result.state[name], want, name)


class RerunTest(unittest.TestCase):
    """A job whose worker dies runs again from the coordinator's spool: the
    client gets a second JobAccepted, sends only the query sets again, and
    returns the results of the run that completed."""

    def test_worker_killed_mid_job(self):
        cluster = LocalCluster(3)
        try:
            client = lact.Client(cluster.address)
            rng = np.random.default_rng(11)
            context = rng.standard_normal((8192, 256), dtype=np.float32)
            queries = [rng.standard_normal((16, 256), dtype=np.float32)]
            options = dict(workers=2, dtype="bf16", return_state=True, timeout=120)
            undisturbed = client.submit("preset:small:3", context, queries, **options).result()
            job = client.submit("preset:small:3", context, queries, **options)
            for p in job.progress():
                if p.stage == "LAYERS":  # uploaded and spooled; one layer of two done
                    break
            rank0 = client.status(job.id).proto.accepted.shards[0].worker
            os.kill(cluster.child_listening_on(rank0), signal.SIGKILL)
            result = job.result(timeout=120)
            self.assertGreaterEqual(result.stats["reruns"], 1, "the kill came after the job ended")
            self.assertNotIn(rank0, [s.worker for s in result.shards])
            # Two workers again, the same split: the same arithmetic.
            assert_same_results(self, result, undisturbed)
            client.close()
        finally:
            cluster.stop()


class RestartTest(unittest.TestCase):
    """A coordinator with --state-dir killed (SIGKILL) mid-job and started
    again on its port: the job's shards ran on, held on their workers; the
    Job's Submit call, lost to the kill, is made again and follows the job,
    reporting COORDINATOR_AWAY meanwhile, and returns the results of an
    undisturbed run, bit for bit."""

    def _coordinator(self, port):
        """A coordinator on `port` (0: any) and its address."""
        out = self.dir / f"coordinator-{time.monotonic_ns()}.out"
        with open(out, "w") as f:
            process = subprocess.Popen(
                [str(BIN_DIR / "lact-coordinator"), "--port", str(port), "--heartbeat-ms", "300",
                 "--state-dir", str(self.dir / "state"), "--spool-dir", str(self.dir / "spool")],
                stdout=f, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # "lact-coordinator listening on HOST:PORT"
            for line in out.read_text().splitlines():
                if "listening on" in line:
                    return process, line.split()[-1]
            time.sleep(0.05)
        process.kill()
        raise RuntimeError("the coordinator did not start")

    def setUp(self):
        self.dir = Path(tempfile.mkdtemp(prefix="lact-restart-", dir=_TMP))
        (self.dir / "state").mkdir()
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        self.coordinator, self.address = self._coordinator(0)
        self.workers = []
        self.addCleanup(self._stop_all)
        self.workers = [subprocess.Popen(
            [str(BIN_DIR / "lact-worker"), "--coordinator", self.address, "--threads", "1",
             "--spool-dir", str(self.dir / "spool"), "--coordinator-grace-seconds", "60"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(2)]
        rng = np.random.default_rng(12)
        self.context = rng.standard_normal((8192, 256), dtype=np.float32)
        self.queries = [rng.standard_normal((16, 256), dtype=np.float32)]
        self.options = dict(workers=2, return_state=True, timeout=120)
        with lact.Client(self.address) as client:
            deadline = time.monotonic() + 60
            while True:  # the workers registered
                try:
                    self.undisturbed = client.submit("preset:small:3", self.context, self.queries,
                                                     **self.options).result()
                    break
                except lact.LactError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)

    def _stop_all(self):
        for process in [self.coordinator, *self.workers]:
            process.kill()
            process.wait()

    def _kill_and_start_again(self):
        self.coordinator.kill()
        self.coordinator.wait()
        self.coordinator, _ = self._coordinator(int(self.address.rsplit(":", 1)[1]))

    def test_coordinator_killed_mid_job(self):
        with lact.Client(self.address) as client:
            job = client.submit("preset:small:3", self.context, self.queries, **self.options)
            events = job.progress()
            for p in events:
                if p.stage == "LAYERS":  # one layer of two done
                    break
            self._kill_and_start_again()
            stages = [p.stage for p in events]
            result = job.result(timeout=120)
            self.assertIn("COORDINATOR_AWAY", stages)
            assert_same_results(self, result, self.undisturbed)

    def _sent_as_the_coordinator_goes(self, client, send):
        """``send()``'s value, sent by ``client`` (which the coordinator has
        answered before) as the coordinator goes away before answering
        (stopped, the call sent, then killed); the coordinator started again."""
        client.models()  # the channel connected
        self.coordinator.send_signal(signal.SIGSTOP)
        sent = send()
        time.sleep(0.3)  # the call is sent
        self._kill_and_start_again()
        return sent

    def test_read_cut_before_its_answer(self):
        """A call that only reads, cut so, rides the restart out."""
        with lact.Client(self.address) as client:
            listed = []

            def read():
                reader = threading.Thread(target=lambda: listed.append(client.models()))
                reader.start()
                return reader

            self._sent_as_the_coordinator_goes(client, read).join(timeout=60)
            self.assertEqual(len(listed), 1, "ListModels failed or hung")

    def test_submit_cut_before_any_answer(self):
        """A Submit call cut so is made again once a coordinator listens."""
        with lact.Client(self.address) as client:
            job = self._sent_as_the_coordinator_goes(
                client, lambda: client.submit("preset:small:3", self.context, self.queries,
                                              **self.options))
            result = job.result(timeout=120)
            self.assertIn("COORDINATOR_AWAY", [p.stage for p in job.progress()])
            assert_same_results(self, result, self.undisturbed)


class TlsTest(unittest.TestCase):
    """A cluster with TLS on every port: the client trusts its CA (tls_ca or $LACT_TLS_CA)."""

    def test_golden_over_tls(self):
        cluster = LocalCluster(1, "--tls")
        try:
            case = GoldenCase(golden_case_names()[0])
            os.environ["LACT_TLS_CA"] = cluster.tls_ca
            try:
                client = lact.Client(cluster.address)
            finally:
                del os.environ["LACT_TLS_CA"]
            with client:
                result = client.submit(case.name, case.context, case.queries,
                                       return_state=True, **case.options).result(timeout=60)
            self.assertLessEqual(relative_error(result.output, case.expected["output"]),
                                 TOLERANCE)
            with lact.Client(cluster.address) as plaintext:  # no CA: refused
                with self.assertRaises(lact.LactError):
                    plaintext.submit(case.name, case.context, timeout=5).result(timeout=30)
        finally:
            cluster.stop()


if __name__ == "__main__":
    unittest.main()
