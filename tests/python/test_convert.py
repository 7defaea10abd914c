"""Tests of the converters (client/python/lact/convert.py): Mamba-2 checkpoints
in state-spaces/mamba's layout, and lact.torch state dicts, into lact models.

Run from tests/python: /usr/bin/python3 test_convert.py
                   or: /usr/bin/python3 -m unittest test_convert -v
Environment: LACT_BIN_DIR (default build/bin), LACT_PROTO_DIR (default proto/).

The checkpoints are built here (random tensors, a config.json as mamba_ssm's
MambaConfig writes it). The reference Mamba-2 mixer below follows mamba_ssm's
Mamba2 module token by token (its step() semantics: conv state [conv_dim,
d_conv], the recurrence, D skip, RMSNormGated with norm_before_gate=False,
out_proj), independently of lact.torch's chunked scan.
"""

import json
import math
import os
import subprocess
import sys
import unittest
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import lact_package

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-4  # float32 (lact run) against float64

lact = lt = convert = sio = None  # imported in setUpModule, from the generated copy
_TMP = None


def setUpModule():
    global lact, lt, convert, sio, _TMP
    _TMP, lact, lt, convert, sio = lact_package.install_copy(
        "lact-convert-test-", "lact", "lact.torch", "lact.convert", "lact.safetensors_io")


def tearDownModule():
    lact_package.remove_copy(_TMP)


relative_error = lact_package.relative_error


