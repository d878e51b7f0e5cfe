# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The headroom fence (roles/install/files/fence.yml + module_utils fence.py) and Rancher's quota lock-down, against the lab.

The fence's parameters are written by fence.py as the least-privilege identity (the lab user, given here what
the operator namespace's Role and the ClusterRole kvquota-maintenance-fence grant); pods are tried as a tenant
(a ServiceAccount bound to edit, kvqlab.tenants), as KubeVirt's controller (the emulator's identity) and as the
lab admin. Pod and PVC creations that only probe admission are server-side dry runs (nothing is stored). Only the
run's own migrations (listed by name and UID) get target pods and backend-storage PVCs in a fenced namespace.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import os
import secrets

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

import modlab as M
from kvqlab import emulator, tenants
from kvqlab.emulator import rancher as rancher_mod
from kvqlab.emulator.rest import Rest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import fence as F

pytestmark = pytest.mark.lab   # make lab-tests (conftest.py: every lab test has one such marker)

OPERATOR_NS = "kvquota-system"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
CONTROLLER = emulator.kubevirt_controller_user("kubevirt")


@pytest.fixture(scope="module")
def installed(lab, r):
    """roles/install/files/fence.yml applied by the administrator; the lab user may write the operator namespace's ConfigMaps
    (the lead's roles/install/files/operator-namespace.yml grants the same) and read the fence's policy."""
    path = os.path.join(REPO, "roles", "install", "files", "fence.yml")
    with open(path) as fh:
        objects = yaml.safe_load(fh)["items"]
    if r.get_or_none("/api/v1/namespaces/" + OPERATOR_NS) is None:
        r.create("/api/v1/namespaces", {"metadata": {"name": OPERATOR_NS}})
    lab.kubectl("apply", "-f", path)            # the documented install
    user = {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": lab.user_name}
    for path, body in (
            ("/apis/rbac.authorization.k8s.io/v1/namespaces/%s/roles" % OPERATOR_NS, {
                "metadata": {"name": "kvqlab-fence-test"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                           "verbs": ["get", "list", "create", "update", "delete"]}]}),
            ("/apis/rbac.authorization.k8s.io/v1/namespaces/%s/rolebindings" % OPERATOR_NS, {
                "metadata": {"name": "kvqlab-fence-test"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kvqlab-fence-test"},
                "subjects": [user]}),
            ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
                "metadata": {"name": "kvqlab-fence-test"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "kvquota-maintenance-fence"},
                "subjects": [user]})):
        try:
            r.create(path, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
    yield objects
    r.delete("/api/v1/namespaces/%s/configmaps/%s" % (OPERATOR_NS, F.FENCE_CONFIGMAP))


@pytest.fixture(scope="module")
def operator(lab, installed):
    """A kvquota Cluster as the least-privilege lab user."""
    return M.connect({"kubeconfig": str(lab.user_kubeconfig)})


@pytest.fixture
def tenant_ns(lab, emu, r, request):
    ns = "fence-" + secrets.token_hex(3)
    M.make_tenant(lab, ns, vms=2, hard={"limits.cpu": "40", "limits.memory": "80Gi", "pods": "20"})
    yield ns
    M.delete_namespace(r, ns)


def pod_body(ns, owner=None, name=None, migration=None):
    """A pod; owner: {name, uid} of a VMI (controller ownerReference); migration: (name, uid) of the migration it
    is the target pod of, as virt-controller marks one (annotation kubevirt.io/migrationJobName, label
    kubevirt.io/migrationJobUID)."""
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name or "probe-" + secrets.token_hex(3), "namespace": ns},
            "spec": {"containers": [{"name": "c", "image": "example.invalid/pause",
                                     "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}]}}
    if owner is not None:
        body["metadata"]["ownerReferences"] = [dict({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                                     "controller": True, "blockOwnerDeletion": True}, **owner)]
    if migration is not None:
        body["metadata"]["annotations"] = {"kubevirt.io/migrationJobName": migration[0]}
        body["metadata"]["labels"] = {"kubevirt.io/migrationJobUID": migration[1]}
    return body


def _refusal(fn):
    """None when admission admits (server-side dry run), else the refusal's message."""
    try:
        fn()
        return None
    except ApiException as exc:
        assert exc.status in (403, 422), exc
        return " ".join(str(exc.body).split())


def try_pod(rest, ns, owner=None, migration=None):
    """None when admission admits the pod (server-side dry run), else the refusal's message."""
    return _refusal(lambda: rest.request("POST", "/api/v1/namespaces/%s/pods" % ns, {"dryRun": "All"},
                                         body=pod_body(ns, owner, migration=migration)))


def try_pvc(rest, ns, migration_name=None, vm="vm-1"):
    """None when admission admits the PVC (server-side dry run), else the refusal's message. migration_name: the
    label kubevirt.io/migrationName virt-controller puts on a migration target's backend-storage PVC (generateName
    persistent-state-for-<vm>-, as in KubeVirt's backend-storage.go)."""
    body = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"generateName": "persistent-state-for-%s-" % vm, "namespace": ns},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Mi"}}}}
    if migration_name is not None:
        body["metadata"]["labels"] = {"kubevirt.io/migrationName": migration_name}
    return _refusal(lambda: rest.request("POST", "/api/v1/namespaces/%s/persistentvolumeclaims" % ns,
                                         {"dryRun": "All"}, body=body))


def vmi_ref(r, ns, name):
    md = r.get(M.KV + "/namespaces/%s/virtualmachineinstances/%s" % (ns, name))["metadata"]
    return {"name": md["name"], "uid": md["uid"]}


def test_fence_yml_is_what_the_lab_serves(installed, r):
    kinds = sorted(o["kind"] for o in installed)
    assert kinds == ["ClusterRole", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    policy = r.get(ADMISSION + "/validatingadmissionpolicies/" + F.POLICY_NAME)
    # the API server type-checked every expression against the ConfigMap and Pod schemas
    warnings = (policy.get("status") or {}).get("typeChecking", {}).get("expressionWarnings") or []
    assert warnings == []


def test_fenced_namespace_admits_only_kubevirts_target_pods_of_reserved_vmis(lab, r, emu, operator, tenant_ns):
    ns = tenant_ns
    team = tenants.make(lab, ns)
    tenant = Rest(team["edit"].api_client())
    kubevirt = emulator.as_identity(r, CONTROLLER)
    vm1, vm2 = vmi_ref(r, ns, "vm-1"), vmi_ref(r, ns, "vm-2")
    note = F.fence_note("2026-01-01T00:00:00Z", "2026-01-01T02:00:00Z", "platform team (#ops)")
    own = ("vm-1-kvq-" + secrets.token_hex(3), "2f6c1d2e-0000-4000-8000-000000000001")

    assert try_pod(tenant, ns) is None                       # not fenced yet: the tenant may start pods
    resizable = pod_body(ns, name="resizable")
    resizable["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m", "memory": "64Mi"},
                                                       "limits": {"cpu": "200m", "memory": "64Mi"}}
    # never scheduled: the API server refuses resizes of pods on nodes that do not support them (kwok's)
    resizable["spec"]["nodeSelector"] = {"kvqlab.io/no-such-node": "true"}
    tenant.create("/api/v1/namespaces/%s/pods" % ns, resizable)
    dry = F.fence(operator, OPERATOR_NS, ns, [vm1], note=note, controller=CONTROLLER, check_mode=True)
    assert dry["changed"] and r.get_or_none("/api/v1/namespaces/%s/configmaps/kvq-fence" % OPERATOR_NS) is None
    result = F.fence(operator, OPERATOR_NS, ns, [vm1], note=note, controller=CONTROLLER,
                     migrations=[{"name": own[0], "uid": own[1], "vm": "vm-1"}])
    assert result["changed"] and result["vmis"] == {vm1["uid"]: "vm-1"}
    assert result["migrations"] == {own[0]: {"vmi": vm1["uid"], "uid": own[1]}}
    assert F.installed(operator, OPERATOR_NS)

    refusal = M.wait(lambda: try_pod(tenant, ns), 20, "the fence to refuse the tenant's pod")
    for fragment in ("kvquota.maintenance", "namespace %s is fenced" % ns,
                     "reserved from 2026-01-01T00:00:00Z until 2026-01-01T02:00:00Z at the latest",
                     "contact: platform team (#ops)", "ask your cluster administrator"):
        assert fragment in refusal, (fragment, refusal)
    # a tenant cannot pass for a target pod by naming the reserved VMI as owner: the identity counts
    assert "is fenced" in try_pod(tenant, ns, owner=vm1, migration=own)
    assert "is fenced" in try_pod(Rest(team["admin"].api_client()), ns, owner=vm1, migration=own)
    # KubeVirt's controller: the target pod of the listed migration of the reserved VMI is admitted; the other
    # VMI's is not, nor a forged owner name, nor a pod of the reserved VMI that is no target of that migration
    assert try_pod(kubevirt, ns, owner=vm1, migration=own) is None
    assert "is fenced" in try_pod(kubevirt, ns, owner=vm2, migration=own)
    assert "is fenced" in try_pod(kubevirt, ns, owner={"name": "vm-2", "uid": vm1["uid"]}, migration=own)
    assert "is fenced" in try_pod(kubevirt, ns, owner=vm1)
    assert "is fenced" in try_pod(kubevirt, ns)
    # the lab admin is not KubeVirt either
    assert "is fenced" in try_pod(r, ns, owner=vm1, migration=own)
    # a pod resize is charged to the quota too: refused while fenced
    with pytest.raises(ApiException) as err:
        r.request("PATCH", "/api/v1/namespaces/%s/pods/resizable/resize" % ns, {"dryRun": "All"},
                  body={"spec": {"containers": [{"name": "c", "resources": {
                      "requests": {"cpu": "150m"}, "limits": {"cpu": "300m"}}}]}},
                  content_type="application/strategic-merge-patch+json")
    assert err.value.status == 403 and "is fenced" in str(err.value.body), err.value.body

    # end to end: the emulator creates target pods as KubeVirt's controller. The run lists its migration's name
    # before creating it (no UID yet), and its UID once created
    name1 = "vm-1-kvq-" + secrets.token_hex(3)
    listed = F.admit_migrations(operator, OPERATOR_NS, ns, [{"name": name1, "vm": "vm-1"}])
    assert listed["migrations"][name1] == {"vmi": vm1["uid"], "uid": ""}
    mig1 = M.create_vmim(r, ns, "vm-1", name=name1)
    F.admit_migrations(operator, OPERATOR_NS, ns, [{"name": mig1, "uid": M.vmim(r, ns, mig1)["metadata"]["uid"],
                                                    "vm": "vm-1"}])
    mig2 = M.create_vmim(r, ns, "vm-2")
    M.wait(lambda: M.phase(M.vmim(r, ns, mig1)) == "Succeeded", 60, "the reserved VMI's migration")
    M.wait(lambda: emu.count("is fenced") > 0, 30, "the emulator to see vm-2's target pod refused")
    assert M.phase(M.vmim(r, ns, mig2)) in (None, "", "Pending")
    # a fence refusal is not a quota refusal (virt-controller sets that condition only for exceeded quota)
    assert not M.rejected(M.vmim(r, ns, mig2))

    # unfencing the last VMI unfences the namespace: vm-2's migration goes through, tenants may start pods
    left = F.unfence(operator, OPERATOR_NS, ns, [vm1])
    assert left["changed"] and not left["fenced"] and left["vmis"] == {}
    assert not [k for k in r.get("/api/v1/namespaces/%s/configmaps/kvq-fence" % OPERATOR_NS).get("data") or {}
                if k.startswith("mig.%s." % ns)]
    M.wait(lambda: try_pod(tenant, ns) is None, 20, "the fence to let the tenant's pod in")
    M.wait(lambda: M.phase(M.vmim(r, ns, mig2)) == "Succeeded", 60, "vm-2's migration after unfence")
    assert not F.unfence(operator, OPERATOR_NS, ns)["changed"]


def test_only_the_runs_own_migrations_get_target_pods_and_backend_pvcs(lab, r, emu, operator, installed,
                                                                       tenant_ns):
    """Issue 24: a reservation also expands persistentvolumeclaims/requests.storage (the backend-storage PVC of
    a VM with persistent TPM/EFI), and a tenant may migrate its reserved VM itself. While fenced: a tenant's PVC
    is refused; KubeVirt's PVC labelled with a listed migration is admitted, one for another migration is not;
    the target pod of another migration of the reserved VMI (the tenant's) is refused, also once the run's own
    migration is final and unlisted; the end to end tenant migration of the reserved VM gets no target pod."""
    ns = tenant_ns
    team = tenants.make(lab, ns, roles=("edit",))
    tenant = Rest(team["edit"].api_client())
    kubevirt = emulator.as_identity(r, CONTROLLER)
    vm1 = vmi_ref(r, ns, "vm-1")
    own = ("vm-1-kvq-" + secrets.token_hex(3), "2f6c1d2e-0000-4000-8000-0000000000a1")
    theirs = ("vm-1-mine-" + secrets.token_hex(3), "2f6c1d2e-0000-4000-8000-0000000000b2")

    assert try_pvc(tenant, ns) is None                          # not fenced: the tenant may create PVCs
    F.fence(operator, OPERATOR_NS, ns, [vm1], note="window", controller=CONTROLLER,
            migrations=[{"name": own[0], "uid": own[1], "vm": "vm-1"}])
    refused = M.wait(lambda: try_pvc(tenant, ns), 20, "the fence to refuse the tenant's PVC")
    assert "namespace %s is fenced" % ns in refused and "PersistentVolumeClaims" in refused, refused
    assert "is fenced" in try_pvc(tenant, ns, own[0])           # the label does not make a tenant KubeVirt
    assert "is fenced" in try_pvc(r, ns, own[0])                # nor the lab admin
    # KubeVirt's backend-storage PVC for the run's migration's target, and for no other migration
    assert try_pvc(kubevirt, ns, own[0]) is None
    assert "is fenced" in try_pvc(kubevirt, ns, theirs[0])
    assert "is fenced" in try_pvc(kubevirt, ns)

    # target pods: the run's migration (name and UID) only; the same name with another UID is another object
    assert try_pod(kubevirt, ns, owner=vm1, migration=own) is None
    assert "is fenced" in try_pod(kubevirt, ns, owner=vm1, migration=theirs)
    assert "is fenced" in try_pod(kubevirt, ns, owner=vm1, migration=(own[0], theirs[1]))
    # the run's migration is final: nothing more for it, while the namespace stays fenced
    ended = F.end_migrations(operator, OPERATOR_NS, ns, [{"name": own[0], "uid": own[1]}])
    assert ended["changed"] and ended["migrations"] == {}
    M.wait(lambda: try_pod(kubevirt, ns, owner=vm1, migration=own), 20, "the ended migration's pods to be refused")
    assert "is fenced" in try_pvc(kubevirt, ns, own[0])
    assert "is fenced" in try_pod(tenant, ns)

    # end to end: the tenant migrates its reserved VM itself; KubeVirt's target pod for it is refused
    before = emu.count("is fenced")
    mig = M.create_vmim(tenant, ns, "vm-1", name=theirs[0])
    M.wait(lambda: emu.count("is fenced") > before, 30, "the emulator to see the tenant's target pod refused")
    assert M.phase(M.vmim(r, ns, mig)) in (None, "", "Pending")
    assert not [p for p in M.launcher_pods(r, ns) if (p["metadata"].get("annotations") or {}).get(
        "kubevirt.io/migrationJobName") == mig]
    F.unfence(operator, OPERATOR_NS, ns)
    M.wait(lambda: try_pvc(tenant, ns) is None, 20, "the fence to let the tenant's PVC in")


def test_the_targets_attachment_pod_passes_and_a_pvc_cannot_move_to_a_charged_class(lab, r, emu, operator, installed,
                                                                                    tenant_ns):
    """Issue 24 review: KubeVirt's hotplug-volume attachment pod for a migration target is owned by the target Pod
    (not the VMI) and carries the migration's name and UID: admitted for the run's migration once its UID is
    listed, never for another migration, never while the UID is not known, never from a tenant. A tenant's PVC
    that had no storage class may not be given one while fenced (quota charges <class>.storageclass...)."""
    ns = tenant_ns
    tenant = Rest(tenants.make(lab, ns, roles=("edit",))["edit"].api_client())
    kubevirt = emulator.as_identity(r, CONTROLLER)
    vm1 = vmi_ref(r, ns, "vm-1")
    own = ("vm-1-kvq-" + secrets.token_hex(3), "2f6c1d2e-0000-4000-8000-0000000000c3")
    pending = ("vm-1-kvq-" + secrets.token_hex(3), "2f6c1d2e-0000-4000-8000-0000000000d4")
    theirs = ("vm-1-mine-" + secrets.token_hex(3), "2f6c1d2e-0000-4000-8000-0000000000e5")
    target = {"apiVersion": "v1", "kind": "Pod", "name": "virt-launcher-vm-1-abcde",
              "uid": "2f6c1d2e-0000-4000-8000-0000000000f6", "controller": True, "blockOwnerDeletion": True}

    def attachment(migration):
        body = pod_body(ns, migration=migration, name="hp-volume-" + secrets.token_hex(3))
        body["metadata"]["ownerReferences"] = [target]
        return body

    def try_attachment(rest, migration):
        return _refusal(lambda: rest.request("POST", "/api/v1/namespaces/%s/pods" % ns, {"dryRun": "All"},
                                             body=attachment(migration)))

    claim = r.create("/api/v1/namespaces/%s/persistentvolumeclaims" % ns, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"generateName": "data-", "namespace": ns},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Mi"}}}})
    claim_path = "/api/v1/namespaces/%s/persistentvolumeclaims/%s" % (ns, claim["metadata"]["name"])
    F.fence(operator, OPERATOR_NS, ns, [vm1], note="window", controller=CONTROLLER,
            migrations=[{"name": own[0], "uid": own[1], "vm": "vm-1"}, {"name": pending[0], "vm": "vm-1"}])
    M.wait(lambda: try_pod(tenant, ns), 20, "the fence to refuse the tenant's pod")
    assert try_attachment(kubevirt, own) is None
    assert "is fenced" in try_attachment(kubevirt, pending)      # no UID listed yet: the name alone is not enough
    assert "is fenced" in try_attachment(kubevirt, theirs)
    assert "is fenced" in try_attachment(kubevirt, (own[0], theirs[1]))
    assert "is fenced" in try_attachment(tenant, own)
    # a class given to a PVC that had none is charged to <class>.storageclass.storage.k8s.io/...: refused
    refused = _refusal(lambda: tenant.request("PATCH", claim_path, {"dryRun": "All"},
                                              body={"spec": {"storageClassName": "kvq-charged"}},
                                              content_type="application/merge-patch+json"))
    assert refused is not None and "is fenced" in refused, refused
    # a label on it charges nothing: passes
    assert _refusal(lambda: tenant.request("PATCH", claim_path, {"dryRun": "All"},
                                           body={"metadata": {"labels": {"x": "y"}}},
                                           content_type="application/merge-patch+json")) is None
    F.unfence(operator, OPERATOR_NS, ns)
    M.wait(lambda: try_pod(tenant, ns) is None, 20, "the fence to let the tenant's pod in")
    r.delete(claim_path)


def test_a_target_pod_larger_than_its_migrations_pinned_size_is_refused(lab, r, emu, operator, installed, tenant_ns):
    """Issue 24 (grow-during-batch): the run lists each migration's pinned size (size.<ns>.<migration>); KubeVirt's
    target pod for it is admitted up to that size, to the byte and the millicore, and refused past it in any of
    requests/limits of cpu/memory: a container more (a hook sidecar), a larger limit (the memory-limits ratio
    label), a larger init container, a native sidecar, the pod overhead. Without a size the pod's size is not
    looked at (kvquota_reserve's standalone entries); ending the migration removes its size."""
    ns = tenant_ns
    kubevirt = emulator.as_identity(r, CONTROLLER)
    vm1 = vmi_ref(r, ns, "vm-1")
    own = ("vm-1-kvq-" + secrets.token_hex(3), "2f6c1d2e-0000-4000-8000-0000000000a7")
    unsized = ("vm-1-kvq-" + secrets.token_hex(3), "2f6c1d2e-0000-4000-8000-0000000000b8")

    def target(containers=None, init=None, overhead=None):
        body = pod_body(ns, vm1, migration=own)
        body["spec"]["containers"] = containers or [
            {"name": "compute", "image": "example.invalid/launcher",
             "resources": {"requests": {"cpu": "925m", "memory": "1600Mi"},
                           "limits": {"cpu": "1", "memory": "1677721601"}}},
            {"name": "guest-console-log", "image": "example.invalid/launcher",
             "resources": {"requests": {"cpu": "5m", "memory": "35M"}, "limits": {"cpu": "15m", "memory": "60M"}}}]
        if init:
            body["spec"]["initContainers"] = init
        if overhead:
            body["spec"]["overhead"] = overhead
        return body

    def try_target(body):
        return _refusal(lambda: kubevirt.request("POST", "/api/v1/namespaces/%s/pods" % ns, {"dryRun": "All"},
                                                 body=body))

    # 930m + (1600Mi + 35M) requests, 1015m + (1677721601 + 60M) limits: pinned exactly
    size = {"requests.cpu": "930m", "requests.memory": str(1600 * 2 ** 20 + 35 * 10 ** 6),
            "limits.cpu": "1015m", "limits.memory": str(1677721601 + 60 * 10 ** 6)}
    F.fence(operator, OPERATOR_NS, ns, [vm1], note="window", controller=CONTROLLER,
            migrations=[{"name": own[0], "uid": own[1], "vm": "vm-1", "size": size},
                        {"name": unsized[0], "uid": unsized[1], "vm": "vm-1"}])
    M.wait(lambda: try_pod(kubevirt, ns, owner=vm1, migration=("x", "y")), 20, "the fence to be in force")
    data = r.get("/api/v1/namespaces/%s/configmaps/%s" % (OPERATOR_NS, F.FENCE_CONFIGMAP))["data"]
    assert data[F.size_key(ns, own[0])] == "930m %d 1015m %d" % (1600 * 2 ** 20 + 35 * 10 ** 6,
                                                                 1677721601 + 60 * 10 ** 6)
    assert F.size_key(ns, unsized[0]) not in data
    assert try_target(target()) is None                                     # exactly the pin
    sidecar = {"name": "hook-sidecar-0", "image": "example.invalid/hook",
               "resources": {"requests": {"cpu": "1m", "memory": "1"}, "limits": {"cpu": "1m", "memory": "1"}}}
    grown = target()
    grown["spec"]["containers"].append(sidecar)                             # a container more: +1m, +1 byte
    refused = try_target(grown)
    assert refused is not None and "charges more than the maintenance run planned" in refused, refused
    assert "limits.memory=%d" % (1677721601 + 60 * 10 ** 6) in refused and own[0] in refused, refused
    one_byte = target()
    one_byte["spec"]["containers"][0]["resources"]["limits"]["memory"] = "1677721602"
    assert "charges more" in try_target(one_byte)                           # one byte over
    one_milli = target()
    one_milli["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "926m"
    assert "charges more" in try_target(one_milli)                          # one millicore over
    smaller = target()
    smaller["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "900m"
    assert try_target(smaller) is None                                      # smaller passes
    # an init container counts on its own (the pod's charge is the larger of it and the app containers)
    small_init = dict(sidecar, name="container-disk-binary")
    assert try_target(target(init=[small_init])) is None
    big_init = dict(sidecar, name="container-disk-binary",
                    resources={"requests": {"cpu": "931m"}, "limits": {"cpu": "931m"}})
    assert "charges more" in try_target(target(init=[big_init]))
    # a native sidecar (an init container that keeps running) adds to the app containers
    assert "charges more" in try_target(target(init=[dict(sidecar, restartPolicy="Always")]))
    # the same pod under another migration without a size: not looked at
    bigger = target()
    bigger["metadata"]["annotations"]["kubevirt.io/migrationJobName"] = unsized[0]
    bigger["metadata"]["labels"]["kubevirt.io/migrationJobUID"] = unsized[1]
    bigger["spec"]["containers"].append(sidecar)
    assert try_target(bigger) is None
    # the run raises a size (a sizing miss it accepts): the larger pod passes
    F.admit_migrations(operator, OPERATOR_NS, ns, [{"name": own[0], "uid": own[1], "vm": "vm-1",
                                                    "size": dict(size, **{"requests.cpu": "931m",
                                                                          "limits.cpu": "1016m"})}])
    M.wait(lambda: try_target(one_milli) is None, 20, "the raised size to be in force")
    # a later write without a size keeps the size listed
    F.admit_migrations(operator, OPERATOR_NS, ns, [{"name": own[0], "uid": own[1], "vm": "vm-1"}])
    assert F.fenced_migrations(r.get("/api/v1/namespaces/%s/configmaps/%s" % (OPERATOR_NS, F.FENCE_CONFIGMAP))[
        "data"], ns)[own[0]]["size"]["requests.cpu"] == F.Fraction(931, 1000)
    F.end_migrations(operator, OPERATOR_NS, ns, [{"name": own[0], "uid": own[1]}])
    data = r.get("/api/v1/namespaces/%s/configmaps/%s" % (OPERATOR_NS, F.FENCE_CONFIGMAP))["data"]
    assert F.size_key(ns, own[0]) not in data and F.migration_key(ns, own[0]) not in data
    F.unfence(operator, OPERATOR_NS, ns)
    data = r.get("/api/v1/namespaces/%s/configmaps/%s" % (OPERATOR_NS, F.FENCE_CONFIGMAP))["data"] or {}
    assert not [k for k in data if ns in k], data


def test_only_fenced_namespaces_and_only_with_params(lab, r, emu, operator, installed, tenant_ns):
    other = "fence-other-" + secrets.token_hex(3)
    r.create("/api/v1/namespaces", {"metadata": {"name": other, "labels": {"kvqlab/test": "true"}}})
    try:
        tenant_other = Rest(tenants.make(lab, other, roles=("edit",))["edit"].api_client())
        tenant = Rest(tenants.make(lab, tenant_ns, roles=("edit",))["edit"].api_client())
        F.fence(operator, OPERATOR_NS, tenant_ns, [vmi_ref(r, tenant_ns, "vm-1")], note="window",
                controller=CONTROLLER)
        M.wait(lambda: try_pod(tenant, tenant_ns), 20, "the fence to refuse the tenant's pod")
        assert try_pod(tenant_other, other) is None          # a namespace that holds no reservation
        # parameters gone (or never written): parameterNotFoundAction Allow, nothing is fenced
        r.delete("/api/v1/namespaces/%s/configmaps/%s" % (OPERATOR_NS, F.FENCE_CONFIGMAP))
        M.wait(lambda: try_pod(tenant, tenant_ns) is None, 20, "the fence to allow all without parameters")
        # installed() tells when the administrator removed the binding (opt-out)
        binding = r.get(ADMISSION + "/validatingadmissionpolicybindings/" + F.POLICY_NAME)
        r.delete(ADMISSION + "/validatingadmissionpolicybindings/" + F.POLICY_NAME)
        try:
            assert not F.installed(operator, OPERATOR_NS)
        finally:
            binding["metadata"] = {"name": binding["metadata"]["name"], "labels": binding["metadata"].get("labels")}
            r.create(ADMISSION + "/validatingadmissionpolicybindings", binding)
        assert F.installed(operator, OPERATOR_NS)
    finally:
        M.delete_namespace(r, other)
        tenants.remove(lab, other)


# ---------------------------------------------------------------------------
# Rancher 2.14+'s quota lock-down (emulator knob rancher_lockdown)

def test_a_drain_gets_its_own_migration_through_the_fence_and_the_tenants_none(lab, r, emu, operator, installed):
    """kvquota_migrate with the fence installed, a tenant near the top of its quota: the run lists its migration
    (by name before creating it, then by UID), KubeVirt's target pod for it is admitted and the VM moves; the
    tenant's own migration of the same reserved VM, created the moment the namespace is fenced, gets no target
    pod while the reservation is held; the quota is back at its base and nothing of the fence is left."""
    import threading
    ns = "fence-drain-" + secrets.token_hex(3)
    M.make_tenant(lab, ns, vms=2)
    try:
        tenant = Rest(tenants.make(lab, ns, roles=("edit",))["edit"].api_client())
        node = r.get(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns)["status"]["nodeName"]
        theirs = "vm-1-mine-" + secrets.token_hex(3)
        before = M.quota(r, ns, "compute")["spec"]["hard"]
        seen = {}
        stop = threading.Event()

        def attack():
            while not stop.is_set():
                data = (r.get_or_none("/api/v1/namespaces/%s/configmaps/%s" % (OPERATOR_NS, F.FENCE_CONFIGMAP))
                        or {}).get("data") or {}
                if "ns." + ns in data:
                    seen["fence"] = dict(data)
                    M.create_vmim(tenant, ns, "vm-1", name=theirs)
                    return
                stop.wait(0.05)
        attacker = threading.Thread(target=attack, daemon=True)
        attacker.start()
        try:
            res = M.run_module("kvquota_migrate", {"node": node, "batches": [{"vms": ["%s/vm-1" % ns]}],
                                                   "reservation_prefix": "fenced-%s" % ns, "poll_interval": 0.5,
                                                   "ttl": "1h"}, lab.user_kubeconfig)
        finally:
            stop.set()
            attacker.join(10)
        print(json.dumps(res.get("progress"), indent=1))
        M.assert_ok(res)
        assert seen.get("fence"), "the namespace was never fenced"
        (ours,) = res["migrations_created"]
        assert M.phase(M.vmim(r, *ours.split("/"))) == "Succeeded"
        log = emu.log_text().splitlines()
        assert [line for line in log if theirs in line and "is fenced" in line], \
            "the tenant's migration was never refused by the fence"
        assert not [line for line in log if ours.split("/")[1] in line and "is fenced" in line]
        assert not [p for p in M.launcher_pods(r, ns) if (p["metadata"].get("annotations") or {}).get(
            "kubevirt.io/migrationJobName") == theirs]
        assert M.quota(r, ns, "compute")["spec"]["hard"] == before
        data = (r.get_or_none("/api/v1/namespaces/%s/configmaps/%s" % (OPERATOR_NS, F.FENCE_CONFIGMAP))
                or {}).get("data") or {}
        prefixes = ("vmi.%s." % ns, "mig.%s." % ns, "size.%s." % ns)
        assert not [k for k in data if k == "ns." + ns or k.startswith(prefixes)], data
    finally:
        M.delete_namespace(r, ns)


def test_a_tenant_that_deletes_the_runs_migration_keeps_only_its_own_vm_back(lab, r, emu, operator, installed):
    """Issue 29 (review M4): during a real drain the tenant (edit) deletes the run's migration of its vm-1 while it
    runs. vm-1 stays where it is, named in vms_left with how its migration ended; the run's other migration (vm-2)
    goes through; the quota is back at its base and nothing of the fence or of a reservation is left. (The run
    used to stop on it, every other VM with it.)"""
    import threading
    ns = "fence-del-" + secrets.token_hex(3)
    M.make_tenant(lab, ns, vms=2)
    try:
        tenant = Rest(tenants.make(lab, ns, roles=("edit",))["edit"].api_client())
        on = dict((vm, r.get(M.KV + "/namespaces/%s/virtualmachineinstances/%s" % (ns, vm))["status"]["nodeName"])
                  for vm in ("vm-1", "vm-2"))
        nodes = sorted(set(on.values()))
        before = M.quota(r, ns, "compute")["spec"]["hard"]
        deleted = {}
        stop = threading.Event()
        vmims = M.KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns

        def attack():
            while not stop.is_set():
                for vmim in tenant.get(vmims)["items"]:
                    if vmim["spec"].get("vmiName") == "vm-1" and (vmim["metadata"].get("labels") or {}).get(
                            "kvquota.io/reservation"):
                        tenant.delete("%s/%s" % (vmims, vmim["metadata"]["name"]))
                        deleted["name"] = vmim["metadata"]["name"]
                        return
                stop.wait(0.05)
        # vm-1's migration never finishes on its own: only the tenant's delete ends it
        emulator.set_knobs(lab, stall_migrations="%s/vm-1" % ns)
        attacker = threading.Thread(target=attack, daemon=True)
        attacker.start()
        try:
            res = M.run_module("kvquota_migrate", {"nodes": nodes, "batches": [{"vms": ["%s/vm-1" % ns, "%s/vm-2" % ns]}],
                                                   "reservation_prefix": "del-%s" % ns, "poll_interval": 0.5,
                                                   "ttl": "1h"}, lab.user_kubeconfig)
        finally:
            stop.set()
            attacker.join(10)
            emulator.set_knobs(lab, stall_migrations="")
        print(json.dumps(res.get("progress"), indent=1))
        M.assert_ok(res)
        assert deleted.get("name"), "the tenant never saw the run's migration of vm-1"
        # (no cordon here: vm-2 may land on vm-1's node when the two ran on different nodes, so vms_left can list it,
        # never as left out)
        left = dict((v["name"], v) for v in res["vms_left"] if v["namespace"] == ns)
        assert "its migration %s/%s was deleted before it ended, not by this run" % (ns, deleted["name"]) in \
            left["vm-1"].get("left_out", ""), res["vms_left"]
        assert "left_out" not in left.get("vm-2", {}), res["vms_left"]
        moved = r.get(M.KV + "/namespaces/%s/virtualmachineinstances/vm-2" % ns)["status"]["nodeName"]
        assert moved != on["vm-2"], "vm-2 must have moved on"
        assert r.get(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns)["status"]["nodeName"] == on["vm-1"]
        assert res["reservations_held"] == [] and res["outcome"] == "succeeded", res
        assert M.quota(r, ns, "compute")["spec"]["hard"] == before
        assert not _fence_keys(r, ns)
        assert not [k for k in M.ledgers(r) if k.split("/")[0] == ns]
    finally:
        M.delete_namespace(r, ns)


def _fence_keys(r, ns):
    data = (r.get_or_none("/api/v1/namespaces/%s/configmaps/%s" % (OPERATOR_NS, F.FENCE_CONFIGMAP)) or {}).get(
        "data") or {}
    return [k for k in data if ns in k]


def test_a_vm_moves_at_the_size_it_runs_with_even_where_the_sizing_misses_something(lab, r, emu, operator,
                                                                                    installed):
    """Issue 24: the fence pins each migration's target pod to the larger of its VM's computed size and the pod it
    runs in now. Every launcher pod here is rendered 3 % larger in memory than computed (emulator knob
    oversize_percent, as a mutating webhook or a LimitRange default would), the running one included: the target
    pod is the size the VM has, the fence admits it, quota admission's refusal is topped up as before, the VM
    moves and everything ends at the base."""
    ns = "fence-asis-" + secrets.token_hex(3)
    emulator.set_knobs(lab, oversize_percent=3)
    try:
        M.make_tenant(lab, ns, vms=2)
        node = r.get(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns)["status"]["nodeName"]
        before = M.quota(r, ns, "compute")["spec"]["hard"]
        refusals = emu.count("charges more than the maintenance run planned")
        res = M.run_module("kvquota_migrate", {"node": node, "batches": [{"vms": ["%s/vm-1" % ns]}],
                                               "reservation_prefix": "asis-%s" % ns, "poll_interval": 0.5,
                                               "top_up_settle_seconds": 2, "ttl": "1h"}, lab.user_kubeconfig)
        print("\n".join(res.get("progress") or []))
        M.assert_ok(res)
        assert emu.count("charges more than the maintenance run planned") == refusals
        (ours,) = res["migrations_created"]
        assert M.phase(M.vmim(r, *ours.split("/"))) == "Succeeded"
        assert M.quota(r, ns, "compute")["spec"]["hard"] == before
        assert _fence_keys(r, ns) == []
    finally:
        emulator.set_knobs(lab, oversize_percent=None)
        M.delete_namespace(r, ns)


def test_a_target_pod_larger_than_the_vm_runs_with_and_than_computed_is_refused_and_the_vm_stays_named(
        lab, r, emu, operator, installed):
    """Issue 24: target pods rendered 3 % larger than both the computed size and the running pod (the knob set after
    the VM started: a change the sizing cannot see) are refused by the fence; the run sees virt-controller's Event,
    cancels the migration and leaves the VM where it is, named; never a larger size in the fence; the quota ends
    at its base and nothing of the fence is left."""
    ns = "fence-miss-" + secrets.token_hex(3)
    M.make_tenant(lab, ns, vms=2)
    try:
        node = r.get(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns)["status"]["nodeName"]
        before = M.quota(r, ns, "compute")["spec"]["hard"]
        refusals = emu.count("charges more than the maintenance run planned")
        emulator.set_knobs(lab, oversize_percent=3)
        try:
            res = M.run_module("kvquota_migrate", {"node": node, "batches": [{"vms": ["%s/vm-1" % ns]}],
                                                   "reservation_prefix": "miss-%s" % ns, "poll_interval": 0.5,
                                                   "top_up_settle_seconds": 2, "ttl": "1h"}, lab.user_kubeconfig)
        finally:
            emulator.set_knobs(lab, oversize_percent=None)
        text = " ".join(json.dumps(res).split())
        print(json.dumps(res.get("progress"), indent=1))
        assert emu.count("charges more than the maintenance run planned") > refusals, \
            "the fence never refused the larger target pod"
        assert "a fresh sizing shows no change" in text and "%s/vm-1" % ns in text, text[:3000]
        assert r.get(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns)["status"]["nodeName"] == node
        assert not [m for m in r.get(M.KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns)["items"]
                    if M.phase(m) not in ("Succeeded", "Failed")], "the run's migration was not cancelled"
        assert M.quota(r, ns, "compute")["spec"]["hard"] == before
        assert _fence_keys(r, ns) == []
    finally:
        M.delete_namespace(r, ns)


def test_a_reservation_fences_its_namespace_for_its_window(lab, r, emu, operator, installed, tenant_ns):
    """reserve (with the batch's VMs in its refs) fences the namespace before the quota grows; a tenant's new pod
    is refused for the window, KubeVirt's target pod of the reserved VMI is admitted; release restores the
    quota and then unfences; nothing of the fence is left."""
    from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils import reservation_calls as V
    ns = tenant_ns
    tenant = Rest(tenants.make(lab, ns, roles=("edit",))["edit"].api_client())
    controller = emulator.as_identity(r, CONTROLLER)
    vm = vmi_ref(r, ns, "vm-1")
    other = vmi_ref(r, ns, "vm-2")
    assert try_pod(tenant, ns) is None                          # no reservation: no fence
    own = ("vm-1-kvq-" + secrets.token_hex(3), "2f6c1d2e-0000-4000-8000-0000000000c3")
    result = V.reserve(operator, "fence-window", {(ns, "compute"): {"limits.cpu": "1"}}, "lab-test", "drain",
                       600, refs={"vms": [{"namespace": ns, "name": "vm-1"}],
                                  "migrations": [{"namespace": ns, "name": own[0], "uid": own[1], "vm": "vm-1"}]})
    assert [(f["namespace"], f["changed"]) for f in result["fence"]] == [(ns, True)]
    assert F.fences(operator, OPERATOR_NS)[ns]["vmis"] == {vm["uid"]: "vm-1"}
    refused = try_pod(tenant, ns)
    assert refused is not None and "kvquota" in refused
    assert try_pod(controller, ns, vm, own) is None             # the target pod of the reserved VM's migration
    assert try_pod(controller, ns, other, own) is not None      # another VM's is not
    assert try_pod(controller, ns, vm) is not None              # nor one of no listed migration
    released = V.release(operator, "fence-window", wait_for_pods=False, force=True)
    assert released["quotas"][0]["outcome"] == "released"
    assert [(f["namespace"], f["fenced"]) for f in released["fence"]] == [(ns, False)]
    assert ns not in F.fences(operator, OPERATOR_NS)
    assert try_pod(tenant, ns) is None


def test_the_reaper_lifts_a_fence_that_outlived_its_reservation(lab, r, emu, operator, installed, tenant_ns):
    """A run killed between its fence and its quota write leaves a fence with no reservation: the reaper
    unfences it (a fence never outlives its headroom)."""
    from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils import reservation_calls as V
    ns = tenant_ns
    F.fence(operator, OPERATOR_NS, ns, [vmi_ref(r, ns, "vm-1")])
    reaped = V.release_expired(operator)
    assert [(f["namespace"], f["fenced"]) for f in reaped["unfenced"]] == [(ns, False)]
    assert ns not in F.fences(operator, OPERATOR_NS)


def test_rancher_lockdown_refuses_everyone_but_rancher(lab, r, emu):
    ns = "lockdown-" + secrets.token_hex(3)
    r.create("/api/v1/namespaces", {"metadata": {"name": ns, "labels": {"kvqlab/test": "true"}}})
    rancher = emulator.as_identity(r, emulator.rancher_user())
    user = Rest(lab.api_client(admin=False))
    label = {rancher_mod.RANCHER_LABEL: "true"}
    quotas = "/api/v1/namespaces/%s/resourcequotas" % ns
    try:
        emulator.set_knobs(lab, rancher_lockdown=True)
        emulator.wait_lockdown(lab, True)
        # Rancher creates and changes its quota
        rancher.create(quotas, {"metadata": {"name": "default-abcde", "labels": label},
                                "spec": {"hard": {"limits.cpu": "2"}}})
        rancher.patch(quotas + "/default-abcde", {"spec": {"hard": {"limits.cpu": "3"}}})

        def refused(fn, *args):
            with pytest.raises(ApiException) as err:
                fn(*args)
            assert err.value.status == 403 and "managed by Rancher" in str(err.value.body), err.value

        def replace(rest, name, hard=None, labels=None):
            """PUT the quota as stored now with changes; again when the quota controller's status update
            came in between (409)."""
            for _attempt in range(20):
                obj = r.get(quotas + "/" + name)
                obj["spec"]["hard"].update(hard or {})
                if labels is not None:
                    obj["metadata"]["labels"] = labels
                try:
                    return rest.replace(quotas + "/" + name, obj)
                except ApiException as exc:
                    if exc.status != 409:
                        raise
            raise AssertionError("quota %s kept changing" % name)
        refused(replace, r, "default-abcde", {"limits.cpu": "30"})       # the lab admin
        refused(replace, user, "default-abcde", {"limits.cpu": "30"})    # kvquota's least-privilege identity
        refused(replace, r, "default-abcde", None, {})                   # demotion
        refused(r.delete, quotas + "/default-abcde")
        refused(r.create, quotas, {"metadata": {"name": "forged", "labels": label}, "spec": {"hard": {"pods": "1"}}})
        # quotas without the label stay the administrator's; adding the label is refused (promotion)
        r.create(quotas, {"metadata": {"name": "plain"}, "spec": {"hard": {"pods": "5"}}})
        replace(r, "plain", {"pods": "6"})
        refused(replace, r, "plain", None, label)
        assert r.get(quotas + "/default-abcde")["spec"]["hard"]["limits.cpu"] == "3"

        # the emulated agent writes as Rancher, so Rancher's sync still works under the lock-down
        r.patch("/api/v1/namespaces/" + ns, {"metadata": {"annotations": {
            rancher_mod.QUOTA_ANNOTATION: '{"limit": {"limitsCpu": "4000m"}}'}}})
        M.wait(lambda: r.get(quotas + "/default-abcde")["spec"]["hard"]["limits.cpu"] in ("4", "4000m"), 30,
               "Rancher's sync to apply the namespace limit")
        emulator.set_knobs(lab, rancher_lockdown=None)
        emulator.wait_lockdown(lab, False)
        # off again: the administrator may write what they like
        assert replace(r, "default-abcde", {"limits.cpu": "30"})
    finally:
        emulator.set_knobs(lab, rancher_lockdown=None)
        M.delete_namespace(r, ns)


def test_rancher_lockdown_lets_namespace_deletion_remove_rancher_quotas(lab, r, emu):
    ns = "lockdown-del-" + secrets.token_hex(3)
    r.create("/api/v1/namespaces", {"metadata": {"name": ns, "labels": {"kvqlab/test": "true"}}})
    try:
        emulator.set_knobs(lab, rancher_lockdown=True)
        emulator.wait_lockdown(lab, True)
        emulator.as_identity(r, emulator.rancher_user()).create(
            "/api/v1/namespaces/%s/resourcequotas" % ns,
            {"metadata": {"name": "default-xyz12", "labels": {rancher_mod.RANCHER_LABEL: "true"}},
             "spec": {"hard": {"pods": "3"}}})
        r.delete("/api/v1/namespaces/" + ns)
        M.wait(lambda: r.get_or_none("/api/v1/namespaces/" + ns) is None, 60, "namespace %s to be deleted" % ns)
    finally:
        emulator.set_knobs(lab, rancher_lockdown=None)
        emulator.wait_lockdown(lab, False)
