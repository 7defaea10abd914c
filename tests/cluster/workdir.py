"""The cluster tests' work folder: made readable by the containers' user
(10001) and removed at the end unless the caller keeps it."""

import os
import shutil
import tempfile


def make(prefix):
    work = tempfile.mkdtemp(prefix=prefix)
    os.chmod(work, 0o755)
    return work


def release(work, keep):
    if keep:
        print(f"work folder kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
