"""Tests of lact.torch, the LaCT-BiMamba model as a torch.nn.Module
(client/python/lact/torch.py), against the golden cases of ../shared/golden and
the service's own computation (`build/bin/lact run`).

Run from tests/python: /usr/bin/python3 test_torch_model.py
                   or: /usr/bin/python3 -m unittest test_torch_model -v
Environment: LACT_BIN_DIR (default build/bin), LACT_GOLDEN_DIR (default
../shared/golden beside the repository), LACT_PROTO_DIR (default proto/).

The package is copied to a temporary folder with its gRPC stubs generated
beside it (lact/__init__.py imports them), as tests/python/test_client.py does.
Tolerances: max|got - want| / max|want| <= 1e-4 in float32 (the C++ golden
tests' bound), 1e-9 in float64 against the float64 golden files.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

import numpy as np
import torch

import lact_package

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_DIR = Path(os.environ.get("LACT_GOLDEN_DIR", ROOT.parent / "shared" / "golden"))
F32_TOLERANCE = 1e-4
F64_TOLERANCE = 1e-9

lact = lt = sio = None  # imported in setUpModule, from the generated copy
_TMP = None


def setUpModule():
    global lact, lt, sio, _TMP
    _TMP, lact, lt, sio = lact_package.install_copy(
        "lact-torch-test-", "lact", "lact.torch", "lact.safetensors_io")


def tearDownModule():
    lact_package.remove_copy(_TMP)


relative_error = lact_package.relative_error


def lact_run(model_path, context_path, query_paths=(), **options):
    """(tensors, metadata) of `build/bin/lact run` (CPU, in process) on files.
    A rebuild may replace the binary for a moment: wait for it (2 minutes)."""
    out = Path(tempfile.mkdtemp(dir=_TMP)) / "out.safetensors"
    args = ["run", "--model", model_path, "--context", context_path, "--threads", "1",
            "--out", out]
    for q in query_paths:
        args += ["--query", q]
    for key, value in options.items():
        args += [f"--{key.replace('_', '-')}", value]
    lact_package.run_lact(args)
    return sio.read(out)


class GoldenTest(unittest.TestCase):
    """lact.torch on every golden case, float32 and float64."""

    def cases(self):
        names = sorted(p.name for p in GOLDEN_DIR.iterdir()
                       if (p / "expected.safetensors").exists())
        self.assertTrue(names, f"no golden cases in {GOLDEN_DIR}")
        for name in names:
            folder = GOLDEN_DIR / name
            expected, metadata = sio.read(folder / "expected.safetensors")
            queries = [np.load(p) for p in sorted(folder.glob("query_*.npy"),
                                                  key=lambda p: int(p.stem.split("_")[1]))]
            yield (name, folder / "model.safetensors", np.load(folder / "context.npy"), queries,
                   expected, json.loads(metadata.get("job.options", "{}")))

    def check_case(self, dtype, tolerance, scan_chunk=None):
        worst = 0.0
        for name, model_path, context, queries, expected, options in self.cases():
            model = lt.LactModel.from_safetensors(model_path, dtype=dtype)
            if scan_chunk is not None:
                for m in model.modules():
                    if isinstance(m, lt.MambaMixer):
                        m.scan_chunk = scan_chunk
            with torch.no_grad():
                out, query_outs, state = model.run(torch.from_numpy(context), queries, **options)
            self.assertEqual(out.dtype, dtype)
            got = {"output": out, **{f"query_{k}": q for k, q in enumerate(query_outs)}, **state}
            self.assertEqual(sorted(got), sorted(expected), name)
            for key in expected:
                err = relative_error(got[key], expected[key])
                worst = max(worst, err)
                self.assertLessEqual(err, tolerance, f"{name} {dtype} {key}")
        return worst

    def test_golden_float32(self):
        worst = self.check_case(torch.float32, F32_TOLERANCE)
        print(f"\n  golden float32: worst relative error {worst:.2e}", file=sys.stderr)

    def test_golden_float64(self):
        worst = self.check_case(torch.float64, F64_TOLERANCE)
        print(f"\n  golden float64: worst relative error {worst:.2e}", file=sys.stderr)

    def test_golden_float64_scan_in_small_chunks(self):
        # The chunked Mamba scan across many chunk boundaries (1 = token by token).
        for chunk in (1, 5):
            self.check_case(torch.float64, F64_TOLERANCE, scan_chunk=chunk)

    def test_query_from_state_file(self):
        # Later queries against a finished job: the state as a file, no context.
        name, model_path, context, queries, expected, options = next(iter(self.cases()))
        model = lt.LactModel.from_safetensors(model_path, dtype=torch.float64)
        state = {k: torch.from_numpy(v) for k, v in expected.items() if k.startswith("layers.")}
        path = _TMP / "state.safetensors"
        lt.save_state(path, state)
        loaded = lt.load_state(path)
        self.assertEqual(sorted(loaded), sorted(state))
        with torch.no_grad():
            for k, q in enumerate(queries):
                self.assertLessEqual(relative_error(model.query(q, loaded), expected[f"query_{k}"]),
                                     F32_TOLERANCE, f"{name} query_{k}")


class LactRunTest(unittest.TestCase):
    """lact.torch against the service's CPU computation (`lact run`) on random models."""

    SHAPES = [
        # embed and head, 2 layers, one TTT chunk
        dict(config={"d_model": 16, "n_layers": 2, "d_input": 5, "d_output": 3,
                     "ssm": {"expand": 2, "head_dim": 8, "d_state": 4, "conv_width": 4},
                     "ttt": {"head_dim": 8, "inter_multi": 2, "base_lr": 0.1, "muon_steps": 0,
                             "chunk_tokens": 0}, "mlp": {"hidden": 24}},
             context=23, queries=[7, 2], options={}),
        # conv width 1, one TTT head, inter_multi 1; job overrides muon_steps / chunk_tokens
        dict(config={"d_model": 24, "n_layers": 1, "d_input": 0, "d_output": 0,
                     "ssm": {"expand": 1, "head_dim": 6, "d_state": 5, "conv_width": 1},
                     "ttt": {"head_dim": 24, "inter_multi": 1, "base_lr": 0.05, "muon_steps": 0,
                             "chunk_tokens": 0}, "mlp": {"hidden": 16}},
             context=17, queries=[1], options={"muon_steps": 3, "chunk_tokens": 5}),
        # 3 layers, a context shorter than W-1 (zero conv rows first), Muon in the config
        dict(config={"d_model": 12, "n_layers": 3, "d_input": 0, "d_output": 4,
                     "ssm": {"expand": 3, "head_dim": 9, "d_state": 3, "conv_width": 5},
                     "ttt": {"head_dim": 4, "inter_multi": 3, "base_lr": 0.3, "muon_steps": 1,
                             "chunk_tokens": 2}, "mlp": {"hidden": 20}},
             context=3, queries=[2, 6], options={}),
    ]

    def test_matches_lact_run(self):
        for n, shape in enumerate(self.SHAPES):
            with self.subTest(shape=n):
                folder = Path(tempfile.mkdtemp(dir=_TMP))
                model = lt.LactModel(shape["config"], dtype=torch.float64, seed=n)
                model.save_safetensors(folder / "model.safetensors")
                rng = np.random.default_rng(n)
                width = shape["config"]["d_input"] or shape["config"]["d_model"]
                context = rng.standard_normal((shape["context"], width)).astype(np.float32)
                queries = [rng.standard_normal((q, width)).astype(np.float32)
                           for q in shape["queries"]]
                np.save(folder / "context.npy", context)
                for k, q in enumerate(queries):
                    np.save(folder / f"query_{k}.npy", q)
                want, _ = lact_run(folder / "model.safetensors", folder / "context.npy",
                                   [folder / f"query_{k}.npy" for k in range(len(queries))],
                                   **shape["options"])
                # The saved file is float32: compare the model as the service holds it.
                for dtype in (torch.float64, torch.float32):
                    loaded = lt.LactModel.from_safetensors(folder / "model.safetensors",
                                                           dtype=dtype)
                    with torch.no_grad():
                        out, qs, state = loaded.run(context, queries, **shape["options"])
                    got = {"output": out, **{f"query_{k}": q for k, q in enumerate(qs)},
                           **state}
                    self.assertEqual(sorted(got), sorted(want))
                    for key in want:
                        self.assertLessEqual(relative_error(got[key], want[key]), F32_TOLERANCE,
                                             f"shape {n} {dtype} {key}")
                    # A query set from the state `lact run` returned.
                    lact_state = {k: torch.from_numpy(v) for k, v in want.items()
                                  if k.startswith("layers.")}
                    with torch.no_grad():
                        q0 = loaded.query(queries[0], lact_state)
                    self.assertLessEqual(relative_error(q0, want["query_0"]), F32_TOLERANCE)

    def test_lact_loads_a_saved_model_with_the_same_config(self):
        model = lt.LactModel(self.SHAPES[0]["config"], seed=3)
        path = _TMP / "saved.safetensors"
        model.save_safetensors(path)
        tensors, metadata = sio.read(path)
        self.assertEqual(json.loads(metadata["lact.config"]), self.SHAPES[0]["config"])
        self.assertEqual([(k, tuple(v.shape)) for k, v in sorted(tensors.items())],
                         sorted((k, tuple(s)) for k, s in
                                lt.expected_tensors(self.SHAPES[0]["config"])))
        again = lt.LactModel.from_safetensors(path)
        for name, p in model.tensors().items():
            self.assertTrue(torch.equal(again.tensors()[name], p), name)


