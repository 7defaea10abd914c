"""The Kubernetes manifests, executed: renders an overlay, then runs the
coordinator's and the workers' containers from an image exactly as the
rendered pod templates say (pods.py: command, args, env, volumes as local
folders, secrets made here, the security context), each pod in a network
namespace of its own; the names the manifests use (the coordinator's
Service, the workers' StatefulSet DNS names) resolve to those namespaces.
Then, from a "node" namespace:

- the probes answer as the kubelet calls them (startup, liveness, readiness)
  and every declared container port accepts connections;
- every golden case runs through the cluster on both workers, in band, and
  one by reference (context and output files on the shared data volume,
  written by the workers' user), within 1e-4 of the golden files;
- the coordinator rolled out (preStop, SIGTERM, a new one on the same
  state volume) under a running job: the job goes on and its `lact
  submit` exits 0 with the output of an undisturbed run;
- each pod stops as the kubelet stops it: its preStop hook runs, then
  SIGTERM drains it within terminationGracePeriodSeconds, exit status 0.

    manifests_test.py --image lact:dev [--overlay cpu] [--repo DIR] [--keep]

Needs root, podman (runc), iproute2, openssl and kubectl; prints what it
ran and how long each step took. Exit 0 only when every check passed.
"""

import argparse
import os
import shutil
import stat
import subprocess
import sys
import time

import numpy as np
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden  # noqa: E402
import netns  # noqa: E402
import pki  # noqa: E402
import workdir  # noqa: E402
from pods import Pod, podman_base  # noqa: E402

NAMESPACE = "lact"
TENANT_TOKEN = "manifests-test-token-0123456789abcdef"


