# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""KubeVirt v1.9's report of a launcher pod's memory overhead (VMI status.memory.memoryOverhead and, during a
migration, status.migrationState.targetMemoryOverhead) compared with kvquota's sizing (model/overhead_report.py),
and the check's result naming the VMs where they differ (overhead_differences). The expected values are written out
from docs/docsite/rst/sizing.rst's rules, not computed by the code under test.

The VM: 1 vCPU, requests.memory 3276Mi, limits.memory 16Gi, amd64, graphics device on. KubeVirt v1.9.0:
page tables ceil(3276Mi / 1000) x 1000 // 512 = 6,709,248; + 220Mi fixed + 8Mi vCPU + 8Mi IOThread + 32Mi video
= B 287,727,616. Ratio 1.5: + int(287,728 x 0.5) x 1000 = + 143,864,000 -> 431,591,616. Ratio 2: + 287,728,000
-> 575,455,616. KubeVirt v1.5.0 (video 16Mi): B 270,950,400, ratio 1.5 -> + 135,475,000 -> 406,425,400.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
from fractions import Fraction

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import overhead_report as o
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.config import ClusterConfig
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.launcher import launcher_pod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import check as c

Mi = 1024 ** 2
B_19 = 287727616
AT_1_5 = 431591616
AT_2 = 575455616
V15_AT_1_5 = 406425400

CONFIG = ClusterConfig(kubevirt_version="1.9.0", overhead_ratio="1.5")


def vmi(name="vm-1", memory_overhead=None, target=None, completed=False, labels=None, image=None):
    status = {"phase": "Running", "nodeName": "n1",
              "conditions": [{"type": "LiveMigratable", "status": "True"}]}
    if memory_overhead is not None:
        status["memory"] = {"memoryOverhead": memory_overhead}
    if target is not None:
        status["migrationState"] = {"targetMemoryOverhead": target, "completed": completed}
    if image is not None:
        status["launcherContainerImageVersion"] = image
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": name, "namespace": "t", "uid": "uid-" + name,
                         "labels": dict(labels or {}, **{"kubevirt.io/nodeName": "n1"})},
            "spec": {"domain": {"cpu": {"cores": 1}, "devices": {},
                                "resources": {"requests": {"memory": "3276Mi", "cpu": "100m"},
                                              "limits": {"memory": "16Gi", "cpu": "1"}}}},
            "status": status}


def test_the_computed_overhead_is_the_written_out_one():
    assert launcher_pod(vmi(), CONFIG).memory_overhead == AT_1_5
    assert launcher_pod(vmi(), ClusterConfig(kubevirt_version="1.9.0")).memory_overhead == B_19


def test_an_equal_report_names_nothing_in_any_spelling():
    assert o.compare("t", vmi(memory_overhead=str(AT_1_5)), CONFIG, AT_1_5) == []
    assert o.compare("t", vmi(memory_overhead="431591616", target="421476.1875Ki"), CONFIG, AT_1_5) == []
    assert o.compare("t", vmi(), CONFIG, AT_1_5) == []          # no report (before v1.9, or the gate off)


def test_a_pod_rendered_without_the_ratio_is_named_with_both_numbers_and_the_ratio():
    (diff,) = o.compare("t", vmi(memory_overhead=str(B_19)), CONFIG, AT_1_5)
    assert diff.as_dict() == {
        "namespace": "t", "vm": "vm-1", "field": "status.memory.memoryOverhead",
        "computed": 431591616, "computed_quantity": "431591616",
        "reported": 287727616, "reported_quantity": "280984Ki", "difference": -143864000,
        "why": "the overhead ratio changed since the VM started: its pod was rendered with ratio unset, the cluster "
               "has 1.5 now (its target pod is sized with the current one)"}


def test_the_ratio_the_report_implies_is_found_and_verified():
    (diff,) = o.compare("t", vmi(memory_overhead=str(AT_2)), CONFIG, AT_1_5)
    assert diff.difference == 143864000
    assert diff.why.startswith("the overhead ratio changed since the VM started: its pod was rendered with ratio 2,")
    # the hotplug ratio label KubeVirt sets is tried first
    (diff,) = o.compare("t", vmi(memory_overhead=str(AT_2), labels={o.HOTPLUG_RATIO_LABEL: "2.0"}), CONFIG, AT_1_5)
    assert "rendered with ratio 2.0, the cluster has 1.5 now" in diff.why


