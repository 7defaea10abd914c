"""A lact cluster across hosts: a coordinator and three workers, each in a
network namespace of its own joined by a bridge (netns.py), secured as a
cluster off loopback must be (tenants' bearer tokens, the cluster secret,
TLS with a CA and one certificate per host naming its IP), and a client in a
fifth namespace. It checks, and prints the figures of:

1. golden: every golden case at P = 1, 2, 3 within 1e-4;
2. outsiders on the Gloo ports: while a 2-worker job's ranks connect,
   connections from the client's host to the ports its workers listen on
   for Gloo (junk bytes, and connect-then-close) race the peers for them;
   the job still completes, once, bit for bit the same job undisturbed
   (a race the outsider loses on every port is reported, not failed);
3. a link cut: one of a running job's workers loses its link (`ip link set
   down`) and gets it back once the job has moved on; the job completes on
   the other workers, bit for bit the undisturbed output; the time to
   detect and re-run is printed;
4. link rates: the links limited with tc's token bucket (tbf) to two rates;
   the data path's MB/s and the gradient all-reduce's time and hidden share
   at each.

    multi_host_test.py (--bin build/bin | --image IMAGE) [--repo DIR]
                       [--results FILE.json] [--keep]

--image runs the coordinator and workers from the image (user 10001,
read-only root, capabilities dropped); the client is --bin's lact, or the
image's. Needs root, iproute2 (ip, ss, tc) and openssl.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden  # noqa: E402
import netns  # noqa: E402
import pki  # noqa: E402
import workdir  # noqa: E402
from launch import Server, wait_for  # noqa: E402
from pods import podman_base  # noqa: E402

TOKEN = "multi-host-test-token-0123456789abcdef"
CONTROL_PORT, API_PORT, WORKER_PORT = 50053, 50051, 50052
METRICS_PORTS = (9090, 9091)
# The job the disturbance checks compare: 2 workers, long enough to be
# disturbed mid-way on a 2-core machine.
DISTURBED_JOB = ["--model", "preset:small", "--context", "random:196608:11", "--workers", "2"]
# The outsider's job: one whose upload keeps the workers busy while their
# groups connect (the outsider then wins the race to a listening port more
# often).
INTRUDED_JOB = DISTURBED_JOB
INTRUDED_TRIES = 2
RATE_JOB = ["--model", "preset:small", "--context", "random:98304:12", "--workers", "3"]
RATES = ("10gbit", "1gbit")


class Cluster:
    def __init__(self, work, args):
        self.work = work
        self.args = args
        self.net = netns.Network("mh")
        self.client = self.net.add_host("client")
        self.coordinator_host = self.net.add_host("coordinator")
        self.worker_hosts = [self.net.add_host(f"worker-{i}") for i in range(3)]
        self.servers = []
        self.lact = None

    def start(self, models):
        work = self.work
        ca = pki.CertificateAuthority(os.path.join(work, "pki"))
        self.ca = ca.cert
        secret = os.path.join(work, "cluster-secret")
        tokens = os.path.join(work, "tokens")
        self.token = os.path.join(work, "token")
        for path, text in ((secret, "multi-host-test-cluster-secret\n"),
                           (tokens, f"tenant-a {TOKEN}\n"), (self.token, TOKEN + "\n")):
            with open(path, "w") as f:
                f.write(text)
        spool = os.path.join(work, "spool")
        os.makedirs(spool)
        logs = os.path.join(work, "logs")
        os.makedirs(logs)
        if self.args.image:  # the servers run as 10001: everything readable, the spool theirs
            for root, dirs, files in os.walk(work):
                for name in dirs + files:
                    os.chmod(os.path.join(root, name), 0o755 if name in dirs else 0o644)
            os.chown(spool, 10001, 10001)
        common = dict(log_dir=logs, bin_dir=self.args.bin, image=self.args.image,
                      mounts=(work,))

        def tls(host):
            cert, key = ca.issue(host.name, ips=[host.ip])
            os.chmod(key, 0o644)
            return ["--tls-cert", cert, "--tls-key", key, "--tls-ca", ca.cert,
                    "--cluster-secret-file", secret]

        c = self.coordinator_host
        self.servers.append(Server(c, "lact-coordinator", [
            "--host", c.ip, "--port", str(API_PORT), "--control-port", str(CONTROL_PORT),
            "--metrics-port", str(METRICS_PORTS[0]), "--auth-tokens", tokens,
            "--spool-dir", spool, *tls(c)], **common))
        self.server = f"{c.ip}:{API_PORT}"
        for w in self.worker_hosts:
            self.servers.append(Server(w, "lact-worker", [
                "--coordinator", f"{c.ip}:{CONTROL_PORT}", "--host", w.ip,
                "--port", str(WORKER_PORT), "--metrics-port", str(METRICS_PORTS[1]),
                "--model-dir", models, "--threads", "1", "--spool-dir", spool, *tls(w)],
                **common))
        if self.args.bin:
            self.lact = os.path.join(self.args.bin, "lact")
        else:
            self.lact = os.path.join(work, "lact")
            subprocess.run([*podman_base(), "cp", f"{self.servers[0].ctr}:/usr/local/bin/lact",
                            self.lact], check=True, capture_output=True)
        wait_for(lambda: len(self.workers()) == 3 or self.dead(), 60, "3 registered workers")
        if self.dead():
            raise AssertionError(f"a server exited:\n{self.dead()}")

    def dead(self):
        return "".join(f"--- {s.host.name}\n{s.logs()}" for s in self.servers if not s.alive())

    def lact_argv(self, *args):
        return self.client.exec_argv([self.lact, *args, "--server", self.server,
                                      "--token-file", self.token, "--tls-ca", self.ca])

    def workers(self):
        run = subprocess.run(self.lact_argv("workers", "--json"), capture_output=True, text=True)
        if run.returncode != 0:
            return []
        return [w for w in json.loads(run.stdout).get("workers", []) if w.get("healthy")]

    def jobs(self):
        run = subprocess.run(self.lact_argv("status", "--json"), capture_output=True, text=True)
        return json.loads(run.stdout).get("jobs", []) if run.returncode == 0 else []

    def submit(self, job, out, background=False):
        argv = self.lact_argv("submit", *job, "--out", out, "--json", "--timeout", "600")
        if background:
            return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
        run = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        return finish(run.returncode, run.stdout, run.stderr, job)

    def close(self):
        for server in self.servers:
            server.stop()
        self.net.close()


def finish(code, stdout, stderr, job):
    if code != 0:
        raise AssertionError(f"lact submit {' '.join(job)} failed ({code}):\n{stderr[-2000:]}")
    return json.loads(stdout)


def tensors(path):
    return golden.safetensors_io.read(path)[0]


def same_bytes(a, b):
    """The names of tensors that differ (in any bit) between two result files."""
    x, y = tensors(a), tensors(b)
    if set(x) != set(y):
        return sorted(set(x) ^ set(y))
    return [k for k in x if x[k].tobytes() != y[k].tobytes()]


def running_job(cluster):
    for job in cluster.jobs():
        if job.get("status") == "RUNNING":
            return job
    return None


def server_pids(cluster):
    """Process ids of the workers (their sockets are in /proc/PID/net/tcp)."""
    pids = []
    for server in cluster.servers[1:]:
        if server.proc is not None:
            pids.append(server.proc.pid)  # ip netns exec runs the binary in its own process
        else:
            pids.append(int(subprocess.run(
                [*podman_base(), "inspect", "-f", "{{.State.Pid}}", server.ctr],
                capture_output=True, text=True, check=True).stdout))
    return pids


# An outsider on the client's host. It watches the workers' listening TCP
# sockets (their /proc/PID/net/tcp: far faster than anyone could scan for
# them) and connects to each port that is not lact's own the moment it
# appears: once to close at once, once to send junk, until LIMIT
# connections were accepted. A Gloo pair listens only while its group
# connects, so these are the groups' rendezvous. The test stops it as soon
# as a rank logs a mesh built again. Prints "seen PORT" and
# "accepted PORT" lines as it goes.
INTRUDER = """
import os, socket, sys, threading, time
limit, seconds, skip = int(sys.argv[1]), float(sys.argv[2]), {int(p) for p in sys.argv[3].split(",")}
targets = [t.split("=") for t in sys.argv[4:]]
seen, accepted = set(), []
def hit(ip, port):
    for junk in (False, True):
        if len(accepted) >= limit:
            return
        try:
            s = socket.create_connection((ip, port), 1)
        except OSError:
            continue
        accepted.append(port)
        print("accepted", port, flush=True)
        try:
            if junk:
                s.sendall(os.urandom(4096))
                time.sleep(0.5)
        except OSError:
            pass
        s.close()
