"""`lact local` for the examples: started (with a model folder, if given),
stopped on exit. Each example puts this folder on its import path."""

import signal
import subprocess
import time


class LocalCluster:
    """A `lact local` cluster of `workers` workers, its log and data root in
    `folder`, serving the models in `models` (one thread per worker) or, with
    none, the presets (the machine's cores shared); a context manager.
    `address` is the coordinator's host:port once it is up."""

    def __init__(self, lact, folder, workers, models=None):
        (folder / "data").mkdir(exist_ok=True)
        self.log_path = folder / "local.log"
        self.command = [str(lact), "local", "--workers", str(workers), "--port", "0",
                        "--data-root", str(folder / "data")]
        if models is not None:
            self.command += ["--threads-per-worker", "1", "--model-dir", str(models)]
        self.process = self.address = None

    def __enter__(self):
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(self.command, stdout=self.log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        deadline = time.monotonic() + 60
        while self.address is None:
            for line in self.log_path.read_text().splitlines():
                if "coordinator at " in line:
                    self.address = line.split("coordinator at ", 1)[1].split()[0]
            if self.address is None and (self.process.poll() is not None
                                         or time.monotonic() > deadline):
                self.__exit__()
                raise RuntimeError(f"lact local did not start:\n{self.log_path.read_text()}")
            time.sleep(0.1)
        return self

    def __exit__(self, *exc):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
