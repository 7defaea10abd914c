"""The Python package as a user installs it: `pip install` into a venv on Debian 12
from a read-only checkout (a read-only bind mount of this repository), the sdist
built from it and installed where no proto/ folder is near, the twin without
grpcio, the client with it against a real `lact local` cluster.

Run from tests/python: /usr/bin/python3 -m unittest test_package -v
Needs root (the read-only bind mount, in a mount namespace of its own), Debian's
python3-venv and the packages scripts/install-deps lists. pip never reaches an
index (PIP_NO_INDEX): the dependencies are Debian's.
"""

import json
import os
import subprocess
import sys
import tarfile
import tempfile
import unittest
from pathlib import Path

import numpy as np

import lact_package
import test_client

ROOT = Path(__file__).resolve().parents[2]
# The package's version, as pyproject.toml gives it (the sdist's folder name).
VERSION = next(line.split('"')[1] for line in
               (ROOT / "client" / "python" / "pyproject.toml").read_text().splitlines()
               if line.startswith("version = "))
DIST_PACKAGES = Path("/usr/lib/python3/dist-packages")
_TMP = None


def setUpModule():
    global _TMP
    if os.geteuid() != 0:
        raise unittest.SkipTest("needs root: the checkout is bind-mounted read-only")
    _TMP = Path(tempfile.mkdtemp(prefix="lact-package-test-"))
    test_client._TMP = _TMP  # its LocalCluster's folder


def tearDownModule():
    lact_package.remove_copy(_TMP)


def run(args, **kwargs):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_"))}
    env["PIP_NO_INDEX"] = "1"
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env,
                          timeout=300, **kwargs)
    return done


def in_read_only_checkout(command):
    """Runs `command` (a shell line; $RO is the checkout) in a mount namespace where
    this repository is bind-mounted read-only at $RO; the mount ends with it."""
    ro = _TMP / "ro"
    ro.mkdir(exist_ok=True)
    script = (f'mount --bind "{ROOT}" "{ro}" && mount -o remount,bind,ro "{ro}" && '
              f'RO="{ro}" && touch "$RO/client/python/.probe" 2>/dev/null && '
              'echo "checkout is writable" && exit 3; ' + command)
    return run(["unshare", "-m", "sh", "-c", script])


def make_venv(name, system_site_packages):
    venv = _TMP / name
    done = run([sys.executable, "-m", "venv", *(["--system-site-packages"]
                                               if system_site_packages else []), venv])
    if done.returncode != 0:
        raise AssertionError(f"python3 -m venv failed (python3-venv installed?):\n"
                             f"{done.stdout}{done.stderr}")
    return venv


