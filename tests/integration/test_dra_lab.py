# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""DRA device quotas (issue 27), on a release that serves DRA (Kubernetes 1.34 and later: KVQ_K8S_VERSION=v1.37.2).

A VM whose spec.resourceClaims names a ResourceClaimTemplate: the emulated virt-controller copies the entry into
every launcher pod, the lab's kube-controller-manager (resourceclaim-controller) creates each pod's own claim from
the template, the scheduler allocates it from a ResourceSlice of the pod's node. The namespace's quota caps
count/resourceclaims.resource.k8s.io and nic.kvq.lab.deviceclass.resource.k8s.io/devices at exactly what the
running VM's claim uses, so a migration target's claim is refused unless the quota is expanded: kvquota_check (as
the least-privilege user) names exactly that need, kvquota_migrate moves the VM and restores the quota byte for
byte once the source pod's claim is gone.

Run: KVQ_LAB_REQUIRED=1 KVQ_K8S_VERSION=v1.37.2 python3 -m pytest -q -p no:cacheprovider -m lab \
    tests/integration/test_dra_lab.py
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import os
import secrets
import threading
import time

import pytest
from kubernetes.client.exceptions import ApiException

import modlab as M
from kvqlab import controlplane, scenarios, tenants
from kvqlab.emulator.rest import Rest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import fence as F

pytestmark = pytest.mark.lab   # make lab-tests (conftest.py: every lab test has one such marker)

DRA = "/apis/resource.k8s.io/v1"
CLASS = "nic.kvq.lab"
COUNT = "count/resourceclaims.resource.k8s.io"
DEVICES = CLASS + ".deviceclass.resource.k8s.io/devices"


@pytest.fixture(scope="module", autouse=True)
def dra_release():
    if not controlplane.dra_served():
        pytest.skip("DRA is served from Kubernetes 1.34 (this lab runs %s): KVQ_K8S_VERSION=v1.37.2"
                    % controlplane.K8S_VERSION)


@pytest.fixture(scope="module")
def devices(lab, r, emu):
    """A DeviceClass and, on every node, a ResourceSlice of four devices of its driver (as a DRA driver
    publishes them): the scheduler allocates a launcher pod's claim on the node it picks."""
    r.create(DRA + "/deviceclasses", {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                      "metadata": {"name": CLASS},
                                      "spec": {"selectors": [{"cel": {"expression": 'device.driver == "%s"' % CLASS}}]}})
    for node in r.get("/api/v1/nodes")["items"]:
        name = node["metadata"]["name"]
        r.create(DRA + "/resourceslices", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "%s-%s" % (CLASS, name)},
            "spec": {"driver": CLASS, "nodeName": name, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "nic-%d" % i} for i in range(4)]}})
    return CLASS


def claims(r, ns):
    return [c for c in r.get(DRA + "/namespaces/%s/resourceclaims" % ns)["items"]
            if not c["metadata"].get("deletionTimestamp")]


def devices_quota_and_template(r, ns):
    """A quota capping claims at what one VM's claim charges (1 claim, 2 devices), and the template of that claim."""
    r.create("/api/v1/namespaces/%s/resourcequotas" % ns, {"metadata": {"name": "devices"}, "spec": {"hard": {
        COUNT: "1", DEVICES: "2"}}})
    r.create(DRA + "/namespaces/%s/resourceclaimtemplates" % ns, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "nic"},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "nic", "exactly": {"deviceClassName": CLASS, "count": 2}}]}}}})


def a_vm_with_a_claim(r, ns):
    """Quota compute (room for the pods), the devices quota and template of devices_quota_and_template, and vm-1
    with a claim from that template, running with its claim counted (1 claim, 2 devices: the devices quota full)."""
    r.create("/api/v1/namespaces/%s/resourcequotas" % ns, {"metadata": {"name": "compute"}, "spec": {"hard": {
        "limits.memory": "8Gi", "limits.cpu": "8", "pods": "10"}}})
    devices_quota_and_template(r, ns)
    vm = scenarios.vm_object({"name": "vm-1", "namespace": ns, "cpu": 1, "memory": "256Mi",
                              "limits": {"cpu": "1", "memory": "256Mi"}})
    vm["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimTemplateName": "nic"}]
    r.create(M.KV + "/namespaces/%s/virtualmachines" % ns, vm)
    M.wait(lambda: M.settled(r, ns, 1) and used(r, ns, "devices").get(COUNT) == "1"
           and used(r, ns, "devices").get(DEVICES) == "2", 90, "vm-1 running with its claim counted")


