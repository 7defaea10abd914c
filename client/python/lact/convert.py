"""Converters into lact model files (safetensors with `lact.config`).

    python -m lact.convert mamba2 CKPT OUT.safetensors [--backward CKPT2] [options]
    python -m lact.convert torch STATE.pt OUT.safetensors [--config CONFIG]
    python -m lact.convert lact-nvs CKPT OUT.safetensors --muon-steps N [options]

`mamba2`: a Mamba-2 checkpoint in state-spaces/mamba's layout (the
`Mamba2` mixer of mamba_ssm: per layer `mixer.in_proj.weight`,
`mixer.conv1d.weight`/`.bias`, `mixer.dt_bias`, `mixer.A_log`, `mixer.D`,
`mixer.norm.weight`, `mixer.out_proj.weight`, with its `config.json`) becomes
the BiMamba weights of a lact model: both directions from CKPT, or the
backward direction from `--backward CKPT2`. The block norms, the final norm
and a gated MLP (`d_intermediate > 0`) are mapped too when the checkpoint has
them; the LaCT weights and whatever else a Mamba-2 checkpoint lacks are
initialised and must be trained. A table says which lact tensor came from
which checkpoint tensor. Shapes lact cannot represent are refused with the
field named (ngroups > 1, norm_before_gate, D_has_hdim, biases, ...).

CKPT is a directory holding config.json and the weights (model.safetensors,
pytorch_model.bin, *.safetensors, *.bin, *.pt, *.pth; shards are merged) or
a weights file (its config.json beside it, or --config). torch files are
read with torch.load(weights_only=True): tensors in plain containers only
(torch 1.13's cannot read floats; --trust-pickle loads anything, running
its pickled code).

`torch`: a `lact.torch.LactModel` state dict saved with torch.save (its
`_extra_state` carries the config; or a {"config", "state_dict"} dict; or
--config) becomes a lact model file.

`lact-nvs`: upstream LaCT's view-synthesis TTT layers (lact_nvs), one layer
or a whole model's; see lact/convert_lact_nvs.py.
"""

import argparse
import json
import math
import pickle
import re
import sys
from pathlib import Path

import torch

from . import convert_lact_nvs as lact_nvs
from . import safetensors_io
from . import torch as lact_torch


class ConversionError(ValueError):
    """A checkpoint lact cannot take, with the reason."""


# --- reading checkpoints --------------------------------------------------------

def _torch_load(path, trust_pickle=False):
    """torch.load on the CPU; only tensors and plain containers unless trust_pickle."""
    if trust_pickle:
        return torch.load(path, map_location="cpu")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except TypeError:  # a torch without weights_only
        raise ConversionError(f"{path}: this torch cannot load a file safely "
                              "(weights_only); pass --trust-pickle if you trust it") from None
    except pickle.UnpicklingError as e:
        raise ConversionError(f"{path}: torch.load(weights_only=True) cannot read it ({e}); "
                              "pass --trust-pickle if you trust the file (it runs its pickled "
                              "code)") from None


def _state_dict_of(obj, path):
    """The name -> tensor dict inside what torch.load returned."""
    if isinstance(obj, torch.nn.Module):
        obj = obj.state_dict()
    if not isinstance(obj, dict):
        raise ConversionError(f"{path}: not a state dict (a {type(obj).__name__})")
    for key in ("state_dict", "model", "module"):
        if key in obj and isinstance(obj[key], dict) and not any(
                isinstance(v, torch.Tensor) for v in obj.values()):
            return _state_dict_of(obj[key], path)
    return obj


# Prefixes that wrappers put before every name of a model's state dict:
# DataParallel and DistributedDataParallel ("module."), torch.compile
# ("_orig_mod."), and a model kept as a wrapper's attribute ("model.").
WRAPPER_PREFIXES = ("module.", "_orig_mod.", "model.")


def _strip_wrapper_prefixes(tensors):
    """The names without the prefixes wrappers put before every one of them,
    however many wrappers deep."""
    while True:
        names = [k for k in tensors if k != "_extra_state"]
        prefix = next((p for p in WRAPPER_PREFIXES
                       if names and all(k.startswith(p) for k in names)), None)
        if prefix is None:
            return tensors
        tensors = {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in tensors.items()}


