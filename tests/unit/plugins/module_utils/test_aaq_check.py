# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kvquota_check and AAQ (kubevirt/application-aware-quota, issue 27 part 4): per namespace in scope, the AAQ
objects that cover it (ApplicationAwareResourceQuotas in it, ApplicationAwareClusterResourceQuotas selecting it),
read only; whether AAQ's VMI calculator mode charges a migration only its growth (the AAQ objects need no
expansion) or the whole target pod (then kvquota says so and names the mode to switch to); and that the native
ResourceQuotas of the namespace are planned as before.

Every expected value below is written from AAQ v1.8.0's source, never from kvquota's output:
- CRDs (pkg/aaq-operator/resources/crds_generated.go): group aaq.kubevirt.io, version v1alpha1; kinds AAQ (plural
  aaqs, cluster scope), ApplicationAwareResourceQuota (applicationawareresourcequotas, namespaced),
  ApplicationAwareClusterResourceQuota (applicationawareclusterresourcequotas, cluster scope; README calls it
  "ClusterAppsResourceQuota", no such kind exists); the AAQ CR field
  spec.configuration.vmiCalculatorConfiguration.configName, enum VmiPodUsage, VirtualResources,
  DedicatedVirtualResources, IgnoreVmiCalculator, GuestEffectiveResources.
- pkg/aaq-controller/built-in-usage-calculators/virt-launcher-usage-calc.go: PodUsageFunc charges a migration's
  target pod SubtractWithNonNegativeResult(target, source) for every mode in MyConfigs (VmiPodUsage,
  VirtualResources, DedicatedVirtualResources, GuestEffectiveResources); pkg/aaq-controller/application.go
  registers no launcher calculator at all with IgnoreVmiCalculator, so both launcher pods count whole.
- pkg/util/util.go: DefaultLauncherConfig = VmiPodUsage (the controller's mode when the operator passes none, i.e.
  the CR leaves configName empty; pkg/aaq-operator/resources/namespaced/controller.go).
- pkg/aaq-operator/resources/cluster/aaqserver.go: the gating webhook's namespaceSelector is spec.namespaceSelector,
  default: label key "application-aware-quota/enable-gating" Exists.
- the cluster quota's selector (openshift ClusterResourceQuotaSelector, manifests/examples/acrq-example.yaml):
  spec.selector.labels (a LabelSelector) and spec.selector.annotations (a map), both must match
  (pkg/aaq-controller/additional-cluster-quota-controllers/clusterquotamapping/helpers.go GetObjectMatcher).
- HCO (kubevirt/hyperconverged-cluster-operator controllers/handlers/aaq.go) names its AAQ CR
  aaq-kubevirt-hyperconverged, labels it app.kubernetes.io/managed-by=hco-operator and copies
  HyperConverged spec.deployment.applicationAwareConfig.vmiCalcConfigName into it (default
  DedicatedVirtualResources).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy

import yaml

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import check as c
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import inventory as inv
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import report as render
from ansible_collections.kvquota.maintenance.plugins.modules import kvquota_check as module_mod
from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_check import (
    NOW,
    FakeCluster,
    _objects,
    make_quota,
    make_vmi,
    snapshot,
)

GATING_LABEL = "application-aware-quota/enable-gating"
MODE_FIELD = "spec.configuration.vmiCalculatorConfiguration.configName"


def aaq_cr(config_name=None, namespace_selector=None, hco=False):
    """An AAQ CR as AAQ's operator (or HCO, controllers/handlers/aaq.go) has it."""
    spec = {"imagePullPolicy": "IfNotPresent", "configuration": {"allowApplicationAwareClusterResourceQuota": True}}
    if config_name is not None:
        spec["configuration"]["vmiCalculatorConfiguration"] = {"configName": config_name}
    if namespace_selector is not None:
        spec["namespaceSelector"] = namespace_selector
    metadata = {"name": "aaq"}
    if hco:
        metadata = {"name": "aaq-kubevirt-hyperconverged",
                    "labels": {"app.kubernetes.io/managed-by": "hco-operator"}}
    return {"apiVersion": "aaq.kubevirt.io/v1alpha1", "kind": "AAQ", "metadata": metadata, "spec": spec}


