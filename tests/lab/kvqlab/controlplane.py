"""A real Kubernetes control plane on loopback: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, and kwok for fake nodes.

Everything listens on 127.0.0.1 on ports chosen free at start. The run directory
holds all state:

    lab.json                 ports, server URL, bin dir, node list, start timings
    pki/                     ca.crt (trust this), serving cert, service-account keys
    tokens.csv               static tokens for the apiserver (admin, user, components)
    admin.kubeconfig         system:masters identity
    user.kubeconfig          least-privilege identity bound to the roles of roles/install/files/*.yml
    audit-policy.yaml        kube-apiserver audit policy: Metadata level for the least-privilege user only
    audit.log                its audit log (JSON lines; read with kvqlab.rbacusage)
    components/              kubeconfigs of the controller-manager, scheduler, kwok
    logs/<name>.log          one log per process
    pids/<name>.pid|.json    what lab-down stops (by pid, checked against start time)
    etcd-data/               etcd's data (removed by down)

Nothing here talks to any address other than 127.0.0.1.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from . import pki, procs, virtapi

LOOPBACK = "127.0.0.1"
K8S_VERSION = os.environ.get("KVQ_K8S_VERSION", "v1.33.13")


def k8s_minor(version=None):
    """The minor release of a Kubernetes version ('v1.37.2' -> 37)."""
    return int((version or K8S_VERSION).lstrip("v").split(".")[1])


def dra_served(version=None):
    """Whether the lab's Kubernetes serves DRA (resource.k8s.io/v1, on by default) and so runs the resourceclaim
    controller: 1.34 and later (1.33 has it beta and off)."""
    return k8s_minor(version) >= 34


ETCD_VERSION = os.environ.get("KVQ_ETCD_VERSION", "v3.5.21")
KWOK_VERSION = os.environ.get("KVQ_KWOK_VERSION", "v0.7.0")
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# start order; down stops in reverse, after any other registered process (emulator...)
CORE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# pid files that other lab parts keep themselves (relative to the run dir); down stops
# them first, and only if the process's command line mentions this run dir.
FOREIGN_PID_FILES = {"emulator": "emulator/emulator.pid"}
KUBECTL = os.environ.get("KVQ_KUBECTL", "/usr/bin/kubectl")

ADMIN_USER = "kvquota-lab-admin"
USER_NAME = "kvquota-operator"
RBAC_BINDING = "kvquota-maintenance-lab-user"
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
DEFAULT_NODE_LABELS = {
    "kubernetes.io/os": "linux",
    "kubernetes.io/arch": "amd64",
    "beta.kubernetes.io/os": "linux",
    "beta.kubernetes.io/arch": "amd64",
    "type": "kwok",
    # virt-handler sets this on real KubeVirt nodes; launcher pods select on it
    "kubevirt.io/schedulable": "true",
}
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.1/16"

_TESTS_LAB = Path(__file__).resolve().parent.parent          # tests/lab
REPO_ROOT = _TESTS_LAB.parent.parent                         # collection root
RBAC_DIR = REPO_ROOT / "roles" / "install" / "files"
DEFAULT_RBAC_FILE = RBAC_DIR / "clusterrole.yml"
# the kinds apply_rbac applies from an RBAC file; bindings in the files (placeholders) are the lab's own
RBAC_KINDS = ("Namespace", "ClusterRole", "Role")
AUDIT_POLICY = "audit-policy.yaml"
AUDIT_LOG = "audit.log"


def default_rbac_files() -> list[Path]:
    """The collection's RBAC files the lab applies by default: every roles/install/files/*.yml that defines a role."""
    return [p for p in sorted(RBAC_DIR.glob("*.yml")) if _rbac_docs(p)]


def manifest_objects(path: Path) -> list[dict]:
    """Every object of a manifest file: its YAML documents, the items of a v1 List expanded (the collection's
    roles/install/files/*.yml are each one List: ansible-test's yamllint allows one document per file)."""
    objects = []
    for doc in yaml.safe_load_all(Path(path).read_text()):
        if doc and doc.get("kind") == "List":
            objects.extend(item for item in doc.get("items") or () if item)
        elif doc:
            objects.append(doc)
    return objects


def _rbac_docs(path: Path) -> list[dict]:
    """The Namespace, ClusterRole and Role objects of an RBAC file."""
    return [d for d in manifest_objects(path) if d.get("kind") in RBAC_KINDS]