def used(r, ns, name):
    return dict((M.quota(r, ns, name).get("status") or {}).get("used") or {})


def test_a_vm_with_a_template_backed_claim_migrates_within_an_exact_reservation(lab, r, emu, devices):
    ns = "dra-" + secrets.token_hex(3)
    r.create("/api/v1/namespaces", {"metadata": {"name": ns, "labels": {"kvqlab/test": "true"}}})
    try:
        a_vm_with_a_claim(r, ns)
        (source_claim,) = claims(r, ns)
        (source_pod,) = [p for p in M.launcher_pods(r, ns) if M.phase(p) == "Running"]
        assert [ref["uid"] for ref in source_claim["metadata"]["ownerReferences"]] == [source_pod["metadata"]["uid"]]
        node = r.get(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns)["status"]["nodeName"]
        before = M.quota(r, ns, "devices")["spec"]
        compute_before = M.quota(r, ns, "compute")["spec"]

        # the check names exactly the target claim's need, on the quota that tracks claims
        report = M.assert_ok(M.run_module("kvquota_check", {"nodes": [node], "plan": True}, lab.user_kubeconfig))
        namespace = report["namespaces"][ns]
        print(json.dumps(namespace, indent=1)[:4000])
        assert namespace["verdict"] == "needs_reservation" and namespace["summary"]["blockers"] == 0
        assert namespace["needed"] == {"devices": {COUNT: "1", DEVICES: "2"}}
        (quota,) = [q for q in namespace["quotas"] if q["name"] == "devices"]
        assert quota["needed"] == {COUNT: "1", DEVICES: "2"}
        assert quota["fixes"] == [
            "raise %s of quota %s/devices to 2 for the maintenance window: batch 1 needs 1 more" % (COUNT, ns),
            "raise %s of quota %s/devices to 4 for the maintenance window: batch 1 needs 2 more" % (DEVICES, ns)]
        assert report["plan"]["vms"]["%s/vm-1" % ns]["charge"][COUNT] > 0

        # the migration: reserved just before, the target's claim admitted, the quota restored byte for byte
        res = M.run_module("kvquota_migrate", {"node": node, "plan": report["plan"],
                                               "reservation_prefix": "dra-%s" % ns, "poll_interval": 0.5,
                                               "ttl": "1h"}, lab.user_kubeconfig)
        print("\n".join(res.get("progress") or []))
        M.assert_ok(res)
        (migration,) = res["migrations_created"]
        assert M.phase(M.vmim(r, *migration.split("/"))) == "Succeeded"
        assert r.get(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns)["status"]["nodeName"] != node
        assert M.quota(r, ns, "devices")["spec"] == before
        assert M.quota(r, ns, "compute")["spec"] == compute_before
        assert not [key for key in M.ledgers(r) if key.split("/")[0] == ns]
        # the source pod's claim went with it (the resourceclaim controller); the target's is the VM's claim now
        M.wait(lambda: [c["metadata"]["uid"] for c in claims(r, ns)] != [source_claim["metadata"]["uid"]]
               and len(claims(r, ns)) == 1, 60, "the source pod's claim deleted")
        M.wait(lambda: used(r, ns, "devices") == {COUNT: "1", DEVICES: "2"}, 30, "claim usage back to one claim")
    finally:
        M.delete_namespace(r, ns)