def run_cli(*args):
    """`python -m lact.convert ARGS` with the generated package: CompletedProcess."""
    env = dict(os.environ, PYTHONPATH=str(_TMP / "pkg"))
    return subprocess.run([sys.executable, "-m", "lact.convert", *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=_TMP, timeout=300)


def lact_run(model_path, context_path, out, *extra):
    """The tensors of `build/bin/lact run` (waits out a rebuild swapping the binary);
    `extra`: more of its arguments (e.g. --query FILE)."""
    lact_package.run_lact(["run", "--model", model_path, "--context", context_path, "--threads",
                           "1", "--out", out, *extra])
    return sio.read(out)[0]


# --- Mamba-2 checkpoints in state-spaces/mamba's layout ----------------------------

def make_mamba2_checkpoint(folder, d_model=16, n_layer=2, d_state=8, expand=2, headdim=8,
                           d_conv=4, d_intermediate=0, vocab_size=11, seed=0, fmt="bin",
                           zero_in_proj=False, ssm_cfg=None, extra_tensors=None, config=None):
    """Writes folder/config.json and the weights of a MambaLMHeadModel with Mamba2
    mixers (random values; float32). Returns the state dict (float64 copies)."""
    gen = torch.Generator().manual_seed(seed)
    d_inner, nheads = expand * d_model, expand * d_model // headdim
    conv_dim = d_inner + 2 * d_state
    normal = lambda *shape, std=1.0: torch.randn(*shape, generator=gen) * std  # noqa: E731
    sd = {"backbone.embedding.weight": normal(vocab_size, d_model, std=0.02)}
    for i in range(n_layer):
        p, m = f"backbone.layers.{i}.", f"backbone.layers.{i}.mixer."
        in_proj = normal(2 * d_inner + 2 * d_state + nheads, d_model, std=d_model ** -0.5)
        dt = torch.exp(math.log(1e-3) + torch.rand(nheads, generator=gen)
                       * (math.log(1e-1) - math.log(1e-3)))
        sd.update({
            p + "norm.weight": 1 + normal(d_model, std=0.1),
            m + "in_proj.weight": torch.zeros_like(in_proj) if zero_in_proj else in_proj,
            m + "conv1d.weight": normal(conv_dim, 1, d_conv, std=d_conv ** -0.5),
            m + "conv1d.bias": normal(conv_dim, std=0.1),
            m + "dt_bias": dt + torch.log(-torch.expm1(-dt)) + normal(nheads, std=0.5),
            m + "A_log": torch.log(1 + 15 * torch.rand(nheads, generator=gen)),
            m + "D": 1 + normal(nheads, std=0.3),
            m + "norm.weight": 1 + normal(d_inner, std=0.1),
            m + "out_proj.weight": normal(d_model, d_inner, std=d_inner ** -0.5),
        })
        if d_intermediate:
            sd.update({p + "norm2.weight": 1 + normal(d_model, std=0.1),
                       p + "mlp.fc1.weight": normal(2 * d_intermediate, d_model,
                                                    std=d_model ** -0.5),
                       p + "mlp.fc2.weight": normal(d_model, d_intermediate,
                                                    std=d_intermediate ** -0.5)})
    sd["backbone.norm_f.weight"] = 1 + normal(d_model, std=0.1)
    sd["lm_head.weight"] = sd["backbone.embedding.weight"]
    sd.update(extra_tensors or {})
    cfg = {"d_model": d_model, "d_intermediate": d_intermediate, "n_layer": n_layer,
           "vocab_size": vocab_size,
           "ssm_cfg": {"layer": "Mamba2", "d_state": d_state, "d_conv": d_conv,
                       "expand": expand, "headdim": headdim, "ngroups": 1, **(ssm_cfg or {})},
           "attn_layer_idx": [], "attn_cfg": {}, "rms_norm": True, "residual_in_fp32": True,
           "fused_add_norm": True, "pad_vocab_size_multiple": 8, "tie_embeddings": True}
    cfg.update(config or {})
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    if fmt == "bin":
        torch.save(sd, folder / "pytorch_model.bin")
    else:
        sio.write(folder / "model.safetensors",
                  {k: v for k, v in sd.items() if k != "lm_head.weight"})  # tied: stored once
    return {k: v.double() for k, v in sd.items()}


def rmsnorm(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def reference_mamba2_mixer(sd, prefix, u, headdim, d_state, conv_state=None, ssm_state=None):
    """mamba_ssm's Mamba2 (ngroups 1, rmsnorm, norm_before_gate False) on u [L, d_model],
    token by token as its step(): (out [L, d_model], ssm_state [H, P, N], conv_state
    [conv_dim, d_conv] = the last d_conv conv inputs)."""
    in_proj, out_proj = sd[prefix + "in_proj.weight"], sd[prefix + "out_proj.weight"]
    conv_w, conv_b = sd[prefix + "conv1d.weight"][:, 0, :], sd[prefix + "conv1d.bias"]
    d_inner, nheads = out_proj.shape[1], sd[prefix + "A_log"].numel()
    conv_dim, d_conv = conv_w.shape
    z, xBC, dt = torch.split(u @ in_proj.T, [d_inner, conv_dim, nheads], dim=-1)
    A = -torch.exp(sd[prefix + "A_log"])
    if conv_state is None:
        conv_state = torch.zeros(conv_dim, d_conv, dtype=u.dtype)
    if ssm_state is None:
        ssm_state = torch.zeros(nheads, headdim, d_state, dtype=u.dtype)
    ys = []
    for t in range(u.shape[0]):
        conv_state = torch.cat([conv_state[:, 1:], xBC[t][:, None]], dim=1)
        xbc = F.silu((conv_state * conv_w).sum(-1) + conv_b)
        x, B, C = torch.split(xbc, [d_inner, d_state, d_state])
        dt_t = F.softplus(dt[t] + sd[prefix + "dt_bias"])
        x = x.reshape(nheads, headdim)
        ssm_state = (ssm_state * torch.exp(dt_t * A)[:, None, None]
                     + torch.einsum("h,n,hp->hpn", dt_t, B, x))
        y = torch.einsum("hpn,n->hp", ssm_state, C) + sd[prefix + "D"][:, None] * x
        ys.append(y.reshape(d_inner))
    y = rmsnorm(torch.stack(ys) * F.silu(z), sd[prefix + "norm.weight"])  # RMSNormGated
    return y @ out_proj.T, ssm_state, conv_state


def reference_backbone(sd, u, n_layer, headdim, d_state):
    """MambaLMHeadModel's backbone after the embedding, on hidden states u:
    x += mixer(norm(x)) [, x += mlp(norm2(x))] per layer, then norm_f.
    Returns (out, [ssm_state per layer], [conv_state per layer])."""
    x, ssm_states, conv_states = u, [], []
    for i in range(n_layer):
        p = f"backbone.layers.{i}."
        a, s, c = reference_mamba2_mixer(sd, p + "mixer.", rmsnorm(x, sd[p + "norm.weight"]),
                                         headdim, d_state)
        x = x + a
        ssm_states.append(s)
        conv_states.append(c)
        if p + "mlp.fc1.weight" in sd:
            y, gate = (rmsnorm(x, sd[p + "norm2.weight"]) @ sd[p + "mlp.fc1.weight"].T).chunk(2, -1)
            x = x + (y * F.silu(gate)) @ sd[p + "mlp.fc2.weight"].T
    return rmsnorm(x, sd["backbone.norm_f.weight"]), ssm_states, conv_states


class Mamba2Test(unittest.TestCase):
    def test_forward_mixer_matches_the_checkpoints_mixer(self):
        for fmt in ("bin", "safetensors"):
            with self.subTest(fmt=fmt):
                folder = _TMP / f"mixer-{fmt}"
                sd = make_mamba2_checkpoint(folder, fmt=fmt, seed=1)
                model, table = convert.convert_mamba2(folder, folder / "lact.safetensors")
                model = lt.LactModel.from_safetensors(folder / "lact.safetensors",
                                                      dtype=torch.float64)
                self.assertEqual(model.config["ssm"], {"expand": 2, "head_dim": 8, "d_state": 8,
                                                       "conv_width": 4})
                gen = torch.Generator().manual_seed(2)
                for i in range(2):
                    for L in (13, 2):  # 2 < d_conv - 1: zero conv rows first
                        u = torch.randn(L, 16, generator=gen, dtype=torch.float64)
                        want, want_ssm, want_conv = reference_mamba2_mixer(
                            sd, f"backbone.layers.{i}.mixer.", u, 8, 8)
                        mamba = model.layers[i].mamba
                        with torch.no_grad():
                            y, ssm, conv = mamba.fwd(u)
                            got = mamba.out_proj(y)
                        self.assertLessEqual(relative_error(got, want), 1e-10, f"layer {i} L {L}")
                        self.assertLessEqual(relative_error(ssm, want_ssm), 1e-10)
                        # mamba_ssm keeps the last d_conv inputs [conv_dim, d_conv]; lact the
                        # last d_conv - 1 (the next step needs only those), transposed.
                        self.assertLessEqual(relative_error(conv, want_conv[:, 1:].T), 1e-12)
                        # Both directions came from the one checkpoint.
                        want_b, _, _ = reference_mamba2_mixer(
                            sd, f"backbone.layers.{i}.mixer.", u.flip(0), 8, 8)
                        with torch.no_grad():
                            got_b = mamba.out_proj(mamba.bwd(u.flip(0))[0])
                        self.assertLessEqual(relative_error(got_b, want_b), 1e-10)
                sources = {name: source for name, _, source in table}
                self.assertEqual(sources["layers.1.mamba.bwd.A_log"],
                                 "ckpt: backbone.layers.1.mixer.A_log")
                self.assertEqual(sources["layers.0.norm1.weight"],
                                 "ckpt: backbone.layers.0.norm.weight")
                self.assertEqual(sources["final_norm.weight"], "ckpt: backbone.norm_f.weight")
                self.assertIn("must be trained", sources["layers.0.ttt.qkv.weight"])
                self.assertIn("must be trained", sources["layers.0.mlp.gate.weight"])
                self.assertIn("zeros", sources["layers.0.ttt.o_proj.weight"])
                self.assertEqual(float(model.tensors()["layers.0.mlp.down.weight"].abs().max()), 0)

    def test_cli_and_lact_run_compute_the_checkpoints_backbone(self):
        # Backward checkpoint: the same model with in_proj = 0, so its mixer gives exactly 0
        # (z = 0 gates y to 0). With the LaCT and MLP branches mapped or zero, lact's model is
        # then the Mamba-2 backbone itself, and `lact run` (C++) must compute it.
        fwd_dir, bwd_dir, out = _TMP / "fwd", _TMP / "bwd", _TMP / "bimamba.safetensors"
        sd = make_mamba2_checkpoint(fwd_dir, n_layer=2, d_intermediate=24, seed=3)
        make_mamba2_checkpoint(bwd_dir, n_layer=2, d_intermediate=24, seed=4, zero_in_proj=True,
                               fmt="safetensors")
        done = run_cli("mamba2", fwd_dir, out, "--backward", bwd_dir, "--ttt-head-dim", "8")
        self.assertEqual(done.returncode, 0, done.stderr)
        rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
        self.assertIn("fwd ckpt: backbone.layers.0.mixer.in_proj.weight",
                      rows["layers.0.mamba.fwd.in_proj.weight"])
        self.assertIn("bwd ckpt: backbone.layers.1.mixer.conv1d.weight [C, 1, W] -> [C, W]",
                      rows["layers.1.mamba.bwd.conv1d.weight"])
        self.assertIn("backbone.layers.0.mlp.fc1.weight[:24]", rows["layers.0.mlp.up.weight"])
        self.assertIn("backbone.layers.0.mlp.fc1.weight[24:]", rows["layers.0.mlp.gate.weight"])
        self.assertIn("fwd ckpt: backbone.layers.1.mlp.fc2.weight",
                      rows["layers.1.mlp.down.weight"])
        for name in ("layers.0.ttt.qkv.weight", "layers.1.ttt.w0", "layers.1.ttt.lr.bias"):
            self.assertIn("must be trained", rows[name])
        self.assertIn("initialised: these must be trained", done.stdout)
        _, metadata = sio.read(out)
        config = json.loads(metadata["lact.config"])
        self.assertEqual((config["d_model"], config["n_layers"], config["mlp"]["hidden"],
                          config["ttt"]["head_dim"]), (16, 2, 24, 8))

        u = np.random.default_rng(5).standard_normal((19, 16)).astype(np.float32)
        np.save(_TMP / "u.npy", u)
        got = lact_run(out, _TMP / "u.npy", _TMP / "run.safetensors")
        want, ssm_states, conv_states = reference_backbone(sd, torch.from_numpy(u).double(),
                                                           2, 8, 8)
        self.assertLessEqual(relative_error(got["output"], want), TOLERANCE)
        for i in range(2):
            self.assertLessEqual(relative_error(got[f"layers.{i}.mamba.fwd.ssm_state"],
                                                ssm_states[i]), TOLERANCE)
            self.assertLessEqual(relative_error(got[f"layers.{i}.mamba.fwd.conv_state"],
                                                conv_states[i][:, 1:].T), TOLERANCE)
        # lact.torch agrees on the converted file too.
        model = lt.LactModel.from_safetensors(out, dtype=torch.float64)
        with torch.no_grad():
            mine, _ = model(u)
        self.assertLessEqual(relative_error(mine, want), 1e-9)

    def test_refuses_what_lact_cannot_represent(self):
        cases = [
            (dict(ssm_cfg={"ngroups": 2}), "ngroups"),
            (dict(ssm_cfg={"norm_before_gate": True}), "norm_before_gate"),
            (dict(ssm_cfg={"D_has_hdim": True}), "D_has_hdim"),
            (dict(ssm_cfg={"rmsnorm": False}), "rmsnorm"),
            (dict(ssm_cfg={"dt_limit": [0.001, 0.1]}), "dt_limit"),
            (dict(ssm_cfg={"layer": "Mamba1"}), "layer"),
            (dict(ssm_cfg={"d_ssm": 16}), "d_ssm"),
            (dict(ssm_cfg={"headdim": 4}), "headdim = 4 but the checkpoint's tensors have 8"),
            (dict(config={"rms_norm": False}), "rms_norm"),
            (dict(config={"attn_layer_idx": [1]}), "attn_layer_idx"),
            (dict(extra_tensors={"backbone.layers.0.mixer.out_proj.bias": torch.zeros(16)}),
             "out_proj.bias"),
            (dict(extra_tensors={"backbone.layers.1.mixer.D": torch.ones(32)}),
             "backbone.layers.1.mixer.D"),
        ]
        for n, (kwargs, field) in enumerate(cases):
            with self.subTest(field=field):
                folder = _TMP / f"refuse-{n}"
                make_mamba2_checkpoint(folder, n_layer=2, **kwargs)
                with self.assertRaises(convert.ConversionError) as raised:
                    convert.convert_mamba2(folder)
                self.assertIn(field, str(raised.exception))
        # A backward checkpoint of another shape.
        make_mamba2_checkpoint(_TMP / "good", seed=1)
        make_mamba2_checkpoint(_TMP / "other", d_state=4)
        with self.assertRaisesRegex(convert.ConversionError, "d_state = 4 but the forward"):
            convert.convert_mamba2(_TMP / "good", backward=_TMP / "other")
        # The CLI: exit status 1 and the message on stderr.
        done = run_cli("mamba2", _TMP / "refuse-0", _TMP / "never.safetensors")
        self.assertEqual(done.returncode, 1)
        self.assertIn("ssm_cfg.ngroups = 2", done.stderr)
        self.assertIn("one group", done.stderr)
        self.assertFalse((_TMP / "never.safetensors").exists())

    def test_options(self):
        folder = _TMP / "options"
        make_mamba2_checkpoint(folder, n_layer=1, seed=7)
        model, table = convert.convert_mamba2(folder, init="random", out_proj="mean",
                                              d_input=3, d_output=5, muon_steps=2,
                                              chunk_tokens=8, mlp_hidden=40, seed=1)
        self.assertEqual((model.config["d_input"], model.config["d_output"],
                          model.config["mlp"]["hidden"], model.config["ttt"]["muon_steps"]),
                         (3, 5, 40, 2))
        sources = dict((n, s) for n, _, s in table)
        self.assertIn("must be trained", sources["embed.weight"])
        self.assertIn("must be trained", sources["head.weight"])
        self.assertIn("mean of", sources["layers.0.mamba.out_proj.weight"])
        self.assertGreater(float(model.tensors()["layers.0.ttt.o_proj.weight"].abs().max()), 0)


class TorchStateDictTest(unittest.TestCase):
    def test_state_dict_to_lact_model(self):
        config = {"d_model": 8, "n_layers": 2, "d_input": 3, "d_output": 0,
                  "ssm": {"expand": 2, "head_dim": 4, "d_state": 4, "conv_width": 3},
                  "ttt": {"head_dim": 4, "inter_multi": 2, "base_lr": 0.1, "muon_steps": 1,
                          "chunk_tokens": 5}, "mlp": {"hidden": 12}}
        model = lt.LactModel(config, seed=9)
        state_path, out = _TMP / "state.pt", _TMP / "from_torch.safetensors"
        torch.save(model.state_dict(), state_path)
        done = run_cli("torch", state_path, out)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("state dict: layers.1.ttt.w2", done.stdout)
        loaded = lt.LactModel.from_safetensors(out)
        self.assertEqual(loaded.config, config)
        for name, p in model.tensors().items():
            self.assertTrue(torch.equal(loaded.tensors()[name], p), name)
        # The service runs it as lact.torch does.
        x = np.random.default_rng(1).standard_normal((11, 3)).astype(np.float32)
        np.save(_TMP / "x.npy", x)
        got = lact_run(out, _TMP / "x.npy", _TMP / "x-run.safetensors")
        with torch.no_grad():
            want, _ = model(x)
        self.assertLessEqual(relative_error(got["output"], want), TOLERANCE)
        # A bare state dict needs --config; {"config", "state_dict"} carries its own.
        bare = {k: v for k, v in model.state_dict().items() if k != "_extra_state"}
        torch.save(bare, _TMP / "bare.pt")
        with self.assertRaisesRegex(convert.ConversionError, "pass --config"):
            convert.convert_torch(_TMP / "bare.pt")
        again, _ = convert.convert_torch(_TMP / "bare.pt", config=json.dumps(config))
        self.assertEqual(again.config, config)
        torch.save({"config": json.dumps(config), "state_dict": bare}, _TMP / "wrapped.pt")
        again, _ = convert.convert_torch(_TMP / "wrapped.pt")
        self.assertEqual(again.config, config)
        # A config dict with floats: torch 1.13's weights_only loader cannot read it.
        torch.save({"config": config, "state_dict": bare}, _TMP / "floats.pt")
        try:
            again, _ = convert.convert_torch(_TMP / "floats.pt")
        except convert.ConversionError as e:
            self.assertIn("--trust-pickle", str(e))
            again, _ = convert.convert_torch(_TMP / "floats.pt", trust_pickle=True)
        self.assertTrue(torch.equal(again.tensors()["layers.1.ttt.w0"],
                                    model.tensors()["layers.1.ttt.w0"]))
        # The prefixes wrappers add (torch.compile's, DataParallel's, an attribute's).
        for prefix in ("_orig_mod.", "model.module."):
            torch.save({prefix + k: v for k, v in model.state_dict().items()}, _TMP / "pre.pt")
            again, _ = convert.convert_torch(_TMP / "pre.pt")
            self.assertEqual(again.config, config, prefix)
            self.assertTrue(torch.equal(again.tensors()["layers.1.ttt.w0"],
                                        model.tensors()["layers.1.ttt.w0"]), prefix)
        del bare["layers.0.mlp.up.weight"]
        torch.save(bare, _TMP / "short.pt")
        with self.assertRaisesRegex(convert.ConversionError, "missing tensor "
                                                             "'layers.0.mlp.up.weight'"):
            convert.convert_torch(_TMP / "short.pt", config=json.dumps(config))


if __name__ == "__main__":
    unittest.main()
