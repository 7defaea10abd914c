"""Installs the lact client. Its gRPC stubs (lact.v1) are generated from the
repository's protos (../../proto, or $LACT_PROTO_DIR) into the build by
build_protos.py: `pip install client/python` needs protoc with
grpc_python_plugin (Debian: protobuf-compiler protobuf-compiler-grpc) or
grpcio-tools. Metadata lives in pyproject.toml."""

import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import build_protos  # noqa: E402


class BuildPyWithProtos(build_py):
    """build_py, then the stubs beside the copied package (in the source
    tree for an editable install, where lact/v1/ is git-ignored)."""

    def run(self):
        super().run()
        build_protos.generate(HERE if getattr(self, "editable_mode", False) else self.build_lib)


setup(cmdclass={"build_py": BuildPyWithProtos})