def audit_policy(user: str) -> dict:
    """Metadata (who, verb, resource, response code, RBAC decision and reason) for requests by user; nothing
    for any other identity, so the log stays small and holds only what the collection asked for."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "Metadata", "users": [user]},
            {"level": "None"},
        ],
    }


class LabError(RuntimeError):
    """Anything that stops the lab from starting, attaching or answering."""


def default_run_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(cache) / "kvquota" / "lab-run"


def find_bin_dir(bin_dir: str | os.PathLike | None = None) -> Path:
    """Where the lab binaries are: argument, $KVQ_LAB_BIN_DIR, or build.sh's cache."""
    candidates: list[Path] = []
    if bin_dir:
        candidates.append(Path(bin_dir))
    elif os.environ.get("KVQ_LAB_BIN_DIR"):
        candidates.append(Path(os.environ["KVQ_LAB_BIN_DIR"]))
    else:
        cache = Path(os.environ.get("KVQ_LAB_CACHE")
                     or Path(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")) / "kvquota-lab")
        candidates.append(cache / f"k8s-{K8S_VERSION}-etcd-{ETCD_VERSION}-kwok-{KWOK_VERSION}" / "bin")
    for c in candidates:
        if all(os.access(c / b, os.X_OK) for b in BINARIES):
            return c.resolve()
    missing = [b for b in BINARIES if not os.access(candidates[0] / b, os.X_OK)]
    raise LabError(
        f"lab binaries missing in {candidates[0]}: {', '.join(missing)}. "
        "Build them with `make lab-build` (tests/lab/build.sh; 15-30 min cold, cached afterwards) "
        "or point KVQ_LAB_BIN_DIR at a directory holding " + ", ".join(BINARIES) + "."
    )


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _i in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _kubeconfig(server: str, ca: Path, user: str, token: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kvquota-lab", "cluster": {
            "server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": f"{user}@kvquota-lab", "context": {
            "cluster": "kvquota-lab", "user": user}}],
        "current-context": f"{user}@kvquota-lab",
        "preferences": {},
    }


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _quiet(*_a, **_k) -> None:
    pass


