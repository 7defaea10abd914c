#!/usr/bin/python3
"""Renders every kustomize overlay of deploy/k8s with `kubectl kustomize` and
checks the rendered objects for what a review of a production deployment
asks, so that a regression fails CI; then the images' Dockerfiles.

Usage: check_manifests.py REPO_ROOT. Prints one line per failed property
(object, property) and exits 1 if any failed, 0 otherwise.
"""

import pathlib
import re
import subprocess
import sys

import yaml

FAILURES = []


def check(ok, where, what):
    if not ok:
        FAILURES.append(f"{where}: {what}")


def render(overlay):
    out = subprocess.run(["kubectl", "kustomize", str(overlay)], capture_output=True, text=True)
    if out.returncode != 0:
        FAILURES.append(f"{overlay}: kubectl kustomize failed: {out.stderr.strip()}")
        return []
    return [o for o in yaml.safe_load_all(out.stdout) if o]


def flag(args, name):
    """The value after `name` in a container's args, or None."""
    return args[args.index(name) + 1] if name in args else None


def check_pod(where, obj, objects):
    spec = obj["spec"]["template"]["spec"]
    meta = obj["spec"]["template"]["metadata"]
    check(spec.get("serviceAccountName") == "lact", where, "runs as ServiceAccount lact")
    check(spec.get("automountServiceAccountToken") is False, where, "mounts no API token")
    pod_sc = spec.get("securityContext", {})
    check(pod_sc.get("runAsNonRoot") is True, where, "runAsNonRoot")
    check(pod_sc.get("runAsUser", 0) != 0, where, "a non-root runAsUser")
    check(pod_sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", where,
          "seccompProfile RuntimeDefault")
    claims = {o["metadata"]["name"] for o in objects if o["kind"] == "PersistentVolumeClaim"}
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for v in volumes.values():
        if "persistentVolumeClaim" in v:
            check(v["persistentVolumeClaim"]["claimName"] in claims, where,
                  f"volume {v['name']}'s claim is rendered too")
        check("emptyDir" not in v or v["name"] == "tmp", where,
              f"volume {v['name']} is no emptyDir placeholder")
    for c in spec["containers"]:
        cw = f"{where} container {c['name']}"
        sc = c.get("securityContext", {})
        check(sc.get("allowPrivilegeEscalation") is False, cw, "allowPrivilegeEscalation false")
        check(sc.get("readOnlyRootFilesystem") is True, cw, "readOnlyRootFilesystem")
        check("ALL" in sc.get("capabilities", {}).get("drop", []), cw, "drops ALL capabilities")
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            check(probe in c, cw, f"has a {probe}")
        check(c.get("readinessProbe", {}).get("httpGet", {}).get("path") == "/readyz", cw,
              "readiness reads /readyz (the health service's word)")
        res = c.get("resources", {})
        check("memory" in res.get("requests", {}) and "cpu" in res.get("requests", {}), cw,
              "cpu and memory requests")
        check("memory" in res.get("limits", {}), cw, "a memory limit")
        check("preStop" in c.get("lifecycle", {}), cw, "a preStop hook")
        args = c.get("args", [])
        # With --state-dir the coordinator hands its jobs over at once;
        # otherwise SIGTERM drains for --drain-seconds.
        drain = 0 if flag(args, "--state-dir") else int(flag(args, "--drain-seconds") or 60)
        check(spec.get("terminationGracePeriodSeconds", 30) >= drain + 10, cw,
              f"terminationGracePeriodSeconds covers --drain-seconds {drain} and 10 s more")
        for tls in ("--tls-cert", "--tls-key", "--tls-ca", "--cluster-secret-file"):
            check(flag(args, tls) is not None, cw, f"passes {tls} (required off loopback)")
        mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
        for tls in ("--tls-cert", "--cluster-secret-file"):
            path = flag(args, tls) or ""
            mount = next((m for p, m in mounts.items() if path.startswith(p + "/")), None)
            check(mount is not None and "secret" in volumes.get(mount["name"], {}), cw,
                  f"{tls} comes from a mounted Secret")
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        metrics_port = flag(args, "--metrics-port")
        check(metrics_port is not None and ports.get("metrics") == int(metrics_port or 0), cw,
              "--metrics-port is the container's port 'metrics'")
        annotations = meta.get("annotations", {})
        check(annotations.get("prometheus.io/scrape") == "true" and
              annotations.get("prometheus.io/port") == metrics_port, where,
              "Prometheus scrape annotations name the metrics port")
    return spec


