"""Upstream LaCT's novel-view-synthesis TTT layers into lact models.

    python -m lact.convert lact-nvs CKPT OUT.safetensors --muon-steps N [options]

CKPT is a state dict (torch.save file or .safetensors) of a lact_nvs
`FastWeightGluMLPMultihead` (a1600012888/LaCT, lact_nvs/lact_ttt.py: `w0`,
`w1`, `w2`, `to_qkv.weight`, `lr_fc.weight`/`.bias`, `o_norm.weight`,
`c_proj.weight`), or of a whole model holding such layers (LaCTLVSM:
`blocks.{i}.module_list.{j}.f.*`). Each TTT layer becomes one lact layer
whose LaCT part computes what upstream's does; the layer's other branches
(BiMamba and the MLP) start at zero, so the lact model is the TTT layers
with RMS pre-norms until those branches are trained. docs/upstream.md has
the correspondence tensor by tensor.

What has no counterpart is refused, named: biases on `to_qkv` or `c_proj`,
a LayerNorm bias, lact_llm's layers (sliding-window attention, momentum,
low-rank fast weights, q/k scale and offset). A whole model's other modules
(attention, MLP, patch embedding, decoder) are refused unless --ttt-only,
which converts the TTT layers alone and lists what it left out.

The checkpoint does not record `base_lr` or `muon_update_steps`: pass the
ones the model was trained with (lact_nvs' configs: base_lr 0.01,
muon_update_steps 5). The converted layer normalises its update at 0 steps
as upstream does (ttt.normalize_update). Upstream runs Newton-Schulz in
bf16; bf16 results depend on each implementation's reductions, and after 5
steps two bf16 implementations differ about as much as bf16 differs from
float32, so the default is the float32 iteration (upstream's math, to
float32 rounding); --ns-precision bf16 keeps upstream's precision regime.
"""

import re

import torch

from . import torch as lact_torch

# A lact_nvs TTT layer's tensors, as named under its prefix.
LAYER_TENSORS = ("w0", "w1", "w2", "to_qkv.weight", "lr_fc.weight", "lr_fc.bias",
                 "o_norm.weight", "c_proj.weight")
_NO_COUNTERPART = {
    "to_qkv.bias": "to_qkv has a bias (bias=True); lact's ttt.qkv has none",
    "c_proj.bias": "c_proj has a bias (bias=True); lact's ttt.o_proj has none",
}
# Names that mark lact_llm's LaCT layer, which has no lact counterpart.
_LACT_LLM_MARKS = ("lr_proj.weight", "qk_scale", "qk_offset", "momentum_proj", "w_left",
                   "w_right", "ttt_scale_proj")


class _Error(ValueError):
    pass


def _natural_key(name):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def find_layers(tensors):
    """The prefixes (e.g. "blocks.0.module_list.1.f.", or "" for a bare layer) of the
    lact_nvs TTT layers in a state dict, in the model's order."""
    prefixes = {name[:-len("lr_fc.weight")] for name in tensors if name.endswith("lr_fc.weight")}
    prefixes = {p for p in prefixes if p + "w0" in tensors}
    return sorted(prefixes, key=_natural_key)


def _refuse_lact_llm(tensors, where):
    marks = sorted(n for n in tensors
                   if any(n.endswith(m) or m in n.split(".") for m in _LACT_LLM_MARKS))
    if marks:
        raise _Error(
            f"{where}: '{marks[0]}' is part of a lact_llm LaCT layer, which has no lact "
            "counterpart (sliding-window attention inside the layer, q/k scale and offset, "
            "momentum, low-rank fast weights); only lact_nvs layers (FastWeightGluMLPMultihead) "
            "convert")


