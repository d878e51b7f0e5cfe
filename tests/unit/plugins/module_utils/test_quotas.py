# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Quota matching, charged parts, headroom plans and fixes: examples plus properties."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import quotas as q
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import rancher_keys
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError

Mi = 1024 ** 2
Gi = 1024 ** 3
LAUNCHER = q.pod_facts(priority_class_name=None)


def quota(name="compute-quota", hard=None, used=None, scopes=None, selector=None, namespace="tenant-a",
          labels=None, status_hard=True):
    obj = {"metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
           "spec": {"hard": dict(hard or {})},
           "status": {"used": dict(used or {})}}
    if status_hard:
        obj["status"]["hard"] = dict(hard or {})
    if scopes:
        obj["spec"]["scopes"] = list(scopes)
    if selector:
        obj["spec"]["scopeSelector"] = {"matchExpressions": list(selector)}
    return obj


def vm(name, charge, facts=None, source=None, pod_charge=None, namespace="tenant-a"):
    entry = {"namespace": namespace, "name": name, "charge": charge, "facts": facts or LAUNCHER}
    if source is not None:
        entry["source"] = source
    if pod_charge is not None:
        entry["pod_charge"] = pod_charge
    return entry


# ---------------------------------------------------------------------------
# names

@pytest.mark.parametrize("name, pod, pvc", [
    ("cpu", True, False), ("memory", True, False), ("ephemeral-storage", True, False),
    ("requests.cpu", True, False), ("requests.memory", True, False), ("requests.ephemeral-storage", True, False),
    ("limits.cpu", True, False), ("limits.memory", True, False), ("limits.ephemeral-storage", True, False),
    ("pods", True, False), ("count/pods", True, False),
    ("hugepages-2Mi", True, False), ("requests.hugepages-1Gi", True, False),
    ("requests.devices.kubevirt.io/kvm", True, False), ("requests.nvidia.com/gpu", True, False),
    ("requests.example.kubernetes.io/thing", False, False),  # native: not an extended resource
    ("limits.nvidia.com/gpu", False, False),  # extended resources are quota'd by requests only
    ("limits.hugepages-2Mi", False, False),
    ("requests.storage", False, True), ("persistentvolumeclaims", False, True),
    ("count/persistentvolumeclaims", False, True),
    ("gold.storageclass.storage.k8s.io/requests.storage", False, True),
    ("gold.storageclass.storage.k8s.io/persistentvolumeclaims", False, True),
    ("services", False, False), ("count/secrets", False, False), ("configmaps", False, False),
])
def test_tracked_names(name, pod, pvc):
    assert q.pod_tracks(name) is pod
    assert q.pvc_tracks(name) is pvc


def test_tracked_names_of_a_quota_include_status_hard():
    obj = quota(hard={"limits.cpu": "30", "services": "5"})
    obj["status"]["hard"]["requests.memory"] = "1Gi"
    assert q.tracked_names(obj) == frozenset(["limits.cpu", "requests.memory"])
    assert q.namespace_tracked_names([obj, quota(hard={"pods": "3"})]) == frozenset(
        ["limits.cpu", "services", "requests.memory", "pods"])


# ---------------------------------------------------------------------------
# scopes

@pytest.mark.parametrize("scope, facts, expected", [
    ("Terminating", LAUNCHER, False),
    ("NotTerminating", LAUNCHER, True),
    ("BestEffort", LAUNCHER, False),
    ("NotBestEffort", LAUNCHER, True),
    ("CrossNamespacePodAffinity", LAUNCHER, False),
    ("CrossNamespacePodAffinity", q.pod_facts(cross_namespace_pod_affinity=True), True),
    ("Terminating", q.pod_facts(terminating=True), True),
    ("BestEffort", q.pod_facts(best_effort=True), True),
    ("PriorityClass", LAUNCHER, False),  # scopes: [PriorityClass] = Exists
    ("PriorityClass", q.pod_facts(priority_class_name="high"), True),
    ("VolumeAttributesClass", LAUNCHER, False),  # a PVC scope never matches a pod
    ("SomethingNew", LAUNCHER, False),
])
def test_plain_scopes(scope, facts, expected):
    assert q.quota_matches_pod(quota(hard={"limits.cpu": "1"}, scopes=[scope]), facts) is expected