@contextlib.contextmanager
def _locked(run_dir: Path):
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2,
             check: Callable[[], None] | None = None) -> Any:
    """Poll predicate until it returns a truthy value; LabError naming `what` on timeout.

    `check` is called every round and may raise (e.g. a process died)."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        if check:
            check()
        try:
            value = predicate()
            if value:
                return value
        except LabError:
            raise
        except Exception as exc:  # noqa: BLE001 - transient API errors while polling
            last_exc = exc
        if time.monotonic() >= deadline:
            extra = f" (last error: {last_exc})" if last_exc else ""
            raise LabError(f"timed out after {timeout:g}s waiting for {what}{extra}")
        time.sleep(interval)


@dataclass
class Lab:
    run_dir: Path
    server: str
    ca_file: Path
    admin_kubeconfig: Path
    user_kubeconfig: Path
    bin_dir: Path
    user_name: str = USER_NAME
    ports: dict = field(default_factory=dict)
    state: dict = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------------ clients
    def api_client(self, admin: bool = True):
        """A kubernetes.client.ApiClient for the admin (default) or least-privilege user."""
        from kubernetes import config as kconfig
        kc = self.admin_kubeconfig if admin else self.user_kubeconfig
        return kconfig.new_client_from_config(config_file=str(kc))

    def core(self, admin: bool = True):
        from kubernetes import client
        return client.CoreV1Api(self.api_client(admin))

    def kubectl(self, *args: str, admin: bool = True, check: bool = True,
                input: str | None = None, timeout: float = 120) -> str:
        """Run /usr/bin/kubectl against the lab; returns stdout, LabError on failure if check."""
        kc = self.admin_kubeconfig if admin else self.user_kubeconfig
        argv = [KUBECTL, "--kubeconfig", str(kc), "--cache-dir", str(self.run_dir / "kubectl-cache"), *args]
        res = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, check=False,
                             env={**os.environ, "KUBECONFIG": str(kc)})
        if check and res.returncode != 0:
            raise LabError(f"kubectl {' '.join(args)} failed ({res.returncode}): {res.stderr.strip()}")
        return res.stdout if check or res.returncode == 0 else res.stdout + res.stderr

    def env(self, admin: bool = True) -> dict:
        """Environment for running ansible / kubectl / the emulator against this lab."""
        kc = str(self.admin_kubeconfig if admin else self.user_kubeconfig)
        return {
            "K8S_AUTH_KUBECONFIG": kc,
            "KUBECONFIG": kc,
            "KVQ_LAB_RUN_DIR": str(self.run_dir),
            "KVQ_LAB_SERVER": self.server,
            "KVQ_LAB_CA_FILE": str(self.ca_file),
            "KVQ_LAB_ADMIN_KUBECONFIG": str(self.admin_kubeconfig),
            "KVQ_LAB_USER_KUBECONFIG": str(self.user_kubeconfig),
        }

    # ------------------------------------------------------------------ health
    def _token(self, admin: bool = True) -> str:
        kc = yaml.safe_load((self.admin_kubeconfig if admin else self.user_kubeconfig).read_text())
        return kc["users"][0]["user"]["token"]

    def _get(self, url: str, token: str | None = None, timeout: float = 3) -> tuple[int, str]:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        req = urllib.request.Request(url)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=timeout) as r:
                return r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def readyz(self) -> bool:
        try:
            code = self._get(self.server + "/readyz", self._token())[0]
            return code == 200
        except (OSError, ssl.SSLError):
            return False

    def component_healthy(self, name: str) -> bool:
        port = self.ports.get(name)
        if not port:
            return procs.alive(self.run_dir, name)
        try:
            code = self._get(f"https://{LOOPBACK}:{port}/healthz")[0]
            return code == 200
        except (OSError, ssl.SSLError):
            return False

    def processes(self) -> dict[str, dict]:
        """name -> {pid, alive} for every process recorded in the run dir."""
        out = {}
        for name in procs.names(self.run_dir):
            meta = procs.read_meta(self.run_dir, name) or {}
            out[name] = {"pid": meta.get("pid"), "alive": procs.is_ours(meta) if meta else False}
        return out

    def check_processes(self, names=CORE) -> None:
        for name in names:
            if procs.read_meta(self.run_dir, name) and not procs.alive(self.run_dir, name):
                raise LabError(f"{name} exited; last log lines ({self.run_dir / 'logs' / (name + '.log')}):\n"
                               + procs.tail(self.run_dir, name))

    def wait_ready(self, timeout: float = 60) -> None:
        wait_for(self.readyz, timeout, "kube-apiserver /readyz",
                 check=lambda: self.check_processes(("etcd", "kube-apiserver")))

    # ------------------------------------------------------------------ waits
    def wait_quota_ready(self, namespace: str, name: str, timeout: float = 30):
        """Wait until the quota controller has filled status.hard (= spec.hard) and status.used.

        (status.used lists what the controller can count; a hard key that no evaluator
        knows stays absent from it.)

        A ResourceQuota is only enforced once status.hard is set. Returns the quota."""
        from kubernetes import client
        api = client.CoreV1Api(self.api_client())

        def ready():
            q = api.read_namespaced_resource_quota(name, namespace)
            hard = (q.spec.hard if q.spec else None) or {}
            st = q.status
            if st is None or st.hard is None or st.used is None:
                return None
            if dict(st.hard) != dict(hard):
                return None
            return q
        return wait_for(ready, timeout, f"ResourceQuota {namespace}/{name} status.hard to be filled",
                        check=lambda: self.check_processes(("kube-apiserver", "kube-controller-manager")))

    def wait_quota(self, namespace: str, name: str, predicate: Callable[[Any], bool],
                   timeout: float = 30, what: str | None = None):
        """Wait until predicate(quota) is true; returns the quota."""
        from kubernetes import client
        api = client.CoreV1Api(self.api_client())

        def probe():
            q = api.read_namespaced_resource_quota(name, namespace)
            return q if predicate(q) else None
        return wait_for(probe, timeout, what or f"ResourceQuota {namespace}/{name} condition")

    def wait_pod_phase(self, namespace: str, name: str, phase: str = "Running", timeout: float = 30):
        from kubernetes import client
        api = client.CoreV1Api(self.api_client())

        def probe():
            p = api.read_namespaced_pod(name, namespace)
            return p if p.status and p.status.phase == phase else None
        return wait_for(probe, timeout, f"pod {namespace}/{name} phase {phase}")

    def set_pod_phase(self, namespace: str, name: str, phase: str = "Succeeded"):
        """PATCH pods/status phase (what a kubelet would do). Only after the pod is Running:
        kwok's pod-ready stage would otherwise overwrite the phase."""
        from kubernetes import client
        api = client.CoreV1Api(self.api_client())
        return api.patch_namespaced_pod_status(
            name, namespace, {"status": {"phase": phase}},
            _content_type="application/merge-patch+json")

    # ------------------------------------------------------------------ nodes
    def add_node(self, name: str, cpu: str = "32", memory: str = "128Gi", pods: str = "110",
                 labels: dict | None = None, wait: bool = True, timeout: float = 30) -> None:
        """Create a kwok-managed fake node and (by default) wait until it is Ready."""
        from kubernetes import client
        api = client.CoreV1Api(self.api_client())
        all_labels = {**DEFAULT_NODE_LABELS, "kubernetes.io/hostname": name, **(labels or {})}
        resources = {"cpu": str(cpu), "memory": str(memory), "pods": str(pods)}
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": all_labels,
                "annotations": {KWOK_ANNOTATION[0]: KWOK_ANNOTATION[1],
                                "node.alpha.kubernetes.io/ttl": "0"},
            },
            "spec": {},
            "status": {"capacity": resources, "allocatable": resources},
        }
        api.create_node(body)
        nodes = self.state.setdefault("nodes", [])
        if name not in nodes:
            nodes.append(name)
            self._save_state()
        if wait:
            self.wait_node_ready(name, timeout)

    def wait_node_ready(self, name: str, timeout: float = 30) -> None:
        from kubernetes import client
        api = client.CoreV1Api(self.api_client())

        def ready():
            n = api.read_node(name)
            for c in (n.status.conditions or []) if n.status else []:
                if c.type == "Ready" and c.status == "True":
                    return True
            return False
        wait_for(ready, timeout, f"node {name} Ready (kwok)",
                 check=lambda: self.check_processes(("kube-apiserver", "kwok")))

    def delete_node(self, name: str, remove_pods: bool = True) -> None:
        """Delete a fake node. With remove_pods (default) first delete, with grace period 0,
        every pod bound to it: the lab runs no pod garbage collector, so pods left on a
        deleted node would stay (Terminating) forever."""
        from kubernetes import client
        api = client.CoreV1Api(self.api_client())
        if remove_pods:
            for p in api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items:
                with contextlib.suppress(client.ApiException):
                    api.delete_namespaced_pod(p.metadata.name, p.metadata.namespace, grace_period_seconds=0)
        api.delete_node(name)
        nodes = self.state.setdefault("nodes", [])
        if name in nodes:
            nodes.remove(name)
            self._save_state()

    # ------------------------------------------------------------------ RBAC
    def apply_rbac(self, rbac_file: Path | None = None, rbac_files: list | None = None) -> list[str]:
        """Apply the collection's RBAC and bind its roles to the lab user.

        Which files: rbac_files, else rbac_file alone, else the files of the last call (lab.json), else every
        roles/install/files/*.yml that defines a role (default_rbac_files). Their Namespaces, ClusterRoles and Roles are
        applied; each ClusterRole is bound with a ClusterRoleBinding and each Role with a RoleBinding in its
        namespace (bindings written in the files are skipped: they hold placeholders).
        Returns the names of the roles bound (ClusterRoles, then Roles). Re-run after editing the files."""
        if rbac_files:
            paths = [Path(p) for p in rbac_files]
        elif rbac_file:
            paths = [Path(rbac_file)]
        elif self.state.get("rbac_files"):
            paths = [Path(p) for p in self.state["rbac_files"]]
        else:
            paths = default_rbac_files()
        docs = []
        for path in paths:
            if not path.exists():
                raise LabError(f"RBAC file {path} not found")
            docs.extend(_rbac_docs(path))
        cluster_roles = [d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRole"]
        roles = [(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "Role"]
        if not cluster_roles and not roles:
            raise LabError(f"{', '.join(map(str, paths))} define no ClusterRole or Role; "
                           "the lab user would have no permissions")
        namespaces = [d for d in docs if d["kind"] == "Namespace"]
        for ns in sorted({n for n, _r in roles} - {d["metadata"]["name"] for d in namespaces}):
            namespaces.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        # namespaces first: a Role in a namespace that does not exist yet is refused
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(namespaces + [
            d for d in docs if d["kind"] != "Namespace"]))
        subjects = [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": self.user_name}]
        labels = {"app.kubernetes.io/managed-by": "kvqlab"}
        manifests = []
        for role in cluster_roles:
            manifests.append({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"{RBAC_BINDING}-{role}" if len(cluster_roles) > 1 else RBAC_BINDING,
                             "labels": labels},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": subjects,
            })
        for namespace, role in roles:
            manifests.append({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": f"{RBAC_BINDING}-{role}", "namespace": namespace, "labels": labels},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                "subjects": subjects,
            })
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(manifests))
        self.state["rbac_file"] = str(paths[0])
        self.state["rbac_files"] = [str(p) for p in paths]
        self.state["cluster_roles"] = cluster_roles
        self.state["roles"] = [f"{n}/{r}" for n, r in roles]
        self._save_state()
        return cluster_roles + [r for _n, r in roles]

    def api_service_available(self, name: str) -> bool:
        out = self.kubectl("get", "apiservice", name, "-o", "json", check=False)
        try:
            conditions = json.loads(out).get("status", {}).get("conditions") or []
        except ValueError:
            return False
        return any(c.get("type") == "Available" and c.get("status") == "True" for c in conditions)

    # ------------------------------------------------------------------ audit
    @property
    def audit_log(self) -> Path:
        """The kube-apiserver audit log: one JSON event per request of the least-privilege user."""
        return Path(self.state.get("audit_log") or self.run_dir / AUDIT_LOG)

    def audit_offset(self) -> int:
        """Where the audit log ends now: give it to kvqlab.rbacusage.read_audit to read only what follows."""
        try:
            return self.audit_log.stat().st_size
        except FileNotFoundError:
            return 0

    # ------------------------------------------------------------------ processes
    def spawn(self, name: str, argv: list[str], env: dict | None = None) -> int:
        """Start a helper process (e.g. the emulator) that lab-down will stop by pid.

        Its output goes to logs/<name>.log; pids/<name>.pid records it."""
        if name in CORE:
            raise LabError(f"{name} is a lab core process name")
        return procs.spawn(self.run_dir, name, argv, env=env)

    def register_process(self, name: str, pid: int, argv: list[str] | None = None) -> None:
        """Record a process started elsewhere so that lab-down stops it."""
        procs.register(self.run_dir, name, pid, argv)

    def stop_process(self, name: str, timeout: float = 10) -> str:
        return procs.stop(self.run_dir, name, timeout)

    def down(self) -> dict:
        return down(self.run_dir)

    def status(self) -> dict:
        return status(self.run_dir)

    # ------------------------------------------------------------------ state
    def _save_state(self) -> None:
        _write_private(self.run_dir / "lab.json", json.dumps(self.state, indent=1, sort_keys=True))

    @classmethod
    def _from_state(cls, run_dir: Path, state: dict) -> "Lab":
        return cls(
            run_dir=run_dir,
            server=state["server"],
            ca_file=Path(state["ca_file"]),
            admin_kubeconfig=Path(state["admin_kubeconfig"]),
            user_kubeconfig=Path(state["user_kubeconfig"]),
            bin_dir=Path(state["bin_dir"]),
            user_name=state.get("user_name", USER_NAME),
            ports=dict(state.get("ports", {})),
            state=state,
        )


