"""lact.torch: the LaCT-BiMamba model of docs/model.md as a differentiable torch.nn.Module.

    import lact.torch as lt
    model = lt.LactModel.from_safetensors("model.safetensors")   # or lt.LactModel(config)
    out, state = model(context)                  # [L, d_out], {"layers.0.ttt.w0": ...}
    q_out = model.query(query_tokens, state)     # a query set against the fused state
    out, queries, state = model.run(context, [q0, q1], muon_steps=2, chunk_tokens=64)
    model.save_safetensors("trained.safetensors")  # what `lact run` / the service load

The computation is docs/model.md's, written from its text: a job's context updates
the TTT fast weights and the Mamba states; query sets read them. Every
operation is out of place and in torch, so gradients flow to the context, the
query tokens and every weight (train the slow weights with any optimiser).
The dtype (float32, float64) and device follow the parameters: inputs are
converted to them.

Parameter names are the safetensors tensor names (``model.state_dict()``
keys, plus ``_extra_state`` holding the config), so a state dict converts to
a service model with ``python -m lact.convert torch``.
"""

import copy
import json
import math
import operator

import torch
import torch.nn.functional as F
from torch import nn

from . import safetensors_io

__all__ = ["LactModel", "preset_config", "parse_config", "config_to_json",
           "expected_tensors", "state_tensor_shapes", "init_rule", "load_state", "save_state",
           "newton_schulz", "ssd_scan"]

EPS = 1e-5  # rmsnorm and l2norm (docs/model.md)

# --- configuration (docs/model.md, Configuration) ---------------------------------------

_SMALL = {"d_model": 256, "n_layers": 2, "d_input": 0, "d_output": 0,
          "ssm": {"expand": 2, "head_dim": 64, "d_state": 64, "conv_width": 4},
          "ttt": {"head_dim": 128, "inter_multi": 2, "base_lr": 0.01, "muon_steps": 0,
                  "chunk_tokens": 0},
          "mlp": {"hidden": 1024}}
_KEYS = {"": ("d_model", "n_layers", "d_input", "d_output", "ssm", "ttt", "mlp"),
         "ssm": ("expand", "head_dim", "d_state", "conv_width"),
         "ttt": ("head_dim", "inter_multi", "base_lr", "muon_steps", "chunk_tokens"),
         "mlp": ("hidden",)}
# Optional fields: their defaults, and the values allowed. A config keeps them
# only where they differ from the default (so the JSON of a config without
# them is unchanged).
_OPTIONAL = {"ttt": {"normalize_update": (False, (False, True)),
                     "ns_precision": ("float32", ("float32", "bf16"))}}
_MINIMUM = {"d_model": 1, "n_layers": 1, "d_input": 0, "d_output": 0, "ssm.expand": 1,
            "ssm.head_dim": 1, "ssm.d_state": 1, "ssm.conv_width": 1, "ttt.head_dim": 1,
            "ttt.inter_multi": 1, "ttt.muon_steps": 0, "ttt.chunk_tokens": 0, "mlp.hidden": 1}


def preset_config(name="small"):
    """The config dict of a built-in preset ("small" or "base", as the service's)."""
    c = copy.deepcopy(_SMALL)
    if name == "small":
        return c
    if name == "base":
        c.update(d_model=768, n_layers=12)
        c["ssm"]["d_state"], c["ttt"]["head_dim"], c["mlp"]["hidden"] = 128, 768, 3072
        return c
    raise ValueError(f"unknown preset '{name}' (allowed: small, base)")


