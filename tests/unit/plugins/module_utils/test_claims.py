# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""DRA ResourceClaims of a migration target: the quota evaluator's charge of a claim spec (vectors written by hand
from k8s pkg/quota/v1/evaluator/core/resource_claims.go's rules), validation of tenant input, quota matching (the
evaluator matches no scope), and what a VM's migration is charged for its template-backed claims."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from fractions import Fraction

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import claims
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import quotas as q
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.vmi import VmInputError

COUNT = "count/resourceclaims.resource.k8s.io"
GPU = "gpu.example.com.deviceclass.resource.k8s.io/devices"
NIC = "nic.example.com.deviceclass.resource.k8s.io/devices"


def exactly(klass, mode=None, count=None):
    request = {"deviceClassName": klass}
    if mode is not None:
        request["allocationMode"] = mode
    if count is not None:
        request["count"] = count
    return request


def spec(*requests):
    return {"devices": {"requests": [dict(request, name="r%d" % i) for i, request in enumerate(requests)]}}


@pytest.mark.parametrize("claim_spec, expected", [
    # no requests: the claim object alone
    ({}, {COUNT: 1}),
    ({"devices": {}}, {COUNT: 1}),
    # exactly, ExactCount by default, count 1 by default
    (spec({"exactly": exactly("gpu.example.com")}), {COUNT: 1, GPU: 1}),
    (spec({"exactly": exactly("gpu.example.com", "ExactCount", 3)}), {COUNT: 1, GPU: 3}),
    # All: the most one allocation holds, 32
    (spec({"exactly": exactly("gpu.example.com", "All")}), {COUNT: 1, GPU: 32}),
    # All ignores a count
    (spec({"exactly": exactly("gpu.example.com", "All", 2)}), {COUNT: 1, GPU: 32}),
    # summed per class over the requests
    (spec({"exactly": exactly("gpu.example.com", count=2)}, {"exactly": exactly("gpu.example.com")},
          {"exactly": exactly("nic.example.com")}), {COUNT: 1, GPU: 3, NIC: 1}),
    # firstAvailable: per class the largest subrequest
    (spec({"firstAvailable": [dict(exactly("gpu.example.com", count=4), name="big"),
                              dict(exactly("gpu.example.com", count=1), name="small")]}), {COUNT: 1, GPU: 4}),
    # firstAvailable over two classes: each class its largest (not the largest of all)
    (spec({"firstAvailable": [dict(exactly("gpu.example.com", count=2), name="a"),
                              dict(exactly("nic.example.com", count=5), name="b"),
                              dict(exactly("gpu.example.com"), name="c")]}), {COUNT: 1, GPU: 2, NIC: 5}),
    # firstAvailable with All, then added to an exactly request of the same class
    (spec({"firstAvailable": [dict(exactly("gpu.example.com", "All"), name="all"),
                              dict(exactly("gpu.example.com", count=8), name="eight")]},
          {"exactly": exactly("gpu.example.com", count=2)}), {COUNT: 1, GPU: 34}),
])
def test_claim_spec_charge_follows_the_evaluator(claim_spec, expected):
    assert claims.claim_spec_charge(claim_spec) == dict((k, Fraction(v)) for k, v in expected.items())


@pytest.mark.parametrize("claim_spec, field", [
    ("not a mapping", "spec"),
    (spec({}), "spec.devices.requests[0]"),  # neither exactly nor firstAvailable
    (spec({"exactly": exactly("gpu.example.com"), "firstAvailable": [exactly("gpu.example.com")]}),
     "spec.devices.requests[0]"),
    (spec({"exactly": exactly("GPU_Class")}), "spec.devices.requests[0].exactly.deviceClassName"),
    (spec({"exactly": exactly("")}), "spec.devices.requests[0].exactly.deviceClassName"),
    (spec({"exactly": {"count": 1}}), "spec.devices.requests[0].exactly.deviceClassName"),
    (spec({"exactly": exactly("gpu.example.com", "Some")}), "spec.devices.requests[0].exactly.allocationMode"),
    (spec({"exactly": exactly("gpu.example.com", count=0)}), "spec.devices.requests[0].exactly.count"),
    (spec({"exactly": exactly("gpu.example.com", count=-1)}), "spec.devices.requests[0].exactly.count"),
    (spec({"exactly": exactly("gpu.example.com", count=1.5)}), "spec.devices.requests[0].exactly.count"),
    (spec({"exactly": exactly("gpu.example.com", count="2")}), "spec.devices.requests[0].exactly.count"),
    (spec({"exactly": exactly("gpu.example.com", count=True)}), "spec.devices.requests[0].exactly.count"),
    (spec({"firstAvailable": []}), "spec.devices.requests[0].firstAvailable"),
    (spec({"firstAvailable": [exactly("gpu.example.com", "Any")]}),
     "spec.devices.requests[0].firstAvailable[0].allocationMode"),
])
def test_claim_spec_charge_refuses_what_it_cannot_charge(claim_spec, field):
    with pytest.raises(claims.ClaimInputError) as raised:
        claims.claim_spec_charge(claim_spec)
    assert isinstance(raised.value, VmInputError)
    assert raised.value.field == field
    assert raised.value.fix


