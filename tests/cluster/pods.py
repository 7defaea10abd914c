"""Runs a rendered Kubernetes pod template's container with podman the way a
kubelet would, in a network namespace made for the pod (netns.Host).

What is carried over, and how:
- command, args, env (values; fieldRef of metadata.name, metadata.namespace
  and status.podIP), with the kubelet's $(VAR) expansion in command and args;
- volumes: persistentVolumeClaim as a local folder (group fsGroup, setgid, as
  the kubelet hands a volume to a pod with an fsGroup; read-only when the
  claim or the mount says so), emptyDir as a tmpfs, secret as a read-only
  folder of the secret's keys (or its items) with defaultMode and group
  fsGroup;
- the security context: runAsUser/runAsGroup (--user), fsGroup (an extra
  group), runAsNonRoot (refused when the user is 0), seccomp RuntimeDefault
  (podman's default profile), allowPrivilegeEscalation: false
  (no-new-privileges), readOnlyRootFilesystem (--read-only, with no tmpfs
  podman would add by itself), capabilities drop/add;
- the pod's DNS (hostAliases given by the test, as --add-host);
- probes (httpGet, as the kubelet calls them: GET http://POD_IP:PORT/PATH
  from the node, success for 200-399) and preStop exec hooks.
Anything else in the spec (another volume type, another fieldRef, a probe
kind or security field this does not know) raises ManifestError: the test
must not pass over what it did not run. Resources are not applied: they are
the scheduler's, and the test machine is smaller than the requests.
"""

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request

PODMAN = ["podman", "--runtime", "runc"]
LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]


class ManifestError(Exception):
    """The manifest asks for something this runner cannot do as a kubelet would."""


def podman_base():
    extra = os.environ.get("LACT_PODMAN_FLAGS")
    return ["podman", *extra.split()] if extra is not None else list(PODMAN)


def expand(text, env):
    """The kubelet's $(VAR) expansion: a defined variable is replaced, $$ is a
    literal $, anything else stays as written."""
    def repl(match):
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", repl, text)


def _known(mapping, allowed, what):
    unknown = set(mapping or {}) - set(allowed)
    if unknown:
        raise ManifestError(f"{what}: {sorted(unknown)} not supported by the test's kubelet")