class AutogradTest(unittest.TestCase):
    CONFIG = {"d_model": 4, "n_layers": 1, "d_input": 3, "d_output": 2,
              "ssm": {"expand": 2, "head_dim": 4, "d_state": 2, "conv_width": 3},
              "ttt": {"head_dim": 2, "inter_multi": 2, "base_lr": 0.3, "muon_steps": 2,
                      "chunk_tokens": 2}, "mlp": {"hidden": 6}}

    def test_gradcheck_float64(self):
        model = lt.LactModel(self.CONFIG, dtype=torch.float64, seed=11)
        for m in model.modules():
            if isinstance(m, lt.MambaMixer):
                m.scan_chunk = 2  # several scan chunks in 5 tokens
        gen = torch.Generator().manual_seed(0)
        context = torch.randn(5, 3, generator=gen, dtype=torch.float64, requires_grad=True)
        query = torch.randn(2, 3, generator=gen, dtype=torch.float64, requires_grad=True)
        names = ["layers.0.ttt.w0", "layers.0.mamba.fwd.A_log", "layers.0.ttt.lr.bias",
                 "layers.0.mamba.bwd.conv1d.bias"]
        weights = [model.tensors()[n].detach().clone().requires_grad_(True) for n in names]
        call = torch.nn.utils.stateless.functional_call

        def job(context, query, *values):
            params = dict(zip(names, values))
            out, state = call(model, params, (context,))
            q = call(_Query(model), {f"model.{k}": v for k, v in params.items()},
                     (query, state))
            return (out, q, state["layers.0.ttt.w1"], state["layers.0.mamba.fwd.ssm_state"],
                    state["layers.0.mamba.bwd.conv_state"])

        self.assertTrue(torch.autograd.gradcheck(job, (context, query, *weights), eps=1e-6,
                                                 atol=1e-6, rtol=1e-5))

    def test_every_weight_gets_a_finite_gradient_float32(self):
        config = json.loads(json.dumps(self.CONFIG))
        model = lt.LactModel(config, seed=1)
        context = torch.randn(6, 3)
        out, state = model(context)
        q = model.query(torch.randn(3, 3), state)
        (out.square().sum() + q.square().sum()).backward()
        for name, p in model.named_parameters():
            self.assertIsNotNone(p.grad, name)
            self.assertTrue(torch.isfinite(p.grad).all(), name)
            self.assertGreater(float(p.grad.abs().max()), 0.0, name)