def arq(name, namespace):
    """manifests/examples/arq-example.yaml, in namespace."""
    return {"apiVersion": "aaq.kubevirt.io/v1alpha1", "kind": "ApplicationAwareResourceQuota",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"hard": {"pods": "10", "limits.cpu": "1", "limits.memory": "1Gi", "requests.cpu": "1",
                              "requests.memory": "1Gi", "cpu/vmi": "1", "memory/vmi": "1Gi",
                              "instances/vmi": "10"}}}


def acrq(name, labels=None, annotations=None):
    """manifests/examples/acrq-example.yaml with the selector given."""
    return {"apiVersion": "aaq.kubevirt.io/v1alpha1", "kind": "ApplicationAwareClusterResourceQuota",
            "metadata": {"name": name},
            "spec": {"quota": {"hard": {"pods": "10", "limits.memory": "1Gi", "memory/vmi": "1Gi"}},
                     "selector": {"annotations": annotations, "labels": labels}}}


def aaq_snapshot(config_name="GuestEffectiveResources", labels=None, cluster_quotas=(), arqs=True, **cr):
    """Namespace t (labels) with a native quota 'compute' its VMs' target pods need headroom in, one VM, an ARQ."""
    quota = make_quota("compute", "t", {"limits.memory": "5000Mi"}, used={"limits.memory": "4500Mi"})
    snap = snapshot({"t": ([quota], [make_vmi("vm1", "t")])},
                    aaq_quotas={"t": [arq("vm-quota", "t")]} if arqs else {},
                    aaq_cluster_quotas=list(cluster_quotas),
                    aaq_configs=[aaq_cr(config_name, **cr)])
    snap["namespaces"]["t"]["metadata"]["labels"] = dict(labels if labels is not None else {GATING_LABEL: ""})
    return snap


def test_growth_mode_needs_no_aaq_expansion_but_native_quotas_still_do():
    snap = aaq_snapshot("GuestEffectiveResources",
                        cluster_quotas=[acrq("tenant-wide", labels={"matchLabels": {GATING_LABEL: ""}}),
                                        acrq("other", labels={"matchLabels": {"team": "b"}})])
    report = c.evaluate(snap, {"now": NOW})
    aaq = report["aaq"]
    assert aaq["mode"] == "GuestEffectiveResources"
    assert aaq["mode_read_from"] == "AAQ aaq " + MODE_FIELD
    assert aaq["migration_charge"] == "growth"
    ns = aaq["namespaces"]["t"]
    assert ns["quotas"] == [
        {"kind": "ApplicationAwareResourceQuota", "namespace": "t", "name": "vm-quota"},
        {"kind": "ApplicationAwareClusterResourceQuota", "namespace": None, "name": "tenant-wide"}]
    assert ns["gated"] is True
    assert ns["needs_expansion"] is False
    assert "GuestEffectiveResources" in ns["reason"] and "growth" in ns["reason"]
    assert ns["fix"] is None
    # (c) the native quota is planned and expanded as before
    assert ns["native_quotas"] == ["compute"]
    assert report["namespaces"]["t"]["verdict"] == "needs_reservation"
    assert [p["name"] for p in report["namespaces"]["t"]["quotas"]] == ["compute"]
    assert report["namespaces"]["t"]["quotas"][0]["needed"]
    # the human line, in the namespace's findings
    (line,) = [w for w in report["warnings"] if w["kind"] == "aaq_present" and w["namespace"] == "t"]
    for text in ("vm-quota", "tenant-wide", "need no expansion", "GuestEffectiveResources", MODE_FIELD, "compute"):
        assert text in line["message"], (text, line["message"])


def test_every_calculator_mode_charges_only_the_growth():
    for mode in ("VmiPodUsage", "VirtualResources", "DedicatedVirtualResources", "GuestEffectiveResources"):
        aaq = c.evaluate(aaq_snapshot(mode), {"now": NOW})["aaq"]
        assert (aaq["mode"], aaq["migration_charge"]) == (mode, "growth")
        assert aaq["namespaces"]["t"]["needs_expansion"] is False