class _Layer:
    """One upstream TTT layer's tensors and shapes, checked."""

    def __init__(self, tensors, prefix, where):
        self.prefix = prefix
        for suffix, why in _NO_COUNTERPART.items():
            if prefix + suffix in tensors:
                raise _Error(f"{where}: tensor '{prefix}{suffix}': {why}")
        missing = [s for s in LAYER_TENSORS if prefix + s not in tensors]
        if missing:
            raise _Error(f"{where}: TTT layer '{prefix or '(top level)'}' lacks "
                         f"'{prefix}{missing[0]}'")
        self.t = {s: tensors[prefix + s].detach().to(torch.float64) for s in LAYER_TENSORS}
        w0 = self.t["w0"]
        if w0.dim() != 3:
            raise _Error(f"{where}: '{prefix}w0' has shape {list(w0.shape)}; a lact_nvs fast "
                         "weight is [heads, head_dim, hidden]")
        self.heads, self.head_dim, self.hidden = w0.shape
        self.d_model = self.t["to_qkv.weight"].shape[-1]
        H, k, m, D = self.heads, self.head_dim, self.hidden, self.d_model
        want = {"w0": [H, k, m], "w2": [H, k, m], "w1": [H, m, k], "to_qkv.weight": [3 * D, D],
                "lr_fc.weight": [3 * H, D], "lr_fc.bias": [3 * H], "o_norm.weight": [k],
                "c_proj.weight": [D, D]}
        for suffix, shape in want.items():
            if list(self.t[suffix].shape) != shape:
                raise _Error(f"{where}: '{prefix}{suffix}' has shape "
                             f"{list(self.t[suffix].shape)}, expected {shape} (heads {H}, "
                             f"head_dim {k}, hidden {m}, dim {D})")
        if H * k != D:
            raise _Error(f"{where}: '{prefix}w0' has {H} heads of {k}, but dim is {D}")
        if m % k:
            raise _Error(f"{where}: fast-weight hidden width {m} is not a multiple of head_dim "
                         f"{k} (lact's inter_multi is an integer)")

    def lact_tensors(self):
        """lact name (without `layers.{i}.`) -> (tensor, how it was made)."""
        H, p = self.heads, self.prefix
        order = torch.tensor([j * H + h for h in range(H) for j in range(3)])
        per_head = "each head transposed"
        rows = "rows permuted: lact row 3h+j <- upstream row j*heads+h"
        return {
            "ttt.qkv.weight": (self.t["to_qkv.weight"], f"{p}to_qkv.weight"),
            "ttt.lr.weight": (self.t["lr_fc.weight"][order], f"{p}lr_fc.weight, {rows}"),
            "ttt.lr.bias": (self.t["lr_fc.bias"][order], f"{p}lr_fc.bias, {rows}"),
            "ttt.w0": (self.t["w0"].transpose(1, 2), f"{p}w0, {per_head}"),
            "ttt.w1": (self.t["w1"].transpose(1, 2), f"{p}w1, {per_head}"),
            "ttt.w2": (self.t["w2"].transpose(1, 2), f"{p}w2, {per_head}"),
            "ttt.o_norm.weight": (self.t["o_norm.weight"], f"{p}o_norm.weight"),
            "ttt.o_proj.weight": (self.t["c_proj.weight"], f"{p}c_proj.weight"),
        }


def _pre_norm(tensors, prefix, where):
    """(name, tensor) of the LayerNorm lact_nvs' Block puts before the layer
    (`...{j}.ln.weight` beside `...{j}.f.`), or None for a bare layer."""
    if not prefix.endswith("f."):
        return None
    name = prefix[:-len("f.")] + "ln.weight"
    if prefix[:-len("f.")] + "ln.bias" in tensors:
        raise _Error(f"{where}: tensor '{prefix[:-2]}ln.bias': the pre-norm is a LayerNorm with "
                     "a bias; lact's pre-norm is an RMSNorm without one")
    return (name, tensors[name]) if name in tensors else None


def _group(names):
    """Module prefixes of tensor names, for a message: 'a.b' of 'a.b.weight'."""
    groups = []
    for name in sorted(names, key=_natural_key):
        head = name.rsplit(".", 1)[0] if "." in name else name
        if head not in groups:
            groups.append(head)
    return groups


def _ssm_head_dim(d_inner):
    return max(d for d in range(1, min(d_inner, 64) + 1) if d_inner % d == 0)