class PackageTest(unittest.TestCase):

    def assert_ok(self, done, what):
        self.assertEqual(done.returncode, 0, f"{what}:\n{done.stdout}\n{done.stderr}")

    def test_a_venv_installs_the_client_from_a_read_only_checkout_and_it_runs_a_job(self):
        venv = make_venv("client-venv", system_site_packages=True)
        done = in_read_only_checkout(
            f'"{venv}/bin/pip" install --no-build-isolation "$RO/client/python[client]"')
        self.assert_ok(done, "pip install from the read-only checkout")
        for leftover in ("build", "lact.egg-info", "lact/v1"):
            self.assertFalse((ROOT / "client" / "python" / leftover).exists(), leftover)
        site = run([venv / "bin" / "python", "-c", "import lact.v1.data_pb2, lact.client; "
                    "print(lact.client.__file__)"], cwd=_TMP)
        self.assert_ok(site, "import the installed client")
        self.assertIn(str(venv), site.stdout)

        case = test_client.GoldenCase(test_client.golden_case_names()[0])
        np.save(_TMP / "context.npy", case.context)
        cluster = test_client.LocalCluster(1)
        try:
            script = (
                "import json, sys, numpy as np, lact\n"
                f"client = lact.Client({cluster.address!r})\n"
                f"job = client.submit({case.name!r}, np.load(sys.argv[1]), "
                f"**json.loads({json_options(case)!r}))\n"
                "np.save(sys.argv[2], job.result(timeout=120).output)\n")
            job = run([venv / "bin" / "python", "-c", script, _TMP / "context.npy",
                       _TMP / "output.npy"], cwd=_TMP)
        finally:
            cluster.stop()
        self.assert_ok(job, "a job through the installed client")
        self.assertLessEqual(test_client.relative_error(np.load(_TMP / "output.npy"),
                                                        case.expected["output"]),
                             test_client.TOLERANCE)

    def test_the_twin_and_converters_run_where_grpcio_is_absent(self):
        # Debian's site packages without grpcio and protobuf.
        venv = make_venv("twin-venv", system_site_packages=False)
        site = _TMP / "site-without-grpc"
        site.mkdir()
        for entry in DIST_PACKAGES.iterdir():
            if not entry.name.startswith(("grpc", "google", "protobuf")):
                (site / entry.name).symlink_to(entry)
        pth = next(venv.glob("lib/python3*/site-packages")) / "debian-without-grpc.pth"
        pth.write_text(f"{site}\n")
        python = venv / "bin" / "python"
        self.assertNotEqual(run([python, "-c", "import grpc"]).returncode, 0)
        done = in_read_only_checkout(
            f'"{venv}/bin/pip" install --no-build-isolation "$RO/client/python"')
        self.assert_ok(done, "pip install without grpcio")
        case = test_client.GoldenCase(test_client.golden_case_names()[0])
        model = test_client.GOLDEN_DIR / case.name / "model.safetensors"
        np.save(_TMP / "twin-context.npy", case.context)
        script = (
            "import json, sys, numpy as np, torch, lact, lact.torch as lt\n"
            "model = lt.LactModel.from_safetensors(sys.argv[1], dtype=torch.float64)\n"
            "with torch.no_grad():\n"
            "    out, _ = model(np.load(sys.argv[2]), **json.loads(sys.argv[4]))\n"
            "np.save(sys.argv[3], out.numpy())\n"
            "try:\n"
            "    lact.Client\n"
            "except ImportError as e:\n"
            "    print('client:', e)\n")
        twin = run([python, "-c", script, model, _TMP / "twin-context.npy",
                    _TMP / "twin-output.npy", json_options(case)], cwd=_TMP)
        self.assert_ok(twin, "lact.torch without grpcio")
        self.assertIn("lact.Client needs grpcio", twin.stdout)
        self.assertIn("lact[client]", twin.stdout)
        self.assertLessEqual(test_client.relative_error(np.load(_TMP / "twin-output.npy"),
                                                        case.expected["output"]), 1e-9)
        self.assert_ok(run([python, "-m", "lact.convert", "lact-nvs", "--help"], cwd=_TMP),
                       "python -m lact.convert without grpcio")

    def test_the_sdist_carries_its_protos_and_installs_away_from_the_checkout(self):
        venv = make_venv("sdist-venv", system_site_packages=True)
        dist = _TMP / "dist"
        done = in_read_only_checkout(
            f'cd "$RO/client/python" && "{venv}/bin/python" -c "from setuptools import '
            f'build_meta; print(build_meta.build_sdist(\'{dist}\'))"')
        self.assert_ok(done, "the sdist from the read-only checkout")
        sdist = dist / done.stdout.split()[-1]
        with tarfile.open(sdist) as tar:
            names = tar.getnames()
        for proto in sorted((ROOT / "proto" / "lact" / "v1").glob("*.proto")):
            self.assertIn(f"lact-{VERSION}/proto/lact/v1/{proto.name}", names)
        self.assertIn(f"lact-{VERSION}/build_protos.py", names)
        self.assert_ok(run([venv / "bin" / "pip", "install", "--no-build-isolation",
                            f"{sdist}[client]"], cwd=_TMP), "pip install of the sdist")
        stubs = run([venv / "bin" / "python", "-c",
                     "import lact.v1.coordinator_pb2_grpc as s; print(s.__file__)"], cwd=_TMP)
        self.assert_ok(stubs, "the stubs the sdist generated")
        self.assertIn(str(venv), stubs.stdout)


def json_options(case):
    """A golden case's job options as JSON text (muon_steps, chunk_tokens)."""
    return json.dumps(case.options)


if __name__ == "__main__":
    unittest.main()