deadline = time.monotonic() + seconds
while time.monotonic() < deadline and len(accepted) < limit:
    for ip, pid in targets:
        try:
            rows = open(f"/proc/{pid}/net/tcp").read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            port = int(f[1].split(":")[1], 16)
            if f[3] == "0A" and port not in skip and (ip, port) not in seen:
                seen.add((ip, port))
                print("seen", port, flush=True)
                threading.Thread(target=hit, args=(ip, port), daemon=True).start()
time.sleep(1)
"""
INTRUDED_CONNECTIONS = 6


def check_golden(cluster, cases, work, report):
    worst = 0.0
    for workers in (1, 2, 3):
        for case in cases:
            out = os.path.join(work, f"golden-{case.name}-p{workers}.safetensors")
            job = ["--model", case.name, "--context", case.context, "--workers", str(workers),
                   *case.job_flags()]
            for query in case.queries:
                job += ["--query", query]
            cluster.submit(job, out)
            error, tensor = case.worst_error(out)
            if error > golden.TOLERANCE:
                raise AssertionError(f"{case.name} at P={workers}: {tensor} off by {error:.3g}")
            worst = max(worst, error)
        print(f"golden at P={workers}: {len(cases)} cases, worst so far {worst:.2e}", flush=True)
    report["golden_worst_error"] = worst


def mesh_retries(cluster):
    return sum(s.logs(None).count('"event":"gloo_mesh_retry"') for s in cluster.servers[1:])


def intruded_job(cluster, work, reference, attempt):
    """One INTRUDED_JOB with the outsider at work: (ports seen, connections
    accepted, meshes built again). Fails unless the job ran once, bit for
    bit the `reference`."""
    targets = [f"{h.ip}={pid}" for h, pid in zip(cluster.worker_hosts, server_pids(cluster))]
    skip = ",".join(str(p) for p in (WORKER_PORT, *METRICS_PORTS))
    before = mesh_retries(cluster)
    intruder = subprocess.Popen(cluster.client.exec_argv(
        ["/usr/bin/python3", "-c", INTRUDER, str(INTRUDED_CONNECTIONS), "120", skip, *targets]),
        stdout=subprocess.PIPE, text=True)
    out = os.path.join(work, f"intruded-{attempt}.safetensors")
    job = cluster.submit(INTRUDED_JOB, out, background=True)
    # Once a rank says it built its mesh again, an outsider did take a
    # peer's place: the outsider stops there, so later attempts connect.
    while job.poll() is None and intruder.poll() is None:
        if mesh_retries(cluster) > before:
            break
        time.sleep(0.05)
    intruder.kill()
    stdout, stderr = job.communicate()
    summary = finish(job.returncode, stdout, stderr, INTRUDED_JOB)
    lines = intruder.communicate()[0].splitlines()
    differ = same_bytes(reference, out)
    reruns = summary["stats"].get("reruns", 0)
    accepted = sum(1 for line in lines if line.startswith("accepted"))
    rebuilt = mesh_retries(cluster) - before
    # An outsider that keeps taking a pair's place can exhaust a group's mesh
    # attempts; the job then runs again, to the same bytes. A re-run with no
    # outsider connection accepted has no such cause.
    if differ or (reruns and accepted == 0):
        raise AssertionError(f"outsiders on the Gloo ports changed the job: differing {differ}, "
                             f"reruns {reruns} (the outsider: {lines})")
    return (sum(1 for line in lines if line.startswith("seen")), accepted, rebuilt, reruns)


def check_intruders(cluster, work, reference, report):
    """Runs INTRUDED_JOB with the outsider until one of its connections took a
    peer's place (a rank rebuilt its mesh), at most INTRUDED_TRIES times:
    whether the outsider wins the race to a listening port is chance (on a
    loaded machine it may lose them all, and then only says so)."""
    ports = accepted = rebuilt = reruns = tries = 0
    while tries < INTRUDED_TRIES and rebuilt == 0:
        tries += 1
        seen, got, built, ran_again = intruded_job(cluster, work, reference, tries)
        ports, accepted, rebuilt = ports + seen, accepted + got, rebuilt + built
        reruns += ran_again
    report["gloo_outsider"] = {"jobs": tries, "ports": ports, "connections_accepted": accepted,
                               "meshes_built_again": rebuilt, "reruns": reruns}
    if accepted == 0:
        # The race to a pair's listening port is lost on a loaded machine;
        # gloo_outsider_test takes a peer's place in process every time.
        print(f"Gloo ports: in {tries} jobs the outsider saw {ports} listening Gloo port(s) but "
              f"lost every race to them (every job ran once, bit for bit)", flush=True)
        return
    print(f"Gloo ports: in {tries} job(s), {accepted} connection(s) from outside accepted by "
          f"{ports} listening Gloo port(s) during the rendezvous, {rebuilt} mesh(es) built again, "
          f"{reruns} job(s) run again; every output bit for bit the undisturbed one", flush=True)


def check_link_cut(cluster, work, reference, undisturbed_seconds, report):
    out = os.path.join(work, "cut.safetensors")
    start = time.monotonic()
    proc = cluster.submit(DISTURBED_JOB, out, background=True)
    job = None
    while job is None or not job.get("accepted", {}).get("shards"):
        if proc.poll() is not None:
            raise AssertionError(f"the job ended before it could be cut: {proc.stderr.read()}")
        time.sleep(0.2)
        job = running_job(cluster)
    time.sleep(max(0.0, 0.25 * undisturbed_seconds - (time.monotonic() - start)))
    victim_address = job["accepted"]["shards"][-1]["worker"].rpartition(":")[0]
    victim = next(h for h in cluster.worker_hosts if h.ip == victim_address)
    cluster.net.set_link(victim, up=False)
    cut = time.monotonic()
    detected = None
    try:
        while proc.poll() is None and time.monotonic() - cut < 300:
            info = next((j for j in cluster.jobs() if j["job_id"] == job["job_id"]), {})
            shards = info.get("accepted", {}).get("shards", [])
            moved = shards and all(s["worker"].rpartition(":")[0] != victim_address
                                   for s in shards)
            if info.get("stats", {}).get("reruns", 0) or moved:
                detected = time.monotonic() - cut
                break
            time.sleep(0.5)
    finally:
        cluster.net.set_link(victim, up=True)
    restored = time.monotonic() - cut
    stdout, stderr = proc.communicate(timeout=600)
    total = time.monotonic() - start
    summary = finish(proc.returncode, stdout, stderr, DISTURBED_JOB)
    differ = same_bytes(reference, out)
    if differ:
        raise AssertionError(f"after the link cut the output differs in {differ}")
    reruns = summary["stats"].get("reruns", 0)
    print(f"link cut: {victim.name}'s link down {cut - start:.1f} s into the job; re-run "
          f"detected after {detected if detected is None else round(detected, 1)} s; link "
          f"restored after {restored:.1f} s; the job ended after {total:.1f} s "
          f"(undisturbed {undisturbed_seconds:.1f} s), {reruns} re-run(s), output bit for bit "
          f"the undisturbed one", flush=True)
    if detected is None or reruns < 1:
        raise AssertionError("the job was not run again after its worker's link was cut")
    report["link_cut"] = {"cut_after_s": cut - start, "detected_after_s": detected,
                          "job_seconds": total, "undisturbed_seconds": undisturbed_seconds,
                          "reruns": reruns}
    wait_for(lambda: len(cluster.workers()) == 3, 60, "the cut worker back in the registry")


def check_rates(cluster, work, report):
    report["rates"] = {}
    hosts = [cluster.client, cluster.coordinator_host, *cluster.worker_hosts]
    reference = None
    for rate in (None, *RATES):
        for host in hosts:
            cluster.net.limit(host, rate)
        out = os.path.join(work, f"rate-{rate}.safetensors")
        stats = cluster.submit(RATE_JOB, out)["stats"]
        if reference is None:
            reference = out
        elif same_bytes(reference, out):
            raise AssertionError(f"at {rate} the output differs from the unlimited one")
        figures = {k: stats.get(k, 0.0) for k in (
            "seconds", "upload_mb_per_second", "download_mb_per_second", "allreduce_seconds",
            "allreduce_hidden_fraction", "compute_seconds")}
        report["rates"][rate or "unlimited"] = figures
        print(f"link rate {rate or 'unlimited'}: job {figures['seconds']:.1f} s (compute "
              f"{figures['compute_seconds']:.1f} s), upload {figures['upload_mb_per_second']:.0f} "
              f"MB/s, download {figures['download_mb_per_second']:.0f} MB/s, all-reduce "
              f"{figures['allreduce_seconds']:.2f} s, {100 * figures['allreduce_hidden_fraction']:.0f}% "
              f"hidden", flush=True)
    for host in hosts:
        cluster.net.limit(host, None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--bin", help="the folder of lact, lact-coordinator, lact-worker")
    where.add_argument("--image", help="run the servers from this image")
    parser.add_argument("--repo", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    parser.add_argument("--results", help="write the figures to this JSON file")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    if args.bin:
        args.bin = os.path.abspath(args.bin)
    if os.geteuid() != 0:
        print("multi_host_test: needs root (network namespaces)", file=sys.stderr)
        return 2
    begin = time.monotonic()
    cases = golden.cases(os.path.abspath(args.repo))
    work = workdir.make("lact-multi-host-")
    models = os.path.join(work, "models")
    os.makedirs(models)
    for case in cases:
        shutil.copy(case.model, os.path.join(models, f"{case.name}.safetensors"))
    report = {}
    cluster = Cluster(work, args)
    try:
        cluster.start(models)
        print(f"cluster up: coordinator {cluster.coordinator_host.ip}, workers "
              f"{', '.join(h.ip for h in cluster.worker_hosts)} (TLS, tokens, cluster secret)",
              flush=True)
        check_golden(cluster, cases, work, report)
        reference = os.path.join(work, "undisturbed.safetensors")
        t0 = time.monotonic()
        cluster.submit(DISTURBED_JOB, reference)
        undisturbed = time.monotonic() - t0
        check_intruders(cluster, work, reference, report)
        check_link_cut(cluster, work, reference, undisturbed, report)
        check_rates(cluster, work, report)
        if cluster.dead():
            raise AssertionError(f"a server exited:\n{cluster.dead()}")
        report["test_seconds"] = time.monotonic() - begin
        if args.results:
            with open(args.results, "w") as f:
                json.dump(report, f, indent=1)
        print(f"multi_host_test: PASS ({report['test_seconds']:.0f} s)")
        return 0
    except Exception:
        for server in cluster.servers:
            print(f"--- {server.host.name} ---\n{server.logs()}", file=sys.stderr)
        raise
    finally:
        cluster.close()
        workdir.release(work, args.keep)


if __name__ == "__main__":
    sys.exit(main())
