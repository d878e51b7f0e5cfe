"""KubeVirt / Rancher / Harvester emulator for the kvquota lab (tests only, our own code).

    from kvqlab import emulator
    emu = emulator.start(lab, source_pod_delay_seconds=2)   # a subprocess; pid + log in lab.run_dir
    emulator.set_knobs(lab, oversize_percent=5)              # live, through the ConfigMap
    emu.restart(); emu.stop()

See docs/emulator.md.
"""
import glob
import json
import os
import signal
import subprocess
import sys
import time

from .knobs import KNOBS_CONFIGMAP, Knobs, knobs_to_data, parse_knobs

__all__ = ["start", "attach", "install_crds", "install_identities", "ensure_knobs", "set_knobs", "get_knobs",
           "rancher_agent_restart", "roll_out_kubevirt", "lockdown_active", "wait_lockdown", "kubevirt_controller_user", "rancher_user",
           "harvester_user",
           "as_identity", "EmulatorHandle", "Knobs", "KNOBS_CONFIGMAP", "KNOBS_NAMESPACE", "parse_knobs",
           "knobs_to_data"]

KNOBS_NAMESPACE = "kvqlab-system"
CRD_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "crds")


def _rest_for(target):
    """A Rest for a lab object, a kubeconfig path or a Rest."""
    from .rest import Rest, make_api_client
    if isinstance(target, Rest):
        return target
    if isinstance(target, str):
        return Rest(make_api_client(target))
    return Rest(target.api_client(admin=True))


