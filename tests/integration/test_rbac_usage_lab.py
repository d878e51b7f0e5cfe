# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Least privilege by construction: every request the collection makes is allowed by the shipped roles, and
every rule of the shipped roles is used.

One lab (scenario c: a Rancher-managed namespace; plus a plain tenant and a VM that cannot live-migrate)
records, in the kube-apiserver audit log, every request of the least-privilege user while a representative
set of runs happens: preflight, kvquota_reserve/kvquota_release, node_maintenance on a plain and on a
Rancher-managed namespace, node_maintenance with policy shutdown, a refused top-up whose migration is
cancelled, and the reaper on an expired reservation. kvqlab.rbacusage then matches each request against
the rules read from roles/install/files/*.yml: none may be refused or fall outside the shipped rules, and every rule
must have been used (the optional roles because their features ran here). The figures are printed.

The analysis is kvqlab.rbacusage (reusable over any run: `python3 -m kvqlab.rbacusage --run-dir ...`).

The install playbook, on the same lab as administrator: refuses an incomplete subject, --check creates
nothing, a run binds exactly the asked-for roles to a ServiceAccount (SubjectAccessReviews say what it may and
may not do), a second run changes nothing.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import os
import shutil
import subprocess
import time

import pytest

import modlab as M
from test_roles_lab import KV, RECORDED_REQUESTS, REPO, collections_path, playbook, start_lab

from kvqlab import rbacusage

pytestmark = pytest.mark.roles   # make roles-tests (conftest.py: every lab test has one such marker)
# after every other role test of the run: the last test judges the requests of every lab before it
RUNS_LAST = True

PLAIN = "u-plain"
MISC = "u-misc"
RWO = "u-rwo"
PVCS = "u-pvcs"
RANCHER = "c-tenant"


def _aaq_crd(kind, plural, scope):
    """An AAQ CRD (group, version, names and scope as AAQ v1.8.0's crds_generated.go; schema left open)."""
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": plural + ".aaq.kubevirt.io"},
            "spec": {"group": "aaq.kubevirt.io", "scope": scope,
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                     "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {"type": "object",
                                                                  "x-kubernetes-preserve-unknown-fields": True}}}]}}


# kvquota_check lists all three when AAQ is served (the quotas, the cluster quotas, the AAQ CR's mode)
AAQ_CRDS = (_aaq_crd("ApplicationAwareResourceQuota", "applicationawareresourcequotas", "Namespaced"),
            _aaq_crd("ApplicationAwareClusterResourceQuota", "applicationawareclusterresourcequotas", "Cluster"),
            _aaq_crd("AAQ", "aaqs", "Cluster"))


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    started = start_lab(tmp_path_factory, "c")
    try:
        yield started
    finally:
        started.stop()


def _vm_node(lab, ns, name):
    return lab.get(KV + "/namespaces/%s/virtualmachineinstances/%s" % (ns, name))["status"]["nodeName"]


def _rwo_vm(lab, node):
    """A VM with a ReadWriteOnce volume (cannot live-migrate) on node, in namespace u-rwo."""
    lab.rest.create("/api/v1/namespaces", {"metadata": {"name": RWO}})
    lab.rest.create("/api/v1/namespaces/%s/persistentvolumeclaims" % RWO, {
        "metadata": {"name": "rwo-disk"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                 "storageClassName": "none"}})
    vm = lab.scenarios.vm_object({"name": "rwo-vm", "namespace": RWO, "cpu": 1, "memory": "256Mi",
                                  "node": node, "volumes": [{"name": "data", "pvc": "rwo-disk"}]})
    lab.rest.create(KV + "/namespaces/%s/virtualmachines" % RWO, vm)
    lab.wait(lambda: [v for v in lab.vmis(RWO) if (v.get("status") or {}).get("phase") == "Running"], 60,
             "rwo-vm running")


def _stale_locks(lab, namespace):
    """A lock left by a run that died long ago, in the operator namespace: the next run takes it over (a Lease
    update), and a Lease named like 0.1.0's lock in the tenant namespace, which nothing reads any more."""
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "spec": {"holderIdentity": "dead-run@nowhere:1", "leaseDurationSeconds": 1,
                     "acquireTime": "2020-01-01T00:00:00.000000Z", "renewTime": "2020-01-01T00:00:00.000000Z"}}
    for ns, name in ((namespace, "kvquota-maintenance"), ("kvquota-system", "kvq-lock-" + namespace)):
        lab.rest.create("/apis/coordination.k8s.io/v1/namespaces/%s/leases" % ns,
                        dict(body, metadata={"name": name, "namespace": ns}))


def _bare_pod(lab, node):
    """A pod without a controller on node, in a namespace without quotas: the drain evicts it."""
    lab.rest.create("/api/v1/namespaces", {"metadata": {"name": MISC}})
    lab.rest.create("/api/v1/namespaces/%s/pods" % MISC, {
        "metadata": {"name": "bare"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}],
                 "tolerations": [{"operator": "Exists"}]}})
    lab.wait(lambda: (lab.get("/api/v1/namespaces/%s/pods/bare" % MISC).get("status") or {}).get("phase")
             == "Running", 60, "bare pod running")


def _pvc_capture(lab, user):
    """A reservation that expands PVCs, and PVCs created during it: the release restores the base below usage and
    names them, listing the namespace's PVCs (issue 24)."""
    lab.rest.create("/api/v1/namespaces", {"metadata": {"name": PVCS}})
    lab.rest.create("/api/v1/namespaces/%s/resourcequotas" % PVCS, {
        "metadata": {"name": "storage"}, "spec": {"hard": {"persistentvolumeclaims": "1"}}})
    lab.wait(lambda: ((lab.get("/api/v1/namespaces/%s/resourcequotas/storage" % PVCS).get("status") or {})
                      .get("hard") or {}).get("persistentvolumeclaims") == "1", 30, "quota status of %s" % PVCS)
    M.assert_ok(M.run_module("kvquota_reserve", {"reservation_id": "rbac-pvc", "headroom": [
        {"namespace": PVCS, "quota": "storage", "resources": {"persistentvolumeclaims": "1"}}]}, str(user)),
        "kvquota_reserve (PVCs)")
    time.sleep(1.1)   # creation timestamps have a second's resolution: the PVCs come after the reservation
    for name in ("grab-1", "grab-2"):
        lab.rest.create("/api/v1/namespaces/%s/persistentvolumeclaims" % PVCS, {
            "metadata": {"name": name}, "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "none",
                                                 "resources": {"requests": {"storage": "1Mi"}}}})
    lab.wait(lambda: ((lab.get("/api/v1/namespaces/%s/resourcequotas/storage" % PVCS).get("status") or {})
                      .get("used") or {}).get("persistentvolumeclaims") == "2", 30, "status.used of %s" % PVCS)
    res = M.assert_ok(M.run_module("kvquota_release", {"reservation_id": "rbac-pvc"}, str(user)),
                      "kvquota_release (PVCs)")
    assert sorted(o["name"] for o in res["overuse"][0]["objects"]) == ["grab-1", "grab-2"], res["overuse"]


DRA = "u-dra"
DRA_API = "/apis/resource.k8s.io/v1"
CLAIM_COUNT = "count/resourceclaims.resource.k8s.io"


def _dra_served(lab):
    """Whether the lab's Kubernetes serves resource.k8s.io/v1 (1.34 and later)."""
    return any(g["name"] == "resource.k8s.io" and any(v["version"] == "v1" for v in g.get("versions") or ())
               for g in lab.rest.get("/apis")["groups"])


def _dra_stand_ins(lab):
    """Where resource.k8s.io/v1 is not served (Kubernetes 1.33: DRA beta and off), CRDs of the same group, version
    and names stand in for ResourceClaimTemplates and ResourceClaims (schema open; a *.k8s.io group needs the
    api-approved annotation), as AAQ's CRDs do for AAQ: the collection's requests and the quota's object count are
    the same."""
    if _dra_served(lab):
        return
    for kind, plural in (("ResourceClaimTemplate", "resourceclaimtemplates"), ("ResourceClaim", "resourceclaims")):
        lab.rest.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", {
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": plural + ".resource.k8s.io", "annotations": {
                "api-approved.kubernetes.io": "unapproved, kvqlab stand-in for resource.k8s.io/v1 on Kubernetes 1.33"}},
            "spec": {"group": "resource.k8s.io", "scope": "Namespaced",
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {"type": "object",
                                                                  "x-kubernetes-preserve-unknown-fields": True}}}]}})
    lab.wait(lambda: _dra_served(lab), 60, "resource.k8s.io/v1 served")


def _dra_reads(lab, user):
    """Issue 27: a namespace whose quota charges DRA claims and whose VM names a ResourceClaimTemplate - the check
    lists the templates; a reservation of claims, and claims created during it - the release lists the claims and
    names them."""
    _dra_stand_ins(lab)
    lab.rest.create("/api/v1/namespaces", {"metadata": {"name": DRA}})
    lab.rest.create("/api/v1/namespaces/%s/resourcequotas" % DRA, {
        "metadata": {"name": "devices"}, "spec": {"hard": {CLAIM_COUNT: "1"}}})
    lab.rest.create(DRA_API + "/namespaces/%s/resourceclaimtemplates" % DRA, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "nic"},
        "spec": {"spec": {}}})
    vm = lab.scenarios.vm_object({"name": "dra-vm", "namespace": DRA, "cpu": 1, "memory": "256Mi"})
    vm["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimTemplateName": "nic"}]
    lab.rest.create(KV + "/namespaces/%s/virtualmachines" % DRA, vm)
    lab.wait(lambda: [v for v in lab.vmis(DRA) if (v.get("status") or {}).get("phase") == "Running"], 90,
             "dra-vm running")
    lab.wait(lambda: ((lab.get("/api/v1/namespaces/%s/resourcequotas/devices" % DRA).get("status") or {})
                      .get("hard") or {}).get(CLAIM_COUNT) == "1", 30, "quota status of %s" % DRA)
    report = M.assert_ok(M.run_module("kvquota_check", {"namespaces": [DRA]}, str(user)), "kvquota_check (DRA)")
    assert [q["name"] for q in report["namespaces"][DRA]["quotas"]] == ["devices"], report["namespaces"][DRA]
    # the VM goes (it is in no one's way later), then claims are taken during a reservation of one
    lab.rest.delete(KV + "/namespaces/%s/virtualmachines/dra-vm" % DRA)
    lab.wait(lambda: not lab.vmis(DRA), 90, "dra-vm gone")
    M.assert_ok(M.run_module("kvquota_reserve", {"reservation_id": "rbac-dra", "headroom": [
        {"namespace": DRA, "quota": "devices", "resources": {CLAIM_COUNT: "1"}}]}, str(user)), "kvquota_reserve (DRA)")
    lab.wait(lambda: not lab.rest.get(DRA_API + "/namespaces/%s/resourceclaims" % DRA)["items"] and (
        (lab.get("/api/v1/namespaces/%s/resourcequotas/devices" % DRA).get("status") or {}).get("used") or {}).get(
        CLAIM_COUNT) == "0", 60, "no claim left in %s" % DRA)
    time.sleep(1.1)   # creation timestamps have a second's resolution: the claims come after the reservation
    for name in ("grab-1", "grab-2"):
        lab.rest.create(DRA_API + "/namespaces/%s/resourceclaims" % DRA, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name}, "spec": {}})
    lab.wait(lambda: ((lab.get("/api/v1/namespaces/%s/resourcequotas/devices" % DRA).get("status") or {})
                      .get("used") or {}).get(CLAIM_COUNT) == "2", 30, "status.used of %s" % DRA)
    res = M.assert_ok(M.run_module("kvquota_release", {"reservation_id": "rbac-dra"}, str(user)),
                      "kvquota_release (DRA)")
    assert sorted(o["name"] for o in res["overuse"][0]["objects"]) == ["grab-1", "grab-2"], res["overuse"]


def test_every_request_allowed_and_every_rule_used(lab, tmp_path):
    user = lab.lab.user_kubeconfig
    # AAQ is recognised (listed) when its API is served: serve it, as on a cluster with AAQ installed
    for crd in AAQ_CRDS:
        lab.rest.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    M.make_tenant(lab.lab, PLAIN, vms=2)
    # a quota scoped to a priority class (no VM pod has it): the inventory then reads the PriorityClasses
    lab.rest.create("/api/v1/namespaces/%s/resourcequotas" % PLAIN, {
        "metadata": {"name": "high-priority"},
        "spec": {"hard": {"pods": "5"}, "scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["kvq-high"]}]}}})
    offset = lab.lab.audit_offset()
    started = time.monotonic()

    # preflight over every node: the whole inventory, Rancher projects, Harvester settings, AAQ
    run = playbook(lab, "preflight", {"preflight_report_dir": str(tmp_path)})
    assert (tmp_path / "preflight.json").exists(), run

    # reserve and release by hand (the modules), over a dead run's lock; then an expired reservation for the
    # reaper
    _stale_locks(lab, PLAIN)
    reserved = M.run_module("kvquota_reserve", {"reservation_id": "rbac-1", "vms": [
        {"namespace": PLAIN, "name": "vm-1"}]}, str(user))
    M.assert_ok(reserved, "kvquota_reserve")
    M.assert_ok(M.run_module("kvquota_release", {"reservation_id": "rbac-1"}, str(user)), "kvquota_release")
    M.assert_ok(M.run_module("kvquota_reserve", {"reservation_id": "rbac-reap", "ttl": "1s", "vms": [
        {"namespace": PLAIN, "name": "vm-1"}]}, str(user)), "kvquota_reserve (ttl 1s)")
    _pvc_capture(lab, user)
    _dra_reads(lab, user)
    time.sleep(2)
    run = playbook(lab, "reaper")
    assert run.rc == 0, run
    assert "rbac-reap" in run.stdout, run

    # node_maintenance: the Rancher-managed namespace's node (Namespace annotation), then the plain tenant's
    node = _vm_node(lab, RANCHER, "c-vm-1")
    run = playbook(lab, "node_maintenance", {"node_maintenance_node": node})
    assert run.rc == 0, run
    # ... with a pod that is no VM's: drained through the eviction API
    node = _vm_node(lab, PLAIN, "vm-1")
    _bare_pod(lab, node)
    run = playbook(lab, "node_maintenance", {"node_maintenance_node": node, "node_maintenance_drain_force": True})
    assert run.rc == 0, run
    assert not [p for p in lab.get("/api/v1/namespaces/%s/pods" % MISC)["items"]
                if not p["metadata"].get("deletionTimestamp")], "the bare pod was not evicted"

    # a top-up beyond its cap: the refused migration is cancelled (VMIM delete)
    node = _vm_node(lab, PLAIN, "vm-1")
    lab.set_knobs(oversize_percent=3)
    try:
        run = playbook(lab, "node_maintenance", {"node_maintenance_node": node,
                                                 "node_maintenance_top_up_cap": {"limits.memory": "1Mi"},
                                                 "node_maintenance_rescue_release_timeout": 20})
        assert run.rc != 0 and "top_up_cap" in run.stdout, run
    finally:
        lab.set_knobs(oversize_percent=None)
        lab.force_clean()

    # policy shutdown: a VM that cannot live-migrate is stopped and started again (kvquota-shutdown)
    node = _vm_node(lab, PLAIN, "vm-1")
    _rwo_vm(lab, node)
    run = playbook(lab, "node_maintenance", {"node_maintenance_node": node,
                                             "node_maintenance_non_migratable": "shutdown"})
    assert run.rc == 0, run

    requests = rbacusage.read_audit(lab.lab.audit_log, lab.lab.user_name, offset)
    usage = rbacusage.analyse(requests, rbacusage.load_roles(), features={"rancher", "shutdown"})
    print(usage.summary())
    print("runs took %.0f s" % (time.monotonic() - started))
    assert usage.resource_requests, "the audit log recorded no request of %s" % lab.lab.user_name
    assert usage.problems() == []


# What some installs keep of a collection (issue 26): the install must work from these directories alone.
INSTALLED_DIRS = ("meta", "plugins", "roles", "playbooks")


def _installed_copy(lab):
    """A collections path whose kvquota.maintenance holds only INSTALLED_DIRS (copied from the checkout), created
    once per lab; listed before the checkout's own."""
    root = lab.run_dir / "installed-copy"
    target = root / "ansible_collections" / "kvquota" / "maintenance"
    if not target.exists():
        for name in INSTALLED_DIRS:
            shutil.copytree(str(REPO / name), str(target / name))
        # ansible-core finds a collection by its MANIFEST.json or galaxy.yml: an installed one has the manifest
        (target / "MANIFEST.json").write_text(json.dumps({"collection_info": {
            "namespace": "kvquota", "name": "maintenance", "version": "1.0.0"}, "format": 1}))
    assert sorted(p.name for p in target.iterdir() if p.is_dir()) == sorted(INSTALLED_DIRS)
    return str(root)


def _install(lab, extra_vars, check=False):
    """ansible-playbook kvquota.maintenance.install as the lab's administrator, from a copy of the collection that
    holds only INSTALLED_DIRS; (rc, stdout)."""
    cmd = ["ansible-playbook", "kvquota.maintenance.install", "-e", json.dumps(extra_vars)]
    if check:
        cmd.append("--check")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.pathsep.join([_installed_copy(lab), collections_path()]),
               ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
               K8S_AUTH_KUBECONFIG=str(lab.lab.admin_kubeconfig))
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, env=env,
                          cwd=str(lab.run_dir), timeout=300, check=False)
    return proc.returncode, proc.stdout


def _can(lab, sa, verb, resource, namespace="", name=""):
    """Whether ServiceAccount sa (namespace:name) may: a SubjectAccessReview (what kube-apiserver's RBAC says).
    resource: 'group/resource[/subresource]' ('' group for core)."""
    group, _slash, rest = resource.partition("/")
    plural, _slash, sub = rest.partition("/")
    ns, account = sa.split(":")
    review = lab.rest.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "system:serviceaccount:%s:%s" % (ns, account),
                 "groups": ["system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"],
                 "resourceAttributes": {"verb": verb, "group": group, "resource": plural, "subresource": sub,
                                        "namespace": namespace, "name": name}}})
    return "yes" if review["status"].get("allowed") else "no"


def test_install_playbook_binds_the_roles(lab):
    ops, sa = "kvq-ops", "u-install:runner"
    lab.rest.create("/api/v1/namespaces", {"metadata": {"name": "u-install"}})
    lab.rest.create("/api/v1/namespaces/u-install/serviceaccounts", {"metadata": {"name": "runner"}})
    variables = {"kvquota_subject_kind": "ServiceAccount", "kvquota_subject_name": "runner",
                 "kvquota_subject_namespace": "u-install", "kvquota_operator_namespace": ops,
                 "kvquota_bind_shutdown": True}

    rc, out = _install(lab, dict(variables, kvquota_subject_namespace=""))
    assert rc != 0 and "kvquota_subject_namespace" in out, out

    rc, out = _install(lab, variables, check=True)
    assert rc == 0, out
    assert "changed=" in out and "changed=0" not in out, out
    assert _can(lab, sa, "update", "/resourcequotas") == "no"
    assert "NotFound" in lab.lab.kubectl("get", "namespace", ops, check=False)

    rc, out = _install(lab, variables)
    assert rc == 0, out
    assert "bound to kvquota-read, kvquota-write, kvquota-shutdown, kvquota-state, kvquota-maintenance-fence" in out, out
    assert "fence applied" in out, out
    expected = {
        ("update", "/resourcequotas"): "yes", ("patch", "/nodes"): "yes", ("create", "/pods/eviction"): "yes",
        ("list", "kubevirt.io/virtualmachineinstances"): "yes",
        ("update", "subresources.kubevirt.io/virtualmachines/stop"): "yes",
        ("create", "/configmaps", ops): "yes", ("update", "coordination.k8s.io/leases", ops): "yes",
        # the fence's ClusterRole: whether the fence is installed, by name only
        ("get", "admissionregistration.k8s.io/validatingadmissionpolicies", "", "kvquota-headroom-fence"): "yes",
        ("get", "admissionregistration.k8s.io/validatingadmissionpolicies", "", "other"): "no",
        # not granted: Rancher's namespace write (flag off), VM spec patches, configmaps elsewhere, watch, secrets
        ("update", "/namespaces"): "no", ("patch", "kubevirt.io/virtualmachines"): "no",
        ("create", "/configmaps", "default"): "no", ("watch", "/pods"): "no",
        ("get", "/secrets"): "no", ("update", "coordination.k8s.io/leases", "kube-system"): "no",
    }
    assert dict((args, _can(lab, sa, *args)) for args in expected) == expected

    rc, out = _install(lab, variables)
    assert rc == 0 and "changed=0" in out, out


def test_install_fails_loudly_when_the_fence_cannot_be_applied(lab):
    """An administrator who may create the namespace and the RBAC but not the ValidatingAdmissionPolicy (a policy
    engine, a cluster without the API look the same): the install fails, saying the fence could not be applied,
    why, what a tenant can do without it and the two ways on; with kvquota_fence=false it completes and says the
    fence was not applied. Before: the fence was applied "when present", and skipped without a word when not."""
    admin = "kvq-admin-without-vap"
    lab.rest.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", {
        "metadata": {"name": admin},
        "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "create", "patch"]},
                  {"apiGroups": ["rbac.authorization.k8s.io"],
                   "resources": ["clusterroles", "clusterrolebindings", "roles", "rolebindings"],
                   "verbs": ["get", "list", "create", "patch", "update", "escalate", "bind"]}]})
    lab.rest.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "metadata": {"name": admin},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": admin},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": admin}]})
    variables = {"kvquota_subject_kind": "User", "kvquota_subject_name": "fence-less",
                 "kvquota_operator_namespace": "kvq-ops-nofence", "kvquota_binding_prefix": "nofence"}
    try:
        os.environ["K8S_AUTH_IMPERSONATE_USER"] = admin
        rc, out = _install(lab, variables)
        assert rc != 0, out
        assert "the headroom fence could not be applied" in out and "forbidden" in out.lower(), out
        assert "a tenant can take the quota reserved for the migrations" in out and "kvquota_fence=false" in out, out
        rc, out = _install(lab, dict(variables, kvquota_fence=False))
        assert rc == 0, out
        assert "fence not applied (install_fence=false)" in out, out
    finally:
        os.environ.pop("K8S_AUTH_IMPERSONATE_USER", None)
        lab.rest.delete("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/" + admin)
        lab.rest.delete("/apis/rbac.authorization.k8s.io/v1/clusterroles/" + admin)


def test_every_request_of_the_role_tests_was_allowed_by_the_shipped_roles(lab):
    """Every request the least-privilege user made in every lab of this session (the role tests before this
    module, when run together as `make roles-tests` does, and this module's lab): refused by none, allowed by
    the shipped rules only, and every rule used."""
    lab.record_requests()
    recorded = list(RECORDED_REQUESTS)
    labs = sorted(set(run_dir for run_dir, _request in recorded))
    usage = rbacusage.analyse([request for _run_dir, request in recorded], rbacusage.load_roles(),
                              features={"rancher", "shutdown"})
    print("%d lab(s): %s" % (len(labs), usage.summary()))
    assert str(lab.run_dir) in labs and usage.resource_requests
    assert usage.problems() == []
