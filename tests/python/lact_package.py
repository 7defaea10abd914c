"""What the Python tests share: the lact package as an install would lay it
out (its modules copied to a temporary folder, its gRPC stubs generated
beside them by client/python/build_protos.py) and imported from there, the
`lact` command of the build, and the relative error the golden comparisons
use."""

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("LACT_BIN_DIR", ROOT / "build" / "bin"))


def install_copy(prefix: str, *modules: str):
    """A temporary folder holding pkg/lact (modules and generated stubs), put
    first on sys.path; lact modules another test module imported are
    forgotten, so `import lact` finds this copy. Returns the folder and then
    each of ``modules`` (names such as "lact.torch") imported from it.
    Remove it with remove_copy."""
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
    return (tmp, *(importlib.import_module(name) for name in modules))


def remove_copy(tmp) -> None:
    if tmp is not None:
        sys.path[:] = [p for p in sys.path if p != str(Path(tmp) / "pkg")]
        shutil.rmtree(tmp, ignore_errors=True)


def run_lact(args) -> None:
    """Runs `BIN_DIR/lact ARGS` (its output captured); AssertionError with
    that output if it fails, unittest.SkipTest if the build has no `lact`.
    A rebuild may replace the binary for a moment (ENOENT, ETXTBSY): it
    waits for it, two minutes at most."""
    if not BIN_DIR.is_dir():
        raise unittest.SkipTest(f"no {BIN_DIR} (build the C++ first)")
    args = [str(a) for a in args]
    deadline = time.monotonic() + 120
    while True:
        try:
            done = subprocess.run([str(BIN_DIR / "lact")] + args, capture_output=True, text=True,
                                  timeout=120)
            if done.returncode == 0 or (BIN_DIR / "lact").exists():
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise unittest.SkipTest(f"no runnable {BIN_DIR / 'lact'}")
        time.sleep(1)
    if done.returncode != 0:
        raise AssertionError(f"lact {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


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
