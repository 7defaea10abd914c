"""What the Python tests share: the lact package as an install would lay it
out (its modules copied to a temporary folder, its gRPC stubs generated
beside them by client/python/build_protos.py) and imported from there, and
the relative error the golden comparisons use."""

import importlib
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def install_copy(prefix: str) -> Path:
    """A temporary folder holding pkg/lact (modules and generated stubs), put
    first on sys.path; lact modules another test module imported are
    forgotten, so `import lact` finds this copy. Remove it with remove_copy."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    package = tmp / "pkg"
    shutil.copytree(ROOT / "client" / "python" / "lact", package / "lact",
                    ignore=shutil.ignore_patterns("v1", "__pycache__"))
    sys.path.insert(0, str(ROOT / "client" / "python"))
    build_protos = importlib.import_module("build_protos")
    sys.path.pop(0)
    build_protos.generate(package)
    for name in [n for n in sys.modules if n == "lact" or n.startswith("lact.")]:
        del sys.modules[name]
    sys.path.insert(0, str(package))
    return tmp


def remove_copy(tmp) -> None:
    if tmp is not None:
        sys.path[:] = [p for p in sys.path if p != str(Path(tmp) / "pkg")]
        shutil.rmtree(tmp, ignore_errors=True)


def relative_error(got, want) -> float:
    """max|got - want| / max|want| (absolute when want is all zeros); inf on a
    shape mismatch or a non-finite value. Takes numpy arrays or torch tensors."""
    got, want = (x.detach().cpu().double().numpy() if hasattr(x, "detach") else x
                 for x in (got, want))
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape or not np.all(np.isfinite(got)):
        return float("inf")
    diff, scale = np.max(np.abs(got - want), initial=0.0), np.max(np.abs(want), initial=0.0)
    return diff / scale if scale > 0 else diff