def convert_lact_nvs(tensors, where, *, muon_steps, base_lr=0.01, ns_precision="float32",
                     ttt_only=False, ssm_d_state=16, mlp_hidden=None, seed=0):
    """lact_nvs TTT layers (a name -> tensor dict) -> (float32 LactModel, table, left_out).

    table: rows (lact name, shape, source) as lact.convert prints them; left_out:
    the module prefixes --ttt-only did not convert. Raises ValueError naming what
    has no counterpart."""
    if ns_precision not in ("bf16", "float32"):
        raise _Error(f"ns_precision {ns_precision!r}: allowed float32, bf16")
    _refuse_lact_llm(tensors, where)
    prefixes = find_layers(tensors)
    if not prefixes:
        raise _Error(f"{where}: no lact_nvs TTT layer (FastWeightGluMLPMultihead: w0, w1, w2, "
                     "to_qkv, lr_fc, o_norm, c_proj) in this state dict")
    layers = [_Layer(tensors, p, where) for p in prefixes]
    first = layers[0]
    for layer in layers[1:]:
        shape = (layer.d_model, layer.heads, layer.hidden)
        if shape != (first.d_model, first.heads, first.hidden):
            raise _Error(f"{where}: TTT layer '{layer.prefix}' has dim, heads, hidden {shape}; "
                         f"'{first.prefix}' has {(first.d_model, first.heads, first.hidden)}: "
                         "lact's layers share one shape")
    norms = [_pre_norm(tensors, p, where) for p in prefixes]
    claimed = {p + s for p in prefixes for s in LAYER_TENSORS}
    claimed |= {n[0] for n in norms if n is not None}
    left_out = _group(set(tensors) - claimed - {"_extra_state"})
    if left_out and not ttt_only:
        shown = ", ".join(left_out[:6]) + (", ..." if len(left_out) > 6 else "")
        raise _Error(f"{where}: {len(left_out)} module(s) besides the {len(layers)} TTT "
                     f"layer(s) have no lact counterpart ({shown}); pass --ttt-only to convert "
                     "the TTT layers alone")
    D = first.d_model
    ttt = {"head_dim": first.head_dim, "inter_multi": first.hidden // first.head_dim,
           "base_lr": base_lr, "muon_steps": muon_steps, "chunk_tokens": 0,
           "normalize_update": True}
    if ns_precision == "bf16":
        ttt["ns_precision"] = "bf16"
    config = lact_torch.parse_config({
        "d_model": D, "n_layers": len(layers), "d_input": 0, "d_output": 0,
        "ssm": {"expand": 2, "head_dim": _ssm_head_dim(2 * D), "d_state": ssm_d_state,
                "conv_width": 4},
        "ttt": ttt, "mlp": {"hidden": mlp_hidden or 4 * D}})
    model = lact_torch.LactModel(config, dtype=torch.float32, seed=seed)
    mapped = {}
    for i, (layer, norm) in enumerate(zip(layers, norms)):
        for name, value in layer.lact_tensors().items():
            mapped[f"layers.{i}.{name}"] = value
        if norm is not None:
            mapped[f"layers.{i}.norm1.weight"] = (
                norm[1].detach().to(torch.float64),
                f"{norm[0]} (a LayerNorm upstream: lact's RMSNorm does not subtract the mean)")
    table = []
    with torch.no_grad():
        params = model.tensors()
        for name, shape in lact_torch.expected_tensors(config):
            if name in mapped:
                value, source = mapped[name]
                params[name].copy_(value.to(torch.float32))
                source = "ckpt: " + source
            elif name.endswith(("mamba.out_proj.weight", "mlp.down.weight")):
                params[name].zero_()
                source = "initialised: zeros (the branch adds nothing): must be trained"
            elif name.endswith(("norm1.weight", "norm2.weight")) or name == "final_norm.weight":
                params[name].fill_(1.0)
                source = "initialised: 1: must be trained"
            else:
                source = "initialised (its branch's output projection is zero): must be trained"
            table.append((name, list(shape), source))
    return model, table, left_out


def add_arguments(parser):
    """The `lact-nvs` subcommand's arguments."""
    parser.add_argument("checkpoint", help="state dict of a lact_nvs TTT layer or model "
                                           "(torch.save file or .safetensors)")
    parser.add_argument("out", help="the lact model to write (.safetensors)")
    parser.add_argument("--muon-steps", type=int, required=True,
                        help="the layer's muon_update_steps (not stored in checkpoints; "
                             "lact_nvs' configs use 5)")
    parser.add_argument("--base-lr", type=float, default=0.01,
                        help="the layer's base_lr (not stored in checkpoints; default 0.01)")
    parser.add_argument("--ns-precision", choices=("float32", "bf16"), default="float32",
                        help="Newton-Schulz arithmetic: float32 (default, every backend: "
                             "upstream's math to float32 rounding), or bf16 (upstream's "
                             "precision regime, not its values; cpu backend)")
    parser.add_argument("--ttt-only", action="store_true",
                        help="a whole model: convert its TTT layers and leave out the rest")
    parser.add_argument("--mlp-hidden", type=int, help="lact's MLP width (default 4 * dim); "
                                                       "the MLP starts at zero")
    parser.add_argument("--seed", type=int, default=0, help="seed of the initialised weights")
    parser.add_argument("--trust-pickle", action="store_true",
                        help="full torch.load (runs pickled code) instead of weights_only")