# ---------------------------------------------------------------------- lifecycle

def _load_state(run_dir: Path) -> dict | None:
    f = run_dir / "lab.json"
    if not f.exists():
        return None
    try:
        return json.loads(f.read_text())
    except ValueError:
        return None


def _running_core(run_dir: Path) -> list[str]:
    return [n for n in CORE if procs.alive(run_dir, n)]


def attach(run_dir: str | os.PathLike | None = None, timeout: float = 10) -> Lab:
    """A Lab object for the lab running in run_dir; LabError if none is running."""
    run_dir = Path(run_dir or os.environ.get("KVQ_LAB_RUN_DIR") or default_run_dir()).expanduser().resolve()
    state = _load_state(run_dir)
    if not state:
        raise LabError(f"no lab in {run_dir} (no lab.json); start one with `make lab-up` or kvqlab.up()")
    missing = [n for n in CORE if n not in _running_core(run_dir)]
    if missing:
        raise LabError(f"the lab in {run_dir} is not running (down: {', '.join(missing)}); "
                       "restart it with `make lab-down lab-up`")
    lab = Lab._from_state(run_dir, state)
    wait_for(lab.readyz, timeout, f"kube-apiserver of the lab in {run_dir} to answer /readyz")
    return lab


def down(run_dir: str | os.PathLike | None = None, log: Callable[[str], None] = _quiet) -> dict:
    """Stop every process recorded in run_dir/pids (helpers first, then kwok ... etcd).

    Only processes this lab started are signalled, by pid. Returns name -> outcome."""
    run_dir = Path(run_dir or os.environ.get("KVQ_LAB_RUN_DIR") or default_run_dir()).expanduser().resolve()
    results: dict[str, str] = {}
    if not run_dir.exists():
        return results
    with _locked(run_dir):
        for name, rel in FOREIGN_PID_FILES.items():
            outcome = procs.stop_pid_file(run_dir / rel, str(run_dir), timeout=15)
            if outcome in ("stopped", "killed"):
                results[name] = outcome
                log(f"{name}: {outcome}")
        extra = [n for n in procs.names(run_dir) if n not in CORE]
        for name in extra + list(reversed(CORE)):
            if procs.read_meta(run_dir, name) is None:
                continue
            results[name] = procs.stop(run_dir, name, timeout=15 if name == "kube-apiserver" else 10)
            log(f"{name}: {results[name]}")
        shutil.rmtree(run_dir / "etcd-data", ignore_errors=True)
        state = _load_state(run_dir)
        if state is not None:
            state["stopped_at"] = time.time()
            _write_private(run_dir / "lab.json", json.dumps(state, indent=1, sort_keys=True))
    stuck = [n for n, r in results.items() if r == "still-running"]
    if stuck:
        raise LabError(f"could not stop: {', '.join(stuck)}")
    return results