def test_a_pod_rendered_by_an_older_kubevirt_is_named_with_that_version():
    (diff,) = o.compare("t", vmi(memory_overhead=str(V15_AT_1_5), image="quay.io/kubevirt/virt-launcher:v1.5.0"),
                        CONFIG, AT_1_5)
    assert (diff.reported, diff.computed, diff.difference) == (V15_AT_1_5, AT_1_5, -25166216)
    assert diff.why == ("the KubeVirt version changed since the VM started: its pod was rendered by KubeVirt 1.5.0, "
                        "the cluster runs 1.9.0 now (its target pod is sized with the current one)")


def test_an_unexplained_difference_is_a_sizing_rule_kvquota_lacks():
    (diff,) = o.compare("t", vmi(memory_overhead="%d" % (AT_1_5 + 64 * Mi)), CONFIG, AT_1_5)
    assert (diff.reported, diff.difference) == (498700480, 67108864)
    assert diff.why == ("a sizing rule kvquota lacks (or an input of the pod kvquota does not see): KubeVirt reports "
                        "more than kvquota computes")
    (diff,) = o.compare("t", vmi(memory_overhead="%d" % (AT_1_5 - 1)), CONFIG, AT_1_5)
    assert diff.difference == -1 and diff.why.endswith("KubeVirt reports less than kvquota computes")


def test_the_target_pods_report_is_compared_during_a_migration_only():
    (diff,) = o.compare("t", vmi(memory_overhead=str(AT_1_5), target="500Mi"), CONFIG, AT_1_5)
    assert (diff.field, diff.reported, diff.difference) == (
        "status.migrationState.targetMemoryOverhead", 524288000, 92696384)
    assert diff.why.startswith("a sizing rule kvquota lacks")
    assert o.compare("t", vmi(memory_overhead=str(AT_1_5), target="500Mi", completed=True), CONFIG, AT_1_5) == []


def test_a_malformed_report_is_named_for_that_vm_and_used_for_nothing():
    for raw in ("12abc", "-1Mi", "0.5", ["431591616"], True):
        (diff,) = o.compare("t", vmi(memory_overhead=raw), CONFIG, AT_1_5)
        assert diff.reported is None and diff.difference is None and diff.malformed
        assert diff.as_dict()["reported"] is None and diff.as_dict()["computed"] == AT_1_5
        assert diff.why == "the reported value cannot be read; nothing uses it"


def _snapshot(vmis, kv_version="v1.9.0", ratio="1.5", source_ratio=None):
    """A Snapshot mapping: namespace t with a limits.memory quota and the VMIs' source pods, each rendered with
    source_ratio (default: ratio)."""
    source_config = ClusterConfig(kubevirt_version=kv_version[1:],
                                  overhead_ratio=ratio if source_ratio is None else source_ratio)
    pods = []
    for v in vmis:
        pod = launcher_pod(v, source_config, quota_tracks=frozenset(["limits.memory"]))
        pods.append({"metadata": {"name": "virt-launcher-%s-x" % v["metadata"]["name"], "namespace": "t",
                                  "uid": "pod-" + v["metadata"]["name"],
                                  "ownerReferences": [{"apiVersion": "kubevirt.io/v1",
                                                       "kind": "VirtualMachineInstance",
                                                       "name": v["metadata"]["name"], "uid": v["metadata"]["uid"],
                                                       "controller": True}]},
                     "spec": {"nodeName": "n1", "containers": [
                         {"name": cr.name, "resources": cr.formatted()} for cr in pod.containers]},
                     "status": {"phase": "Running"}})
    quota = {"metadata": {"name": "q", "namespace": "t"}, "spec": {"hard": {"limits.memory": "1000Gi"}},
             "status": {"hard": {"limits.memory": "1000Gi"}, "used": {"limits.memory": "0"}}}
    kv = {"metadata": {"name": "kubevirt", "namespace": "kubevirt"},
          "spec": {"configuration": {"additionalGuestMemoryOverheadRatio": ratio}},
          "status": {"observedKubeVirtVersion": kv_version}}
    return {"scope": {"nodes": [], "namespaces": []}, "nodes": {}, "namespaces": {"t": {"metadata": {"name": "t"}}},
            "quotas": {"t": [quota]}, "pods": {"t": pods}, "vmis": {"t": vmis}, "vmims": {}, "kubevirt": kv,
            "harvester_settings": None, "aaq_quotas": None, "priority_classes": None, "rancher_projects": None,
            "notes": [], "requests": 0}