def test_ignore_vmi_calculator_charges_source_and_target_and_names_the_fix():
    report = c.evaluate(aaq_snapshot("IgnoreVmiCalculator", hco=True), {"now": NOW})
    aaq = report["aaq"]
    assert aaq["mode"] == "IgnoreVmiCalculator"
    assert aaq["mode_read_from"] == "AAQ aaq-kubevirt-hyperconverged " + MODE_FIELD
    assert aaq["migration_charge"] == "source_and_target"
    ns = aaq["namespaces"]["t"]
    assert ns["needs_expansion"] is True and ns["gated"] is True
    assert "kvquota does not expand" in ns["reason"]
    # HCO reconciles its AAQ CR: the fix is on the HyperConverged CR
    assert "spec.deployment.applicationAwareConfig.vmiCalcConfigName" in ns["fix"]
    assert "VmiPodUsage" in ns["fix"] and "GuestEffectiveResources" in ns["fix"]
    assert ns["native_quotas"] == ["compute"]
    (line,) = [w for w in report["warnings"] if w["kind"] == "aaq_migration_charged_twice"]
    assert line["namespace"] == "t" and "vm-quota" in line["message"] and line["fix"] == ns["fix"]
    # a warning, not a blocker: the native quota's verdict stands
    assert report["namespaces"]["t"]["verdict"] == "needs_reservation"


def test_plain_aaq_cr_fix_names_the_aaq_field():
    ns = c.evaluate(aaq_snapshot("IgnoreVmiCalculator"), {"now": NOW})["aaq"]["namespaces"]["t"]
    assert MODE_FIELD in ns["fix"] and "AAQ aaq" in ns["fix"]


def test_no_config_name_is_the_controllers_default_vmi_pod_usage():
    aaq = c.evaluate(aaq_snapshot(None), {"now": NOW})["aaq"]
    assert aaq["mode"] == "VmiPodUsage"
    assert aaq["migration_charge"] == "growth"
    assert "not set" in aaq["mode_read_from"] and "VmiPodUsage" in aaq["mode_read_from"]


def test_a_namespace_aaq_does_not_gate_is_not_held_by_aaq():
    snap = aaq_snapshot("IgnoreVmiCalculator", labels={})   # default selector: the gating label is absent
    ns = c.evaluate(snap, {"now": NOW})["aaq"]["namespaces"]["t"]
    assert ns["gated"] is False and ns["needs_expansion"] is False and ns["fix"] is None
    assert "gate" in ns["reason"]
    # a namespaceSelector of its own
    selector = {"matchExpressions": [{"key": "quota", "operator": "In", "values": ["aaq"]}]}
    ns = c.evaluate(aaq_snapshot("IgnoreVmiCalculator", labels={"quota": "aaq"}, namespace_selector=selector),
                    {"now": NOW})["aaq"]["namespaces"]["t"]
    assert ns["gated"] is True and ns["needs_expansion"] is True


def test_cluster_quota_selects_by_labels_and_annotations_together():
    both = acrq("both", labels={"matchLabels": {"team": "a"}}, annotations={"billing": "x"})
    only_annotations = acrq("ann", annotations={"billing": "x"})
    snap = aaq_snapshot(arqs=False, labels={GATING_LABEL: "", "team": "a"}, cluster_quotas=[both, only_annotations])
    report = c.evaluate(snap, {"now": NOW})
    assert "t" not in report["aaq"]["namespaces"]   # no annotation billing=x
    snap["namespaces"]["t"]["metadata"]["annotations"] = {"billing": "x"}
    names = [o["name"] for o in c.evaluate(snap, {"now": NOW})["aaq"]["namespaces"]["t"]["quotas"]]
    assert names == ["ann", "both"]


def test_namespaces_no_aaq_object_covers_are_left_out():
    report = c.evaluate(aaq_snapshot(arqs=False), {"now": NOW})
    assert report["aaq"]["namespaces"] == {}
    assert not [w for w in report["warnings"] if w["namespace"] == "t" and w["kind"].startswith("aaq")]