def status(run_dir: str | os.PathLike | None = None) -> dict:
    """Plain-data status: per-process pid/alive, apiserver readiness, kubeconfig paths."""
    run_dir = Path(run_dir or os.environ.get("KVQ_LAB_RUN_DIR") or default_run_dir()).expanduser().resolve()
    state = _load_state(run_dir)
    out: dict[str, Any] = {"run_dir": str(run_dir), "running": False, "processes": {}}
    if not state:
        return out
    lab = Lab._from_state(run_dir, state)
    out["processes"] = lab.processes()
    core_alive = all(out["processes"].get(n, {}).get("alive") for n in CORE)
    out["ready"] = bool(core_alive and lab.readyz())
    out["running"] = core_alive
    out.update({
        "server": lab.server,
        "admin_kubeconfig": str(lab.admin_kubeconfig),
        "user_kubeconfig": str(lab.user_kubeconfig),
        "ca_file": str(lab.ca_file),
        "logs": str(run_dir / "logs"),
        "nodes": state.get("nodes", []),
        "startup_seconds": state.get("startup_seconds"),
    })
    return out


def _normalise_node_labels(node_names: list[str], node_labels: dict | None) -> dict[str, dict]:
    """node_labels is either {label: value} for every node or {node: {label: value}}."""
    per_node = {n: {} for n in node_names}
    if not node_labels:
        return per_node
    if all(isinstance(v, dict) for v in node_labels.values()):
        unknown = set(node_labels) - set(node_names)
        if unknown:
            raise LabError(f"node_labels names unknown nodes: {', '.join(sorted(unknown))}")
        for n, labels in node_labels.items():
            per_node[n] = {str(k): str(v) for k, v in labels.items()}
        return per_node
    common = {str(k): str(v) for k, v in node_labels.items()}
    return {n: dict(common) for n in node_names}