def test_the_check_names_exactly_the_vms_whose_report_differs_and_plans_with_its_own_sizing():
    vmis = [vmi("vm-a", memory_overhead=str(AT_1_5)), vmi("vm-b", memory_overhead=str(AT_1_5 + 64 * Mi)),
            vmi("vm-c"), vmi("vm-d", memory_overhead="garbage")]
    report = c.evaluate(_snapshot(vmis), {"now": "2026-11-28T09:00:00Z"})
    assert [(d["vm"], d["reported"], d["computed"], d["difference"]) for d in report["overhead_differences"]] == [
        ("vm-b", 498700480, 431591616, 67108864), ("vm-d", None, 431591616, None)]
    assert report["summary"]["overhead_differences"] == 2
    assert "malformed quantity 'garbage'" in report["overhead_differences"][1]["malformed"]
    # reported only: the plan is the same as without any report (and the malformed one blocks nothing)
    plain = [copy.deepcopy(v) for v in vmis]
    for v in plain:
        v["status"].pop("memory", None)
    without = c.evaluate(_snapshot(plain), {"now": "2026-11-28T09:00:00Z"})
    assert without["overhead_differences"] == [] and without["summary"]["overhead_differences"] == 0
    assert report["batches"] == without["batches"] and report["blocked_vms"] == without["blocked_vms"] == []
    assert report["namespaces"]["t"]["quotas"] == without["namespaces"]["t"]["quotas"]
    assert report["verdict"] == without["verdict"]


def test_the_check_says_why_for_a_vm_started_before_the_ratio_changed():
    vmis = [vmi("old", memory_overhead=str(B_19))]
    (diff,) = c.evaluate(_snapshot(vmis, source_ratio=""), {"now": "2026-11-28T09:00:00Z"})["overhead_differences"]
    assert (diff["vm"], diff["reported"], diff["computed"]) == ("old", B_19, AT_1_5)
    assert "rendered with ratio unset, the cluster has 1.5 now" in diff["why"]
    assert isinstance(Fraction(diff["difference"]), Fraction)


# ---------------------------------------------------------------------------
# a tenant writes the VMI's status and labels (KubeVirt's edit role): one VM's values never end the check for the
# others (found by an attack on this change: each of these raised out of check.evaluate)

HOSTILE = [
    ({"memory_overhead": "1e400"}, None),                        # parses, but no int64: was an OverflowError
    ({"memory_overhead": "1.5e308"}, None),                      # whole bytes far beyond int64: unprintable BinarySI
    ({"memory_overhead": str(2 ** 63)}, None),                   # one past int64
    ({"target": "1e400"}, None),
    ({"memory_overhead": str(AT_2), "labels": {o.HOTPLUG_RATIO_LABEL: "1e308"}}, AT_2),   # an overflowing ratio
]


def test_a_tenants_hostile_values_are_named_for_that_vm_and_hold_up_nothing():
    for fields, reported in HOSTILE:
        hostile = vmi("hostile", **fields)
        report = c.evaluate(_snapshot([vmi("vm-a", memory_overhead=str(AT_1_5)), hostile]),
                            {"now": "2026-11-28T09:00:00Z"})
        (diff,) = report["overhead_differences"]
        assert diff["vm"] == "hostile" and diff["reported"] == reported, (fields, diff)
        if reported is None:
            assert len(diff["malformed"]) < 200 and ("int64" in diff["malformed"] or "quantity" in diff["malformed"])
        assert report["blocked_vms"] == [] and report["verdict"] != "blocked"


def test_the_largest_int64_is_still_read():
    assert o.read_reported(str(2 ** 63 - 1)) == (2 ** 63 - 1, None)
    value, problem = o.read_reported(str(2 ** 63))
    assert value is None and problem.startswith("larger than a Kubernetes quantity holds (int64 bytes)")