class BatchTest(unittest.TestCase):
    """[B, L, D] batches and ragged lists compute what one sequence at a time does,
    values and gradients, in float64."""

    def setUp(self):
        config = LactRunTest.SHAPES[0]["config"]
        self.model = lt.LactModel({**config, "ttt": {**config["ttt"], "muon_steps": 1,
                                                     "chunk_tokens": 3}},
                                  dtype=torch.float64, seed=4)
        self.gen = torch.Generator().manual_seed(8)

    def tokens(self, *shape):
        return torch.randn(*shape, 5, dtype=torch.float64, generator=self.gen)

    def assert_equal_rows(self, batched, singles, bound=1e-12):
        for b, single in enumerate(singles):
            self.assertLessEqual(relative_error(batched[b], single), bound, f"row {b}")

    def test_a_batch_equals_its_sequences_one_at_a_time(self):
        context, queries = self.tokens(3, 7), self.tokens(3, 4)
        with torch.no_grad():
            out, (q,), state = self.model.run(context, [queries])
            singles = [self.model.run(context[b], [queries[b]]) for b in range(3)]
        self.assertEqual(tuple(out.shape), (3, 7, 3))
        self.assert_equal_rows(out, [o for o, _, _ in singles])
        self.assert_equal_rows(q, [qs[0] for _, qs, _ in singles])
        for name, value in state.items():
            self.assert_equal_rows(value, [st[name] for _, _, st in singles])

    def test_a_ragged_list_equals_its_sequences_one_at_a_time(self):
        contexts = [self.tokens(n) for n in (5, 7, 5, 2)]
        queries = [self.tokens(n) for n in (3, 1, 1, 3)]
        with torch.no_grad():
            outs, states = self.model(contexts)
            answers = self.model.query(queries, states)
            for c, q, out, answer in zip(contexts, queries, outs, answers):
                want, state = self.model(c)
                self.assertLessEqual(relative_error(out, want), 1e-12)
                self.assertLessEqual(relative_error(answer, self.model.query(q, state)), 1e-12)
        with self.assertRaisesRegex(ValueError, "a list of as many states"):
            self.model.query(queries, states[:2])
        with self.assertRaisesRegex(ValueError, r"or \[B, L, 5\]"):
            self.model(self.tokens(2, 3, 4)[..., :4])

    def test_a_batchs_gradients_are_the_sum_of_its_sequences(self):
        context = self.tokens(2, 6)
        out, state = self.model(context)
        (out.pow(2).sum() + state["layers.1.ttt.w1"].sum()).backward()
        batched = {n: p.grad.clone() for n, p in self.model.named_parameters()}
        self.model.zero_grad()
        for b in range(2):
            out, state = self.model(context[b])
            (out.pow(2).sum() + state["layers.1.ttt.w1"].sum()).backward()
        for name, p in self.model.named_parameters():
            self.assertLessEqual(relative_error(batched[name], p.grad), 1e-10, name)