def test_without_room_the_target_claim_is_refused_by_quota(lab, r, emu, devices):
    """The apiserver is the judge: a migration created without a reservation gets a target pod whose claim quota
    refuses (the resourceclaim controller's Warning Event FailedResourceClaimCreation names the quota), so the
    reservation above is what let it through."""
    ns = "dra-tight-" + secrets.token_hex(3)
    r.create("/api/v1/namespaces", {"metadata": {"name": ns, "labels": {"kvqlab/test": "true"}}})
    try:
        devices_quota_and_template(r, ns)
        vm = scenarios.vm_object({"name": "vm-1", "namespace": ns, "cpu": 1, "memory": "256Mi"})
        vm["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimTemplateName": "nic"}]
        r.create(M.KV + "/namespaces/%s/virtualmachines" % ns, vm)
        M.wait(lambda: M.settled(r, ns, 1) and used(r, ns, "devices").get(COUNT) == "1", 90, "vm-1 running")
        M.create_vmim(r, ns, "vm-1", "unreserved")

        def refused():
            events = r.get("/api/v1/namespaces/%s/events" % ns,
                           fieldSelector="reason=FailedResourceClaimCreation")["items"]
            return [e for e in events if "exceeded quota: devices" in (e.get("message") or "")]
        M.wait(refused, 60, "the target pod's claim refused by quota devices")
        assert len(claims(r, ns)) == 1
    finally:
        M.delete_namespace(r, ns)


# -- under the headroom fence ------------------------------------------------------------------------------------

FENCE_YML = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles",
                         "install", "files", "fence.yml")
# the lab's kube-controller-manager runs without --use-service-account-credentials, as this token user
# (kvqlab/controlplane.py): the administrator of such a cluster sets it once in the fence's ConfigMap
LAB_CLAIM_CONTROLLER = "kvqlab:kube-controller-manager"


@pytest.fixture
def fence(lab, r):
    """roles/install/files/fence.yml as the administrator installs it, the lab user allowed to see that it is, and
    the resourceclaim controller's identity set in kvq-fence (as documented for a kube-controller-manager without
    service-account credentials). Removed afterwards."""
    lab.kubectl("apply", "-f", FENCE_YML)
    user = {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": lab.user_name}
    binding = {"metadata": {"name": "kvqlab-dra-fence"}, "subjects": [user],
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": "kvquota-maintenance-fence"}}
    cm = "/api/v1/namespaces/%s/configmaps" % M.OPERATOR_NS
    for path, body in (("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding),
                       (cm, {"metadata": {"name": F.FENCE_CONFIGMAP},
                             "data": {F.CLAIM_CONTROLLER_KEY: LAB_CLAIM_CONTROLLER}})):
        try:
            r.create(path, body)
        except ApiException as err:
            if err.status != 409:
                raise
    r.patch(cm + "/" + F.FENCE_CONFIGMAP, {"data": {F.CLAIM_CONTROLLER_KEY: LAB_CLAIM_CONTROLLER}})
    yield
    lab.kubectl("delete", "--ignore-not-found", "-f", FENCE_YML, check=False)
    for path in ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kvqlab-dra-fence", cm + "/" + F.FENCE_CONFIGMAP):
        try:
            r.delete(path)
        except ApiException:
            pass


def template(name, devices):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "nic", "exactly": {"deviceClassName": CLASS, "count": devices}}]}}}}


def two_vms_with_claims(r, ns):
    """vm-1 and vm-2, each with a claim of 2 devices from a template of its own (nic-1, nic-2), in a namespace whose
    quotas are at exactly what they use: a migration needs +1 claim and +2 devices each."""
    r.create("/api/v1/namespaces", {"metadata": {"name": ns, "labels": {"kvqlab/test": "true"}}})
    r.create("/api/v1/namespaces/%s/resourcequotas" % ns, {"metadata": {"name": "compute"}, "spec": {"hard": {
        "limits.memory": "8Gi", "limits.cpu": "8", "pods": "10"}}})
    r.create("/api/v1/namespaces/%s/resourcequotas" % ns, {"metadata": {"name": "devices"}, "spec": {"hard": {
        COUNT: "2", DEVICES: "4"}}})
    for i in (1, 2):
        r.create(DRA + "/namespaces/%s/resourceclaimtemplates" % ns, template("nic-%d" % i, 2))
        vm = scenarios.vm_object({"name": "vm-%d" % i, "namespace": ns, "cpu": 1, "memory": "256Mi", "node": "node-1",
                                  "limits": {"cpu": "1", "memory": "256Mi"}})
        vm["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimTemplateName": "nic-%d" % i}]
        r.create(M.KV + "/namespaces/%s/virtualmachines" % ns, vm)
    M.wait(lambda: M.settled(r, ns, 2) and used(r, ns, "devices") == {COUNT: "2", DEVICES: "4"}, 90,
           "vm-1 and vm-2 running with their claims counted")