@pytest.mark.parametrize("name, tracked", [
    (COUNT, True),
    (GPU, True),
    (".deviceclass.resource.k8s.io/devices", False),
    ("count/resourceclaims", False),
    ("requests.deviceclass.resource.kubernetes.io/gpu.example.com", False),  # DRAExtendedResource: not modelled
    ("persistentvolumeclaims", False),
    ("requests.cpu", False),
])
def test_claim_tracks(name, tracked):
    assert q.claim_tracks(name) is tracked
    # a claim name is neither a pod's nor a PVC's
    if tracked:
        assert not q.pod_tracks(name) and not q.pvc_tracks(name)


def quota(hard, scopes=None, selector=None):
    obj = {"metadata": {"name": "dra", "namespace": "tenant-a"}, "spec": {"hard": dict(hard)},
           "status": {"hard": dict(hard), "used": {}}}
    if scopes:
        obj["spec"]["scopes"] = scopes
    if selector:
        obj["spec"]["scopeSelector"] = {"matchExpressions": selector}
    return obj


LAUNCHER = q.pod_facts(priority_class_name=None)
CHARGE = {"requests.cpu": Fraction(1), "pods": Fraction(1), COUNT: Fraction(1), GPU: Fraction(2),
          "requests.storage": Fraction(10 * 2 ** 20)}


def test_a_quota_charges_claims_only_for_the_names_it_tracks():
    assert q.charged_part(quota({COUNT: "3", GPU: "4", "requests.cpu": "8"}), CHARGE, LAUNCHER) == {
        COUNT: 1, GPU: 2, "requests.cpu": 1}
    assert q.charged_part(quota({GPU: "4"}), CHARGE, LAUNCHER) == {GPU: 2}
    assert q.charged_part(quota({NIC: "4"}), CHARGE, LAUNCHER) == {}


@pytest.mark.parametrize("scoped", [
    {"scopes": ["NotTerminating"]},
    {"selector": [{"scopeName": "PriorityClass", "operator": "DoesNotExist"}]},
    {"selector": [{"scopeName": "VolumeAttributesClass", "operator": "DoesNotExist"}]},
])
def test_a_scoped_quota_never_charges_claims(scoped):
    """The claim evaluator matches no scope (MatchesNoScopeFunc): a quota with any scope charges no claim, while
    the pod part still follows the pod's scopes."""
    part = q.charged_part(quota({COUNT: "3", GPU: "4", "requests.cpu": "8"}, **scoped), CHARGE, LAUNCHER)
    assert COUNT not in part and GPU not in part


def template(name, claim_spec, namespace="tenant-a"):
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"spec": claim_spec}}


def vmi(*entries, kind="VirtualMachineInstance"):
    spec = {"resourceClaims": list(entries)}
    if kind == "VirtualMachine":
        return {"kind": kind, "metadata": {"name": "vm1", "namespace": "tenant-a"},
                "spec": {"template": {"spec": spec}}}
    return {"kind": kind, "metadata": {"name": "vm1", "namespace": "tenant-a"}, "spec": spec}


TEMPLATES = {"gpus": template("gpus", spec({"exactly": exactly("gpu.example.com", count=2)})),
             "nic": template("nic", spec({"exactly": exactly("nic.example.com")}))}


@pytest.mark.parametrize("kind", ["VirtualMachineInstance", "VirtualMachine"])
def test_migration_claims_charge_counts_each_template_backed_entry(kind):
    subject = vmi({"name": "a", "resourceClaimTemplateName": "gpus"}, {"name": "b", "resourceClaimTemplateName": "gpus"},
                  {"name": "c", "resourceClaimTemplateName": "nic"}, {"name": "d", "resourceClaimName": "shared"},
                  kind=kind)
    assert claims.migration_claims_charge(subject, TEMPLATES) == {COUNT: 3, GPU: 4, NIC: 1}
    assert claims.shared_claims(subject) == ["shared"]