class Pod:
    """One pod of a rendered workload: `template` is spec.template."""

    def __init__(self, template, pod_name, namespace, host, workdir, secrets, claims,
                 host_aliases, image=None):
        self.template = template
        self.spec = template["spec"]
        if len(self.spec["containers"]) != 1:
            raise ManifestError("one container per pod expected")
        self.container = self.spec["containers"][0]
        self.name = pod_name
        self.namespace = namespace
        self.host = host
        self.workdir = workdir
        self.secrets = secrets  # secretName -> {key: bytes}
        self.claims = claims  # claimName -> local folder
        self.host_aliases = host_aliases  # name -> address
        self.image = image or self.container["image"]
        self.ctr = f"{os.path.basename(host.ns)}-{pod_name}"
        _known(self.spec, ["containers", "volumes", "securityContext", "serviceAccountName",
                           "automountServiceAccountToken", "terminationGracePeriodSeconds",
                           "nodeSelector", "tolerations"], "pod spec")
        _known(self.container, ["name", "image", "command", "args", "env", "ports",
                                "startupProbe", "livenessProbe", "readinessProbe",
                                "lifecycle", "securityContext", "resources", "volumeMounts"],
               "container")
        if self.spec.get("automountServiceAccountToken") is not False:
            raise ManifestError("the pod would get a service account token")

    def env(self):
        fields = {"metadata.name": self.name, "metadata.namespace": self.namespace,
                  "status.podIP": self.host.ip}
        values = {}
        for item in self.container.get("env", []):
            if "value" in item:
                values[item["name"]] = expand(str(item["value"]), values)
                continue
            ref = item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            if ref not in fields:
                raise ManifestError(f"env {item['name']}: {item.get('valueFrom')} not supported")
            values[item["name"]] = fields[ref]
        return values

    def _security(self):
        pod = self.spec.get("securityContext", {})
        ctr = self.container.get("securityContext", {})
        _known(pod, ["runAsNonRoot", "runAsUser", "runAsGroup", "fsGroup", "seccompProfile"],
               "pod securityContext")
        _known(ctr, ["allowPrivilegeEscalation", "readOnlyRootFilesystem", "capabilities",
                     "runAsNonRoot", "runAsUser", "runAsGroup"], "container securityContext")
        user = ctr.get("runAsUser", pod.get("runAsUser"))
        group = ctr.get("runAsGroup", pod.get("runAsGroup"))
        if user is None:
            raise ManifestError("no runAsUser: the image's user would be taken unchecked")
        if (ctr.get("runAsNonRoot", pod.get("runAsNonRoot"))) and int(user) == 0:
            raise ManifestError("runAsNonRoot with user 0")
        args = ["--user", f"{user}:{group if group is not None else user}"]
        self.fs_group = pod.get("fsGroup")
        if self.fs_group is not None:
            args += ["--group-add", str(self.fs_group)]
        seccomp = pod.get("seccompProfile", {}).get("type", "RuntimeDefault")
        if seccomp != "RuntimeDefault":
            raise ManifestError(f"seccomp {seccomp} not supported")
        if ctr.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        if ctr.get("readOnlyRootFilesystem"):
            args += ["--read-only", "--read-only-tmpfs=false"]
        caps = ctr.get("capabilities", {})
        args += [f"--cap-drop={c.lower()}" for c in caps.get("drop", [])]
        args += [f"--cap-add={c.lower()}" for c in caps.get("add", [])]
        return args

    def _volumes(self):
        by_name = {v["name"]: v for v in self.spec.get("volumes", [])}
        args = []
        for mount in self.container.get("volumeMounts", []):
            _known(mount, ["name", "mountPath", "readOnly"], "volumeMount")
            volume = by_name.get(mount["name"])
            if volume is None:
                raise ManifestError(f"volumeMount {mount['name']}: no such volume")
            path = mount["mountPath"]
            read_only = bool(mount.get("readOnly"))
            if "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]
                folder = self.claims[claim["claimName"]]
                if self.fs_group is not None:
                    os.chown(folder, 0, int(self.fs_group))
                    os.chmod(folder, 0o2775)
                read_only = read_only or bool(claim.get("readOnly"))
                args += ["-v", f"{folder}:{path}:{'ro' if read_only else 'rw'}"]
            elif "emptyDir" in volume:
                if read_only:
                    raise ManifestError(f"{mount['name']}: a read-only emptyDir")
                args += ["--tmpfs", f"{path}:rw,mode=0777"]
            elif "secret" in volume:
                args += ["-v", f"{self._secret_folder(volume)}:{path}:ro"]
            else:
                raise ManifestError(f"volume {mount['name']}: {sorted(volume)} not supported")
        return args

    def _secret_folder(self, volume):
        secret = volume["secret"]
        _known(secret, ["secretName", "items", "defaultMode"], "secret volume")
        data = self.secrets[secret["secretName"]]
        folder = os.path.join(self.workdir, "secrets", self.name, volume["name"])
        os.makedirs(folder, exist_ok=True)
        items = secret.get("items") or [{"key": k, "path": k} for k in data]
        mode = secret.get("defaultMode", 0o644)
        for item in items:
            if item["key"] not in data:
                raise ManifestError(f"secret {secret['secretName']} has no key {item['key']}")
            target = os.path.join(folder, item["path"])
            with open(target, "wb") as f:
                f.write(data[item["key"]])
            os.chown(target, 0, int(self.fs_group) if self.fs_group is not None else 0)
            os.chmod(target, item.get("mode", mode))
        return folder

    def argv(self):
        env = self.env()
        security = self._security()
        argv = [*podman_base(), "run", "-d", "--name", self.ctr, *LIMITS,
                "--network", f"ns:/run/netns/{self.host.ns}", "--hostname", self.name,
                *security, *self._volumes()]
        for name, address in self.host_aliases.items():
            argv += ["--add-host", f"{name}:{address}"]
        for name, value in env.items():
            argv += ["-e", f"{name}={value}"]
        command = [expand(c, env) for c in self.container.get("command", [])]
        if command:
            argv += ["--entrypoint", json.dumps(command)]
        argv.append(self.image)
        argv += [expand(a, env) for a in self.container.get("args", [])]
        return argv

    def start(self):
        subprocess.run([*podman_base(), "rm", "-f", self.ctr], capture_output=True)
        run = subprocess.run(self.argv(), capture_output=True, text=True)
        if run.returncode != 0:
            raise ManifestError(f"podman run {self.name}: {run.stderr.strip()}")

    def port(self, name_or_number):
        if isinstance(name_or_number, int):
            return name_or_number
        for port in self.container.get("ports", []):
            if port.get("name") == name_or_number:
                return port["containerPort"]
        raise ManifestError(f"{self.name}: no port named {name_or_number}")

    def probe(self, kind, node):
        """One call of the probe `kind` (startupProbe, livenessProbe, readinessProbe)
        from the node's namespace: (passed, what it got)."""
        spec = self.container.get(kind)
        if spec is None:
            raise ManifestError(f"{self.name}: no {kind}")
        get = spec.get("httpGet")
        if get is None:
            raise ManifestError(f"{self.name}: {kind} is not an httpGet probe")
        _known(get, ["path", "port", "scheme"], f"{kind}.httpGet")
        if get.get("scheme", "HTTP") != "HTTP":
            raise ManifestError(f"{kind}: scheme {get['scheme']}")
        url = f"http://{self.host.ip}:{self.port(get['port'])}{get.get('path', '/')}"
        timeout = spec.get("timeoutSeconds", 1)
        code = subprocess.run(node.exec_argv([
            "/usr/bin/python3", "-c",
            "import sys, urllib.request, urllib.error\n"
            "try:\n"
            f"    r = urllib.request.urlopen({url!r}, timeout={timeout}); print(r.status)\n"
            "except urllib.error.HTTPError as e: print(e.code)\n"
            "except Exception as e: print(0, e)\n"]), capture_output=True, text=True).stdout
        status = int(code.split()[0]) if code.strip() else 0
        return 200 <= status < 400, f"GET {url} -> {code.strip() or 'no answer'}"

    def wait_started(self, node):
        """Polls the startup probe as the kubelet would, within periodSeconds x
        failureThreshold; raises when it never passes."""
        spec = self.container["startupProbe"]
        period = spec.get("periodSeconds", 10)
        attempts = spec.get("failureThreshold", 3)
        last = ""
        for _ in range(attempts):
            ok, last = self.probe("startupProbe", node)
            if ok:
                return last
            if not self.running():
                raise AssertionError(f"{self.name} exited before its startup probe passed:\n"
                                     f"{self.logs()}")
            time.sleep(period)
        raise AssertionError(f"{self.name}: startup probe never passed ({last})\n{self.logs()}")

    def running(self):
        out = subprocess.run([*podman_base(), "inspect", "-f", "{{.State.Running}}", self.ctr],
                             capture_output=True, text=True).stdout.strip()
        return out == "true"

    def pre_stop(self):
        """Runs the preStop exec hook in the container: its exit status."""
        hook = self.container.get("lifecycle", {}).get("preStop")
        if hook is None:
            return 0
        if "exec" not in hook:
            raise ManifestError(f"{self.name}: preStop {sorted(hook)} not supported")
        return subprocess.run([*podman_base(), "exec", self.ctr, *hook["exec"]["command"]],
                              capture_output=True).returncode

    def stop(self):
        """SIGTERM with the pod's grace period, as the kubelet stops a pod after its
        preStop hook: (exit code, seconds it took)."""
        grace = self.spec.get("terminationGracePeriodSeconds", 30)
        start = time.monotonic()
        subprocess.run([*podman_base(), "stop", "-t", str(grace), self.ctr], capture_output=True)
        took = time.monotonic() - start
        code = subprocess.run([*podman_base(), "inspect", "-f", "{{.State.ExitCode}}", self.ctr],
                              capture_output=True, text=True).stdout.strip()
        return int(code or -1), took

    def logs(self, tail=40):
        return subprocess.run([*podman_base(), "logs", "--tail", str(tail), self.ctr],
                              capture_output=True, text=True).stderr

    def remove(self):
        subprocess.run([*podman_base(), "rm", "-f", "-t", "0", self.ctr], capture_output=True)