def fenced(r, ns):
    data = (r.get_or_none("/api/v1/namespaces/%s/configmaps/%s" % (M.OPERATOR_NS, F.FENCE_CONFIGMAP)) or {}).get("data")
    return F.namespace_key(ns) in (data or {})


def claim_body(devices):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"generateName": "grab-"},
            "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": CLASS, "count": devices}}]}}}


def test_under_the_fence_a_tenant_gets_no_claim_and_a_template_grown_after_the_plan_stops_only_its_vm(
        lab, r, emu, devices, fence):
    """Two VMs with a device claim each (2 devices), quotas at their use. After the plan the tenant (edit) re-creates
    vm-1's template asking for 4 devices: without the fence's claims pin vm-1's target claim would take the whole
    +4 devices reserved for both, and vm-2's would be refused. And while the namespace is fenced the tenant creates
    a ResourceClaim of its own. The fence admits only vm-2's target claim (its pod listed by UID, its claim within
    its pin); the tenant's claim and vm-1's grown one are refused, vm-1 stays where it is, named with its template,
    vm-2 moves, and every quota ends byte for byte at its base."""
    ns = "dra-fence-" + secrets.token_hex(3)
    try:
        two_vms_with_claims(r, ns)
        tenant = Rest(tenants.make(lab, ns, roles=("edit",))["edit"].api_client())
        before = dict((q, M.quota(r, ns, q)["spec"]) for q in ("compute", "devices"))
        report = M.assert_ok(M.run_module("kvquota_check", {"nodes": ["node-1"], "plan": True}, lab.user_kubeconfig))
        assert report["namespaces"][ns]["needed"]["devices"] == {COUNT: "2", DEVICES: "4"}

        # after the plan, the tenant re-creates vm-1's template larger (a template's spec is immutable)
        tenant.delete(DRA + "/namespaces/%s/resourceclaimtemplates/nic-1" % ns)
        tenant.create(DRA + "/namespaces/%s/resourceclaimtemplates" % ns, template("nic-1", 4))

        attempts = []

        def attack():
            M.wait(lambda: fenced(r, ns), 120, "namespace %s fenced" % ns, interval=0.1)
            try:
                tenant.create(DRA + "/namespaces/%s/resourceclaims" % ns, claim_body(1))
                attempts.append("admitted")
            except ApiException as err:
                attempts.append("%s %s" % (err.status, err.body))
        thread = threading.Thread(target=attack, daemon=True)
        thread.start()
        res = M.run_module("kvquota_migrate", {"node": "node-1", "plan": report["plan"], "poll_interval": 0.5,
                                               "reservation_prefix": "dra-f-%s" % ns[-6:], "ttl": "1h"},
                           lab.user_kubeconfig, timeout=900)
        thread.join(60)
        print("\n".join(res.get("progress") or []))
        M.assert_ok(res)
        assert len(attempts) == 1 and attempts[0].startswith("403") and "is fenced" in attempts[0], attempts
        left = dict((v["name"], v) for v in res["vms_left"] if v["namespace"] == ns)
        assert set(left) == {"vm-1"}, res["vms_left"]
        reason = left["vm-1"]["left_out"]
        assert "ResourceClaimTemplate %s/nic-1 of claim nic now asks for %s=4, more than the run planned (%s=2)" % (
            ns, CLASS, CLASS) in reason, reason
        nodes = dict((v, r.get(M.KV + "/namespaces/%s/virtualmachineinstances/%s" % (ns, v))["status"]["nodeName"])
                     for v in ("vm-1", "vm-2"))
        assert nodes["vm-1"] == "node-1" and nodes["vm-2"] != "node-1", nodes
        # the refusal was the fence's: the grown claim's create named the claims pin
        events = r.get("/api/v1/namespaces/%s/events" % ns, fieldSelector="reason=FailedResourceClaimCreation")["items"]
        assert any(F.CLAIM_REFUSAL in " ".join((e.get("message") or "").split()) for e in events), \
            [e.get("message") for e in events]
        for q in ("compute", "devices"):
            assert M.quota(r, ns, q)["spec"] == before[q]
        assert not [key for key in M.ledgers(r) if key.split("/")[0] == ns]
        assert not fenced(r, ns)
        # no claim of the tenant's exists; vm-2's target claim replaced its source's, vm-1 keeps its own
        M.wait(lambda: len(claims(r, ns)) == 2 and not [c for c in claims(r, ns)
                                                        if c["metadata"]["name"].startswith("grab-")],
               60, "two claims left, none of the tenant's")
    finally:
        M.delete_namespace(r, ns)


