"""Self-tests proving the lab is a real control plane: real quota admission, a real
quota controller, a real scheduler, kwok nodes that run pods, real RBAC, and a
lab-down that leaves nothing of ours running."""
from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client import ApiException

import kvqlab
from kvqlab import procs

pytestmark = pytest.mark.lab   # make lab-tests (conftest.py: every lab test has one such marker)


def pod(name, cpu="100m", memory="64Mi", node_selector=None):
    spec = {"containers": [{
        "name": "main", "image": "registry.invalid/none:0",
        "resources": {"requests": {"cpu": cpu, "memory": memory},
                      "limits": {"cpu": cpu, "memory": memory}}}]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def message(exc: ApiException) -> str:
    return json.loads(exc.body)["message"]


def make_quota(lab, api, ns, hard, name="compute"):
    api.create_namespaced_resource_quota(ns, {
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": name}, "spec": {"hard": hard}})
    return lab.wait_quota_ready(ns, name)


# ---------------------------------------------------------------- basics

def test_loopback_tls_verified_and_version(lab):
    assert lab.server.startswith("https://127.0.0.1:")
    for kc in (lab.admin_kubeconfig, lab.user_kubeconfig):
        cfg = yaml.safe_load(kc.read_text())
        cluster = cfg["clusters"][0]["cluster"]
        assert cluster["certificate-authority"] == str(lab.ca_file)
        assert "insecure-skip-tls-verify" not in cluster
    version = client.VersionApi(lab.api_client()).get_code()
    # the release the lab was built for: v1.33.13 unless KVQ_K8S_VERSION names another (make lab-tests-newest)
    assert version.git_version == os.environ.get("KVQ_K8S_VERSION", "v1.33.13")
    # a client that does not trust the lab CA is refused at the TLS layer
    with pytest.raises(urllib.error.URLError) as err:
        urllib.request.urlopen(lab.server + "/readyz", context=ssl.create_default_context(), timeout=5)
    assert isinstance(err.value.reason, ssl.SSLCertVerificationError)
    for name, port in lab.ports.items():
        assert 0 < port < 65536, name


def test_nodes_are_kwok_managed_and_ready(lab, lab_api):
    nodes = {n.metadata.name: n for n in lab_api.list_node().items}
    for name in ("node-1", "node-2", "node-3"):
        n = nodes[name]
        assert n.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
        ready = [c for c in n.status.conditions if c.type == "Ready"]
        assert ready and ready[0].status == "True"
        assert n.status.allocatable["cpu"] == "32"
        assert n.status.allocatable["memory"] == "128Gi"
        assert n.metadata.labels["kubernetes.io/hostname"] == name
        assert not n.spec.taints


# ---------------------------------------------------------------- quota admission

def test_pod_over_quota_is_refused_with_the_real_message(lab, lab_api, lab_namespace):
    ns = lab_namespace
    q = make_quota(lab, lab_api, ns, {"requests.cpu": "1", "requests.memory": "1Gi",
                                      "limits.cpu": "2", "pods": "5"})
    assert q.status.hard == {"limits.cpu": "2", "pods": "5", "requests.cpu": "1", "requests.memory": "1Gi"}

    with pytest.raises(ApiException) as err:
        lab_api.create_namespaced_pod(ns, pod("too-big", cpu="1500m", memory="2Gi"))
    assert err.value.status == 403
    assert message(err.value) == (
        'pods "too-big" is forbidden: exceeded quota: compute, '
        "requested: requests.cpu=1500m,requests.memory=2Gi, "
        "used: requests.cpu=0,requests.memory=0, "
        "limited: requests.cpu=1,requests.memory=1Gi")

    lab_api.create_namespaced_pod(ns, pod("first", cpu="600m", memory="256Mi"))
    with pytest.raises(ApiException) as err:
        lab_api.create_namespaced_pod(ns, pod("second", cpu="600m", memory="256Mi"))
    assert err.value.status == 403
    assert message(err.value) == (
        'pods "second" is forbidden: exceeded quota: compute, '
        "requested: requests.cpu=600m, used: requests.cpu=600m, limited: requests.cpu=1")

    used = lab_api.read_namespaced_resource_quota("compute", ns).status.used
    assert used["requests.cpu"] == "600m" and used["pods"] == "1"


def test_used_drops_when_pod_succeeds(lab, lab_api, lab_namespace):
    ns = lab_namespace
    make_quota(lab, lab_api, ns, {"requests.cpu": "1", "pods": "5"})
    lab_api.create_namespaced_pod(ns, pod("job", cpu="800m"))
    lab.wait_pod_phase(ns, "job", "Running")
    with pytest.raises(ApiException):
        lab_api.create_namespaced_pod(ns, pod("blocked", cpu="800m"))

    patched = lab.set_pod_phase(ns, "job", "Succeeded")
    assert patched.status.phase == "Succeeded"
    q = lab.wait_quota(ns, "compute", lambda q: q.status.used.get("requests.cpu") == "0",
                       what="quota controller to release the Succeeded pod")
    assert q.status.used["pods"] == "0"
    lab_api.create_namespaced_pod(ns, pod("now-fits", cpu="800m"))


def test_used_drops_when_pod_deleted_and_kwok_completes_deletion(lab, lab_api, lab_namespace):
    ns = lab_namespace
    make_quota(lab, lab_api, ns, {"requests.cpu": "1", "pods": "5"})
    lab_api.create_namespaced_pod(ns, pod("victim", cpu="700m"))
    p = lab.wait_pod_phase(ns, "victim", "Running")
    assert p.spec.node_name.startswith("node-")
    lab_api.delete_namespaced_pod("victim", ns)  # default grace period: needs a "kubelet"

    def gone():
        try:
            lab_api.read_namespaced_pod("victim", ns)
            return False
        except ApiException as exc:
            return exc.status == 404
    kvqlab.wait_for(gone, 30, "kwok to complete the pod deletion")
    lab.wait_quota(ns, "compute", lambda q: q.status.used.get("requests.cpu") == "0",
                   what="quota controller to release the deleted pod")


# ---------------------------------------------------------------- scheduler

def test_scheduler_binds_pods_to_kwok_nodes_and_they_run(lab, lab_api, lab_namespace):
    ns = lab_namespace
    for i in range(6):
        lab_api.create_namespaced_pod(ns, pod(f"p{i}", cpu="1"))
    for i in range(6):
        p = lab.wait_pod_phase(ns, f"p{i}", "Running")
        assert p.spec.node_name in {"node-1", "node-2", "node-3"}
        assert p.status.pod_ip and p.status.host_ip == "127.0.0.1"
    # bound by the scheduler (not by us): spreads over more than one node
    placed = {lab_api.read_namespaced_pod(f"p{i}", ns).spec.node_name for i in range(6)}
    assert len(placed) > 1

    lab_api.create_namespaced_pod(ns, pod("huge", cpu="64"))

    def unschedulable(name):
        cond = [c for c in (lab_api.read_namespaced_pod(name, ns).status.conditions or [])
                if c.type == "PodScheduled"]
        return cond[0] if cond and cond[0].reason == "Unschedulable" else None
    cond = kvqlab.wait_for(lambda: unschedulable("huge"), 30, "scheduler to report Unschedulable")
    assert "Insufficient cpu" in cond.message
    assert lab_api.read_namespaced_pod("huge", ns).spec.node_name is None


def test_add_node_labels_and_cordon(lab, lab_api, lab_namespace):
    ns = lab_namespace
    name = "node-extra-" + ns[-6:]
    lab.add_node(name, cpu="4", memory="8Gi", pods="10", labels={"kvqlab/pool": ns[-6:]})
    try:
        node = lab_api.read_node(name)
        assert node.status.allocatable == {"cpu": "4", "memory": "8Gi", "pods": "10"}
        sel = {"kvqlab/pool": ns[-6:]}
        lab_api.create_namespaced_pod(ns, pod("pinned", node_selector=sel))
        assert lab.wait_pod_phase(ns, "pinned", "Running").spec.node_name == name
        lab_api.patch_node(name, {"spec": {"unschedulable": True}})
        lab_api.create_namespaced_pod(ns, pod("after-cordon", node_selector=sel))

        def unschedulable():
            conds = lab_api.read_namespaced_pod("after-cordon", ns).status.conditions or []
            return any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in conds)
        kvqlab.wait_for(unschedulable, 30, "cordoned node to be skipped by the scheduler")
    finally:
        lab.delete_node(name)  # also removes its pods (no pod GC in the lab)
    with pytest.raises(ApiException):
        lab_api.read_namespaced_pod("pinned", ns)


# ---------------------------------------------------------------- RBAC

def _role_rules(path: Path):
    """(namespace or None, rule) of every ClusterRole and Role in an RBAC file."""
    for doc in kvqlab.manifest_objects(path):
        if doc.get("kind") in ("ClusterRole", "Role"):
            namespace = doc["metadata"].get("namespace") if doc["kind"] == "Role" else None
            for rule in doc.get("rules") or []:
                yield namespace, rule


def test_user_identity_has_the_role_and_nothing_more(lab):
    user = client.CoreV1Api(lab.api_client(admin=False))
    with pytest.raises(ApiException) as err:
        user.list_secret_for_all_namespaces()
    assert err.value.status == 403
    assert message(err.value) == ('secrets is forbidden: User "kvquota-operator" cannot list '
                                  'resource "secrets" in API group "" at the cluster scope')
    rbac = client.RbacAuthorizationV1Api(lab.api_client(admin=False))
    with pytest.raises(ApiException) as err:
        rbac.create_cluster_role_binding({
            "metadata": {"name": "escalate"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "kvquota-operator"}]})
    assert err.value.status == 403

    # everything the shipped roles grant is allowed for the user (a Role's rules in its namespace)
    authz = client.AuthorizationV1Api(lab.api_client(admin=False))
    rbac_files = [Path(p) for p in lab.state.get("rbac_files") or kvqlab.default_rbac_files()]
    checked = 0
    for namespace, rule in (item for path in rbac_files for item in _role_rules(path)):
        if rule.get("resourceNames") or rule.get("nonResourceURLs"):
            continue
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                for verb in rule.get("verbs", []):
                    if "*" in (group, resource, verb):
                        continue
                    base, _slash, sub = resource.partition("/")
                    attributes = {"group": group, "resource": base, "verb": verb}
                    if sub:
                        attributes["subresource"] = sub
                    if namespace:
                        attributes["namespace"] = namespace
                    review = authz.create_self_subject_access_review({"spec": {"resourceAttributes": attributes}})
                    assert review.status.allowed, (namespace, group, resource, verb)
                    checked += 1
    assert checked > 0


def test_audit_log_records_the_user_with_the_role_that_allowed(lab, lab_namespace):
    from kvqlab import rbacusage
    offset = lab.audit_offset()
    user = client.CoreV1Api(lab.api_client(admin=False))
    user.list_namespaced_pod(lab_namespace)
    with pytest.raises(ApiException):
        user.list_namespaced_secret(lab_namespace)
    client.CoreV1Api(lab.api_client()).list_namespaced_config_map(lab_namespace)   # admin: not audited
    requests = kvqlab.wait_for(lambda: [r for r in rbacusage.read_audit(lab.audit_log, lab.user_name, offset)
                                        if r.namespace == lab_namespace] or None, 10, "audit events")
    assert [(r.verb, r.resource, r.code, r.decision) for r in requests] == [
        ("list", "pods", 200, "allow"), ("list", "secrets", 403, "forbid")]
    assert 'of ClusterRole "kvquota-read"' in requests[0].reason


def _put(lab, path, admin):
    """PUT {} to path as the admin or the least-privilege user; (status, body)."""
    req = urllib.request.Request(lab.server + path, data=b"{}", method="PUT",
                                 headers={"Authorization": "Bearer " + lab._token(admin),
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, context=ssl.create_default_context(cafile=str(lab.ca_file)),
                                    timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_virt_api_subresources_are_served_and_authorised(lab, lab_namespace):
    """The aggregated API answers the user (ClusterRole kvquota-shutdown): for a VM that does not exist,
    virt-api's own 404, proxied by kube-apiserver. A verb the role does not grant is refused by kube-apiserver
    (403) before the request gets there."""
    out = lab.kubectl("get", "--raw", "/apis/subresources.kubevirt.io/v1", admin=False)
    assert {r["name"] for r in json.loads(out)["resources"]} == {"virtualmachines/start", "virtualmachines/stop"}
    base = f"/apis/subresources.kubevirt.io/v1/namespaces/{lab_namespace}/virtualmachines/none"
    code, body = _put(lab, base + "/stop", admin=False)
    assert code == 404 and f"virtualmachine {lab_namespace}/none" in body, (code, body)
    code, body = _put(lab, base + "/restart", admin=False)
    assert code == 403 and "virtualmachines/restart" in body, (code, body)


# ---------------------------------------------------------------- CLI

def _cli(*args, env_extra=None):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "kvqlab", *args], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


def test_cli_status_and_env(lab):
    st = _cli("status", "--run-dir", str(lab.run_dir), "--json")
    assert st.returncode == 0, st.stderr
    data = json.loads(st.stdout)
    assert data["ready"] and data["server"] == lab.server
    assert all(p["alive"] for p in data["processes"].values())
    env = _cli("env", "--run-dir", str(lab.run_dir))
    assert env.returncode == 0, env.stderr
    assert f"export K8S_AUTH_KUBECONFIG={lab.admin_kubeconfig}" in env.stdout.splitlines()
    out = lab.kubectl("get", "nodes", "-o", "name")
    assert "node/node-1" in out.split()
    denied = lab.kubectl("get", "secrets", "-A", admin=False, check=False)
    assert "forbidden" in denied


# ---------------------------------------------------------------- lifecycle

def test_warm_start_reuse_and_down_leaves_nothing(tmp_path):
    """A second, private lab: warm start under 30 s, `up` again reuses it, `down`
    stops exactly its processes (by pid) and nothing of it keeps running."""
    try:
        kvqlab.find_bin_dir()
    except kvqlab.LabError as exc:
        if os.environ.get("KVQ_LAB_REQUIRED", "") not in ("", "0", "false", "no"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    rd = tmp_path / "lab"
    t0 = time.monotonic()
    lab2 = kvqlab.up(run_dir=rd, nodes=1, node_cpu="8", node_memory="16Gi",
                     node_labels={"kvqlab/extra": "yes"})
    elapsed = time.monotonic() - t0
    try:
        assert elapsed < 30, f"warm start took {elapsed:.1f}s"
        assert (rd / "admin.kubeconfig").exists() and (rd / "logs" / "kube-apiserver.log").exists()
        node = client.CoreV1Api(lab2.api_client()).read_node("node-1")
        assert node.metadata.labels["kvqlab/extra"] == "yes"
        again = kvqlab.up(run_dir=rd, nodes=1)
        assert again.server == lab2.server
        pids = {name: procs.read_meta(rd, name)["pid"] for name in procs.names(rd)}
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok",
                             "virt-api"}
    finally:
        results = kvqlab.down(rd)
    assert set(results.values()) <= {"stopped", "killed"}, results
    for name, pid in pids.items():
        state = procs._proc_state(pid)
        assert state in (None, "Z"), f"{name} (pid {pid}) still running"
    # no process anywhere still references this run dir
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        assert str(rd) not in cmd or int(entry.name) == os.getpid(), f"pid {entry.name}: {cmd!r}"
    assert procs.names(rd) == []
    assert not (rd / "etcd-data").exists()
    with pytest.raises(kvqlab.LabError):
        kvqlab.attach(rd)
    assert kvqlab.down(rd) == {}
    assert not kvqlab.status(rd)["running"]


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGSTOP"])
def test_signal_tree_reaches_a_grandchild_in_a_process_group_of_its_own(sig):
    """What the chaos campaigns and the killed-run test rely on: ansible-core 2.19+ runs each worker in a process
    group of its own, so the kill (or freeze) must follow the process tree, not the group."""
    parent = subprocess.Popen(
        [sys.executable, "-c", "import os, subprocess, sys, time\n"
         "child = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
         "print(child.pid, flush=True)\ntime.sleep(60)\n"],
        stdout=subprocess.PIPE, universal_newlines=True, start_new_session=True)
    grandchild = int(parent.stdout.readline())
    try:
        assert os.getpgid(grandchild) != os.getpgid(parent.pid)
        assert procs.signal_tree(parent.pid, getattr(signal, sig)) == 2
        deadline = time.monotonic() + 10
        expected = {"SIGKILL": ("Z", None), "SIGSTOP": ("T",)}[sig]
        while time.monotonic() < deadline and procs._proc_state(grandchild) not in expected:
            time.sleep(0.05)
        assert procs._proc_state(grandchild) in expected
        assert sig == "SIGKILL" or procs._proc_state(parent.pid) == "T"
    finally:
        procs.signal_tree(parent.pid, signal.SIGKILL)
        procs.signal_tree(parent.pid, signal.SIGCONT)
        parent.wait(10)