def test_unreadable_aaq_cr_leaves_the_mode_unknown():
    snap = aaq_snapshot()
    snap["aaq_configs"] = None
    ns_aaq = c.evaluate(snap, {"now": NOW})["aaq"]
    assert ns_aaq["mode"] is None and ns_aaq["migration_charge"] == "unknown"
    ns = ns_aaq["namespaces"]["t"]
    assert ns["needs_expansion"] is None and ns["gated"] is None
    assert "aaqs.aaq.kubevirt.io" in ns["reason"]


def test_without_aaq_the_report_says_null():
    report = c.evaluate(snapshot({"t": ([make_quota("compute", "t", {"limits.memory": "100Gi"})],
                                        [make_vmi("vm1", "t")])}), {"now": NOW})
    assert report["aaq"] is None
    assert render.compact(report)["aaq"] is None


def test_compact_report_keeps_the_aaq_field():
    report = c.evaluate(aaq_snapshot(), {"now": NOW})
    assert render.compact(report)["aaq"] == report["aaq"]


def test_the_module_documents_the_aaq_field():
    returned = yaml.safe_load(module_mod.RETURN)
    assert "aaq" in returned
    text = " ".join(returned["aaq"]["description"])
    for word in ("ApplicationAwareResourceQuota", "ApplicationAwareClusterResourceQuota", "IgnoreVmiCalculator",
                 "needs_expansion", "native_quotas", "gated"):
        assert word in text, word
    assert set(returned["aaq"]["sample"]) >= {"mode", "mode_read_from", "migration_charge", "namespaces"}


# ---------------------------------------------------------------------------
# inventory: the AAQ CR and the cluster quotas, read only when AAQ's API is served

AAQS = "/apis/aaq.kubevirt.io/v1alpha1/aaqs"
ACRQS = "/apis/aaq.kubevirt.io/v1alpha1/applicationawareclusterresourcequotas"


def test_inventory_reads_the_aaq_cr_and_cluster_quotas():
    objs = _objects(1, 1)
    objs["applicationawareresourcequotas"] = [arq("vm-quota", "t0")]
    objs["aaqs"] = [aaq_cr("GuestEffectiveResources")]
    objs["applicationawareclusterresourcequotas"] = [acrq("tenant-wide", labels={"matchLabels": {"a": "b"}})]
    cluster = FakeCluster(objs, missing=["settings"])
    snap = inv.read_inventory(cluster, {"namespaces": ["t0"]})
    assert [o["metadata"]["name"] for o in snap.aaq_configs] == ["aaq"]
    assert [o["metadata"]["name"] for o in snap.aaq_cluster_quotas] == ["tenant-wide"]
    assert [p for p, _q in cluster.lists(AAQS)] == [AAQS]
    assert [p for p, _q in cluster.lists(ACRQS)] == [ACRQS]


def test_inventory_without_aaq_reads_neither():
    cluster = FakeCluster(_objects(1, 1), missing=["settings", "applicationawareresourcequotas"])
    snap = inv.read_inventory(cluster, {"namespaces": ["t0"]})
    assert snap.aaq_configs is None and snap.aaq_cluster_quotas is None
    assert not cluster.lists(AAQS) and not cluster.lists(ACRQS)


def test_inventory_forbidden_aaq_kinds_are_notes_not_failures():
    objs = _objects(1, 1)
    objs["applicationawareresourcequotas"] = [arq("vm-quota", "t0")]
    cluster = FakeCluster(objs, missing=["settings"], forbidden=["aaqs", "applicationawareclusterresourcequotas"])
    snap = inv.read_inventory(cluster, {"namespaces": ["t0"]})
    assert snap.aaq_configs is None and snap.aaq_cluster_quotas is None
    assert any("AAQ" in n and "not readable" in n for n in snap.notes)
    assert any("ApplicationAwareClusterResourceQuotas: not readable" in n for n in snap.notes)
    # the check still reports the namespace's ARQ, with the mode unknown
    report = c.evaluate(copy.deepcopy(snap), {"now": NOW})
    assert report["aaq"]["migration_charge"] == "unknown"
    assert [o["name"] for o in report["aaq"]["namespaces"]["t0"]["quotas"]] == ["vm-quota"]