def wait_fenced_in_admission(r, ns):
    """Until the fence's parameters reach admission (the policy's param informer): the administrator's own claim is
    refused. Without this wait an attack right after the fence's write may run before the fence does."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            made = r.create(DRA + "/namespaces/%s/resourceclaims" % ns, claim_body(1))
            r.delete(DRA + "/namespaces/%s/resourceclaims/%s" % (ns, made["metadata"]["name"]))
        except ApiException as err:
            if err.status == 403 and "is fenced" in (err.body or ""):
                return
            # quota admission runs after the policies: its refusal (a namespace whose quota is full) means the fence
            # let the claim through, so it is not in admission yet (make test on dd8ff5a, Kubernetes v1.37.2: this
            # raised at once when the fence's parameters reached admission after the first try)
            if not (err.status == 403 and "exceeded quota" in (err.body or "")):
                raise
        time.sleep(0.3)
    raise AssertionError("the fence never refused a claim in %s" % ns)


def test_each_claim_of_a_target_pod_is_held_to_its_own_entrys_pin(lab, r, emu, devices, fence):
    """A target pod with two template entries (a, b), each planned at 1 device. The tenant re-creates a's template
    asking for 2 after the plan: a's claim is refused (its own pin: 1), b's admitted; a pin of the pod's total (2)
    would have admitted both, 3 devices on a plan of 2 (the security review's attack, found on the first version of
    the claims pin)."""
    ns = "dra-entries-" + secrets.token_hex(3)
    cm = "/api/v1/namespaces/%s/configmaps/%s" % (M.OPERATOR_NS, F.FENCE_CONFIGMAP)
    r.create("/api/v1/namespaces", {"metadata": {"name": ns, "labels": {"kvqlab/test": "true"}}})
    try:
        pod = r.create("/api/v1/namespaces/%s/pods" % ns, {"metadata": {"name": "virt-launcher-x-abcde"}, "spec": {
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            # b first: the resourceclaim controller creates a pod's claims in order and stops at the first refused
            "resourceClaims": [{"name": "b", "resourceClaimTemplateName": "tb"},
                               {"name": "a", "resourceClaimTemplateName": "ta"}]}})
        uid, migration = pod["metadata"]["uid"], "vm-x-kvq-1"
        # the fence as the run writes it for its migration and that target pod
        r.patch(cm, {"data": {F.namespace_key(ns): "lab", F.migration_key(ns, migration): "%s/" % uid,
                              F.pod_key(ns, uid): migration,
                              F.claims_key(ns, migration): F.claims_value({"a": {CLASS: 1}, "b": {CLASS: 1}})}})
        wait_fenced_in_admission(r, ns)
        tenant = Rest(tenants.make(lab, ns, roles=("edit",))["edit"].api_client())
        tenant.create(DRA + "/namespaces/%s/resourceclaimtemplates" % ns, template("ta", 2))
        tenant.create(DRA + "/namespaces/%s/resourceclaimtemplates" % ns, template("tb", 1))
        M.wait(lambda: [c for c in claims(r, ns) if c["metadata"]["annotations"].get(
            "resource.kubernetes.io/pod-claim-name") == "b"], 60, "claim b created")

        def refused_a():
            events = r.get("/api/v1/namespaces/%s/events" % ns,
                           fieldSelector="reason=FailedResourceClaimCreation")["items"]
            return [e for e in events if F.CLAIM_REFUSAL in " ".join((e.get("message") or "").split())
                    and "claim a (a:%s=1)" % CLASS in " ".join((e.get("message") or "").split())]
        M.wait(refused_a, 60, "claim a refused by the fence, naming its own pin")
        time.sleep(3)     # the controller's retries: still refused
        made = claims(r, ns)
        total = sum(q["exactly"]["count"] for c in made for q in c["spec"]["devices"]["requests"])
        assert [c["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] for c in made] == ["b"], made
        assert total == 1, total
    finally:
        data = (r.get_or_none(cm) or {}).get("data") or {}
        r.patch(cm, {"data": dict((k, None) for k in data if ("." + ns + ".") in k or k == F.namespace_key(ns))})
        M.delete_namespace(r, ns)


def test_a_source_claim_its_tenant_orphans_blocks_its_vm_and_is_refused_while_fenced(lab, r, emu, devices, fence):
    """The security review's last attack: the tenant removes the ownerReference of its running pod's claim, which then
    outlives the migration (the resourceclaim controller deletes only the claims a finished pod owns) and keeps its
    devices after the release. Before a run: kvquota_check blocks that VM alone (claim_not_owned), naming the claim;
    while the namespace is fenced: the change is refused."""
    ns = "dra-orphan-" + secrets.token_hex(3)
    cm = "/api/v1/namespaces/%s/configmaps/%s" % (M.OPERATOR_NS, F.FENCE_CONFIGMAP)
    r.create("/api/v1/namespaces", {"metadata": {"name": ns, "labels": {"kvqlab/test": "true"}}})
    try:
        a_vm_with_a_claim(r, ns)
        (claim,) = claims(r, ns)
        path = DRA + "/namespaces/%s/resourceclaims/%s" % (ns, claim["metadata"]["name"])
        owners = claim["metadata"]["ownerReferences"]
        tenant = Rest(tenants.make(lab, ns, roles=("edit",))["edit"].api_client())
        tenant.patch(path, {"metadata": {"ownerReferences": None}})        # not fenced: the tenant may
        node = r.get(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns)["status"]["nodeName"]
        report = M.assert_ok(M.run_module("kvquota_check", {"nodes": [node]}, lab.user_kubeconfig))
        (blocked,) = [b for b in report["blocked_vms"] if b["namespace"] == ns]
        assert (blocked["kind"], blocked["vm"]) == ("claim_not_owned", "vm-1") and \
            claim["metadata"]["name"] in blocked["message"], blocked
        print("blocked: %s" % blocked["message"])

        # its owner back: the VM is planned again; then fenced, the tenant may not orphan it
        r.patch(path, {"metadata": {"ownerReferences": owners}})
        report = M.assert_ok(M.run_module("kvquota_check", {"nodes": [node]}, lab.user_kubeconfig))
        assert not [b for b in report["blocked_vms"] if b["namespace"] == ns], report["blocked_vms"]
        assert report["namespaces"][ns]["summary"]["migrating_vms"] == 1
        r.patch(cm, {"data": {F.namespace_key(ns): "lab"}})
        wait_fenced_in_admission(r, ns)
        try:
            tenant.patch(path, {"metadata": {"ownerReferences": None}})
            raise AssertionError("the fence let the tenant orphan its claim")
        except ApiException as err:
            assert err.status == 403 and "no claim may change its owners" in " ".join(err.body.split()), err.body
        tenant.patch(path, {"metadata": {"labels": {"tenant": "may-label"}}})   # no owner change: not the fence's
        assert r.get(path)["metadata"]["ownerReferences"] == owners
    finally:
        data = (r.get_or_none(cm) or {}).get("data") or {}
        r.patch(cm, {"data": dict((k, None) for k in data if ("." + ns + ".") in k or k == F.namespace_key(ns))})
        M.delete_namespace(r, ns)