def test_each_claim_is_charged_and_pinned_by_its_own_entry():
    """What the headroom fence pins per claim (issue 27, review): each entry's own devices, never the pod's total."""
    subject = vmi({"name": "a", "resourceClaimTemplateName": "gpus"}, {"name": "c", "resourceClaimTemplateName": "nic"},
                  {"name": "d", "resourceClaimName": "shared"})
    by_entry = claims.migration_claims_by_entry(subject, TEMPLATES)
    assert by_entry == {"a": {COUNT: 1, GPU: 2}, "c": {COUNT: 1, NIC: 1}}
    assert claims.entry_devices(by_entry) == {"a": {"gpu.example.com": 2}, "c": {"nic.example.com": 1}}
    assert claims.entry_devices({"e": {COUNT: 1}}) == {"e": {}}


def test_a_shared_claim_charges_nothing():
    assert claims.migration_claims_charge(vmi({"name": "d", "resourceClaimName": "shared"}), {}) == {}
    assert claims.migration_claims_charge(vmi(), {}) == {}


def test_a_missing_template_blocks_the_vm_with_the_fix():
    with pytest.raises(claims.ClaimInputError) as raised:
        claims.migration_claims_charge(vmi({"name": "a", "resourceClaimTemplateName": "gone"}), TEMPLATES)
    assert "tenant-a/gone" in raised.value.message and "does not exist" in raised.value.message
    assert "create ResourceClaimTemplate tenant-a/gone" in raised.value.fix
    assert raised.value.field == "spec.resourceClaims[a].resourceClaimTemplateName"


def test_a_template_that_cannot_be_charged_names_itself():
    bad = {"bad": template("bad", spec({"exactly": exactly("gpu.example.com", count=0)}))}
    with pytest.raises(claims.ClaimInputError) as raised:
        claims.migration_claims_charge(vmi({"name": "a", "resourceClaimTemplateName": "bad"}), bad)
    assert "ResourceClaimTemplate tenant-a/bad" in raised.value.message
    assert "re-create it" in raised.value.fix


@pytest.mark.parametrize("entry", [
    "gpus", {"resourceClaimTemplateName": "gpus"}, {"name": "a"},
    {"name": "a", "resourceClaimTemplateName": "gpus", "resourceClaimName": "x"},
])
def test_an_unreadable_entry_blocks_the_vm(entry):
    with pytest.raises(claims.ClaimInputError) as raised:
        claims.migration_claims_charge(vmi(entry), TEMPLATES)
    assert raised.value.field.startswith("spec.resourceClaims[0]")


def test_claim_usage_is_its_spec_charge():
    claim = {"metadata": {"name": "c"}, "spec": spec({"exactly": exactly("gpu.example.com", "All")}),
             "status": {"allocation": {"devices": {"results": []}}}}
    assert claims.claim_usage(claim) == {COUNT: 1, GPU: 32}
    assert claims.claim_usage({"spec": spec({"exactly": exactly("gpu.example.com", "Newer")})}) == {COUNT: 1}


def test_a_source_claim_no_longer_owned_by_its_pod_is_named():
    """The tenant removed the ownerReference of its running pod's claim (security review): it would outlive the
    migration. Owned claims, claims not read, and a pod without statuses tell nothing."""
    pod = {"metadata": {"uid": "pod-1"}, "status": {"resourceClaimStatuses": [
        {"name": "a", "resourceClaimName": "vm-a-a-x1"}, {"name": "c", "resourceClaimName": "vm-a-c-x2"}]}}
    owned = {"metadata": {"name": "vm-a-a-x1", "ownerReferences": [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "pod-1", "controller": True}]}}
    orphan = {"metadata": {"name": "vm-a-c-x2", "ownerReferences": []}}
    claims_now = {"vm-a-a-x1": owned, "vm-a-c-x2": orphan}
    assert claims.claims_not_owned(pod, claims_now, ["a", "c"]) == ["vm-a-c-x2"]
    assert claims.claims_not_owned(pod, claims_now, ["a"]) == []
    assert claims.claims_not_owned(pod, None, ["a", "c"]) == []
    assert claims.claims_not_owned(None, claims_now, ["a", "c"]) == []
    assert claims.claims_not_owned({"metadata": {"uid": "pod-1"}}, claims_now, ["a", "c"]) == []