@pytest.mark.parametrize("operator, values, pc, expected", [
    ("In", ["high", "vm"], "vm", True),
    ("In", ["high"], "vm", False),
    ("In", ["high"], None, False),
    ("NotIn", ["high"], "vm", True),
    ("NotIn", ["high"], "high", False),
    ("NotIn", ["high"], None, True),  # label selector semantics: an absent label is "not in"
    ("Exists", [], "vm", True),
    ("Exists", [], None, False),
    ("DoesNotExist", [], None, True),
    ("DoesNotExist", [], "vm", False),
])
def test_priority_class_selector(operator, values, pc, expected):
    obj = quota(hard={"requests.cpu": "4"},
                selector=[{"scopeName": "PriorityClass", "operator": operator, "values": values}])
    assert q.quota_matches_pod(obj, q.pod_facts(priority_class_name=pc)) is expected


def test_every_scope_must_match():
    obj = quota(hard={"limits.cpu": "4"}, scopes=["NotTerminating", "NotBestEffort"],
                selector=[{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}])
    assert not q.quota_matches_pod(obj, LAUNCHER)
    assert q.quota_matches_pod(obj, q.pod_facts(priority_class_name="high"))
    assert q.why_not_matching(obj, LAUNCHER) == (
        "scope PriorityClass In (high) does not match a virt-launcher pod")
    assert q.why_not_matching(quota(hard={"limits.cpu": "4"}, scopes=["BestEffort"]), LAUNCHER) == (
        "scope BestEffort does not match a virt-launcher pod")


def test_operator_is_ignored_for_non_priority_scopes():
    obj = quota(hard={"pods": "4"}, selector=[{"scopeName": "NotTerminating", "operator": "DoesNotExist"}])
    assert q.quota_matches_pod(obj, LAUNCHER)


def test_unknown_operator_is_an_input_error():
    obj = quota(hard={"pods": "4"}, selector=[{"scopeName": "PriorityClass", "operator": "Gt", "values": ["1"]}])
    with pytest.raises(InputError):
        q.quota_matches_pod(obj, LAUNCHER)


def test_quota_without_pod_resources_does_not_match_pods():
    assert not q.quota_matches_pod(quota(hard={"services": "3", "requests.storage": "1Ti"}), LAUNCHER)
    assert q.why_not_matching(quota(hard={"services": "3"}), LAUNCHER) == "limits no pod resource"


def test_pvc_matching():
    assert q.quota_matches_pvc(quota(hard={"requests.storage": "1Ti"}))
    assert not q.quota_matches_pvc(quota(hard={"requests.storage": "1Ti"}, scopes=["NotTerminating"]))
    assert not q.quota_matches_pvc(quota(hard={"limits.cpu": "1"}))
    vac_absent = quota(hard={"requests.storage": "1Ti"},
                       selector=[{"scopeName": "VolumeAttributesClass", "operator": "DoesNotExist"}])
    assert q.quota_matches_pvc(vac_absent)
    assert not q.quota_matches_pvc(vac_absent, volume_attributes_class="fast")


# ---------------------------------------------------------------------------
# pod facts

VMI = {
    "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
    "metadata": {"name": "vm1", "namespace": "tenant-a"},
    "spec": {"domain": {"resources": {"requests": {"memory": "1Gi"}}}},
}


def test_launcher_facts_from_vmi_and_vm():
    assert q.launcher_pod_facts(VMI) == LAUNCHER
    assert q.launcher_pod_facts(VMI, default_priority_class="default")["priority_class_name"] == "default"
    with_pc = dict(VMI, spec=dict(VMI["spec"], priorityClassName="vm-high"))
    assert q.launcher_pod_facts(with_pc, "default")["priority_class_name"] == "vm-high"
    vm_obj = {"kind": "VirtualMachine",
              "spec": {"template": {"spec": {"priorityClassName": "gold", "domain": {}}}}}
    assert q.launcher_pod_facts(vm_obj)["priority_class_name"] == "gold"


@pytest.mark.parametrize("affinity, expected", [
    (None, False),
    ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}, False),
    ({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "x"}]}}, False),
    ({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "x", "namespaces": ["other"]}]}}, True),
    ({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"topologyKey": "x", "namespaceSelector": {}}}]}}, True),
    ({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "x", "namespaces": []}]}}, False),
])
def test_cross_namespace_affinity(affinity, expected):
    vmi = dict(VMI, spec=dict(VMI["spec"], affinity=affinity))
    assert q.launcher_pod_facts(vmi)["cross_namespace_pod_affinity"] is expected