def up(run_dir: str | os.PathLike | None = None, nodes: int = 3, node_cpu: str = "32",
       node_memory: str = "128Gi", node_labels: dict | None = None, node_pods: str = "110",
       bin_dir: str | os.PathLike | None = None, rbac_file: str | os.PathLike | None = None,
       log: Callable[[str], None] = _quiet, reuse: bool = True) -> Lab:
    """Start a lab in run_dir (default ~/.cache/kvquota/lab-run) and return it when ready.

    If a healthy lab already runs there and reuse is true, it is returned as is.
    Stale leftovers (dead processes) are cleaned first. Nodes are node-1..node-N."""
    run_dir = Path(run_dir or default_run_dir()).expanduser().resolve()
    bins = find_bin_dir(bin_dir)
    given = rbac_file or os.environ.get("KVQ_LAB_RBAC_FILE")
    rbac_paths = [Path(p) for p in str(given).split(os.pathsep) if p] if given else default_rbac_files()
    for rbac_path in rbac_paths:
        if not rbac_path.exists():
            raise LabError(f"RBAC file {rbac_path} not found (the lab binds its user to the roles in it)")
    run_dir.mkdir(parents=True, exist_ok=True)

    if _running_core(run_dir):
        if reuse and len(_running_core(run_dir)) == len(CORE):
            try:
                lab = attach(run_dir, timeout=10)
                log(f"lab already running in {run_dir}")
                return lab
            except LabError:
                pass
        log(f"cleaning up a partial lab in {run_dir}")
        down(run_dir)
    else:
        down(run_dir)  # clears stale pid files

    t0 = time.monotonic()
    timings: dict[str, float] = {}
    with _locked(run_dir):
        try:
            lab = _start(run_dir, bins, rbac_paths, nodes, node_cpu, node_memory, node_pods,
                         node_labels, log, t0, timings)
        except BaseException:
            log("start failed; stopping what was started")
            with contextlib.suppress(Exception):
                _stop_unlocked(run_dir)
            raise
    return lab


def _stop_unlocked(run_dir: Path) -> None:
    for rel in FOREIGN_PID_FILES.values():
        procs.stop_pid_file(run_dir / rel, str(run_dir))
    extra = [n for n in procs.names(run_dir) if n not in CORE]
    for name in extra + list(reversed(CORE)):
        if procs.read_meta(run_dir, name) is not None:
            procs.stop(run_dir, name)