def read_weights(path, trust_pickle=False):
    """name -> tensor of a .safetensors or torch file."""
    path = Path(path)
    if path.suffix == ".safetensors":
        tensors, _ = safetensors_io.read(path)
        return {k: torch.from_numpy(v) for k, v in tensors.items()}
    return _strip_wrapper_prefixes(_state_dict_of(_torch_load(path, trust_pickle), path))


def load_checkpoint(path, config_path=None, trust_pickle=False):
    """(tensors, config dict) of a checkpoint directory or weights file."""
    path = Path(path)
    if path.is_dir():
        files = []
        for pattern in ("model.safetensors", "pytorch_model.bin", "*.safetensors", "*.bin",
                        "*.pt", "*.pth"):
            files = sorted(path.glob(pattern))
            if files:
                break
        if not files:
            raise ConversionError(f"{path}: no weights (model.safetensors, pytorch_model.bin, "
                                  "*.safetensors, *.bin, *.pt, *.pth)")
        config_file = Path(config_path) if config_path else path / "config.json"
    elif path.is_file():
        files = [path]
        config_file = Path(config_path) if config_path else path.parent / "config.json"
    else:
        raise ConversionError(f"{path}: no such file or directory")
    tensors = {}
    for f in files:
        tensors.update(read_weights(f, trust_pickle))
    if not config_file.is_file():
        raise ConversionError(f"{path}: no config.json (pass --config FILE)")
    try:
        config = json.loads(config_file.read_text())
    except ValueError as e:
        raise ConversionError(f"{config_file}: not JSON: {e}") from None
    if not isinstance(config, dict):
        raise ConversionError(f"{config_file}: not a JSON object")
    return tensors, config


# --- Mamba-2 ---------------------------------------------------------------------

# Names of the same setting in Hugging Face's Mamba2Config (lookups fall back to them).
_ALIASES = {"d_model": ("hidden_size",), "n_layer": ("num_hidden_layers",),
            "d_state": ("state_size",), "d_conv": ("conv_kernel",), "headdim": ("head_dim",),
            "ngroups": ("n_groups",), "bias": ("use_bias",), "conv_bias": ("use_conv_bias",),
            "norm_epsilon": ("layer_norm_epsilon",), "dt_limit": ("time_step_limit",)}
_MISSING = object()


class _Settings:
    """A Mamba-2 config.json: mixer settings from `ssm_cfg` (mamba_ssm) or the top level."""

    def __init__(self, config, where):
        self.config, self.where = config, where
        self.ssm = config.get("ssm_cfg") or {}

    def get(self, name, default=_MISSING):
        for key in (name,) + _ALIASES.get(name, ()):
            for scope in (self.ssm, self.config):
                if key in scope:
                    return scope[key]
        return default

    def field(self, name):
        """How the field is named in messages."""
        for key in (name,) + _ALIASES.get(name, ()):
            if key in self.ssm:
                return f"ssm_cfg.{key}"
            if key in self.config:
                return key
        return name

    def refuse(self, name, why):
        raise ConversionError(f"{self.where}: {self.field(name)} = {self.get(name, None)!r}: "
                              f"{why}")


def _find_layers(tensors, where):
    """[(block prefix, mixer prefix)] per layer, and the model's root prefix.

    Recognises `...layers.{i}.mixer.*` (MambaLMHeadModel / MixerModel), a single
    Block (`mixer.*`) and a bare Mamba2 module (`in_proj.weight`, ...)."""
    found = {}
    for name in tensors:
        m = re.fullmatch(r"(.*?layers\.)(\d+)\.mixer\.in_proj\.weight", name)
        if m:
            found.setdefault(m.group(1), {})[int(m.group(2))] = f"{m.group(1)}{m.group(2)}."
    if len(found) > 1:
        raise ConversionError(f"{where}: several stacks of layers ({sorted(found)}); "
                              "convert one model at a time")
    if found:
        (base, layers), = found.items()
        if sorted(layers) != list(range(len(layers))):
            raise ConversionError(f"{where}: layers {sorted(layers)} are not numbered 0..n-1")
        root = base[:-len("layers.")]
        return [(layers[i], layers[i] + "mixer.") for i in range(len(layers))], root
    if "mixer.in_proj.weight" in tensors:
        return [("", "mixer.")], ""
    if "in_proj.weight" in tensors:
        return [(None, "")], ""
    raise ConversionError(f"{where}: no Mamba-2 mixer weights (looked for "
                          "'layers.{i}.mixer.in_proj.weight', 'mixer.in_proj.weight', "
                          "'in_proj.weight')")


