"""`lact local` for the example: started with a model folder, stopped on exit."""

import signal
import subprocess
import time


class LocalCluster:
    """A `lact local` cluster serving the models in `models`; a context manager.
    `address` is the coordinator's host:port once it is up."""

    def __init__(self, lact, models, folder, workers):
        (folder / "data").mkdir(exist_ok=True)
        self.log_path = folder / "local.log"
        self.command = [str(lact), "local", "--workers", str(workers), "--threads-per-worker",
                        "1", "--model-dir", str(models), "--data-root", str(folder / "data")]
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