def parse_config(config):
    """A validated copy of a config: a dict in the `lact.config` JSON form, or its
    JSON text. ValueError naming the field for a missing, unknown, mistyped or
    out-of-range field or sizes that do not divide."""
    if isinstance(config, (str, bytes)):
        try:
            config = json.loads(config)
        except ValueError:
            raise ValueError("model config: not valid JSON") from None
    if not isinstance(config, dict):
        raise ValueError("model config: must be a JSON object")
    c = {}
    for section, keys in _KEYS.items():
        src = config if not section else config.get(section)
        if not isinstance(src, dict):
            raise ValueError(f"model config: '{section}' must be an object")
        where = f"{section}." if section else ""
        optional = _OPTIONAL.get(section, {})
        for key in src:
            if key not in keys and key not in optional:
                raise ValueError(f"model config: unknown field '{where}{key}'")
        dst = c if not section else c.setdefault(section, {})
        for key, (default, allowed) in optional.items():
            value = src.get(key, default)
            if not any(type(value) is type(a) and value == a for a in allowed):
                raise ValueError(f"model config: '{where}{key}' = {json.dumps(value)} "
                                 f"(allowed: {', '.join(json.dumps(a) for a in allowed)})")
            if value != default:
                dst[key] = value
        for key in keys:
            if key in ("ssm", "ttt", "mlp"):
                continue
            if key not in src:
                raise ValueError(f"model config: missing field '{where}{key}'")
            value, name = src[key], where + key
            if name == "ttt.base_lr":
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ValueError("model config: 'ttt.base_lr' must be a number")
                if not 0.0 < value < 1e6:
                    raise ValueError(f"model config: ttt.base_lr {value} must be a positive "
                                     "finite number")
                dst[key] = float(value)
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"model config: '{name}' must be an integer, got "
                                 f"{json.dumps(value)}")
            if value < _MINIMUM[name] or value > (1 << 30):
                raise ValueError(f"model config: '{name}' = {value} must be >= {_MINIMUM[name]}")
            dst[key] = value
    d_inner = c["ssm"]["expand"] * c["d_model"]
    if d_inner % c["ssm"]["head_dim"]:
        raise ValueError(f"model config: ssm.head_dim {c['ssm']['head_dim']} must divide "
                         f"d_inner = expand * d_model = {d_inner}")
    if c["d_model"] % c["ttt"]["head_dim"]:
        raise ValueError(f"model config: ttt.head_dim {c['ttt']['head_dim']} must divide "
                         f"d_model {c['d_model']}")
    return c


def config_to_json(config):
    """The `lact.config` metadata string of a config."""
    return json.dumps(parse_config(config), separators=(",", ":"))


class _Sizes:
    """The derived sizes of a config (docs/model.md)."""

    def __init__(self, c):
        self.D, self.n_layers = c["d_model"], c["n_layers"]
        self.d_input, self.d_output = c["d_input"], c["d_output"]
        self.d_inner = c["ssm"]["expand"] * self.D
        self.P, self.N, self.W = c["ssm"]["head_dim"], c["ssm"]["d_state"], c["ssm"]["conv_width"]
        self.Hs = self.d_inner // self.P
        self.conv_channels = self.d_inner + 2 * self.N
        self.in_proj_rows = 2 * self.d_inner + 2 * self.N + self.Hs
        self.dh = c["ttt"]["head_dim"]
        self.Ht = self.D // self.dh
        self.d_h = c["ttt"]["inter_multi"] * self.dh
        self.F = c["mlp"]["hidden"]


def expected_tensors(config):
    """[(name, shape)] of every weight the config asks for, in docs/model.md's order."""
    s, out = _Sizes(parse_config(config)), []
    for i in range(s.n_layers):
        p = f"layers.{i}."
        out += [(p + "norm1.weight", (s.D,)), (p + "norm2.weight", (s.D,))]
        for d in ("fwd", "bwd"):
            m = f"{p}mamba.{d}."
            out += [(m + "in_proj.weight", (s.in_proj_rows, s.D)),
                    (m + "conv1d.weight", (s.conv_channels, s.W)),
                    (m + "conv1d.bias", (s.conv_channels,)), (m + "dt_bias", (s.Hs,)),
                    (m + "A_log", (s.Hs,)), (m + "D", (s.Hs,)), (m + "norm.weight", (s.d_inner,))]
        out += [(p + "mamba.out_proj.weight", (s.D, s.d_inner)),
                (p + "ttt.qkv.weight", (3 * s.D, s.D)), (p + "ttt.lr.weight", (3 * s.Ht, s.D)),
                (p + "ttt.lr.bias", (3 * s.Ht,)), (p + "ttt.w0", (s.Ht, s.d_h, s.dh)),
                (p + "ttt.w1", (s.Ht, s.dh, s.d_h)), (p + "ttt.w2", (s.Ht, s.d_h, s.dh)),
                (p + "ttt.o_norm.weight", (s.dh,)), (p + "ttt.o_proj.weight", (s.D, s.D)),
                (p + "mlp.gate.weight", (s.F, s.D)), (p + "mlp.up.weight", (s.F, s.D)),
                (p + "mlp.down.weight", (s.D, s.F))]
    out.append(("final_norm.weight", (s.D,)))
    if s.d_input > 0:
        out.append(("embed.weight", (s.D, s.d_input)))
    if s.d_output > 0:
        out.append(("head.weight", (s.d_output, s.D)))
    return out


def state_tensor_shapes(config):
    """[(name, shape)] of the fused state of a job (docs/model.md, The fused state)."""
    s, out = _Sizes(parse_config(config)), []
    for i in range(s.n_layers):
        p = f"layers.{i}."
        out += [(p + "ttt.w0", (s.Ht, s.d_h, s.dh)), (p + "ttt.w1", (s.Ht, s.dh, s.d_h)),
                (p + "ttt.w2", (s.Ht, s.d_h, s.dh))]
        for d in ("fwd", "bwd"):
            out += [(f"{p}mamba.{d}.ssm_state", (s.Hs, s.P, s.N)),
                    (f"{p}mamba.{d}.conv_state", (s.W - 1, s.conv_channels))]
    return out


