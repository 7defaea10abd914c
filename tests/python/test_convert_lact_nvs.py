"""Tests of `python -m lact.convert lact-nvs`: upstream LaCT's view-synthesis TTT
layers (a1600012888/LaCT, lact_nvs) into lact models, computed by `lact run`.

Run from tests/python: /usr/bin/python3 -m unittest test_convert_lact_nvs -v
Environment: LACT_BIN_DIR (default build/bin), LACT_PROTO_DIR (default proto/).

The oracle is upstream's TTT layer written here from its published math
(lact_nvs/lact_ttt.py: FastWeightGluMLPMultihead.forward,
fast_weight_swish_glu_weight_norm_mini_batch_apply, zeropower_via_newtonschulz5)
in upstream's own layout (w0 [heads, head_dim, hidden], lr_fc rows (lrs, head),
the "(b h) l d" batching), independently of lact.torch.
"""

import math
import re
import unittest

import numpy as np
import torch
import torch.nn.functional as F

import lact_package
import test_convert

relative_error = lact_package.relative_error
lt = convert = sio = None
_TMP = None

FLOAT32_BOUND = 1e-5  # lact run (float32) against the float64 upstream layer


def setUpModule():
    global lt, convert, sio, _TMP
    _TMP, lt, convert, sio = lact_package.install_copy(
        "lact-nvs-test-", "lact.torch", "lact.convert", "lact.safetensors_io")
    test_convert._TMP, test_convert.sio = _TMP, sio  # its run_cli and lact_run


def tearDownModule():
    lact_package.remove_copy(_TMP)


# --- upstream's layer, from its published math ----------------------------------------