def _start(run_dir: Path, bins: Path, rbac_paths: list[Path], nodes: int, node_cpu: str, node_memory: str,
           node_pods: str, node_labels: dict | None, log: Callable[[str], None], t0: float,
           timings: dict) -> Lab:
    def mark(step: str) -> None:
        timings[step] = round(time.monotonic() - t0, 2)

    for sub in ("etcd-data", "components", "kubectl-cache"):
        shutil.rmtree(run_dir / sub, ignore_errors=True)
    (run_dir / "logs").mkdir(exist_ok=True)
    # keep the previous run's logs for one generation
    for f in (run_dir / "logs").glob("*.log"):
        f.replace(f.with_suffix(".log.prev"))

    log(f"run dir {run_dir}; binaries {bins}")
    files = pki.make_pki(run_dir / "pki")
    mark("pki")

    tokens = {name: secrets.token_hex(24) for name in
              ("admin", "user", "kube-controller-manager", "kube-scheduler", "kwok")}
    # token,user,uid,"group1,group2"
    rows = [
        f'{tokens["admin"]},{ADMIN_USER},uid-admin,"system:masters"',
        f'{tokens["user"]},{USER_NAME},uid-user',
        f'{tokens["kube-controller-manager"]},kvqlab:kube-controller-manager,uid-kcm,"system:masters"',
        f'{tokens["kube-scheduler"]},kvqlab:kube-scheduler,uid-sched,"system:masters"',
        f'{tokens["kwok"]},kvqlab:kwok,uid-kwok,"system:masters"',
    ]
    _write_private(run_dir / "tokens.csv", "\n".join(rows) + "\n")

    p_etcd, p_peer, p_api, p_kcm, p_sched, p_virtapi = _free_ports(6)
    server = f"https://{LOOPBACK}:{p_api}"
    ca = files["ca_crt"]

    kc_paths = {
        "admin": run_dir / "admin.kubeconfig",
        "user": run_dir / "user.kubeconfig",
        "kube-controller-manager": run_dir / "components" / "kube-controller-manager.kubeconfig",
        "kube-scheduler": run_dir / "components" / "kube-scheduler.kubeconfig",
        "kwok": run_dir / "components" / "kwok.kubeconfig",
    }
    users = {"admin": ADMIN_USER, "user": USER_NAME}
    for key, path in kc_paths.items():
        config = _kubeconfig(server, ca, users.get(key, f"kvqlab-{key}"), tokens[key])
        _write_private(path, yaml.safe_dump(config, sort_keys=False))

    state = {
        "version": 1,
        "server": server,
        "ca_file": str(ca),
        "admin_kubeconfig": str(kc_paths["admin"]),
        "user_kubeconfig": str(kc_paths["user"]),
        "bin_dir": str(bins),
        "user_name": USER_NAME,
        "ports": {"etcd": p_etcd, "etcd-peer": p_peer, "kube-apiserver": p_api,
                  "kube-controller-manager": p_kcm, "kube-scheduler": p_sched, "virt-api": p_virtapi},
        "nodes": [],
        "rbac_file": str(rbac_paths[0]),
        "rbac_files": [str(p) for p in rbac_paths],
        "audit_log": str(run_dir / AUDIT_LOG),
        "k8s_version": K8S_VERSION,
        "started_at": time.time(),
    }
    lab = Lab._from_state(run_dir, state)
    lab._save_state()

    # --- etcd
    etcd_url = f"http://{LOOPBACK}:{p_etcd}"
    peer_url = f"http://{LOOPBACK}:{p_peer}"
    procs.spawn(run_dir, "etcd", [
        str(bins / "etcd"),
        "--name", "kvqlab",
        "--data-dir", str(run_dir / "etcd-data"),
        "--listen-client-urls", etcd_url,
        "--advertise-client-urls", etcd_url,
        "--listen-peer-urls", peer_url,
        "--initial-advertise-peer-urls", peer_url,
        "--initial-cluster", f"kvqlab={peer_url}",
        "--initial-cluster-state", "new",
        "--unsafe-no-fsync",
        "--log-level", "warn",
        "--quota-backend-bytes", str(2 * 1024 ** 3),
    ])
    wait_for(lambda: urllib.request.urlopen(etcd_url + "/health", timeout=2).status == 200,
             20, "etcd /health", check=lambda: lab.check_processes(("etcd",)))
    mark("etcd")
    log(f"etcd ready on {etcd_url}")

    # --- kube-apiserver (audit log: a fresh one per start, the previous one kept as .prev)
    _write_private(run_dir / AUDIT_POLICY, yaml.safe_dump(audit_policy(USER_NAME), sort_keys=False))
    if (run_dir / AUDIT_LOG).exists():
        (run_dir / AUDIT_LOG).replace(run_dir / (AUDIT_LOG + ".prev"))
    procs.spawn(run_dir, "kube-apiserver", [
        str(bins / "kube-apiserver"),
        f"--etcd-servers={etcd_url}",
        f"--bind-address={LOOPBACK}",
        f"--advertise-address={LOOPBACK}",
        f"--secure-port={p_api}",
        f"--cert-dir={run_dir / 'pki' / 'apiserver'}",
        f"--tls-cert-file={files['serving_crt']}",
        f"--tls-private-key-file={files['serving_key']}",
        f"--token-auth-file={run_dir / 'tokens.csv'}",
        "--authorization-mode=RBAC",
        "--anonymous-auth=false",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={files['sa_pub']}",
        f"--service-account-signing-key-file={files['sa_key']}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # ServiceAccount: pods would wait for default service accounts (no SA controller).
        # TaintNodesByCondition: new nodes get node.kubernetes.io/not-ready:NoSchedule,
        # which only the node-lifecycle controller (not run here) would remove.
        "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
        # the 'kubernetes' Endpoints would point at a loopback address, which is invalid
        "--endpoint-reconciler-type=none",
        "--profiling=false",
        # aggregated APIs (the lab's virt-api subresources): kube-apiserver authenticates to them with the
        # front-proxy certificate and passes the user it authenticated in X-Remote-* headers
        f"--requestheader-client-ca-file={ca}",
        f"--requestheader-allowed-names={virtapi.FRONT_PROXY_CN}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={files['front_proxy_crt']}",
        f"--proxy-client-key-file={files['front_proxy_key']}",
        f"--audit-policy-file={run_dir / AUDIT_POLICY}",
        f"--audit-log-path={run_dir / AUDIT_LOG}",
        "--audit-log-format=json",
        # blocking (the default): each event is on disk when the response is sent, so a test reads all
        "--audit-log-mode=blocking",
        "--v=1",
    ])
    lab.wait_ready(timeout=90)
    mark("kube-apiserver")
    log(f"kube-apiserver ready on {server}")

    # --- controllers, scheduler, kwok (all need a ready apiserver)
    serving = [f"--bind-address={LOOPBACK}", f"--tls-cert-file={files['serving_crt']}",
               f"--tls-private-key-file={files['serving_key']}"]
    procs.spawn(run_dir, "kube-controller-manager", [
        str(bins / "kube-controller-manager"),
        f"--kubeconfig={kc_paths['kube-controller-manager']}",
        "--leader-elect=false",
        # never pod-garbage-collector-controller: it deletes pods bound to nodes it deems gone
        # persistentvolumeclaim-protection-controller: a deleted PVC goes once no pod uses it (KubeVirt deletes the
        # source's backend-storage PVC after a migration; until the finalizer is removed the quota still counts it)
        "--controllers=resourcequota-controller,namespace-controller,garbage-collector-controller,"
        "clusterrole-aggregation-controller,persistentvolumeclaim-protection-controller"
        # resourceclaim-controller: the ResourceClaims of a pod's resourceClaimTemplateName entries (a migration
        # target's own claims, charged to quota), deleted once their pod is done; DRA is GA and on from 1.34
        + (",resourceclaim-controller" if dra_served() else ""),
        "--use-service-account-credentials=false",
        "--concurrent-resource-quota-syncs=10",
        "--resource-quota-sync-period=10s",
        "--kube-api-qps=200",
        "--kube-api-burst=400",
        f"--secure-port={p_kcm}",
        f"--cert-dir={run_dir / 'pki' / 'kube-controller-manager'}",
        *serving,
        "--v=1",
    ])
    procs.spawn(run_dir, "kube-scheduler", [
        str(bins / "kube-scheduler"),
        f"--kubeconfig={kc_paths['kube-scheduler']}",
        "--leader-elect=false",
        f"--secure-port={p_sched}",
        f"--cert-dir={run_dir / 'pki' / 'kube-scheduler'}",
        *serving,
        "--v=1",
    ])
    kwok_cfg = run_dir / "components" / "kwok.yaml"
    kwok_cfg.write_text(yaml.safe_dump({
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {},
    }))
    procs.spawn(run_dir, "kwok", [
        str(bins / "kwok"),
        f"--kubeconfig={kc_paths['kwok']}",
        f"--config={kwok_cfg}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION[0]}={KWOK_ANNOTATION[1]}",
        f"--node-ip={LOOPBACK}",
        f"--cidr={POD_CIDR}",
    ])

    lab.apply_rbac(rbac_files=rbac_paths)
    mark("rbac")

    # --- KubeVirt's subresource API (virtualmachines/start, /stop), as an aggregated API like virt-api
    procs.spawn(run_dir, "virt-api", [
        sys.executable, "-m", "kvqlab.virtapi", "--port", str(p_virtapi),
        "--cert", str(files["serving_crt"]), "--key", str(files["serving_key"]), "--client-ca", str(ca),
        "--admin-kubeconfig", str(kc_paths["admin"]),
    ])
    lab.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(virtapi.api_service(p_virtapi)))
    wait_for(lambda: lab.api_service_available(f"{virtapi.VERSION}.{virtapi.GROUP}"), 60,
             "APIService subresources.kubevirt.io to be Available",
             check=lambda: lab.check_processes(("kube-apiserver", "virt-api")))
    mark("virt-api")

    names = [f"node-{i}" for i in range(1, nodes + 1)]
    per_node = _normalise_node_labels(names, node_labels)
    for n in names:
        lab.add_node(n, cpu=node_cpu, memory=node_memory, pods=node_pods, labels=per_node[n], wait=False)
    for n in names:
        lab.wait_node_ready(n, timeout=60)
    mark("nodes")
    log(f"{len(names)} kwok node(s) Ready: {', '.join(names)}")

    for comp in ("kube-controller-manager", "kube-scheduler"):
        wait_for(lambda c=comp: lab.component_healthy(c), 60, f"{comp} /healthz",
                 check=lambda c=comp: lab.check_processes((c,)))
    mark("components")

    _probe_quota_controller(lab)
    mark("quota-controller")
    log("quota controller answers (probe ResourceQuota filled and removed)")

    state["startup_seconds"] = round(time.monotonic() - t0, 2)
    state["timings"] = timings
    lab._save_state()
    log(f"lab ready in {state['startup_seconds']}s")
    return lab


def _probe_quota_controller(lab: Lab) -> None:
    """Create a throwaway ResourceQuota, wait for status.hard, delete it."""
    from kubernetes import client
    api = client.CoreV1Api(lab.api_client())
    name = "kvqlab-probe-" + secrets.token_hex(3)
    api.create_namespaced_resource_quota("default", {
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": name}, "spec": {"hard": {"pods": "1000"}}})
    try:
        lab.wait_quota_ready("default", name, timeout=60)
    finally:
        with contextlib.suppress(Exception):
            api.delete_namespaced_resource_quota(name, "default")