class _Query(torch.nn.Module):
    """model.query as a forward (functional_call substitutes parameters of forward)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, tokens, state):
        return self.model.query(tokens, state)


class StandaloneTest(unittest.TestCase):
    """The twin and the converters as on a training machine with only numpy and
    torch: the package copied without its gRPC stubs, grpc and protobuf not
    importable."""

    CODE = textwrap.dedent("""
        import sys
        class Refuse:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("grpc", "google"):
                    raise ImportError("no " + name + " on this machine")
        sys.meta_path.insert(0, Refuse())
        import torch
        import lact, lact.convert, lact.torch as lt
        config = {"d_model": 8, "n_layers": 1, "d_input": 3, "d_output": 2,
                  "ssm": {"expand": 2, "head_dim": 4, "d_state": 4, "conv_width": 3},
                  "ttt": {"head_dim": 4, "inter_multi": 2, "base_lr": 0.1, "muon_steps": 1,
                          "chunk_tokens": 5}, "mlp": {"hidden": 12}}
        out, _ = lt.LactModel(config, seed=1)(torch.zeros(5, 3))
        print("output", tuple(out.shape))
        try:
            lact.Client
        except ImportError as e:
            print("client:", e)
        """)

    def test_the_twin_and_the_converters_need_only_numpy_and_torch(self):
        with tempfile.TemporaryDirectory(prefix="lact-twin-") as tmp:
            shutil.copytree(ROOT / "client" / "python" / "lact", Path(tmp) / "lact",
                            ignore=shutil.ignore_patterns("v1", "__pycache__"))
            done = subprocess.run([sys.executable, "-c", self.CODE], cwd=tmp, capture_output=True,
                                  text=True, env={**os.environ, "PYTHONPATH": tmp}, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("output (5, 2)", done.stdout)
        self.assertIn("client: lact.Client needs grpcio, protobuf and lact's gRPC stubs", done.stdout)


class ApiTest(unittest.TestCase):
    def test_state_dict_round_trip_carries_the_config(self):
        config = LactRunTest.SHAPES[1]["config"]
        model = lt.LactModel(config, seed=5)
        sd = model.state_dict()
        self.assertEqual(json.loads(sd["_extra_state"]["lact.config"]), config)
        other = lt.LactModel(config, seed=6)
        other.load_state_dict(sd)
        for name, p in model.tensors().items():
            self.assertTrue(torch.equal(other.tensors()[name], p), name)
        changed = json.loads(json.dumps(config))
        changed["d_model"] = 12
        changed["ttt"]["head_dim"] = 12
        with self.assertRaises(Exception):
            lt.LactModel(changed).load_state_dict(sd)

    def test_an_unseeded_model_leaves_the_global_generator_alone(self):
        torch.manual_seed(7)
        want = torch.rand(4)
        torch.manual_seed(7)
        lt.LactModel(LactRunTest.SHAPES[0]["config"])
        self.assertTrue(torch.equal(torch.rand(4), want), "torch's global generator was reseeded")

    def test_errors_name_the_problem(self):
        config = LactRunTest.SHAPES[0]["config"]
        model = lt.LactModel(config, seed=0)
        tensors = {k: v.detach() for k, v in model.tensors().items()}
        missing = dict(tensors)
        del missing["layers.1.ttt.w2"]
        with self.assertRaisesRegex(ValueError, "missing tensor 'layers.1.ttt.w2'"):
            model.load_tensors(missing)
        with self.assertRaisesRegex(ValueError, "unexpected tensor 'layers.2.norm1.weight'"):
            model.load_tensors({**tensors, "layers.2.norm1.weight": torch.ones(16)})
        with self.assertRaisesRegex(ValueError, r"'layers.0.ttt.w0' has shape \[1, 2\]"):
            model.load_tensors({**tensors, "layers.0.ttt.w0": torch.ones(1, 2)})
        with self.assertRaisesRegex(ValueError, "muon_steps 101 is out of range"):
            model(torch.zeros(3, 5), muon_steps=101)
        with self.assertRaisesRegex(ValueError, r"context must be \[L, 5\]"):
            model(torch.zeros(3, 16))
        with self.assertRaisesRegex(ValueError, "unknown field 'ssm.groups'"):
            lt.LactModel({**config, "ssm": {**config["ssm"], "groups": 2}})
        with self.assertRaisesRegex(ValueError, "ssm.head_dim 7 must divide"):
            lt.LactModel({**config, "ssm": {**config["ssm"], "head_dim": 7}})
        with self.assertRaisesRegex(ValueError, r"'ttt.ns_precision' = \"fp16\" \(allowed: "
                                                r"\"float32\", \"bf16\"\)"):
            lt.parse_config({**config, "ttt": {**config["ttt"], "ns_precision": "fp16"}})
        with self.assertRaisesRegex(ValueError, "'ttt.normalize_update' = 1"):
            lt.parse_config({**config, "ttt": {**config["ttt"], "normalize_update": 1}})

    def test_update_rule_fields_are_optional_and_kept_only_when_on(self):
        config = LactRunTest.SHAPES[0]["config"]
        self.assertEqual(lt.parse_config({**config, "ttt": {**config["ttt"],
                                          "normalize_update": False,
                                          "ns_precision": "float32"}}), lt.parse_config(config))
        on = lt.parse_config({**config, "ttt": {**config["ttt"], "normalize_update": True,
                                                "ns_precision": "bf16"}})
        self.assertEqual((on["ttt"]["normalize_update"], on["ttt"]["ns_precision"]),
                         (True, "bf16"))
        # With 0 Newton-Schulz steps, the normalised update is another model.
        x = torch.randn(9, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
        plain = lt.LactModel({**config, "ttt": {**config["ttt"], "muon_steps": 0}},
                             dtype=torch.float64, seed=3)
        normed = lt.LactModel({**on, "ttt": {**on["ttt"], "muon_steps": 0}},
                              dtype=torch.float64, seed=3)
        with torch.no_grad():
            self.assertFalse(torch.allclose(plain(x)[0], normed(x)[0]))

    def test_safetensors_io_round_trip(self):
        path = _TMP / "io.safetensors"
        arrays = {"a": np.arange(6, dtype=np.float64).reshape(2, 3),
                  "b": np.array([1.5, -2.25], np.float16), "c": np.arange(4, dtype=np.int64),
                  "e": np.zeros((0, 3), np.float32)}
        sio.write(path, arrays, {"k": "v"})
        got, metadata = sio.read(path)
        self.assertEqual(metadata, {"k": "v"})
        for k, v in arrays.items():
            self.assertEqual(got[k].dtype, v.dtype, k)
            np.testing.assert_array_equal(got[k], v)
        # BF16 (torch's bits) reads as float32.
        x = torch.tensor([1.0, -3.5, 0.15625], dtype=torch.bfloat16)
        sio.write(path, {"x": x})  # written as float32 (numpy has no bf16)
        raw = path.read_bytes()
        header_len = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + header_len])
        header["x"].update(dtype="BF16", data_offsets=[0, 6])
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        bits = x.view(torch.int16).numpy().astype("<i2").tobytes()
        path.write_bytes(len(text).to_bytes(8, "little") + text + bits)
        got, _ = sio.read(path)
        np.testing.assert_array_equal(got["x"], x.float().numpy())


if __name__ == "__main__":
    unittest.main()
