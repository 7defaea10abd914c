"""The golden cases (../shared/golden, or $LACT_GOLDEN_DIR) and the check a
float32 implementation must pass: max|got - want| / max|want| <= 1e-4 on
every expected tensor."""

import json
import os

import importlib.util

import numpy as np

# The client package's reader, loaded as a file (the package itself needs its
# generated gRPC stubs).
_spec = importlib.util.spec_from_file_location(
    "safetensors_io", os.path.join(os.path.dirname(__file__), "..", "..", "client", "python",
                                   "lact", "safetensors_io.py"))
safetensors_io = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(safetensors_io)

TOLERANCE = 1e-4


def golden_dir(repo):
    folder = os.environ.get("LACT_GOLDEN_DIR") or os.path.join(repo, "..", "shared", "golden")
    if not os.path.isfile(os.path.join(folder, "README.md")):
        raise SystemExit(f"golden files not found at {folder} (set LACT_GOLDEN_DIR)")
    return os.path.abspath(folder)


class Case:
    def __init__(self, folder):
        self.name = os.path.basename(folder)
        self.folder = folder
        self.model = os.path.join(folder, "model.safetensors")
        self.context = os.path.join(folder, "context.npy")
        self.queries = sorted(
            (os.path.join(folder, f) for f in os.listdir(folder)
             if f.startswith("query_") and f.endswith(".npy")),
            key=lambda p: int(os.path.basename(p)[6:-4]))
        self.expected, metadata = safetensors_io.read(os.path.join(folder, "expected.safetensors"))
        self.options = json.loads(metadata.get("job.options", "{}"))

    def job_flags(self):
        """The `lact submit` flags of this case's overrides."""
        flags = []
        for key, flag in (("muon_steps", "--muon-steps"), ("chunk_tokens", "--chunk-tokens")):
            value = self.options.get(key, self.options.get(f"ttt.{key}"))
            if value is not None:
                flags += [flag, str(value)]
        return flags

    def worst_error(self, path, names=None):
        """(worst relative error, tensor) of the file at `path` against the expected
        tensors (all of them, or `names`); a missing tensor is an error."""
        got, _ = safetensors_io.read(path)
        worst = (0.0, None)
        for name, want in self.expected.items():
            if names is not None and name not in names:
                continue
            if name not in got:
                raise AssertionError(f"{self.name}: {path} has no tensor {name}")
            have = np.asarray(got[name], dtype=np.float64)
            if have.shape != want.shape:
                raise AssertionError(f"{self.name}: {name} is {have.shape}, expected {want.shape}")
            scale = max(float(np.max(np.abs(want))), 1e-30)
            error = float(np.max(np.abs(have - want))) / scale
            if error > worst[0] or worst[1] is None:
                worst = (error, name)
        return worst


def cases(repo):
    root = golden_dir(repo)
    return [Case(os.path.join(root, d)) for d in sorted(os.listdir(root))
            if os.path.isfile(os.path.join(root, d, "expected.safetensors"))]