def _is_inf_limit(limit):
    if limit is None:
        return True
    try:
        lo, hi = (v.get("__float__") if isinstance(v, dict) else v for v in limit)
        return float(lo) == 0.0 and float(hi) == math.inf
    except (TypeError, ValueError):
        return False


class Mamba2Checkpoint:
    """A checked Mamba-2 checkpoint: sizes and the tensors of each layer."""

    def __init__(self, tensors, config, where):
        self.tensors, self.where = tensors, where
        cfg = _Settings(config, where)
        self.layers, self.root = _find_layers(tensors, where)

        layer_type = cfg.get("layer", "Mamba2")
        if str(layer_type).lower() != "mamba2":
            cfg.refuse("layer", "lact's BiMamba is a Mamba-2 mixer (docs/model.md, BiMamba)")
        if cfg.get("attn_layer_idx", None):
            cfg.refuse("attn_layer_idx", "attention layers have no counterpart in lact")
        activation = cfg.get("activation", "silu")
        if activation not in ("silu", "swish"):
            cfg.refuse("activation", "lact's conv activation is silu")
        if cfg.get("rmsnorm", True) is not True:
            cfg.refuse("rmsnorm", "lact's mixer always ends with rmsnorm(y * silu(z), norm)")
        # Hugging Face's Mamba2 writes norm_before_gate but gates before the norm whatever
        # it says (its MambaRMSNormGated); mamba_ssm's honours it.
        hugging_face = config.get("model_type") == "mamba2"
        if not hugging_face and cfg.get("norm_before_gate", False) is not False:
            cfg.refuse("norm_before_gate", "lact gates before the norm: rmsnorm(y * silu(z)) "
                                           "(mamba_ssm's default norm_before_gate=False)")
        if cfg.get("D_has_hdim", False) is not False:
            cfg.refuse("D_has_hdim", "lact's D is one value per head")
        if not _is_inf_limit(cfg.get("dt_limit", None)):
            cfg.refuse("dt_limit", "lact does not clamp dt (only (0, inf) is representable)")
        if cfg.get("bias", False) is not False:
            cfg.refuse("bias", "lact's in_proj and out_proj have no bias")
        if cfg.get("rms_norm", True) is not True:
            cfg.refuse("rms_norm", "lact's block norms are RMSNorm, not LayerNorm")
        eps = cfg.get("norm_epsilon", 1e-5)
        if abs(float(eps) - 1e-5) > 1e-12:
            cfg.refuse("norm_epsilon", "lact's rmsnorm eps is 1e-5")
        ngroups = cfg.get("ngroups", 1)
        if ngroups != 1:
            cfg.refuse("ngroups", "lact's BiMamba has one group: B and C are shared by all "
                                  "heads (docs/model.md, BiMamba)")

        first = self.layers[0][1]
        for suffix in ("in_proj.bias", "out_proj.bias"):
            if first + suffix in tensors:
                raise ConversionError(f"{where}: tensor '{first + suffix}': lact's in_proj and "
                                      "out_proj have no bias (config field bias)")
        for suffix in ("in_proj.weight", "conv1d.weight", "dt_bias", "A_log", "D",
                       "out_proj.weight"):
            if first + suffix not in tensors:
                raise ConversionError(f"{where}: missing tensor '{first + suffix}'")
        if first + "norm.weight" not in tensors:
            raise ConversionError(f"{where}: missing tensor '{first}norm.weight': a Mamba2 "
                                  "mixer without its gated RMSNorm (rmsnorm=False) cannot be "
                                  "represented")
        in_proj = tensors[first + "in_proj.weight"]
        conv = tensors[first + "conv1d.weight"]
        out_proj = tensors[first + "out_proj.weight"]
        self.d_model = in_proj.shape[1]
        self.d_inner = out_proj.shape[1]
        self.nheads = tensors[first + "A_log"].numel()
        self.d_conv = conv.shape[-1]
        conv_dim = conv.shape[0]
        if (self.nheads == 0 or self.d_inner % self.nheads
                or (conv_dim - self.d_inner) % (2 * ngroups) or conv_dim <= self.d_inner):
            raise ConversionError(f"{where}: inconsistent mixer shapes: A_log "
                                  f"[{self.nheads}], out_proj {list(out_proj.shape)}, conv1d "
                                  f"{list(conv.shape)}")
        self.headdim = self.d_inner // self.nheads
        self.d_state = (conv_dim - self.d_inner) // (2 * ngroups)
        rows = 2 * self.d_inner + 2 * ngroups * self.d_state + self.nheads
        d_ssm = cfg.get("d_ssm", None)
        if (d_ssm is not None and d_ssm != self.d_inner) or in_proj.shape[0] != rows:
            raise ConversionError(
                f"{where}: {cfg.field('d_ssm')} = {d_ssm!r}, in_proj has {in_proj.shape[0]} "
                f"rows where [z, x, B, C, dt] needs {rows}: a mixer whose SSM covers only part "
                "of d_inner (an extra gated-MLP part in in_proj) cannot be represented")
        if tensors[first + "D"].numel() != self.nheads:
            raise ConversionError(f"{where}: tensor '{first}D' has {tensors[first + 'D'].numel()} "
                                  f"values, lact's D has one per head ({self.nheads}) "
                                  "(D_has_hdim)")
        if self.d_inner % self.d_model:
            raise ConversionError(f"{where}: {cfg.field('expand')} = {self.d_inner / self.d_model}"
                                  f" (d_inner {self.d_inner} / d_model {self.d_model}): lact's "
                                  "ssm.expand is an integer")
        self.expand = self.d_inner // self.d_model
        # The config, where it says, must agree with the tensors.
        derived = {"d_model": self.d_model, "d_state": self.d_state, "d_conv": self.d_conv,
                   "headdim": self.headdim, "expand": self.expand, "n_layer": len(self.layers)}
        for name, value in derived.items():
            said = cfg.get(name, None)
            if said is not None and said != value:
                raise ConversionError(f"{where}: {cfg.field(name)} = {said!r} but the "
                                      f"checkpoint's tensors have {value}")
        # Every layer: the same shapes, no biases.
        for _, mixer in self.layers:
            for suffix in ("in_proj.weight", "conv1d.weight", "dt_bias", "A_log", "D",
                           "norm.weight", "out_proj.weight"):
                name = mixer + suffix
                if name not in tensors:
                    raise ConversionError(f"{where}: missing tensor '{name}'")
                if tuple(tensors[name].shape) != tuple(tensors[first + suffix].shape):
                    raise ConversionError(f"{where}: tensor '{name}' has shape "
                                          f"{list(tensors[name].shape)}, layer 0's has "
                                          f"{list(tensors[first + suffix].shape)}")
            for suffix in ("in_proj.bias", "out_proj.bias"):
                if mixer + suffix in tensors:
                    raise ConversionError(f"{where}: tensor '{mixer + suffix}': lact's in_proj "
                                          "and out_proj have no bias (config field bias)")
        # The block parts lact can take: the pre-norm, a gated MLP, the final norm.
        self.mlp_hidden = None
        blocks = [b for b, _ in self.layers if b is not None]
        for block in blocks:
            if block + "norm.bias" in tensors:
                raise ConversionError(f"{where}: tensor '{block}norm.bias': the block norm is a "
                                      "LayerNorm (rms_norm=False); lact's is RMSNorm")
        mlp = [b for b in blocks if b + "mlp.fc1.weight" in tensors]
        if mlp and len(mlp) != len(self.layers):
            raise ConversionError(f"{where}: only some layers have an MLP (mlp.fc1.weight); "
                                  "lact's blocks are all alike")
        if mlp:
            for block in mlp:
                for suffix in ("mlp.fc1.bias", "mlp.fc2.bias", "norm2.bias"):
                    if block + suffix in tensors:
                        raise ConversionError(f"{where}: tensor '{block + suffix}': lact's MLP "
                                              "and norms have no bias")
                fc1, fc2 = tensors[block + "mlp.fc1.weight"], tensors.get(block + "mlp.fc2.weight")
                if (fc2 is None or fc1.shape[0] % 2 or fc1.shape[1] != self.d_model
                        or tuple(fc2.shape) != (self.d_model, fc1.shape[0] // 2)):
                    raise ConversionError(
                        f"{where}: '{block}mlp.fc1.weight' {list(fc1.shape)} / fc2 "
                        f"{None if fc2 is None else list(fc2.shape)} is not a GatedMLP "
                        f"d_model {self.d_model} -> hidden -> d_model")
            self.mlp_hidden = tensors[mlp[0] + "mlp.fc1.weight"].shape[0] // 2

    def mixer(self, i, suffix):
        """(checkpoint name, tensor) of layer i's mixer tensor."""
        name = self.layers[i][1] + suffix
        return name, self.tensors.get(name)

    def block(self, i, suffix):
        """(name, tensor or None) of layer i's block tensor (norm, norm2, mlp.*)."""
        prefix = self.layers[i][0]
        if prefix is None:
            return None, None
        return prefix + suffix, self.tensors.get(prefix + suffix)


def _largest_divisor_at_most(n, limit):
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def _describe_init(name, shape, config, zeroed):
    if zeroed:
        return "initialised: zeros (residual branch starts off; --init random to draw it)"
    kind, value = lact_torch.init_rule(name, shape, config)
    if kind == "constant":
        return f"initialised: {value:g}"
    if kind == "A_log":
        return "initialised: log(U[1, 16])"
    if kind == "dt_bias":
        return "initialised: inv_softplus(logU[1e-3, 1e-1])"
    return f"initialised: normal(0, {value:.3g})"


def convert_mamba2(checkpoint, out=None, backward=None, *, config=None, backward_config=None,
                   ttt_head_dim=None, ttt_inter_multi=2, ttt_base_lr=0.01, muon_steps=0,
                   chunk_tokens=0, mlp_hidden=None, d_input=0, d_output=0,
                   init="residual-zero", out_proj="fwd", seed=0, trust_pickle=False):
    """Converts a Mamba-2 checkpoint (directory or file) into a lact model.

    Returns (model, table): a float32 lact.torch.LactModel and rows
    (lact name, shape, source) where source names the checkpoint tensor or how
    the tensor was initialised. Writes `out` (safetensors) when given.
    Raises ConversionError naming what lact cannot represent.
    """
    if init not in ("residual-zero", "random"):
        raise ConversionError(f"init {init!r}: allowed residual-zero, random")
    if out_proj not in ("fwd", "bwd", "mean"):
        raise ConversionError(f"out_proj {out_proj!r}: allowed fwd, bwd, mean")
    fwd = Mamba2Checkpoint(*load_checkpoint(checkpoint, config, trust_pickle),
                           where=str(checkpoint))
    bwd = fwd
    if backward is not None:
        bwd = Mamba2Checkpoint(*load_checkpoint(backward, backward_config, trust_pickle),
                               where=str(backward))
        for field in ("d_model", "d_inner", "nheads", "d_state", "d_conv"):
            if getattr(bwd, field) != getattr(fwd, field):
                raise ConversionError(f"{backward}: {field} = {getattr(bwd, field)} but the "
                                      f"forward checkpoint has {getattr(fwd, field)}")
        if len(bwd.layers) != len(fwd.layers):
            raise ConversionError(f"{backward}: n_layer = {len(bwd.layers)} but the forward "
                                  f"checkpoint has {len(fwd.layers)}")
    D = fwd.d_model
    if mlp_hidden is not None and fwd.mlp_hidden is not None and mlp_hidden != fwd.mlp_hidden:
        raise ConversionError(f"--mlp-hidden {mlp_hidden}: the checkpoint's MLP has hidden "
                              f"width {fwd.mlp_hidden}")
    config_dict = {
        "d_model": D, "n_layers": len(fwd.layers), "d_input": d_input, "d_output": d_output,
        "ssm": {"expand": fwd.expand, "head_dim": fwd.headdim, "d_state": fwd.d_state,
                "conv_width": fwd.d_conv},
        "ttt": {"head_dim": ttt_head_dim or _largest_divisor_at_most(D, 128),
                "inter_multi": ttt_inter_multi, "base_lr": ttt_base_lr,
                "muon_steps": muon_steps, "chunk_tokens": chunk_tokens},
        "mlp": {"hidden": fwd.mlp_hidden or mlp_hidden or 4 * D}}
    try:
        config_dict = lact_torch.parse_config(config_dict)
    except ValueError as e:
        raise ConversionError(str(e)) from None

    model = lact_torch.LactModel(config_dict, dtype=torch.float32, seed=seed)
    mapped = {}  # lact name -> (tensor, source)

    def take(tag, lact_name, name, tensor, transform=None, note=""):
        if tensor is None:
            return
        value = tensor.detach().to(torch.float64)
        if transform is not None:
            value = transform(value)
        mapped[lact_name] = (value, f"{tag}: {name}{note}")

    fwd_tag, bwd_tag = ("ckpt", "ckpt") if backward is None else ("fwd ckpt", "bwd ckpt")
    for i in range(len(fwd.layers)):
        p = f"layers.{i}."
        for direction, ckpt, tag in (("fwd", fwd, fwd_tag), ("bwd", bwd, bwd_tag)):
            m = f"{p}mamba.{direction}."
            for suffix in ("in_proj.weight", "dt_bias", "A_log", "D", "norm.weight",
                           "conv1d.bias"):
                take(tag, m + suffix, *ckpt.mixer(i, suffix))
            name, conv = ckpt.mixer(i, "conv1d.weight")
            take(tag, m + "conv1d.weight", name, conv,
                 lambda t: t.reshape(t.shape[0], t.shape[-1]),
                 " [C, 1, W] -> [C, W]" if conv.dim() == 3 else "")
            if m + "conv1d.bias" not in mapped:  # conv_bias=False: no bias is a zero bias
                mapped[m + "conv1d.bias"] = (
                    torch.zeros(fwd.d_inner + 2 * fwd.d_state, dtype=torch.float64),
                    f"{tag}: zeros (the checkpoint has no conv1d.bias: conv_bias=False)")
        name_f, out_f = fwd.mixer(i, "out_proj.weight")
        name_b, out_b = bwd.mixer(i, "out_proj.weight")
        if out_proj == "fwd":
            take(fwd_tag, p + "mamba.out_proj.weight", name_f, out_f)
        elif out_proj == "bwd":
            take(bwd_tag, p + "mamba.out_proj.weight", name_b, out_b)
        else:
            mapped[p + "mamba.out_proj.weight"] = (
                (out_f.double() + out_b.double()) / 2,
                f"mean of {fwd_tag}: {name_f} and {bwd_tag}: {name_b}")
        take(fwd_tag, p + "norm1.weight", *fwd.block(i, "norm.weight"))
        if fwd.mlp_hidden:
            hidden = fwd.mlp_hidden
            take(fwd_tag, p + "norm2.weight", *fwd.block(i, "norm2.weight"))
            name, fc1 = fwd.block(i, "mlp.fc1.weight")
            take(fwd_tag, p + "mlp.up.weight", name, fc1, lambda t: t[:hidden],
                 f"[:{hidden}] (the half multiplied by the gate)")
            take(fwd_tag, p + "mlp.gate.weight", name, fc1, lambda t: t[hidden:],
                 f"[{hidden}:] (the half through silu)")
            take(fwd_tag, p + "mlp.down.weight", *fwd.block(i, "mlp.fc2.weight"))
    final = fwd.tensors.get(fwd.root + "norm_f.weight")
    if fwd.layers[0][0] is not None and final is not None:
        if fwd.root + "norm_f.bias" in fwd.tensors:
            raise ConversionError(f"{checkpoint}: tensor '{fwd.root}norm_f.bias': the final norm "
                                  "is a LayerNorm; lact's is RMSNorm")
        take(fwd_tag, "final_norm.weight", fwd.root + "norm_f.weight", final)

    table = []
    with torch.no_grad():
        params = model.tensors()
        for name, shape in lact_torch.expected_tensors(config_dict):
            if name in mapped:
                value, source = mapped[name]
                if tuple(value.shape) != tuple(shape):
                    raise ConversionError(f"{source}: shape {list(value.shape)}, lact's "
                                          f"'{name}' needs {list(shape)}")
                params[name].copy_(value.to(torch.float32))
            else:
                zeroed = init == "residual-zero" and name.endswith(("ttt.o_proj.weight",
                                                                    "mlp.down.weight"))
                if zeroed:
                    params[name].zero_()
                source = _describe_init(name, shape, config_dict, zeroed) + ": must be trained"
            table.append((name, list(shape), source))
    if out is not None:
        model.save_safetensors(out)
    return model, table


# --- lact.torch state dicts --------------------------------------------------------

def _config_arg(text):
    """A config given as JSON text or the path of a JSON file (a model config, or a
    safetensors model whose lact.config is taken)."""
    if text is None:
        return None
    path = Path(text)
    if path.is_file():
        if path.suffix == ".safetensors":
            _, metadata = safetensors_io.read(path)
            if "lact.config" not in metadata:
                raise ConversionError(f"{path}: no lact.config metadata")
            return metadata["lact.config"]
        return path.read_text()
    return text


def convert_torch(state_path, out=None, config=None, trust_pickle=False):
    """A lact.torch state dict file -> (float32 LactModel, table); writes `out`."""
    obj = _torch_load(state_path, trust_pickle)
    found_config = None
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        found_config = obj.get("config")
        obj = obj["state_dict"]
    tensors = _strip_wrapper_prefixes(_state_dict_of(obj, state_path))
    extra = tensors.pop("_extra_state", None)
    if found_config is None and isinstance(extra, dict):
        found_config = extra.get("lact.config")
    config = _config_arg(config) if config is not None else found_config
    if config is None:
        raise ConversionError(f"{state_path}: the state dict carries no lact.config "
                              "(_extra_state); pass --config JSON|FILE")
    try:
        model = lact_torch.LactModel(config, dtype=torch.float32, seed=0)
        for name, value in tensors.items():
            if not isinstance(value, torch.Tensor):
                raise ValueError(f"'{name}' is not a tensor")
        model.load_tensors(tensors)
    except ValueError as e:
        raise ConversionError(f"{state_path}: {e}") from None
    if out is not None:
        model.save_safetensors(out)
    table = [(n, list(s), f"state dict: {n}") for n, s in
             lact_torch.expected_tensors(model.config)]
    return model, table


# --- upstream LaCT (lact_nvs) ---------------------------------------------------------

def convert_lact_nvs(checkpoint, out=None, *, trust_pickle=False, **options):
    """A lact_nvs TTT layer or model checkpoint -> (float32 LactModel, table, left_out);
    writes `out`. options: those of convert_lact_nvs.convert_lact_nvs (muon_steps,
    base_lr, ns_precision, ttt_only, ...)."""
    tensors = read_weights(checkpoint, trust_pickle)
    try:
        model, table, left_out = lact_nvs.convert_lact_nvs(tensors, str(checkpoint), **options)
    except ValueError as e:
        raise ConversionError(str(e)) from None
    if out is not None:
        model.save_safetensors(out)
    return model, table, left_out


# --- command line -------------------------------------------------------------------

def format_table(table):
    """The mapping table as text, with a summary line."""
    width = max(len(n) for n, _, _ in table)
    shape_width = max(len(str(s)) for _, s, _ in table)
    lines = [f"{'lact tensor':<{width}}  {'shape':<{shape_width}}  source",
             f"{'-' * width}  {'-' * shape_width}  {'-' * 6}"]
    lines += [f"{n:<{width}}  {str(s):<{shape_width}}  {src}" for n, s, src in table]
    trained = [s for _, s, src in table if "must be trained" in src]
    total = sum(math.prod(s) for _, s, _ in table)
    fresh = sum(math.prod(s) for s in trained)
    lines.append(f"{len(table) - len(trained)} tensors ({total - fresh} parameters) mapped; "
                 f"{len(trained)} tensors ({fresh} parameters) initialised: these must be "
                 "trained")
    return "\n".join(lines)


def _parser():
    parser = argparse.ArgumentParser(prog="python -m lact.convert",
                                     description="Convert checkpoints into lact model files.")
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("mamba2", help="a state-spaces/mamba Mamba-2 checkpoint -> lact BiMamba",
                       description="A Mamba-2 checkpoint (state-spaces/mamba layout) into a lact "
                                   "model: both BiMamba directions from CKPT, or the backward "
                                   "one from --backward.")
    m.add_argument("checkpoint", help="directory with config.json and weights, or a weights file")
    m.add_argument("out", help="the lact model to write (.safetensors)")
    m.add_argument("--backward", metavar="CKPT", help="checkpoint of the backward direction")
    m.add_argument("--config", help="config.json of CKPT (default: beside it)")
    m.add_argument("--backward-config", help="config.json of --backward")
    m.add_argument("--ttt-head-dim", type=int,
                   help="ttt.head_dim (default: the largest divisor of d_model <= 128)")
    m.add_argument("--ttt-inter-multi", type=int, default=2)
    m.add_argument("--ttt-base-lr", type=float, default=0.01)
    m.add_argument("--muon-steps", type=int, default=0)
    m.add_argument("--chunk-tokens", type=int, default=0)
    m.add_argument("--mlp-hidden", type=int,
                   help="mlp.hidden when the checkpoint has no MLP (default 4 * d_model)")
    m.add_argument("--d-input", type=int, default=0, help="input width (0: d_model, no embed)")
    m.add_argument("--d-output", type=int, default=0, help="output width (0: d_model, no head)")
    m.add_argument("--init", choices=("residual-zero", "random"), default="residual-zero",
                   help="weights not in the checkpoint: random, with ttt.o_proj and mlp.down "
                        "zero so the new branches start off (default), or all random")
    m.add_argument("--out-proj", choices=("fwd", "bwd", "mean"), default="fwd",
                   help="lact has one out_proj for both directions: whose (default fwd)")
    m.add_argument("--seed", type=int, default=0, help="seed of the initialised weights")
    m.add_argument("--trust-pickle", action="store_true",
                   help="torch files: full torch.load (runs pickled code) instead of "
                        "weights_only")
    t = sub.add_parser("torch", help="a lact.torch state dict (torch.save) -> lact safetensors")
    t.add_argument("state", help="torch.save file of LactModel.state_dict()")
    t.add_argument("out", help="the lact model to write (.safetensors)")
    t.add_argument("--config", help="lact.config as JSON text or a file (JSON, or a lact "
                                    ".safetensors model), if the state dict has none")
    t.add_argument("--trust-pickle", action="store_true",
                   help="full torch.load (runs pickled code) instead of weights_only")
    n = sub.add_parser("lact-nvs", help="upstream LaCT (lact_nvs) TTT layers -> lact layers",
                       description="The TTT layers of a lact_nvs checkpoint (one "
                                   "FastWeightGluMLPMultihead or a whole model) as lact layers.")
    lact_nvs.add_arguments(n)
    return parser


def main(argv=None):
    args = _parser().parse_args(argv)
    try:
        if args.command == "mamba2":
            model, table = convert_mamba2(
                args.checkpoint, args.out, args.backward, config=args.config,
                backward_config=args.backward_config, ttt_head_dim=args.ttt_head_dim,
                ttt_inter_multi=args.ttt_inter_multi, ttt_base_lr=args.ttt_base_lr,
                muon_steps=args.muon_steps, chunk_tokens=args.chunk_tokens,
                mlp_hidden=args.mlp_hidden, d_input=args.d_input, d_output=args.d_output,
                init=args.init, out_proj=args.out_proj, seed=args.seed,
                trust_pickle=args.trust_pickle)
        elif args.command == "lact-nvs":
            model, table, left_out = convert_lact_nvs(
                args.checkpoint, args.out, trust_pickle=args.trust_pickle,
                muon_steps=args.muon_steps, base_lr=args.base_lr,
                ns_precision=args.ns_precision, ttt_only=args.ttt_only,
                mlp_hidden=args.mlp_hidden, seed=args.seed)
            if left_out:
                print(f"left out (--ttt-only): {', '.join(left_out)}")
        else:
            model, table = convert_torch(args.state, args.out, args.config, args.trust_pickle)
    except (ConversionError, ValueError, OSError) as e:
        print(f"lact.convert: error: {e}", file=sys.stderr)
        return 1
    print(format_table(table))
    print(f"wrote {args.out}: lact.config {lact_torch.config_to_json(model.config)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
