"""Starts a lact server in a host's network namespace: as a process
(`ip netns exec NS BIN_DIR/NAME ...`) or, with an image, as a container in
that namespace (podman, user 10001, read-only root file system, all
capabilities dropped, the work folder mounted at the same path).

    server = Server(host, "lact-worker", ["--coordinator", ...], logs, bin_dir=..., image=...)
    server.stop()    # SIGTERM, then SIGKILL after `grace` seconds
"""

import os
import subprocess
import time

from pods import LIMITS, podman_base


class Server:
    def __init__(self, host, binary, args, log_dir, bin_dir=None, image=None, mounts=()):
        self.host = host
        self.binary = binary
        self.image = image
        self.log = os.path.join(log_dir, f"{host.name}.log")
        self.ctr = f"{host.ns}-{binary}"
        if image is None:
            argv = host.exec_argv([os.path.join(bin_dir, binary), *args])
            with open(self.log, "w") as log:
                self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        else:
            subprocess.run([*podman_base(), "rm", "-f", self.ctr], capture_output=True)
            volumes = []
            for folder in mounts:
                volumes += ["-v", f"{folder}:{folder}"]
            argv = [*podman_base(), "run", "-d", "--name", self.ctr, *LIMITS,
                    "--network", f"ns:/run/netns/{host.ns}", "--user", "10001:10001",
                    "--read-only", "--cap-drop", "all", "--security-opt", "no-new-privileges",
                    *volumes, "--entrypoint", f"/usr/local/bin/{binary}", image, *args]
            subprocess.run(argv, check=True, capture_output=True, text=True)
            self.proc = None

    def alive(self):
        if self.proc is not None:
            return self.proc.poll() is None
        return subprocess.run([*podman_base(), "inspect", "-f", "{{.State.Running}}", self.ctr],
                              capture_output=True, text=True).stdout.strip() == "true"

    def logs(self, tail=30):
        """The server's last `tail` log lines (all of them for None)."""
        if self.proc is not None:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-tail if tail else 0:])
        return subprocess.run([*podman_base(), "logs", "--tail", str(tail or -1), self.ctr],
                              capture_output=True, text=True).stderr

    def stop(self, grace=20):
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(grace)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            return
        subprocess.run([*podman_base(), "stop", "-t", str(grace), self.ctr], capture_output=True)
        subprocess.run([*podman_base(), "rm", "-f", self.ctr], capture_output=True)


def wait_for(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")
