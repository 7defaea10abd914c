"""Installs the lact package. Its gRPC stubs (lact.v1) are generated into the
build by build_protos.py from the protos: those packaged with an sdist
(proto/ beside this file), else the repository's (../../proto), else
$LACT_PROTO_DIR. Building needs protoc with grpc_python_plugin (Debian:
protobuf-compiler protobuf-compiler-grpc) or grpcio-tools.

Nothing is written into the source folder: the build and egg-info folders
are temporary, so a read-only checkout installs (pip install
--no-build-isolation client/python). Metadata lives in pyproject.toml."""

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import build_protos  # noqa: E402


class BuildPyWithProtos(build_py):
    """build_py, then the stubs beside the copied package (in the source
    tree for an editable install, where lact/v1/ is git-ignored)."""

    def run(self):
        super().run()
        build_protos.generate(HERE if getattr(self, "editable_mode", False) else self.build_lib)


class SdistWithProtos(sdist):
    """An sdist that builds anywhere: the protos go in as proto/lact/v1/. Its
    tree is made in a temporary folder, not beside setup.py."""

    def make_distribution(self):
        name = self.distribution.get_fullname()
        tree = os.path.join(_SCRATCH, "sdist")
        self.make_release_tree(os.path.join(tree, name), self.filelist.files)
        archive = self.make_archive(os.path.join(os.path.abspath(self.dist_dir), name), "gztar",
                                    root_dir=tree, base_dir=name, owner=self.owner,
                                    group=self.group)
        self.archive_files = [archive]
        self.distribution.dist_files.append(("sdist", "", archive))

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        target = Path(base_dir) / "proto" / "lact" / "v1"
        target.mkdir(parents=True, exist_ok=True)
        for proto in build_protos.protos(build_protos.default_proto_root()):
            shutil.copy(proto, target / proto.name)


_SCRATCH = tempfile.mkdtemp(prefix="lact-setup-")
atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)

setup(cmdclass={"build_py": BuildPyWithProtos, "sdist": SdistWithProtos},
      options={"build": {"build_base": os.path.join(_SCRATCH, "build")},
               "egg_info": {"egg_base": _SCRATCH}})