def upstream_newton_schulz(G, steps, dtype):
    """zeropower_via_newtonschulz5 with its working dtype (upstream: bfloat16)."""
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.to(dtype)
    tall = G.size(1) > G.size(2)
    if tall:
        X = X.transpose(1, 2)
    X = X / (X.norm(dim=(1, 2), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = X @ X.transpose(1, 2)
        B = b * A + c * A @ A
        X = a * X + B @ X
    return X.transpose(1, 2) if tall else X


def upstream_fast_weights(w0, w1, w2, q, k, v, lr0, lr1, lr2, order, muon_steps, ns_dtype):
    """fast_weight_swish_glu_weight_norm_mini_batch_apply: w0, w2 [b, d, dh], w1 [b, dh, d]."""
    w0_norm = w0.detach().norm(dim=1, keepdim=True)
    w1_norm = w1.detach().norm(dim=1, keepdim=True)
    w2_norm = w2.detach().norm(dim=1, keepdim=True)
    output = []
    for start, end, update, apply in order:
        if update:
            ki, vi = k[:, start:end], v[:, start:end]
            l0, l1, l2 = lr0[:, start:end], lr1[:, start:end], lr2[:, start:end]
            gate = ki @ w0
            up = ki @ w2
            hidden = F.silu(gate) * up
            dhidden = vi @ w1.transpose(-1, -2)
            dhidden_before_mul = dhidden * F.silu(gate)
            dgate = dhidden * up
            sig = torch.sigmoid(gate)
            dgate_before_act = dgate * sig * (1 + gate * (1 - sig))
            g1 = upstream_newton_schulz((hidden * l1).transpose(-1, -2) @ vi, muon_steps,
                                        ns_dtype)
            g0 = upstream_newton_schulz((ki * l0).transpose(-1, -2) @ dgate_before_act,
                                        muon_steps, ns_dtype)
            g2 = upstream_newton_schulz((ki * l2).transpose(-1, -2) @ dhidden_before_mul,
                                        muon_steps, ns_dtype)
            w1, w0, w2 = w1 + g1, w0 + g0, w2 + g2
            w0 = w0 / (w0.norm(dim=1, keepdim=True) + 1e-5) * w0_norm
            w1 = w1 / (w1.norm(dim=1, keepdim=True) + 1e-5) * w1_norm
            w2 = w2 / (w2.norm(dim=1, keepdim=True) + 1e-5) * w2_norm
        if apply:
            qi = q[:, start:end]
            output.append((F.silu(qi @ w0) * (qi @ w2)) @ w1)
    return torch.cat(output, dim=1), w0, w1, w2


def upstream_layer(sd, x, order, muon_steps, base_lr, ns_dtype=torch.float64):
    """FastWeightGluMLPMultihead.forward on x [b, l, dim] (bias=False):
    (output [b, l, dim], final w0, w1, w2 of batch element 0)."""
    b, L, dim = x.shape
    H = sd["w0"].shape[0]
    dh = dim // H
    qkv = F.silu(x @ sd["to_qkv.weight"].T)
    q, k, v = qkv.reshape(b, L, 3, H, dh).permute(2, 0, 3, 1, 4).reshape(3, b * H, L, dh)
    q = q / (q.norm(dim=2, keepdim=True) + 1e-5)
    k = k / (k.norm(dim=2, keepdim=True) + 1e-5)
    base_lr_inv = base_lr + math.log(-math.expm1(-base_lr))
    lr = F.softplus(x @ sd["lr_fc.weight"].T + sd["lr_fc.bias"] + base_lr_inv)
    lr0, lr1, lr2 = lr.reshape(b, L, 3, H, 1).permute(2, 0, 3, 1, 4).reshape(3, b * H, L, 1)
    w0, w1, w2 = (sd[n].repeat(b, 1, 1) for n in ("w0", "w1", "w2"))
    out, w0, w1, w2 = upstream_fast_weights(w0, w1, w2, q, k, v, lr0, lr1, lr2, order,
                                            muon_steps, ns_dtype)
    out = out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + 1e-5) * sd["o_norm.weight"]
    out = out.reshape(b, H, L, dh).permute(0, 2, 1, 3).reshape(b, L, dim)
    return out @ sd["c_proj.weight"].T, (w0[:H], w1[:H], w2[:H])


def nvs_order(n_input, n_target):
    """lact_nvs' training order: update on the input views, apply to all views."""
    return [(0, n_input, True, False), (0, n_input + n_target, False, True)]


def random_layer(dim=32, heads=2, inter_multi=2, seed=0):
    """A lact_nvs layer's state dict (float64), initialised as upstream does,
    with a random lr_fc bias and o_norm so that every tensor matters."""
    g = torch.Generator().manual_seed(seed)
    k = dim // heads
    m = k * inter_multi
    randn = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    return {"w0": randn(heads, k, m) * math.sqrt(2 / k),
            "w1": randn(heads, m, k) * math.sqrt(2 / m),
            "w2": randn(heads, k, m) * math.sqrt(2 / k),
            "to_qkv.weight": randn(3 * dim, dim) / math.sqrt(dim),
            "c_proj.weight": randn(dim, dim) / math.sqrt(dim),
            "lr_fc.weight": randn(3 * heads, dim) / math.sqrt(dim),
            "lr_fc.bias": randn(3 * heads) * 0.5,
            "o_norm.weight": 1 + 0.2 * randn(k)}


def rmsnorm(x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)


def wrapped_reference(sd, x, n_input, muon_steps, base_lr, ns_dtype=torch.float64):
    """The converted lact model's function: x + layer(rmsnorm(x)), then the final
    rmsnorm (the BiMamba and MLP branches start at zero, every norm weight at 1)."""
    t, weights = upstream_layer(sd, rmsnorm(x)[None], nvs_order(n_input, len(x) - n_input),
                                muon_steps, base_lr, ns_dtype)
    return rmsnorm(x + t[0]), weights


class LayerConversionTest(unittest.TestCase):

    def convert_and_run(self, sd, muon_steps, *options, n_input=40, n_target=12, seed=1):
        path, out = _TMP / "layer.pt", _TMP / "layer.safetensors"
        torch.save({k: v.float() for k, v in sd.items()}, path)
        done = test_convert.run_cli("lact-nvs", path, out, "--muon-steps", muon_steps, *options)
        self.assertEqual(done.returncode, 0, done.stderr)
        rng = np.random.default_rng(seed)
        x = (0.1 * rng.standard_normal((n_input + n_target, sd["c_proj.weight"].shape[0])))
        x = x.astype(np.float32)
        np.save(_TMP / "input.npy", x[:n_input])
        np.save(_TMP / "target.npy", x[n_input:])
        got = test_convert.lact_run(out, _TMP / "input.npy", _TMP / "run.safetensors",
                                    "--query", _TMP / "target.npy")
        weights32 = {k: v.double() for k, v in torch.load(path).items()}
        return done, got, torch.from_numpy(x).double(), weights32, out

    def check_against_upstream(self, muon_steps, ns_option, ns_dtype, bound):
        sd = random_layer(seed=muon_steps)
        done, got, x, sd32, out = self.convert_and_run(sd, muon_steps, "--ns-precision",
                                                       ns_option)
        want, (w0, w1, w2) = wrapped_reference(sd32, x, 40, muon_steps, 0.01, ns_dtype)
        errors = {"output": relative_error(got["output"], want[:40]),
                  "query": relative_error(got["query_0"], want[40:]),
                  "w0": relative_error(got["layers.0.ttt.w0"], w0.transpose(1, 2)),
                  "w1": relative_error(got["layers.0.ttt.w1"], w1.transpose(1, 2)),
                  "w2": relative_error(got["layers.0.ttt.w2"], w2.transpose(1, 2))}
        print(f"\nlact-nvs muon {muon_steps}, ns {ns_option}: lact run against upstream: "
              + ", ".join(f"{k} {v:.2g}" for k, v in errors.items()))
        for name, error in errors.items():
            self.assertLessEqual(error, bound, name)
        return done, out, x, sd32

    def test_lact_run_matches_upstream_with_muon(self):
        done, _, _, _ = self.check_against_upstream(5, "float32", torch.float64, FLOAT32_BOUND)
        rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
        self.assertIn("lr_fc.weight, rows permuted", rows["layers.0.ttt.lr.weight"])
        self.assertIn("w1, each head transposed", rows["layers.0.ttt.w1"])
        self.assertIn("c_proj.weight", rows["layers.0.ttt.o_proj.weight"])
        self.assertIn("zeros", rows["layers.0.mamba.out_proj.weight"])

    def test_lact_run_matches_upstreams_normalised_update_at_muon_zero(self):
        self.check_against_upstream(0, "float32", torch.float64, FLOAT32_BOUND)

    def test_bf16_newton_schulz_runs_as_the_twin_and_in_upstreams_regime(self):
        sd = random_layer(seed=5)
        _, got, x, sd32, out = self.convert_and_run(sd, 5, "--ns-precision", "bf16")
        model = lt.LactModel.from_safetensors(out, dtype=torch.float64)
        with torch.no_grad():
            mine, state = model(x[:40])
            query = model.query(x[40:], state)
        # The service and the twin round at the same places: they agree but for a
        # rare bf16 rounding that float32 and float64 arithmetic put on either side.
        twin = max(relative_error(got["output"], mine), relative_error(got["query_0"], query))
        # Upstream's iteration in this torch's bf16 (its norm reduces in bf16 too), and
        # the float32 iteration: bf16 implementations differ among themselves about as
        # much as from float32.
        upstream16, _ = wrapped_reference(sd32, x, 40, 5, 0.01, torch.bfloat16)
        upstream64, _ = wrapped_reference(sd32, x, 40, 5, 0.01, torch.float64)
        to16 = relative_error(got["output"], upstream16[:40])
        to64 = relative_error(got["output"], upstream64[:40])
        between = relative_error(upstream16, upstream64)
        print(f"\nlact-nvs muon 5, ns bf16: service to twin {twin:.2g}, to torch bf16 "
              f"{to16:.2g}, to float64 {to64:.2g}; torch bf16 to float64 {between:.2g}")
        self.assertLessEqual(twin, 1e-3)
        self.assertGreater(to64, 1e-3)  # bf16 is not the float32 iteration
        self.assertLess(to64, 4 * between)  # but in the regime of upstream's bf16

    def test_the_twin_computes_upstreams_layer_and_gradients_in_float64(self):
        sd = random_layer(seed=7)
        _, _, x, sd32, out = self.convert_and_run(sd, 3, "--ns-precision", "float32")
        model = lt.LactModel.from_safetensors(out, dtype=torch.float64)
        want, _ = wrapped_reference(sd32, x, 40, 3, 0.01)
        mine, state = model(x[:40])
        self.assertLessEqual(relative_error(mine, want[:40]), 1e-10)
        self.assertLessEqual(relative_error(model.query(x[40:], state), want[40:]), 1e-10)
        # Gradients: upstream detaches the weight-norm targets; so does the twin with
        # detach_norm_target, and not without it.
        model.detach_norm_target = True
        params = {k: v.clone().requires_grad_() for k, v in sd32.items()}
        wanted, _ = wrapped_reference(params, x, 40, 3, 0.01)
        wanted.pow(2).sum().backward()
        mine, state = model(x[:40])
        (mine.pow(2).sum() + model.query(x[40:], state).pow(2).sum()).backward()
        g_up = params["w0"].grad.transpose(1, 2)
        g_twin = model.layers[0].ttt.w0.grad
        self.assertLessEqual(relative_error(g_twin, g_up), 1e-9)
        self.assertLessEqual(relative_error(model.layers[0].ttt.qkv.weight.grad,
                                            params["to_qkv.weight"].grad), 1e-9)
        model.zero_grad()
        model.detach_norm_target = False
        mine, s = model(x[:40])
        (mine.pow(2).sum() + model.query(x[40:], s).pow(2).sum()).backward()
        self.assertGreater(relative_error(model.layers[0].ttt.w0.grad, g_up), 1e-3)


def lvsm_state_dict(blocks=2, dim=32, seed=0, prefix="module."):
    """A LaCTLVSM-like state dict: per block attention, TTT and MLP modules, each
    behind its LayerNorm, with the patch embedding and decoder around them."""
    g = torch.Generator().manual_seed(seed)
    randn = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    sd = {"input_linear.weight": randn(dim, 12 * 4), "input_layernorm.weight": randn(dim),
          "image_token_decoder.0.weight": randn(dim), "image_token_decoder.1.weight":
          randn(12, dim)}
    for i in range(blocks):
        b = f"blocks.{i}.module_list."
        sd.update({b + "0.ln.weight": randn(dim), b + "0.f.to_qkv.weight": randn(3 * dim, dim),
                   b + "0.f.c_proj.weight": randn(dim, dim), b + "0.f.q_norm.weight":
                   randn(16), b + "0.f.k_norm.weight": randn(16),
                   b + "1.ln.weight": randn(dim),
                   b + "2.ln.weight": randn(dim), b + "2.f.c_fc.weight": randn(4 * dim, dim),
                   b + "2.f.c_proj.weight": randn(dim, 4 * dim)})
        sd.update({b + "1.f." + k: v.float() for k, v in random_layer(dim, seed=i).items()})
    return {prefix + k: v for k, v in sd.items()}


class ModelConversionTest(unittest.TestCase):

    def test_a_whole_model_is_refused_naming_what_does_not_map_or_its_ttt_layers_convert(self):
        path, out = _TMP / "lvsm.pt", _TMP / "lvsm.safetensors"
        sd = lvsm_state_dict()
        torch.save(sd, path)
        done = test_convert.run_cli("lact-nvs", path, out, "--muon-steps", "5")
        self.assertEqual(done.returncode, 1)
        self.assertIn("have no lact counterpart (blocks.0.module_list.0.f", done.stderr)
        self.assertIn("--ttt-only", done.stderr)
        done = test_convert.run_cli("lact-nvs", path, out, "--muon-steps", "5", "--ttt-only")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("left out (--ttt-only): blocks.0.module_list.0.f", done.stdout)
        self.assertIn("input_linear", done.stdout)
        tensors, metadata = sio.read(out)
        config = lt.parse_config(metadata["lact.config"])
        self.assertEqual((config["n_layers"], config["d_model"], config["ttt"]["head_dim"],
                          config["ttt"]["inter_multi"], config["ttt"]["muon_steps"]),
                         (2, 32, 16, 2, 5))
        self.assertTrue(config["ttt"]["normalize_update"])
        self.assertNotIn("ns_precision", config["ttt"])  # float32, the default
        for i in range(2):
            f = f"module.blocks.{i}.module_list.1."
            np.testing.assert_array_equal(tensors[f"layers.{i}.ttt.w0"],
                                          sd[f + "f.w0"].transpose(1, 2).numpy())
            np.testing.assert_array_equal(tensors[f"layers.{i}.norm1.weight"],
                                          sd[f + "ln.weight"].numpy())
            lr = sd[f + "f.lr_fc.weight"].numpy()
            np.testing.assert_array_equal(tensors[f"layers.{i}.ttt.lr.weight"][3 * 1 + 2],
                                          lr[2 * 2 + 1])  # lact row 3h+j <- upstream j*H+h

    def test_what_has_no_counterpart_is_refused_by_name(self):
        base = {k: v.float() for k, v in random_layer().items()}
        cases = [
            ({"to_qkv.bias": torch.zeros(96)}, "to_qkv has a bias"),
            ({"c_proj.bias": torch.zeros(32)}, "c_proj has a bias"),
            ({"qk_scale": torch.ones(32, 2)}, "lact_llm LaCT layer"),
            ({"w0": torch.zeros(2, 16, 20), "w2": torch.zeros(2, 16, 20),
              "w1": torch.zeros(2, 20, 16)}, "not a multiple of head_dim"),
            ({"o_norm.weight": torch.ones(8)}, "'o_norm.weight' has shape [8], expected [16]"),
        ]
        for extra, message in cases:
            with self.subTest(message=message):
                torch.save({**base, **extra}, _TMP / "bad.pt")
                with self.assertRaisesRegex(convert.ConversionError, re.escape(message)):
                    convert.convert_lact_nvs(_TMP / "bad.pt", muon_steps=0)
        torch.save({"w0": base["w0"]}, _TMP / "bad.pt")
        with self.assertRaisesRegex(convert.ConversionError, "no lact_nvs TTT layer"):
            convert.convert_lact_nvs(_TMP / "bad.pt", muon_steps=0)
        done = test_convert.run_cli("lact-nvs", _TMP / "bad.pt", _TMP / "x.safetensors")
        self.assertEqual(done.returncode, 2)
        self.assertIn("--muon-steps", done.stderr)


if __name__ == "__main__":
    unittest.main()