def check_overlay(overlay):
    objects = render(overlay)
    if not objects:
        return
    where = overlay.name
    by = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    for o in objects:
        labels = o["metadata"].get("labels", {})
        check(labels.get("app.kubernetes.io/name") == "lact" and
              "app.kubernetes.io/part-of" in labels, f"{where} {o['kind']}/{o['metadata']['name']}",
              "app.kubernetes.io/name and part-of labels")
    coordinator = by.get(("Deployment", "lact-coordinator"))
    worker = by.get(("StatefulSet", "lact-worker"))
    check(coordinator is not None, where, "a Deployment lact-coordinator")
    check(worker is not None, where, "workers as a StatefulSet lact-worker")
    check(("Deployment", "lact-worker") not in by, where, "no worker Deployment left")
    if coordinator:
        check(coordinator["spec"].get("replicas") == 1, where, "one coordinator")
        check(coordinator["spec"].get("strategy", {}).get("type") == "Recreate", where,
              "the coordinator is replaced with Recreate, never two at once")
        spec = check_pod(f"{where} coordinator", coordinator, objects)
        args = spec["containers"][0]["args"]
        state = flag(args, "--state-dir")
        mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        check(state is not None and "persistentVolumeClaim" in volumes.get(mounts.get(state), {}),
              where, "the coordinator's --state-dir is on a PersistentVolumeClaim")
    if worker:
        check(worker["spec"].get("serviceName") == "lact-worker", where,
              "the StatefulSet names its headless Service")
        spec = check_pod(f"{where} worker", worker, objects)
        args = spec["containers"][0]["args"]
        check(".lact-worker." in (flag(args, "--advertise-host") or ""), where,
              "workers register their stable DNS names")
        check(int(flag(args, "--coordinator-grace-seconds") or 0) >= 60, where,
              "workers hold their shards a minute or more while the coordinator is away "
              "(--coordinator-grace-seconds): a rollout costs running jobs nothing")
        check(int(flag(args, "--warm-bytes") or 0) > 0, where,
              "workers warm their heap before their first job (--warm-bytes)")
        model_dir = flag(args, "--model-dir")
        mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        check("persistentVolumeClaim" in volumes.get(mounts.get(model_dir), {}), where,
              "models come from a PersistentVolumeClaim")
        if where == "gpu":
            limits = spec["containers"][0]["resources"].get("limits", {})
            check(int(limits.get("nvidia.com/gpu", 0)) >= 1, where, "workers ask for a GPU")
            check(flag(args, "--backend") == "cuda", where, "workers run --backend cuda")
    headless = by.get(("Service", "lact-worker"))
    check(headless is not None and headless["spec"].get("clusterIP") == "None", where,
          "a headless Service lact-worker")
    sa = by.get(("ServiceAccount", "lact"))
    check(sa is not None and sa.get("automountServiceAccountToken") is False, where,
          "ServiceAccount lact without a token")
    for name in ("lact-coordinator", "lact-worker"):
        check(("PodDisruptionBudget", name) in by, where, f"a PodDisruptionBudget {name}")
    policy = by.get(("NetworkPolicy", "lact-coordinator"))
    check(policy is not None, where, "a NetworkPolicy on the coordinator")
    if policy:
        control_rules = [r for r in policy["spec"].get("ingress", [])
                         if any(p.get("port") == 50053 for p in r.get("ports", []))]
        check(control_rules and all(
            r.get("from") and all(f.get("podSelector", {}).get("matchLabels", {}).get(
                "app.kubernetes.io/component") == "worker" for f in r["from"])
            for r in control_rules), where, "Control (50053) only from the workers")


def check_images(root):
    for dockerfile in sorted((root / "deploy" / "docker").glob("Dockerfile*")):
        text = dockerfile.read_text()
        where = dockerfile.name
        stages = set(re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", text, re.M | re.I))
        args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, re.M))
        for image in re.findall(r"^FROM\s+(\S+)", text, re.M):
            arg = re.fullmatch(r"\$\{?(\w+)\}?", image)
            if arg:
                check(args.get(arg.group(1)) in stages, where,
                      f"base {image} defaults to one of the file's stages")
                continue
            if image in stages or image == "scratch":
                continue
            check(":" in image and not image.endswith(":latest") and
                  re.search(r":[^:]*\d+\.\d+", image) is not None, where,
                  f"base image {image} pinned to a point release")
        users = re.findall(r"^USER\s+(\S+)", text, re.M)
        check(users and users[-1] not in ("root", "0", "0:0"), where, "runs as a non-root USER")
    check((root / ".dockerignore").is_file(), ".dockerignore", "exists")


def main():
    root = pathlib.Path(sys.argv[1]).resolve()
    overlays = sorted(p for p in (root / "deploy" / "k8s" / "overlays").iterdir() if p.is_dir())
    check(len(overlays) >= 2, "deploy/k8s/overlays", "the cpu and gpu overlays")
    for overlay in overlays:
        check_overlay(overlay)
    check_images(root)
    for f in FAILURES:
        print("FAILED", f)
    print(f"{len(overlays)} overlays rendered and checked; {len(FAILURES)} failures")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