def init_rule(name, shape, config):
    """How a fresh weight is drawn: ("constant", v), ("normal", std), ("A_log", None)
    (log(U[1, 16])) or ("dt_bias", None) (inv_softplus of a log-uniform dt in
    [1e-3, 1e-1]), as the service's random models."""
    if name.endswith(("norm1.weight", "norm2.weight", "norm.weight", ".D")):
        return "constant", 1.0
    if name.endswith("A_log"):
        return "A_log", None
    if name.endswith("dt_bias"):
        return "dt_bias", None
    if name.endswith("lr.bias"):
        return "constant", 0.0
    if name.endswith(("conv1d.bias", "lr.weight")):
        return "normal", 0.02
    if name.endswith("conv1d.weight"):
        return "normal", 1.0 / math.sqrt(parse_config(config)["ssm"]["conv_width"])
    std = 1.0 / math.sqrt(shape[-1])
    if name.endswith(("out_proj.weight", "o_proj.weight", "down.weight")):
        std /= math.sqrt(2.0 * parse_config(config)["n_layers"])
    return "normal", std


def _job_option(value, default, name, maximum):
    """A job's override of muon_steps / chunk_tokens (None: the config's)."""
    if value is None:
        return default
    try:
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if value < 0 or value > maximum:
        raise ValueError(f"{name} {value} is out of range (allowed: 0..{maximum})")
    return value


# --- the math (docs/model.md) -------------------------------------------------

