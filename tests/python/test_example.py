"""The examples at their reduced sizes: view synthesis (examples/view_synthesis:
trained with lact.torch, converted, served by `lact local`, queried) and the
video pipeline (examples/video_pipeline: clips streamed two jobs in flight,
decoded back to frames).

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


class ExampleTest(unittest.TestCase):
    """An example run at its quick size with the package installed as a copy."""

    @classmethod
    def setUpClass(cls):
        (cls.tmp,) = lact_package.install_copy("lact-example-test-")

    @classmethod
    def tearDownClass(cls):
        lact_package.remove_copy(cls.tmp)

    def run_quick(self, example: str):
        """Runs examples/EXAMPLE/run.py --quick; returns its output folder and stdout."""
        out = self.tmp / example
        env = dict(os.environ, PYTHONPATH=str(self.tmp / "pkg"))
        done = subprocess.run(
            [sys.executable, str(ROOT / "examples" / example / "run.py"), "--quick",
             "--out", str(out), "--lact", str(BIN_DIR / "lact")],
            capture_output=True, text=True, env=env, timeout=600)
        self.assertEqual(done.returncode, 0, f"{done.stdout}\n{done.stderr}")
        return out, done.stdout


class ViewSynthesisExampleTest(ExampleTest):

    def test_quick_run_trains_serves_and_renders(self):
        out, stdout = self.run_quick("view_synthesis")
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
        self.assertIn("held-out mean PSNR", stdout)


class VideoPipelineExampleTest(ExampleTest):

    def test_quick_run_streams_clips_and_decodes_their_frames(self):
        out, stdout = self.run_quick("video_pipeline")
        summary = json.loads((out / "summary.json").read_text())
        self.assertEqual([row["clip"] for row in summary["clips"]], [0, 1, 2])
        self.assertEqual(summary["tokens_per_clip"], 16 * 8 * 8)
        for row in summary["clips"]:
            # Frames after the key frames, decoded from the service's tokens.
            self.assertGreater(row["psnr"], 18, row)
            self.assertEqual(len(row["worker_idle_seconds"]), 2)
            image = Image.open(out / f"clip_{row['clip']}.png")
            self.assertEqual(image.size, (4 * 64, 2 * 64))  # 4 frames, rendered over decoded
        self.assertGreater(summary["sustained_tokens_per_second"], 0)
        self.assertIn("sustained", stdout)


if __name__ == "__main__":
    unittest.main()
