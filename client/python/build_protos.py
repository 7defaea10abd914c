#!/usr/bin/env python3
"""Generates the gRPC stubs of lact's protos as the subpackage ``lact.v1``.

Usage: build_protos.py OUT_DIR [--proto-root DIR]

Writes OUT_DIR/lact/v1/{common,coordinator,data,...}_pb2.py and *_pb2_grpc.py
and an empty OUT_DIR/lact/v1/__init__.py. OUT_DIR/lact itself must hold (or
later get) the package's own modules: the stubs import each other as
``lact.v1.common_pb2``.

The protos are taken from --proto-root, else $LACT_PROTO_DIR, else the
proto/ folder beside this file (an sdist's), else the repository's proto/
folder (two levels above this file). The compiler is
``protoc`` with ``grpc_python_plugin`` from PATH (Debian: protobuf-compiler,
protobuf-compiler-grpc), else grpcio-tools' bundled protoc. Generated files
are never committed: setup.py and the tests call this.
"""

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def default_proto_root() -> Path:
    """The folder holding lact/v1/*.proto."""
    env = os.environ.get("LACT_PROTO_DIR")
    if env:
        return Path(env)
    packaged = HERE / "proto"
    return packaged if (packaged / "lact" / "v1").is_dir() else HERE.parent.parent / "proto"


def protos(root) -> list:
    """The .proto files under ROOT/lact/v1, sorted."""
    return sorted((Path(root) / "lact" / "v1").glob("*.proto"))


def _compiler() -> list:
    """The protoc command line prefix that can emit Python and gRPC stubs."""
    protoc, plugin = shutil.which("protoc"), shutil.which("grpc_python_plugin")
    if protoc and plugin:
        return [protoc, f"--plugin=protoc-gen-grpc_python={plugin}"]
    try:
        import grpc_tools  # noqa: F401  (pip's grpcio-tools)
    except ImportError:
        raise RuntimeError(
            "cannot generate lact's gRPC stubs: install protoc and grpc_python_plugin "
            "(Debian: apt-get install protobuf-compiler protobuf-compiler-grpc) or "
            "pip install grpcio-tools") from None
    return [sys.executable, "-m", "grpc_tools.protoc"]


def generate(out_dir, proto_root=None) -> Path:
    """Generates OUT_DIR/lact/v1 from PROTO_ROOT/lact/v1/*.proto; returns that folder.

    Raises RuntimeError (with protoc's message) if the compiler is missing or fails.
    """
    root = Path(proto_root) if proto_root else default_proto_root()
    files = protos(root)
    if not files:
        raise RuntimeError(f"no lact/v1/*.proto under {root} (set LACT_PROTO_DIR)")
    out = Path(out_dir)
    package = out / "lact" / "v1"
    package.mkdir(parents=True, exist_ok=True)
    command = _compiler() + [
        f"-I{root}", f"--python_out={out}", f"--grpc_python_out={out}",
        *(str(p.relative_to(root)) for p in files)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr}")
    (package / "__init__.py").write_text('"""Generated gRPC stubs of lact/v1/*.proto."""\n')
    return package


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="where lact/v1/ is written")
    parser.add_argument("--proto-root", help="folder holding lact/v1/*.proto")
    args = parser.parse_args(argv)
    try:
        print(generate(args.out_dir, args.proto_root))
    except RuntimeError as e:
        print(f"build_protos: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