def rmsnorm(x, weight):
    """x / sqrt(mean(x^2) + eps) * weight over the last axis."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * weight


def l2norm(x):
    """x / (||x||_2 + 1e-5) over the last axis."""
    return x / (torch.linalg.vector_norm(x, dim=-1, keepdim=True) + EPS)


def softplus(x):
    """log(1 + exp(x)), exact for every x (torch's F.softplus switches to x above 20)."""
    return torch.logaddexp(x, torch.zeros_like(x))


def inv_softplus(y):
    """y + log(-expm1(-y)) for a python float y > 0."""
    return y + math.log(-math.expm1(-y))


def newton_schulz(g, steps, bf16=False):
    """docs/model.md's NS on the last two axes of g (batched): normalise, transpose if
    rows > cols, `steps` quintic iterations, transpose back. bf16: each result
    rounded to bf16, as upstream LaCT's bf16 iteration and the service's
    ttt.ns_precision "bf16" do; the result has g's dtype."""
    if bf16:
        return _newton_schulz_bf16(g, steps)
    x = g / (torch.linalg.matrix_norm(g, keepdim=True) + 1e-7)
    transposed = g.shape[-2] > g.shape[-1]
    if transposed:
        x = x.transpose(-2, -1)
    for _ in range(steps):
        a = x @ x.transpose(-2, -1)
        x = 3.4445 * x + (-4.7750 * a + 2.0315 * (a @ a)) @ x
    return x.transpose(-2, -1) if transposed else x


def _bf16(x):
    """x rounded to bf16 through float32 (nearest even), kept in x's dtype; the
    gradient passes through unchanged."""
    return x.float().bfloat16().to(x.dtype)


def _newton_schulz_bf16(g, steps):
    """NS with every result rounded to bf16 after float32-or-better arithmetic, in
    upstream's order (docs/model.md): the service's ns_precision "bf16"."""
    x = _bf16(g)
    x = _bf16(x / _bf16(_bf16(torch.linalg.matrix_norm(x, keepdim=True)) + 1e-7))
    transposed = g.shape[-2] > g.shape[-1]
    if transposed:
        x = x.transpose(-2, -1)
    for _ in range(steps):
        a = _bf16(x @ x.transpose(-2, -1))
        b = _bf16(_bf16(-4.7750 * a) + _bf16(_bf16(2.0315 * a) @ a))
        x = _bf16(_bf16(3.4445 * x) + _bf16(b @ x))
    return x.transpose(-2, -1) if transposed else x


def ssd_scan(x, dt, A, B, C, state=None, chunk=64):
    """The Mamba-2 scan of docs/model.md, BiMamba without the D skip, in chunks of `chunk`
    tokens (exact up to reassociation; chunk=1 is the token-by-token recurrence).

    x [..., L, H, P], dt [..., L, H] (after softplus), A [H] (negative), B, C [..., L, N],
    state [..., H, P, N] (S(-1); None = zeros); `...` are batch dimensions. Returns
    y [..., L, H, P] with y_t = S(t) @ C_t and S at the last step.
    """
    L, H, P = x.shape[-3:]
    N = B.shape[-1]
    if state is None:
        state = x.new_zeros(*x.shape[:-3], H, P, N)
    minus_inf = torch.tensor(-math.inf, dtype=x.dtype, device=x.device)
    outs = []
    for start in range(0, L, chunk):
        xc, dtc = x[..., start:start + chunk, :, :], dt[..., start:start + chunk, :]
        Bc, Cc = B[..., start:start + chunk, :], C[..., start:start + chunk, :]
        n = xc.shape[-3]
        cum = torch.cumsum(dtc * A, dim=-2)  # [..., n, H]: log decay from the chunk's start
        # decay[t, s] = exp(sum_{r in (s, t]} dt_r A) for s <= t, 0 above the diagonal;
        # masked before exp so that no inf enters the graph.
        causal = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
        seg = torch.where(causal[:, :, None], cum[..., :, None, :] - cum[..., None, :, :],
                          minus_inf)
        weight = ((Cc @ Bc.transpose(-2, -1))[..., None] * torch.exp(seg)
                  * dtc[..., None, :, :])
        y = torch.einsum("...tsh,...shp->...thp", weight, xc)
        y = y + torch.einsum("...tn,...hpn->...thp", Cc, state) * torch.exp(cum)[..., None]
        outs.append(y)
        to_end = torch.exp(cum[..., -1:, :] - cum) * dtc  # [..., n, H]: dt_s * decay to the end
        state = (torch.exp(cum[..., -1, :])[..., None, None] * state
                 + torch.einsum("...sh,...shp,...sn->...hpn", to_end, xc, Bc))
    return torch.cat(outs, dim=-3), state


# --- modules -------------------------------------------------------------------

class _Weight(nn.Module):
    """A module holding one `weight` (norm scales): names `<name>.weight`."""

    def __init__(self, *shape, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(*shape, dtype=dtype))


class _Linear(_Weight):
    """x @ weight^T (+ bias), weight [out, in]."""

    def __init__(self, d_in, d_out, bias=False, dtype=None):
        super().__init__(d_out, d_in, dtype=dtype)
        self.bias = nn.Parameter(torch.empty(d_out, dtype=dtype)) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class _Conv1d(nn.Module):
    """The causal depthwise conv: weight [C, W], bias [C]."""

    def __init__(self, channels, width, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(channels, width, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(channels, dtype=dtype))

    def forward(self, u, history):
        """u [..., L, C] with `history` [..., W-1, C] (the inputs before u): conv(u)
        [..., L, C] and the last W-1 inputs (history first when L < W-1)."""
        channels, width = self.weight.shape
        full = torch.cat([history, u], dim=-2)  # [..., W-1+L, C]
        flat = full.reshape(-1, *full.shape[-2:]).transpose(-2, -1)  # [batch, C, W-1+L]
        out = F.conv1d(flat, self.weight[:, None, :], self.bias, groups=channels)
        out = out.transpose(-2, -1).reshape(*full.shape[:-2], -1, channels)
        return out, full[..., full.shape[-2] - (width - 1):, :]


class MambaMixer(nn.Module):
    """One direction's Mamba-2 mixer (docs/model.md, BiMamba, before out_proj)."""

    def __init__(self, s, dtype=None):
        super().__init__()
        self.s = s
        self.in_proj = _Linear(s.D, s.in_proj_rows, dtype=dtype)
        self.conv1d = _Conv1d(s.conv_channels, s.W, dtype=dtype)
        self.dt_bias = nn.Parameter(torch.empty(s.Hs, dtype=dtype))
        self.A_log = nn.Parameter(torch.empty(s.Hs, dtype=dtype))
        self.D = nn.Parameter(torch.empty(s.Hs, dtype=dtype))
        self.norm = _Weight(s.d_inner, dtype=dtype)
        self.scan_chunk = 64  # tokens per chunk of the scan: numerics only

    def forward(self, h, ssm_state=None, conv_state=None):
        """h [..., L, D] in scan order -> (y [..., L, d_inner], ssm_state [..., H_s, P, N],
        conv_state [..., W-1, d_inner + 2N]); None states are zeros."""
        s, lead, L = self.s, h.shape[:-2], h.shape[-2]
        z, xbc, dt = torch.split(self.in_proj(h), [s.d_inner, s.conv_channels, s.Hs], dim=-1)
        if conv_state is None:
            conv_state = h.new_zeros(*lead, s.W - 1, s.conv_channels)
        xbc, conv_state = self.conv1d(xbc, conv_state)
        xbc = F.silu(xbc)
        xs, B, C = torch.split(xbc, [s.d_inner, s.N, s.N], dim=-1)
        dt = softplus(dt + self.dt_bias)
        A = -torch.exp(self.A_log)
        xs = xs.reshape(*lead, L, s.Hs, s.P)
        y, ssm_state = ssd_scan(xs, dt, A, B, C, ssm_state, chunk=self.scan_chunk)
        y = (y + self.D[:, None] * xs).reshape(*lead, L, s.d_inner)
        return rmsnorm(y * F.silu(z), self.norm.weight), ssm_state, conv_state


class BiMamba(nn.Module):
    def __init__(self, s, dtype=None):
        super().__init__()
        self.fwd = MambaMixer(s, dtype)
        self.bwd = MambaMixer(s, dtype)
        self.out_proj = _Linear(s.d_inner, s.D, dtype=dtype)

    def forward(self, h, fwd_state=None):
        """(a [..., L, D], {"fwd": (ssm, conv), "bwd": (ssm, conv)}); `fwd_state`
        (ssm, conv) continues the forward direction (query sets)."""
        yf, sf, cf = self.fwd(h, *(fwd_state or (None, None)))
        yb, sb, cb = self.bwd(h.flip(-2))
        a = self.out_proj(yf + yb.flip(-2))
        return a, {"fwd": (sf, cf), "bwd": (sb, cb)}


def _fast(q, w0, w1, w2):
    """f_W(u) = w1 @ (silu(w0 @ u) * (w2 @ u)) for rows u of q [..., H, n, dh]."""
    return (F.silu(q @ w0.transpose(-2, -1)) * (q @ w2.transpose(-2, -1))) @ w1.transpose(-2, -1)


class LaCT(nn.Module):
    """Large-chunk test-time training with SwiGLU fast weights (docs/model.md, LaCT)."""

    def __init__(self, s, ttt, dtype=None):
        super().__init__()
        self.s, self.base_lr = s, ttt["base_lr"]
        self.normalize_update = ttt.get("normalize_update", False)
        self.ns_bf16 = ttt.get("ns_precision") == "bf16"
        self.detach_norm_target = False  # LactModel.detach_norm_target
        self.qkv = _Linear(s.D, 3 * s.D, dtype=dtype)
        self.lr = _Linear(s.D, 3 * s.Ht, bias=True, dtype=dtype)
        self.w0 = nn.Parameter(torch.empty(s.Ht, s.d_h, s.dh, dtype=dtype))
        self.w1 = nn.Parameter(torch.empty(s.Ht, s.dh, s.d_h, dtype=dtype))
        self.w2 = nn.Parameter(torch.empty(s.Ht, s.d_h, s.dh, dtype=dtype))
        self.o_norm = _Weight(s.dh, dtype=dtype)
        self.o_proj = _Linear(s.D, s.D, dtype=dtype)

    def _qkv(self, h):
        s, lead, L = self.s, h.shape[:-2], h.shape[-2]
        qkv = F.silu(self.qkv(h)).reshape(*lead, L, 3, s.Ht, s.dh)
        q, k, v = qkv.movedim(-4, -2).unbind(-4)  # [..., 3, H_t, L, dh] unbound
        return l2norm(q), l2norm(k), v  # each [..., H_t, L, dh]

    def _output(self, o):
        """[..., H_t, L, dh] -> o_proj(rmsnorm per head, heads concatenated) [..., L, D]."""
        o = rmsnorm(o, self.o_norm.weight).transpose(-3, -2)  # [..., L, H_t, dh]
        return self.o_proj(o.reshape(*o.shape[:-2], self.s.D))

    def forward(self, h, muon_steps, chunk_tokens):
        """(t [..., L, D], (w0, w1, w2) the final fast weights [..., H_t, ., .])."""
        s, lead, L = self.s, h.shape[:-2], h.shape[-2]
        q, k, v = self._qkv(h)
        lr = softplus(self.lr(h) + inv_softplus(self.base_lr))  # [..., L, 3 H_t]
        lr = lr.reshape(*lead, L, s.Ht, 3).movedim(-2, -3)[..., None]  # [..., H_t, L, 3, 1]
        w0, w1, w2 = self.w0, self.w1, self.w2
        norms = [torch.linalg.vector_norm(w.detach() if self.detach_norm_target else w, dim=-1,
                                          keepdim=True) for w in (w0, w1, w2)]
        step = chunk_tokens if chunk_tokens > 0 else L
        outs = []
        for start in range(0, L, step):
            K, V, Q = (t[..., start:start + step, :] for t in (k, v, q))
            lr0, lr1, lr2 = lr[..., start:start + step, :, :].unbind(-2)  # each [..., H_t, n, 1]
            G, U = K @ w0.transpose(-2, -1), K @ w2.transpose(-2, -1)  # [..., H_t, n, d_h]
            sig = torch.sigmoid(G)
            silu_g = G * sig
            dH = V @ w1  # [H_t, n, d_h]
            dU = dH * silu_g
            dG = dH * U * sig * (1 + G * (1 - sig))
            dws = [dG.transpose(-2, -1) @ (lr0 * K),           # dw0 [H_t, d_h, dh]
                   V.transpose(-2, -1) @ (lr1 * (silu_g * U)),  # dw1 [H_t, dh, d_h]
                   dU.transpose(-2, -1) @ (lr2 * K)]           # dw2 [H_t, d_h, dh]
            if muon_steps > 0 or self.normalize_update:
                dws = [newton_schulz(dw, muon_steps, self.ns_bf16) for dw in dws]
            w0, w1, w2 = (
                (w + dw) / (torch.linalg.vector_norm(w + dw, dim=-1, keepdim=True) + EPS) * n
                for w, dw, n in zip((w0, w1, w2), dws, norms))
            outs.append(_fast(Q, w0, w1, w2))
        return self._output(torch.cat(outs, dim=-2)), (w0, w1, w2)

    def query(self, h, fast):
        q, _, _ = self._qkv(h)
        return self._output(_fast(q, *fast))


class SwiGLU(nn.Module):
    def __init__(self, s, dtype=None):
        super().__init__()
        self.gate = _Linear(s.D, s.F, dtype=dtype)
        self.up = _Linear(s.D, s.F, dtype=dtype)
        self.down = _Linear(s.F, s.D, dtype=dtype)

    def forward(self, g):
        return self.down(F.silu(self.gate(g)) * self.up(g))


class Block(nn.Module):
    """docs/model.md, A block."""

    def __init__(self, s, ttt, dtype=None):
        super().__init__()
        self.norm1 = _Weight(s.D, dtype=dtype)
        self.mamba = BiMamba(s, dtype)
        self.ttt = LaCT(s, ttt, dtype)
        self.norm2 = _Weight(s.D, dtype=dtype)
        self.mlp = SwiGLU(s, dtype)

    def _finish(self, x, a, t):
        x = x + a + t
        return x + self.mlp(rmsnorm(x, self.norm2.weight))

    def forward(self, x, muon_steps, chunk_tokens):
        """(x after the block, this layer's fused state, names without `layers.{i}.`)."""
        h = rmsnorm(x, self.norm1.weight)
        a, mamba = self.mamba(h)
        t, (w0, w1, w2) = self.ttt(h, muon_steps, chunk_tokens)
        state = {"ttt.w0": w0, "ttt.w1": w1, "ttt.w2": w2}
        for d in ("fwd", "bwd"):
            state[f"mamba.{d}.ssm_state"], state[f"mamba.{d}.conv_state"] = mamba[d]
        return self._finish(x, a, t), state

    def query(self, x, state):
        h = rmsnorm(x, self.norm1.weight)
        a, _ = self.mamba(h, (state["mamba.fwd.ssm_state"], state["mamba.fwd.conv_state"]))
        t = self.ttt.query(h, (state["ttt.w0"], state["ttt.w1"], state["ttt.w2"]))
        return self._finish(x, a, t)


class LactModel(nn.Module):
    """The LaCT-BiMamba model (docs/model.md) with the service's weights and job options.

    LactModel(config, dtype=torch.float32, seed=None): random weights (as the
    service's random models: normal(1/sqrt(fan_in)), residual projections
    scaled by 1/sqrt(2 n_layers), norms and D one, A_log log(U[1,16]), dt_bias
    inv_softplus of a log-uniform dt in [1e-3, 1e-1]); `config` is the
    `lact.config` dict or JSON (see preset_config()).
    """

    def __init__(self, config, dtype=None, seed=None):
        super().__init__()
        self.config = parse_config(config)
        self.s = s = _Sizes(self.config)
        dtype = dtype or torch.get_default_dtype()
        self.layers = nn.ModuleList(Block(s, self.config["ttt"], dtype)
                                    for _ in range(s.n_layers))
        self.final_norm = _Weight(s.D, dtype=dtype)
        self.embed = _Linear(s.d_input, s.D, dtype=dtype) if s.d_input > 0 else None
        self.head = _Linear(s.D, s.d_output, dtype=dtype) if s.d_output > 0 else None
        self.reset_parameters(seed)

    @property
    def detach_norm_target(self):
        """Whether training treats each fast weight's row-norm target (the norms of
        the loaded weights the update rescales to) as a constant, as upstream LaCT
        does (`w.detach().norm(...)`). Off by default: gradients flow through the
        targets too. Forward values are the same either way."""
        return self.layers[0].ttt.detach_norm_target

    @detach_norm_target.setter
    def detach_norm_target(self, value):
        for layer in self.layers:
            layer.ttt.detach_norm_target = bool(value)

    # --- weights ------------------------------------------------------------

    @torch.no_grad()
    def reset_parameters(self, seed=None):
        """Random weights, drawn as the service's random models are (not the same
        values): see init_rule()."""
        gen = torch.Generator()
        if seed is None:
            gen.seed()  # a fresh seed for this generator only; torch's global one is left alone
        else:
            gen.manual_seed(int(seed))
        params = dict(self.named_parameters())
        for name, shape in expected_tensors(self.config):
            kind, value = init_rule(name, shape, self.config)
            f64 = torch.float64
            if kind == "constant":
                x = torch.full(shape, value, dtype=f64)
            elif kind == "A_log":
                x = torch.log(1 + 15 * torch.rand(shape, generator=gen, dtype=f64))
            elif kind == "dt_bias":
                dt = torch.exp(math.log(1e-3) + torch.rand(shape, generator=gen, dtype=f64)
                               * (math.log(1e-1) - math.log(1e-3)))
                x = dt + torch.log(-torch.expm1(-dt))
            else:
                x = torch.randn(shape, generator=gen, dtype=f64) * value
            params[name].copy_(x.to(params[name].dtype))

    def tensors(self):
        """name -> parameter (the safetensors names, in docs/model.md's order)."""
        params = dict(self.named_parameters())
        return {name: params[name] for name, _ in expected_tensors(self.config)}

    @torch.no_grad()
    def load_tensors(self, tensors, strict=True):
        """Copies name -> tensor/array into the parameters. ValueError naming a
        missing (if strict), unexpected or mis-shaped tensor."""
        params = self.tensors()
        for name in tensors:
            if name not in params:
                raise ValueError(f"model: unexpected tensor '{name}' (not part of this config)")
        for name, p in params.items():
            if name not in tensors:
                if strict:
                    raise ValueError(f"model: missing tensor '{name}' (shape "
                                     f"{list(p.shape)})")
                continue
            value = torch.as_tensor(tensors[name])
            if tuple(value.shape) != tuple(p.shape):
                raise ValueError(f"model: tensor '{name}' has shape {list(value.shape)}, "
                                 f"expected {list(p.shape)}")
            p.copy_(value.to(device=p.device, dtype=p.dtype))

    @classmethod
    def from_safetensors(cls, path, dtype=None, device=None):
        """A model from a service model file (config in __metadata__["lact.config"];
        F32/BF16/F16 weights, converted to `dtype`)."""
        tensors, metadata = safetensors_io.read(path)
        if "lact.config" not in metadata:
            raise ValueError(f"model '{path}': no __metadata__[\"lact.config\"] with the model "
                             "config")
        try:
            model = cls(metadata["lact.config"], dtype=dtype, seed=0)
            model.load_tensors({k: torch.from_numpy(v) for k, v in tensors.items()})
        except ValueError as e:
            raise ValueError(f"model '{path}': {e}") from None
        return model.to(device) if device is not None else model

    def save_safetensors(self, path):
        """Writes the weights as float32 with the config, as the service loads them."""
        safetensors_io.write(path, {k: v.detach().cpu().float() for k, v in
                                    self.tensors().items()},
                             {"lact.config": config_to_json(self.config)})

    def get_extra_state(self):
        return {"lact.config": config_to_json(self.config)}

    def set_extra_state(self, state):
        """Adopts a saved config's base_lr, update rule and job defaults; the sizes
        must match."""
        config = parse_config(state["lact.config"])
        if expected_tensors(config) != expected_tensors(self.config):
            raise ValueError("state dict: its lact.config has other sizes than this model's")
        self.config = config
        ttt = config["ttt"]
        for block in self.layers:
            block.ttt.base_lr = ttt["base_lr"]
            block.ttt.normalize_update = ttt.get("normalize_update", False)
            block.ttt.ns_bf16 = ttt.get("ns_precision") == "bf16"

    # --- jobs -------------------------------------------------------------

    @property
    def _param(self):
        return self.final_norm.weight

    def _tokens(self, x, what):
        x = torch.as_tensor(x).to(device=self._param.device, dtype=self._param.dtype)
        width = self.s.d_input or self.s.D
        if x.dim() not in (2, 3) or x.shape[-1] != width:
            raise ValueError(f"{what} must be [L, {width}] or [B, L, {width}] (or a list of "
                             f"[L_b, {width}]), got {list(x.shape)}")
        if x.shape[-2] == 0 or x.numel() == 0:
            raise ValueError(f"{what} has no tokens")
        return x

    def _stacked(self, sequences, indices):
        p = self._param
        return torch.stack([torch.as_tensor(sequences[i]).to(device=p.device, dtype=p.dtype)
                            for i in indices])

    @staticmethod
    def _length_groups(sequences, what):
        """The indices of a list's sequences, grouped by length."""
        if len(sequences) == 0:
            raise ValueError(f"{what}: an empty list")
        groups = {}
        for i, seq in enumerate(sequences):
            groups.setdefault(torch.as_tensor(seq).shape[0], []).append(i)
        return list(groups.values())

    def _head(self, x):
        x = rmsnorm(x, self.final_norm.weight)
        return self.head(x) if self.head is not None else x

    def forward(self, context, muon_steps=None, chunk_tokens=None):
        """(output [L, d_out], fused state {name: tensor}) of a job's context.

        A batch: context [B, L, d_in] gives output [B, L, d_out] and every state
        tensor with a leading B; a list of [L_b, d_in] (lengths may differ) gives a
        list of outputs and a list of states, computed in batches of equal length.
        muon_steps / chunk_tokens: the job's overrides (None: the config's)."""
        if isinstance(context, (list, tuple)):
            outs, states = [None] * len(context), [None] * len(context)
            for indices in self._length_groups(context, "context"):
                out, state = self(self._stacked(context, indices), muon_steps, chunk_tokens)
                for row, i in enumerate(indices):
                    outs[i], states[i] = out[row], {k: v[row] for k, v in state.items()}
            return outs, states
        muon = _job_option(muon_steps, self.config["ttt"]["muon_steps"], "muon_steps", 100)
        chunk = _job_option(chunk_tokens, self.config["ttt"]["chunk_tokens"], "chunk_tokens",
                            1 << 62)
        x = self._tokens(context, "context")
        x = self.embed(x) if self.embed is not None else x
        state = {}
        for i, block in enumerate(self.layers):
            x, layer_state = block(x, muon, chunk)
            state.update({f"layers.{i}.{k}": v for k, v in layer_state.items()})
        return self._head(x), state

    def query(self, tokens, state):
        """The output [L_k, d_out] of a query set against a fused state (the dict
        forward() returned, or a state file's tensors: see load_state()). Batched
        as forward(): tokens [B, L_k, d_in] with a state of leading B, or a list of
        query sets with the list of their states."""
        if isinstance(tokens, (list, tuple)):
            if not isinstance(state, (list, tuple)) or len(state) != len(tokens):
                raise ValueError("query sets as a list need a list of as many states")
            outs = [None] * len(tokens)
            for indices in self._length_groups(tokens, "query sets"):
                stacked = {k: torch.stack([torch.as_tensor(state[i][k]) for i in indices])
                           for k in state[indices[0]]}
                out = self.query(self._stacked(tokens, indices), stacked)
                for row, i in enumerate(indices):
                    outs[i] = out[row]
            return outs
        x = self._tokens(tokens, "query set")
        x = self.embed(x) if self.embed is not None else x
        p = self._param
        for i, block in enumerate(self.layers):
            prefix = f"layers.{i}."
            layer_state = {}
            for name, shape in state_tensor_shapes(self.config)[7 * i:7 * (i + 1)]:
                if name not in state:
                    raise ValueError(f"state: missing tensor '{name}'")
                value = torch.as_tensor(state[name]).to(device=p.device, dtype=p.dtype)
                shape = tuple(x.shape[:-2]) + tuple(shape)
                if tuple(value.shape) != shape:
                    raise ValueError(f"state: tensor '{name}' has shape {list(value.shape)}, "
                                     f"expected {list(shape)}")
                layer_state[name[len(prefix):]] = value
            x = block.query(x, layer_state)
        return self._head(x)

    def run(self, context, queries=(), muon_steps=None, chunk_tokens=None):
        """A whole job: (output, [query outputs], fused state); batched as forward()
        for a [B, L, d_in] context with [B, L_k, d_in] query sets."""
        out, state = self(context, muon_steps=muon_steps, chunk_tokens=chunk_tokens)
        return out, [self.query(q, state) for q in queries], state


def load_state(path):
    """The fused state tensors (name -> torch tensor) of a safetensors file the
    service or `lact run` wrote (other tensors, e.g. `output`, are left out)."""
    tensors, _ = safetensors_io.read(path)
    return {k: torch.from_numpy(v) for k, v in tensors.items() if k.startswith("layers.")}


def save_state(path, state):
    """Writes a fused state (name -> tensor) as float32 safetensors."""
    safetensors_io.write(path, {k: torch.as_tensor(v).detach().cpu().float()
                                for k, v in state.items()})