def render(repo, overlay):
    out = subprocess.run(["kubectl", "kustomize", os.path.join(repo, "deploy", "k8s", "overlays",
                                                               overlay)],
                         check=True, capture_output=True, text=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def find(objects, kind, name):
    for obj in objects:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    raise AssertionError(f"the rendered overlay has no {kind} {name}")


def step(what, start):
    print(f"[{time.monotonic() - start:6.1f} s] {what}", flush=True)


def check_ports(pod, node):
    for port in pod.container.get("ports", []):
        number = port["containerPort"]
        ok = subprocess.run(node.exec_argv([
            "/usr/bin/python3", "-c",
            f"import socket; socket.create_connection(({pod.host.ip!r}, {number}), 3).close()"]),
            capture_output=True, text=True)
        if ok.returncode != 0:
            raise AssertionError(f"{pod.name}: declared port {port.get('name')} {number} "
                                 f"refuses connections: {ok.stderr.strip()[-200:]}")


def submit(node, lact, work, case, server, tls_ca, token_file, extra):
    out = os.path.join(work, f"out-{case.name}-{len(os.listdir(work))}.safetensors")
    argv = [lact, "submit", "--server", server, "--model", case.name, "--workers", "2",
            "--token-file", token_file, "--tls-ca", tls_ca, "--timeout", "300",
            *case.job_flags(), *extra]
    if "--context-ref" not in extra:
        argv += ["--context", case.context]
        for query in case.queries:
            argv += ["--query", query]
        argv += ["--out", out]
    run = subprocess.run(node.exec_argv(argv), capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        raise AssertionError(f"lact submit {case.name} failed ({run.returncode}):\n"
                             f"{run.stderr[-2000:]}")
    return out


def rollout(node, lact, work, case, server, tls_ca, token_file, coordinator, start):
    """A rollout of the coordinator under a running job: preStop, SIGTERM (it
    hands the job over, stopping at once), a new coordinator on the same
    state volume. The job's shards run on on the workers
    (--coordinator-grace-seconds), its `lact submit` rides the restart out,
    exits 0, and writes what an undisturbed run writes, bit for bit."""
    width = np.load(case.context).shape[1]
    context = os.path.join(work, "rollout-context.npy")
    np.save(context, np.random.default_rng(7).standard_normal((262144, width)).astype(np.float32))
    rolled = argparse.Namespace(name=case.name, context=context, queries=[],
                                job_flags=case.job_flags)
    undisturbed = submit(node, lact, work, rolled, server, tls_ca, token_file, [])
    out = os.path.join(work, "rollout-out.safetensors")
    argv = [lact, "submit", "--server", server, "--model", case.name, "--workers", "2",
            "--token-file", token_file, "--tls-ca", tls_ca, "--timeout", "300",
            *case.job_flags(), "--context", context, "--out", out]
    if coordinator.pre_stop() != 0:  # it only waits for the Service to let the pod go
        raise AssertionError("coordinator: preStop hook failed")
    job = subprocess.Popen(node.exec_argv(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    time.sleep(1.0)  # the job admitted and running
    exit_code, took = coordinator.stop()
    if exit_code != 0 or took > 10:
        raise AssertionError(f"coordinator: SIGTERM -> exit {exit_code} after {took:.1f} s; "
                             f"with --state-dir it hands its jobs over at once\n{coordinator.logs()}")
    coordinator.start()
    coordinator.wait_started(node)
    _, stderr = job.communicate(timeout=600)
    if job.returncode != 0:
        raise AssertionError(f"lact submit through the rollout failed ({job.returncode}):\n"
                             f"{stderr[-2000:]}")
    got, _ = golden.safetensors_io.read(out)
    want, _ = golden.safetensors_io.read(undisturbed)
    if sorted(got) != sorted(want) or any(not np.array_equal(got[k], want[k]) for k in want):
        raise AssertionError("the job rolled over differs from its undisturbed run")
    away = "waiting for the coordinator" in stderr
    step(f"coordinator rolled out under a running job (SIGTERM: exit 0 in {took:.1f} s): "
         f"its client {'rode the restart out' if away else 'finished first'}, output equal to "
         f"an undisturbed run's", start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", required=True, help="the image the pods run")
    parser.add_argument("--overlay", default="cpu")
    parser.add_argument("--repo", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    parser.add_argument("--lact", help="the lact client binary (default: the image's)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    repo = os.path.abspath(args.repo)
    if os.geteuid() != 0:
        print("manifests_test: needs root (network namespaces, podman)", file=sys.stderr)
        return 2
    start = time.monotonic()
    objects = render(repo, args.overlay)
    coordinator_obj = find(objects, "Deployment", "lact-coordinator")
    worker_obj = find(objects, "StatefulSet", "lact-worker")
    workers = int(worker_obj["spec"]["replicas"])
    if workers < 2:
        raise AssertionError(f"the overlay runs {workers} worker(s): the test needs 2")
    headless = worker_obj["spec"]["serviceName"]
    step(f"rendered overlays/{args.overlay}: coordinator and {workers} workers "
         f"(the test runs 2 of them)", start)

    work = workdir.make("lact-manifests-")
    cases = golden.cases(repo)
    pods = []
    network = netns.Network("k8s")
    try:
        node = network.add_host("node")
        coordinator_host = network.add_host("coordinator")
        worker_hosts = [network.add_host(f"worker-{i}") for i in range(2)]
        svc = f"{NAMESPACE}.svc.cluster.local"
        names = {"lact-coordinator": coordinator_host.ip,
                 f"lact-coordinator.{svc}": coordinator_host.ip}
        for i, host in enumerate(worker_hosts):
            names[f"lact-worker-{i}.{headless}.{svc}"] = host.ip
        network.resolve(names)

        ca = pki.CertificateAuthority(os.path.join(work, "pki"))
        cert, key = ca.issue("lact", dns=["lact-coordinator", f"lact-coordinator.{svc}",
                                          f"*.{headless}.{svc}"])
        read = lambda path: open(path, "rb").read()  # noqa: E731
        secrets = {
            "lact-secrets": {"tokens": f"tenant-a {TENANT_TOKEN}\n".encode(),
                             "cluster-secret": b"manifests-test-cluster-secret-0123\n"},
            "lact-tls": {"tls.crt": read(cert), "tls.key": read(key), "ca.crt": read(ca.cert)},
        }
        claims = {}
        for claim in ("lact-data", "lact-spool", "lact-models", "lact-state"):
            claims[claim] = os.path.join(work, "volumes", claim)
            os.makedirs(claims[claim])
        for case in cases:
            shutil.copy(case.model, os.path.join(claims["lact-models"], f"{case.name}.safetensors"))
        token_file = os.path.join(work, "token")
        with open(token_file, "w") as f:
            f.write(TENANT_TOKEN + "\n")

        coordinator = Pod(coordinator_obj["spec"]["template"], "lact-coordinator-0", NAMESPACE,
                          coordinator_host, work, secrets, claims, names, args.image)
        worker_pods = [Pod(worker_obj["spec"]["template"], f"lact-worker-{i}", NAMESPACE, host,
                           work, secrets, claims, names, args.image)
                       for i, host in enumerate(worker_hosts)]
        pods = [coordinator, *worker_pods]
        coordinator.start()
        step(f"coordinator started: {coordinator.wait_started(node)}", start)
        for pod in worker_pods:
            pod.start()
        for pod in worker_pods:
            step(f"{pod.name} started: {pod.wait_started(node)}", start)
        deadline = time.monotonic() + 60
        for pod in pods:
            while True:
                ok, got = pod.probe("readinessProbe", node)
                if ok:
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(f"{pod.name} never ready: {got}\n{pod.logs()}")
                time.sleep(1)
            live_ok, live = pod.probe("livenessProbe", node)
            if not live_ok:
                raise AssertionError(f"{pod.name}: liveness failed: {live}")
            check_ports(pod, node)
            step(f"{pod.name}: ready ({got}), live, every declared port open", start)

        lact = args.lact
        if lact is None:  # the image's client, copied out, run in the node namespace
            lact = os.path.join(work, "lact")
            subprocess.run([*podman_base(), "cp", f"{coordinator.ctr}:/usr/local/bin/lact", lact],
                           check=True, capture_output=True)
        server = f"lact-coordinator:{coordinator.port('grpc')}"
        results = os.path.join(work, "results")
        os.makedirs(results)
        worst = 0.0
        for case in cases:
            out = submit(node, lact, results, case, server, ca.cert, token_file, [])
            error, tensor = case.worst_error(out)
            worst = max(worst, error)
            if error > golden.TOLERANCE:
                raise AssertionError(f"{case.name}: {tensor} off by {error:.3g}")
            step(f"golden {case.name} on 2 workers: worst error {error:.2e} ({tensor})", start)

        rollout(node, lact, results, cases[0], server, ca.cert, token_file, coordinator, start)

        case = cases[0]
        # With tokens, a tenant's files are in its own folder of the volume,
        # made as an operator would: the volume's owner, group and mode.
        data = os.path.join(claims["lact-data"], "tenant-a")
        os.makedirs(data)
        volume = os.stat(claims["lact-data"])
        os.chown(data, volume.st_uid, volume.st_gid)
        os.chmod(data, stat.S_IMODE(volume.st_mode))
        shutil.copy(case.context, os.path.join(data, "context.npy"))
        submit(node, lact, results, case, server, ca.cert, token_file,
               ["--context-ref", "context.npy", "--out-ref", "output.npy"])
        written = os.path.join(data, "output.npy")
        owner = os.stat(written)
        got = np.load(written).astype(np.float64)
        want = case.expected["output"]
        error = float(np.max(np.abs(got - want))) / float(np.max(np.abs(want)))
        if error > golden.TOLERANCE:
            raise AssertionError(f"{case.name} by reference: output off by {error:.3g}")
        step(f"golden {case.name} by reference on the data volume: output error {error:.2e}, "
             f"written by uid {owner.st_uid}", start)

        for pod in reversed(pods):
            code = pod.pre_stop()
            if code != 0:
                raise AssertionError(f"{pod.name}: preStop hook exited {code}")
            exit_code, took = pod.stop()
            grace = pod.spec.get("terminationGracePeriodSeconds", 30)
            if exit_code != 0 or took >= grace:
                raise AssertionError(f"{pod.name}: SIGTERM -> exit {exit_code} after {took:.1f} s "
                                     f"(grace {grace} s)\n{pod.logs()}")
            step(f"{pod.name}: preStop ran, SIGTERM drained it in {took:.1f} s, exit 0", start)
        print(f"manifests_test: PASS ({len(cases) + 1} golden jobs, worst error {worst:.2e}, "
              f"{time.monotonic() - start:.0f} s)")
        return 0
    except Exception:
        for pod in pods:
            print(f"--- {pod.name} log ---\n{pod.logs()}", file=sys.stderr)
        raise
    finally:
        for pod in pods:
            pod.remove()
        network.close()
        workdir.release(work, args.keep)


if __name__ == "__main__":
    sys.exit(main())
