"""The view-synthesis example (examples/view_synthesis) at its reduced size:
trained with lact.torch, converted, served by `lact local`, queried.

Run from tests/python: /usr/bin/python3 -m unittest test_example -v
Environment: LACT_BIN_DIR (default build/bin).
"""

import json
import os
import subprocess
import sys
import unittest
from pathlib import Path

import numpy as np
from PIL import Image

import lact_package

ROOT = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("LACT_BIN_DIR", ROOT / "build" / "bin"))


class ViewSynthesisExampleTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = lact_package.install_copy("lact-example-test-")

    @classmethod
    def tearDownClass(cls):
        lact_package.remove_copy(cls.tmp)

    def test_quick_run_trains_serves_and_renders(self):
        out = self.tmp / "out"
        env = dict(os.environ, PYTHONPATH=str(self.tmp / "pkg"))
        done = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "view_synthesis" / "run.py"), "--quick",
             "--out", str(out), "--lact", str(BIN_DIR / "lact")],
            capture_output=True, text=True, env=env, timeout=600)
        self.assertEqual(done.returncode, 0, f"{done.stdout}\n{done.stderr}")
        summary = json.loads((out / "summary.json").read_text())
        curve = summary["loss_curve"]
        self.assertLess(curve[-1], curve[0], "training lowered the loss")
        self.assertEqual(len(summary["scenes"]), 2)
        for row in summary["scenes"]:
            # The service renders what the trained twin does.
            self.assertLessEqual(row["service_vs_twin"], 1e-4)
            self.assertTrue(np.isfinite(row["psnr"]) and np.isfinite(row["baseline_psnr"]))
            image = Image.open(out / f"scene_{row['scene']}.png")
            # 4 input views, the truth, the service's view, the baseline; 2-pixel gaps.
            self.assertEqual(image.size, (4 * (7 * 32 + 6 * 2), 4 * 32))
        self.assertIn("held-out mean PSNR", done.stdout)


if __name__ == "__main__":
    unittest.main()