def install_crds(target, timeout=60):
    """Create (or update) the emulator's CRDs and wait until they are Established."""
    import yaml
    from kubernetes.client.exceptions import ApiException
    rest = _rest_for(target)
    names = []
    for fn in sorted(glob.glob(os.path.join(CRD_DIR, "*.yaml"))):
        with open(fn) as fh:
            crd = yaml.safe_load(fh)
        names.append(crd["metadata"]["name"])
        base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        try:
            rest.create(base, crd)
        except ApiException as exc:
            if exc.status != 409:
                raise
            cur = rest.get(base + "/" + crd["metadata"]["name"])
            if (cur["spec"].get("versions") != crd["spec"]["versions"]
                    or cur["spec"].get("names", {}).get("shortNames") != crd["spec"]["names"].get("shortNames")):
                crd["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
                rest.replace(base + "/" + crd["metadata"]["name"], crd)
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            cur = rest.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" + name)
            if any(c["type"] == "Established" and c["status"] == "True"
                   for c in (cur.get("status") or {}).get("conditions") or []):
                break
            if time.monotonic() > deadline:
                raise TimeoutError("CRD %s not Established after %ss" % (name, timeout))
            time.sleep(0.1)
    return names


KUBEVIRT_CONTROLLER_SA = "kubevirt-controller"


def kubevirt_controller_user(kubevirt_namespace="kubevirt"):
    """The identity the emulated virt-controller creates pods as (KubeVirt's: the ServiceAccount
    kubevirt-controller in the namespace of the KubeVirt CR)."""
    return "system:serviceaccount:%s:%s" % (kubevirt_namespace, KUBEVIRT_CONTROLLER_SA)


def rancher_user():
    """The identity the emulated Rancher agent writes quotas as (cattle-system/cattle)."""
    from .rancher import RANCHER_IDENTITY, service_account_user
    return service_account_user(*RANCHER_IDENTITY)


def harvester_user():
    """The identity the emulated Harvester writes quotas as (harvester-system/harvester)."""
    from .rancher import HARVESTER_IDENTITY, service_account_user
    return service_account_user(*HARVESTER_IDENTITY)


def install_identities(target, kubevirt_namespace="kubevirt"):
    """Create the ServiceAccounts the emulator acts as (KubeVirt's controller in kubevirt_namespace,
    Rancher's agent in cattle-system, Harvester's controllers in harvester-system), each bound to cluster-admin
    as on real clusters; idempotent."""
    from kubernetes.client.exceptions import ApiException
    from .rancher import HARVESTER_IDENTITY, RANCHER_IDENTITY
    rest = _rest_for(target)
    for ns, name, binding in ((kubevirt_namespace, KUBEVIRT_CONTROLLER_SA, "kvqlab-kubevirt-controller-" + kubevirt_namespace),
                              (RANCHER_IDENTITY[0], RANCHER_IDENTITY[1], "kvqlab-rancher-agent"),
                              (HARVESTER_IDENTITY[0], HARVESTER_IDENTITY[1], "kvqlab-harvester")):
        for path, body in (
                ("/api/v1/namespaces", {"metadata": {"name": ns}}),
                ("/api/v1/namespaces/%s/serviceaccounts" % ns, {"metadata": {"name": name, "namespace": ns}}),
                ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
                    "metadata": {"name": binding, "labels": {"app.kubernetes.io/part-of": "kvqlab"}},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                    "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]})):
            try:
                rest.create(path, body)
            except ApiException as exc:
                if exc.status != 409:
                    raise


def as_identity(target, username):
    """A Rest acting as username through the lab admin's impersonation right (target: a lab, an admin
    kubeconfig path or an admin Rest)."""
    from .rest import Rest, impersonating
    return Rest(impersonating(_rest_for(target).api, username))


def roll_out_kubevirt(target, image_tag, version=None, methods=("LiveMigrate",)):
    """The lab's KubeVirt upgrade: spec.imageTag = image_tag (the launcher image every VMI is compared with;
    None = back to the emulator's own tag), spec.workloadUpdateStrategy.workloadUpdateMethods = methods (None
    leaves the strategy as it is), and status.observedKubeVirtVersion = version when given (sizing rules and
    the evacuation controller's behaviour follow it)."""
    rest = _rest_for(target)
    cr = "/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts/kubevirt"
    spec = {"imageTag": image_tag}
    if methods is not None:
        spec["workloadUpdateStrategy"] = {"workloadUpdateMethods": list(methods)}
    rest.patch(cr, {"spec": spec})
    if version:
        rest.patch(cr + "/status", {"status": {"observedKubeVirtVersion": "v" + str(version).lstrip("v")}})


def lockdown_active(target):
    """True when Rancher's quota lock-down refuses the admin: probed with a server-side dry run (nothing is
    stored) that creates a labelled quota in the knobs namespace."""
    from kubernetes.client.exceptions import ApiException
    from .rancher import LOCKDOWN_POLICY, RANCHER_LABEL
    rest = _rest_for(target)
    try:
        rest.request("POST", "/api/v1/namespaces/%s/resourcequotas" % KNOBS_NAMESPACE, {"dryRun": "All"},
                     body={"metadata": {"name": "kvqlab-lockdown-probe", "labels": {RANCHER_LABEL: "true"}},
                           "spec": {"hard": {"pods": "1"}}})
        return False
    except ApiException as exc:
        if exc.status in (403, 422) and LOCKDOWN_POLICY in str(exc.body or ""):
            return True
        raise


def wait_lockdown(target, on=True, timeout=30):
    """Wait until the lock-down is (on=True) or is no longer (on=False) enforced by the API server."""
    rest = _rest_for(target)
    deadline = time.monotonic() + timeout
    while lockdown_active(rest) != on:
        if time.monotonic() > deadline:
            raise TimeoutError("Rancher quota lock-down still %s after %ss" % ("off" if on else "on", timeout))
        time.sleep(0.2)


def ensure_knobs(target, namespace=KNOBS_NAMESPACE, **values):
    """Create the knobs namespace and ConfigMap if missing; merge the given knob values in."""
    from kubernetes.client.exceptions import ApiException
    rest = _rest_for(target)
    try:
        rest.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    data = knobs_to_data(values)
    path = "/api/v1/namespaces/%s/configmaps" % namespace
    try:
        rest.create(path, {"metadata": {"name": KNOBS_CONFIGMAP, "namespace": namespace}, "data": data})
    except ApiException as exc:
        if exc.status != 409:
            raise
        if data:
            rest.patch(path + "/" + KNOBS_CONFIGMAP, {"data": data})


def set_knobs(target, namespace=KNOBS_NAMESPACE, **values):
    """Change knobs live (None removes a knob, restoring its default)."""
    rest = _rest_for(target)
    data = {}
    for k, v in values.items():
        if v is None:
            knobs_to_data({k: ""})  # validates the name
            data[k] = None
        else:
            data.update(knobs_to_data({k: v}))
    ensure_knobs(rest, namespace)
    rest.patch("/api/v1/namespaces/%s/configmaps/%s" % (namespace, KNOBS_CONFIGMAP), {"data": data})


def get_knobs(target, namespace=KNOBS_NAMESPACE):
    rest = _rest_for(target)
    cm = rest.get_or_none("/api/v1/namespaces/%s/configmaps/%s" % (namespace, KNOBS_CONFIGMAP)) or {}
    return parse_knobs(cm.get("data") or {})


def rancher_agent_restart(target, namespace=KNOBS_NAMESPACE):
    """Emulate a cattle-cluster-agent restart: Rancher resyncs every namespace quota."""
    set_knobs(target, namespace, rancher_agent_restart="%.6f" % time.time())


class EmulatorHandle:
    """The emulator subprocess of one lab run dir."""

    def __init__(self, lab, namespace=KNOBS_NAMESPACE, workers=4, kubevirt_version=None, defaults=None,
                 verbose=False, ready_timeout=60):
        self.lab = lab
        self.namespace = namespace
        self.workers = workers
        self.kubevirt_version = kubevirt_version
        self.defaults = dict(defaults or {})
        self.verbose = verbose
        self.ready_timeout = ready_timeout
        self.dir = os.path.join(str(lab.run_dir), "emulator")
        os.makedirs(self.dir, exist_ok=True)
        self.pid_file = os.path.join(self.dir, "emulator.pid")
        self.ready_file = os.path.join(self.dir, "emulator.ready")
        self.log_file = os.path.join(self.dir, "emulator.log")
        self.metrics_port_file = os.path.join(self.dir, "metrics.port")
        self.proc = None

    @property
    def pid(self):
        if self.proc is not None and self.proc.poll() is None:
            return self.proc.pid
        return _read_pid(self.pid_file)

    def running(self):
        pid = self.pid
        return pid is not None and _alive(pid)

    def start(self):
        """Start the process (an emulator of this run dir started by another handle is stopped first)."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        stop_pid_file(self.pid_file)   # another or stale emulator of this run dir
        if os.path.exists(self.ready_file):
            os.unlink(self.ready_file)
        cmd = [sys.executable, "-m", "kvqlab.emulator", "--kubeconfig", str(self.lab.admin_kubeconfig),
               "--namespace-of-knobs", self.namespace, "--workers", str(self.workers),
               "--log-file", self.log_file, "--pid-file", self.pid_file, "--ready-file", self.ready_file,
               "--metrics-port-file", self.metrics_port_file]
        if self.kubevirt_version:
            cmd += ["--kubevirt-version", self.kubevirt_version]
        for k, v in knobs_to_data(self.defaults).items():
            cmd += ["--set", "%s=%s" % (k, v)]
        if self.verbose:
            cmd.append("-v")
        out = open(os.path.join(self.dir, "emulator.stderr"), "ab")
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        out.close()
        deadline = time.monotonic() + self.ready_timeout
        while not os.path.exists(self.ready_file):
            if self.proc.poll() is not None:
                raise RuntimeError("emulator exited with %s; see %s and %s" % (
                    self.proc.returncode, self.log_file, os.path.join(self.dir, "emulator.stderr")))
            if time.monotonic() > deadline:
                raise TimeoutError("emulator not ready after %ss; see %s" % (self.ready_timeout, self.log_file))
            time.sleep(0.05)
        return self

    def stop(self, timeout=15):
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
            self.proc = None
        else:
            stop_pid_file(self.pid_file, timeout)
        for f in (self.ready_file, self.pid_file, self.metrics_port_file):
            if os.path.exists(f):
                os.unlink(f)

    def restart(self):
        self.stop()
        return self.start()

    def metrics_url(self):
        """Where the emulated virt-controller serves its metrics (http://127.0.0.1:PORT/metrics)."""
        with open(self.metrics_port_file, encoding="utf-8") as fh:
            return "http://127.0.0.1:%d/metrics" % int(fh.read().strip())

    def log_text(self):
        try:
            with open(self.log_file, encoding="utf-8", errors="replace") as fh:
                return fh.read()
        except FileNotFoundError:
            return ""

    def count(self, needle):
        """How many log lines contain needle (e.g. 'exceeded quota')."""
        return sum(1 for line in self.log_text().splitlines() if needle in line)

    def rejections(self, namespace=None, name=None):
        """Log lines of target-pod rejections by quota ('reenqueuing Migration ns/name ... exceeded quota')."""
        want = "reenqueuing Migration " + ("%s/%s" % (namespace, name) if name else (namespace + "/" if namespace else ""))
        return [l for l in self.log_text().splitlines() if want in l and "exceeded quota" in l]

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def _read_pid(pid_file):
    try:
        with open(pid_file) as fh:
            return int(fh.read().strip())
    except (FileNotFoundError, ValueError):
        return None


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_pid_file(pid_file, timeout=15):
    """Stop the emulator recorded in pid_file (if it is still alive and is an emulator)."""
    pid = _read_pid(pid_file)
    if pid is None or not _alive(pid):
        return
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            if b"kvqlab.emulator" not in fh.read():
                return
    except FileNotFoundError:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)


def start(lab, knobs=None, workers=4, kubevirt_version=None, verbose=False, install=True, **defaults):
    """Start the emulator for a lab (CRDs installed, knobs ConfigMap ensured); returns an EmulatorHandle.

    knobs: values written to the ConfigMap now (live knobs); **defaults: the process's own
    defaults (used when the ConfigMap does not set a knob), e.g. source_pod_delay_seconds=2.
    """
    if install:
        install_crds(lab)
        install_identities(lab)
    ensure_knobs(lab, KNOBS_NAMESPACE, **(knobs or {}))
    handle = EmulatorHandle(lab, workers=workers, kubevirt_version=kubevirt_version, defaults=defaults,
                            verbose=verbose)
    return handle.start()


def attach(lab):
    """The handle of the emulator already running for this lab run dir (may be not running)."""
    return EmulatorHandle(lab)


def summary(lab, namespace):
    """(used, hard) of every ResourceQuota of a namespace, as strings, for quick prints in tests."""
    rest = _rest_for(lab)
    out = {}
    for q in rest.get("/api/v1/namespaces/%s/resourcequotas" % namespace)["items"]:
        out[q["metadata"]["name"]] = {"hard": (q.get("spec") or {}).get("hard"),
                                      "used": (q.get("status") or {}).get("used")}
    return json.loads(json.dumps(out))