def test_facts_of_existing_pods():
    best_effort = {"spec": {"containers": [{"name": "a"}]}}
    assert q.facts_of_pod(best_effort)["best_effort"]
    burstable = {"spec": {"activeDeadlineSeconds": 0, "priorityClassName": "p",
                          "containers": [{"name": "a", "resources": {"limits": {"memory": "1Gi"}}}]}}
    facts = q.facts_of_pod(burstable)
    assert facts == q.pod_facts("p", terminating=True, best_effort=False)
    only_gpu = {"spec": {"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    assert q.facts_of_pod(only_gpu)["best_effort"]


# ---------------------------------------------------------------------------
# usage and charged part

LAUNCHER_POD = {
    "metadata": {"name": "virt-launcher-vm1-abcde", "namespace": "tenant-a"},
    "spec": {
        "containers": [
            {"name": "compute", "resources": {
                "requests": {"cpu": "100m", "memory": "1294Mi", "ephemeral-storage": "50M",
                             "devices.kubevirt.io/kvm": "1", "devices.kubevirt.io/tun": "1"},
                "limits": {"cpu": "1", "memory": "2Gi", "devices.kubevirt.io/kvm": "1",
                           "devices.kubevirt.io/tun": "1"}}},
            {"name": "guest-console-log", "resources": {
                "requests": {"cpu": "5m", "memory": "35M"}, "limits": {"cpu": "15m", "memory": "60M"}}},
        ],
        "initContainers": [
            {"name": "container-disk-binary", "resources": {
                "requests": {"cpu": "10m", "memory": "1M"}, "limits": {"cpu": "100m", "memory": "40M"}}},
        ],
    },
    "status": {"phase": "Running"},
}


def test_pod_usage_of_a_launcher_pod():
    usage = q.pod_usage(LAUNCHER_POD)
    assert usage["pods"] == 1 and usage["count/pods"] == 1
    assert usage["cpu"] == usage["requests.cpu"] == Fraction(105, 1000)
    assert usage["limits.cpu"] == Fraction(1015, 1000)
    assert usage["memory"] == usage["requests.memory"] == 1294 * Mi + 35 * 10 ** 6
    assert usage["limits.memory"] == 2 * Gi + 60 * 10 ** 6
    assert usage["ephemeral-storage"] == usage["requests.ephemeral-storage"] == 50 * 10 ** 6
    assert "limits.ephemeral-storage" not in usage
    assert usage["requests.devices.kubevirt.io/kvm"] == 1
    assert "devices.kubevirt.io/kvm" not in usage and "limits.devices.kubevirt.io/kvm" not in usage


def test_pod_usage_init_containers_overhead_hugepages_and_terminal():
    pod = {"spec": {
        "containers": [{"name": "a", "resources": {"requests": {"cpu": "100m", "hugepages-2Mi": "1Gi"},
                                                   "limits": {"hugepages-2Mi": "1Gi"}}}],
        "initContainers": [{"name": "big", "resources": {"requests": {"cpu": "2"}}},
                           {"name": "side", "restartPolicy": "Always",
                            "resources": {"requests": {"cpu": "50m"}}}],
        "overhead": {"cpu": "250m"}}, "status": {"phase": "Pending"}}
    usage = q.pod_usage(pod)
    # regular init containers run alone (before the sidecar): max(2, 0.1 + 0.05) + overhead
    assert usage["requests.cpu"] == Fraction(2250, 1000)
    assert usage["hugepages-2Mi"] == usage["requests.hugepages-2Mi"] == Gi
    # the overhead goes on a limit only where the pod has that limit (PodLimits): no limits.cpu here
    assert "limits.cpu" not in usage
    limited = {"spec": dict(pod["spec"], containers=[{"name": "a", "resources": {"limits": {"cpu": "1"}}}]),
               "status": {"phase": "Running"}}
    assert q.pod_usage(limited)["limits.cpu"] == Fraction(1250, 1000)
    assert q.pod_usage(dict(pod, status={"phase": "Succeeded"})) == {"count/pods": 1}
    assert q.pod_usage(dict(pod, status={"phase": "Failed"})) == {"count/pods": 1}


def test_expand_aliases():
    charge = {"requests.cpu": Fraction(1, 10), "memory": Fraction(5), "requests.hugepages-1Gi": Fraction(Gi)}
    out = q.expand_aliases(charge)
    assert out["cpu"] == out["requests.cpu"] == Fraction(1, 10)
    assert out["requests.memory"] == out["memory"] == 5
    assert out["hugepages-1Gi"] == Gi
    assert charge == {"requests.cpu": Fraction(1, 10), "memory": Fraction(5), "requests.hugepages-1Gi": Fraction(Gi)}


CHARGE = {"requests.cpu": Fraction(105, 1000), "limits.cpu": Fraction(2015, 1000),
          "requests.memory": Fraction(1000 * Mi), "limits.memory": Fraction(2200 * Mi),
          "requests.ephemeral-storage": Fraction(50 * 10 ** 6), "pods": Fraction(2), "count/pods": Fraction(2),
          "requests.devices.kubevirt.io/kvm": Fraction(1),
          "requests.storage": Fraction(10 * Mi), "persistentvolumeclaims": Fraction(1)}


def test_charged_part_masks_by_hard_and_handles_aliases():
    obj = quota(hard={"cpu": "10", "memory": "20Gi", "limits.memory": "30Gi", "services": "4",
                      "requests.devices.kubevirt.io/kvm": "10", "hugepages-2Mi": "1Gi"})
    assert q.charged_part(obj, CHARGE, LAUNCHER) == {
        "cpu": Fraction(105, 1000), "memory": Fraction(1000 * Mi), "limits.memory": Fraction(2200 * Mi),
        "requests.devices.kubevirt.io/kvm": 1}


def test_charged_part_pvc_part_needs_an_unscoped_quota():
    unscoped = quota(hard={"requests.storage": "1Ti", "persistentvolumeclaims": "10", "pods": "10"})
    assert q.charged_part(unscoped, CHARGE, LAUNCHER) == {"requests.storage": 10 * Mi,
                                                          "persistentvolumeclaims": 1, "pods": 2}
    scoped = quota(hard={"requests.storage": "1Ti", "pods": "10"}, scopes=["NotTerminating"])
    assert q.charged_part(scoped, CHARGE, LAUNCHER) == {"pods": 2}
    not_matching = quota(hard={"pods": "10"}, scopes=["BestEffort"])
    assert q.charged_part(not_matching, CHARGE, LAUNCHER) == {}


# ---------------------------------------------------------------------------
# headroom arithmetic

def test_headroom_needed_checks_only_charged_names():
    hard = {"limits.cpu": Fraction(30), "limits.memory": Fraction(60 * Gi), "pods": Fraction(10)}
    used = {"limits.cpu": Fraction(28405, 1000), "limits.memory": Fraction(62820279552), "pods": Fraction(12)}
    charge = {"limits.cpu": Fraction(4015, 1000), "limits.memory": Fraction(8940039936)}
    assert q.headroom_needed(used, hard, charge) == {
        "limits.cpu": Fraction(242, 100), "limits.memory": Fraction(8940039936 + 62820279552 - 60 * Gi)}
    # pods is over hard but the charge does not request pods: admission does not look at it
    assert "pods" not in q.headroom_needed(used, hard, charge)
    assert q.over_hard(used, hard) == {"pods": 2}
    assert q.free_room(used, hard)["pods"] == -2


def test_growth_of():
    target = {"limits.memory": Fraction(3000), "pods": Fraction(1), "count/pods": Fraction(1)}
    source = {"limits.memory": Fraction(2000), "pods": Fraction(1), "count/pods": Fraction(1)}
    assert q.growth_of(target, source) == {"limits.memory": 1000, "count/pods": 1}
    assert q.growth_of(target, None) == {"count/pods": 1}
    assert q.growth_of(target, target) == {"count/pods": 1}


def test_plan_quota_batches_growth_and_over_hard():
    obj = quota(hard={"limits.memory": "5000Mi", "limits.cpu": "8"},
                used={"limits.memory": "4000Mi", "limits.cpu": "4"})
    target = {"limits.memory": Fraction(1100 * Mi), "limits.cpu": Fraction(1), "pods": Fraction(1)}
    source = {"limits.memory": Fraction(1000 * Mi), "limits.cpu": Fraction(1)}
    vms = [vm("a", target, source=source), vm("b", target, source=source), vm("c", target, source=source)]
    plan = q.plan_quota(obj, vms, [["tenant-a/a", "tenant-a/b"], ["tenant-a/c"]])
    assert plan.batches[0].charge == {"limits.memory": 2200 * Mi, "limits.cpu": 2}
    assert plan.batches[0].needed == {"limits.memory": 1200 * Mi}
    # batch 2 starts after a and b grew by 100Mi each
    assert plan.batches[1].used_before["limits.memory"] == 4200 * Mi
    assert plan.batches[1].needed == {"limits.memory": 300 * Mi}
    assert plan.needed == {"limits.memory": 1200 * Mi}
    assert plan.needed_all_at_once == {"limits.memory": 2300 * Mi}
    assert plan.over_hard == {}
    assert plan.used_after["limits.memory"] == 4300 * Mi
    assert plan.over_after == {}


def test_plan_reports_usage_above_hard_now_and_after():
    obj = quota(hard={"limits.memory": "4000Mi"}, used={"limits.memory": "4100Mi"})
    target = {"limits.memory": Fraction(1100 * Mi)}
    plan = q.plan_quota(obj, [vm("a", target, source={"limits.memory": Fraction(1000 * Mi)})], [["tenant-a/a"]])
    assert plan.over_hard == {"limits.memory": 100 * Mi}
    assert plan.over_after == {"limits.memory": 200 * Mi}
    assert plan.needed == {"limits.memory": 1200 * Mi}
    fixes = q.fixes_for_plan("tenant-a", obj, plan)
    assert [f["permanent"] for f in fixes] == [True, False]
    assert fixes[0]["text"].startswith("raise limits.memory of quota tenant-a/compute-quota to 4200Mi: usage "
                                       "4100Mi is above hard 4000Mi; after the migrations usage will be 4200Mi")
    # with the permanent raise to 4200Mi, the window needs 4100 + 1100 - 4200 = 1000Mi more
    assert fixes[1]["suggested"] == "5200Mi"
    assert fixes[1]["text"] == ("raise limits.memory of quota tenant-a/compute-quota to 5200Mi for the maintenance "
                                "window: batch 1 needs 1000Mi more")


def test_fix_text_and_data():
    obj = quota(hard={"limits.memory": "5000Mi", "limits.cpu": "30"},
                used={"limits.memory": "4000Mi", "limits.cpu": "29"})
    target = {"limits.memory": Fraction(2000 * Mi), "limits.cpu": Fraction(2015, 1000)}
    plan = q.plan_quota(obj, [vm("a", target)], [["tenant-a/a"]])
    fixes = q.fixes_for_plan("tenant-a", obj, plan)
    by_name = dict((f["resource"], f) for f in fixes)
    mem = by_name["limits.memory"]
    assert mem["text"] == ("raise limits.memory of quota tenant-a/compute-quota to 6000Mi for the maintenance "
                           "window: batch 1 needs 1000Mi more")
    assert (mem["current"], mem["required"], mem["suggested"], mem["increase"]) == (
        "5000Mi", "6000Mi", "6000Mi", "1000Mi")
    cpu = by_name["limits.cpu"]
    assert (cpu["current"], cpu["required"], cpu["suggested"]) == ("30", "31015m", "31015m")
    rancher = q.fixes_for_plan("tenant-a", obj, plan, owner="rancher", key_for=rancher_keys.rancher_key)
    assert rancher[1]["text"].startswith("raise limitsMemory in annotation field.cattle.io/resourceQuota of "
                                         "namespace tenant-a to 6000Mi for the maintenance window")
    assert rancher[1]["rancher_key"] == "limitsMemory"


@pytest.mark.parametrize("name, value, fmt, expected", [
    ("limits.memory", 6000 * Mi - 5, "BinarySI", "6000Mi"),
    ("limits.memory", 6000 * Mi + 1, "BinarySI", "6001Mi"),
    ("limits.memory", 62820279552, "DecimalSI", "62821M"),
    ("limits.cpu", Fraction(300001, 10000), "DecimalSI", "30001m"),
    ("pods", Fraction(7), "DecimalSI", "7"),
    ("requests.devices.kubevirt.io/kvm", Fraction(3), "DecimalSI", "3"),
    ("limits.memory", 100, "BinarySI", "1Ki"),
])
def test_suggested_value(name, value, fmt, expected):
    assert q.show(q.suggested_value(name, value, fmt), name, fmt) == expected


def test_plan_namespace_separates_matching_quotas():
    compute = quota(hard={"limits.memory": "10Gi"})
    best_effort = quota("be", hard={"pods": "10"}, scopes=["BestEffort"])
    services = quota("objects", hard={"services": "10"})
    matching, not_matching = q.plan_namespace(
        "tenant-a", [compute, best_effort, services], [vm("a", {"limits.memory": Fraction(Gi)})], [["tenant-a/a"]])
    assert [m[0]["metadata"]["name"] for m in matching] == ["compute-quota"]
    assert dict((n[0]["metadata"]["name"], n[1]) for n in not_matching) == {
        "be": "scope BestEffort does not match a virt-launcher pod", "objects": "limits no pod resource"}


# ---------------------------------------------------------------------------
# properties

names = st.sampled_from(["limits.cpu", "limits.memory", "requests.cpu", "requests.memory", "pods"])
amounts = st.integers(min_value=0, max_value=10 ** 6).map(Fraction)
lists = st.dictionaries(names, amounts, max_size=5)


@settings(max_examples=200, deadline=None)
@given(used=lists, hard=st.dictionaries(names, amounts, min_size=1, max_size=5), batch=st.lists(lists, max_size=6),
       extra=lists)
def test_headroom_is_monotonic_in_the_batch(used, hard, batch, extra):
    before = q.headroom_needed(used, hard, q.total(batch))
    after = q.headroom_needed(used, hard, q.total(batch + [extra]))
    for name, value in before.items():
        assert after.get(name, 0) >= value


@settings(max_examples=200, deadline=None)
@given(used=lists, hard=st.dictionaries(names, amounts, min_size=1, max_size=5),
       charges=st.lists(st.dictionaries(names, amounts.filter(lambda a: a > 0), min_size=1, max_size=5),
                        min_size=1, max_size=8),
       cut=st.lists(st.integers(min_value=1, max_value=3), max_size=8))
def test_planned_headroom_covers_every_vm(used, hard, charges, cut):
    hard_s = dict((n, q.show(v, n)) for n, v in hard.items())
    used_s = dict((n, q.show(v, n)) for n, v in used.items())
    obj = quota(hard=hard_s, used=used_s)
    vms = [vm("vm%d" % i, c) for i, c in enumerate(charges)]
    batches = []
    keys = ["tenant-a/vm%d" % i for i in range(len(vms))]
    sizes = list(cut) or [1]
    while keys:
        size = sizes[len(batches) % len(sizes)]
        batches.append(keys[:size])
        keys = keys[size:]
    plan = q.plan_quota(obj, vms, batches)
    for batch in plan.batches:
        for name, value in batch.charge.items():
            if value > 0:
                # with hard raised by the plan's headroom, admission accepts the whole batch
                assert batch.used_before.get(name, 0) + value <= plan.hard[name] + plan.needed.get(name, 0)
        for name, value in batch.needed.items():
            assert plan.needed[name] >= value
    # without growth every batch needs at most what all VMs at once would need
    for name, value in plan.needed.items():
        assert plan.needed_all_at_once[name] >= value
    # every VM's own charge is covered inside its batch
    for key, charge in plan.charges.items():
        index = [i for i, b in enumerate(batches) if key in b][0]
        (batch,) = [b for b in plan.batches if b.index == index]
        for name, value in charge.items():
            assert batch.charge[name] >= value


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(["limits.cpu", "limits.memory", "pods", "requests.storage", "hugepages-2Mi"]),
       value=st.fractions(min_value=0, max_value=10 ** 12, max_denominator=1000),
       fmt=st.sampled_from(["BinarySI", "DecimalSI"]))
def test_suggested_value_never_below_and_prints(name, value, fmt):
    suggested = q.suggested_value(name, value, fmt)
    assert suggested >= value
    text = q.show(suggested, name, fmt)
    assert q.parse_quantity(text) == suggested


@settings(max_examples=100, deadline=None)
@given(charge=st.dictionaries(st.sampled_from(["requests.cpu", "cpu", "requests.memory", "memory",
                                               "requests.hugepages-2Mi", "hugepages-2Mi", "limits.cpu"]),
                              amounts, max_size=4))
def test_aliases_agree_after_expansion(charge):
    out = q.expand_aliases(charge)
    for bare, full in (("cpu", "requests.cpu"), ("memory", "requests.memory"),
                       ("hugepages-2Mi", "requests.hugepages-2Mi")):
        if bare in charge or full in charge:
            assert bare in out and full in out
            if not (bare in charge and full in charge):
                assert out[bare] == out[full]
