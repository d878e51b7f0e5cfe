# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kvquota_check with AAQ served (issue 27 part 4), as the least-privilege identity of
roles/install/files/clusterrole.yml: the AAQ CRDs (names, group, version, scopes as AAQ v1.8.0's
pkg/aaq-operator/resources/crds_generated.go has them; schemas left open) are created in the lab, with an AAQ CR,
an ApplicationAwareResourceQuota in a tenant namespace and an ApplicationAwareClusterResourceQuota selecting it by
label. The module reads them (list on aaqs, applicationawareresourcequotas and
applicationawareclusterresourcequotas), reports per namespace whether AAQ's mode charges a migration only its
growth, never writes an AAQ object, and plans the native quota as before.

No AAQ controller runs in the lab: what AAQ would do is AAQ's source's (see tests/unit/.../test_aaq_check.py).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import pytest

import modlab as M

pytestmark = pytest.mark.lab   # make lab-tests (conftest.py: every lab test has one such marker)

NS = "aaq-tenant"
GROUP = "aaq.kubevirt.io"
AAQ_API = "/apis/aaq.kubevirt.io/v1alpha1"
GATING_LABEL = "application-aware-quota/enable-gating"


def crd(kind, plural, scope):
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "%s.%s" % (plural, GROUP)},
            "spec": {"group": GROUP, "scope": scope,
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                     "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {"type": "object",
                                                                  "x-kubernetes-preserve-unknown-fields": True}}}]}}


CRDS = (crd("AAQ", "aaqs", "Cluster"),
        crd("ApplicationAwareResourceQuota", "applicationawareresourcequotas", "Namespaced"),
        crd("ApplicationAwareClusterResourceQuota", "applicationawareclusterresourcequotas", "Cluster"))


def _served(r, plural):
    return r.get_or_none("%s/%s" % (AAQ_API, plural)) is not None


@pytest.fixture(scope="module")
def aaq(lab, emu, r):
    for body in CRDS:
        if r.get_or_none("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" + body["metadata"]["name"]) \
                is None:
            r.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body)
    for plural in ("aaqs", "applicationawareresourcequotas", "applicationawareclusterresourcequotas"):
        M.wait(lambda: _served(r, plural), 60, "%s served" % plural)
    M.make_tenant(lab, NS, vms=1)
    r.patch("/api/v1/namespaces/" + NS, {"metadata": {"labels": {GATING_LABEL: ""}}})
    r.create(AAQ_API + "/aaqs", {
        "apiVersion": GROUP + "/v1alpha1", "kind": "AAQ",
        "metadata": {"name": "aaq-kubevirt-hyperconverged", "labels": {"app.kubernetes.io/managed-by": "hco-operator"}},
        "spec": {"configuration": {"vmiCalculatorConfiguration": {"configName": "IgnoreVmiCalculator"}}}})
    r.create(AAQ_API + "/namespaces/%s/applicationawareresourcequotas" % NS, {
        "apiVersion": GROUP + "/v1alpha1", "kind": "ApplicationAwareResourceQuota",
        "metadata": {"name": "vm-quota"}, "spec": {"hard": {"limits.memory": "1Gi", "pods": "10"}}})
    r.create(AAQ_API + "/applicationawareclusterresourcequotas", {
        "apiVersion": GROUP + "/v1alpha1", "kind": "ApplicationAwareClusterResourceQuota",
        "metadata": {"name": "tenant-wide"},
        "spec": {"quota": {"hard": {"memory/vmi": "1Gi"}},
                 "selector": {"annotations": None, "labels": {"matchLabels": {GATING_LABEL: ""}}}}})
    yield r
    M.delete_namespace(r, NS)
    for path in (AAQ_API + "/aaqs/aaq-kubevirt-hyperconverged",
                 AAQ_API + "/applicationawareclusterresourcequotas/tenant-wide"):
        r.delete(path)


def _aaq_objects(r):
    return (r.get(AAQ_API + "/aaqs/aaq-kubevirt-hyperconverged"),
            r.get(AAQ_API + "/namespaces/%s/applicationawareresourcequotas/vm-quota" % NS),
            r.get(AAQ_API + "/applicationawareclusterresourcequotas/tenant-wide"))


def test_check_reports_aaq_double_charge_as_least_privilege(aaq, user):
    before = [o["metadata"]["resourceVersion"] for o in _aaq_objects(aaq)]
    res = M.assert_ok(M.run_module("kvquota_check", {"namespaces": [NS]}, str(user)), "kvquota_check")
    assert not [n for n in res["notes"] if "not readable" in n], res["notes"]
    report = res["aaq"]
    assert report["mode"] == "IgnoreVmiCalculator", report
    assert report["migration_charge"] == "source_and_target"
    assert report["mode_read_from"] == \
        "AAQ aaq-kubevirt-hyperconverged spec.configuration.vmiCalculatorConfiguration.configName"
    entry = report["namespaces"][NS]
    assert entry["quotas"] == [
        {"kind": "ApplicationAwareResourceQuota", "namespace": NS, "name": "vm-quota"},
        {"kind": "ApplicationAwareClusterResourceQuota", "namespace": None, "name": "tenant-wide"}]
    assert entry["gated"] is True and entry["needs_expansion"] is True
    assert "spec.deployment.applicationAwareConfig.vmiCalcConfigName" in entry["fix"]
    assert entry["native_quotas"] == ["compute"]
    assert any(f["kind"] == "aaq_migration_charged_twice" and f["namespace"] == NS for f in res["findings"])
    # the native quota is planned as before; nothing of AAQ's was written
    assert [q["name"] for q in res["namespaces"][NS]["quotas"]] == ["compute"]
    assert [o["metadata"]["resourceVersion"] for o in _aaq_objects(aaq)] == before


def test_check_says_a_growth_mode_needs_no_aaq_expansion(aaq, user):
    aaq.patch(AAQ_API + "/aaqs/aaq-kubevirt-hyperconverged",
              {"spec": {"configuration": {"vmiCalculatorConfiguration": {"configName": "GuestEffectiveResources"}}}})
    res = M.assert_ok(M.run_module("kvquota_check", {"namespaces": [NS]}, str(user)), "kvquota_check")
    entry = res["aaq"]["namespaces"][NS]
    assert res["aaq"]["migration_charge"] == "growth"
    assert entry["needs_expansion"] is False and entry["fix"] is None
    line = [f for f in res["findings"] if f["kind"] == "aaq_present" and f["namespace"] == NS]
    assert line and "need no expansion" in line[0]["message"] and "compute" in line[0]["message"]


MANAGED = "vm-quota-non-schedulable-resources-managed-rq-x"


def _managed_quota(arq, hard):
    """The native ResourceQuota AAQ v1.8.0's rq-controller (pkg/aaq-controller/rq-controller/rq-controller.go)
    creates for an ARQ with non-schedulable names: <arq>-non-schedulable-resources-managed-rq-x, label
    aaq.kubevirt.io=true, a controller ownerReference to the ARQ (metav1.NewControllerRef), spec.hard the ARQ's
    non-schedulable names (util.FilterNonScheduableResources: count/pods stays, pods and limits.* do not)."""
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": MANAGED, "namespace": NS, "labels": {"aaq.kubevirt.io": "true"},
                         "ownerReferences": [{"apiVersion": GROUP + "/v1alpha1",
                                              "kind": "ApplicationAwareResourceQuota",
                                              "name": arq["metadata"]["name"], "uid": arq["metadata"]["uid"],
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"hard": hard}}


def test_aaqs_managed_quota_without_room_blocks_and_is_never_written(aaq, user):
    """No AAQ controller runs here: the ARQ gets count/pods and the managed quota is created as AAQ's controller
    would. The API server's quota controller counts the tenant's launcher pod in it (count/pods 1 of 1): the target
    pod would be refused, kvquota names the ARQ to raise and leaves the quota alone, also when asked to reserve."""
    arq_path = AAQ_API + "/namespaces/%s/applicationawareresourcequotas/vm-quota" % NS
    arq = aaq.patch(arq_path, {"spec": {"hard": {"count/pods": "1"}}})
    quota_path = "/api/v1/namespaces/%s/resourcequotas" % NS
    aaq.create(quota_path, _managed_quota(arq, {"count/pods": "1"}))
    try:
        M.wait(lambda: (M.quota(aaq, NS, MANAGED).get("status") or {}).get("used", {}).get("count/pods") == "1", 60,
               "the quota controller counts the launcher pod")
        res = M.assert_ok(M.run_module("kvquota_check", {"namespaces": [NS]}, str(user)), "kvquota_check")
        ns = res["namespaces"][NS]
        assert ns["verdict"] == "blocked", ns
        blockers = [b for b in res["blockers"] if b["kind"] == "read_only_quota_lacks_room"]
        assert [(b["namespace"], b["quota"], b["resource"]) for b in blockers] == [(NS, MANAGED, "count/pods")]
        assert "raise count/pods of ApplicationAwareResourceQuota %s/vm-quota to 2" % NS in blockers[0]["fix"]
        assert res["aaq"]["namespaces"][NS]["aaq_managed_quotas"] == [MANAGED]
        (report,) = [q for q in ns["quotas"] if q["name"] == MANAGED]
        # the module's compact result keeps owner and fixes (report.COMPACT_QUOTA_KEYS)
        assert report["owner"] == "aaq"
        assert report["fixes"] and all("ApplicationAwareResourceQuota %s/vm-quota" % NS in f for f in report["fixes"])

        before = M.quota(aaq, NS, MANAGED)
        res = M.assert_ok(M.run_module("kvquota_reserve", {"reservation_id": "aaq-managed", "ttl": "1h", "headroom": [
            {"namespace": NS, "quota": MANAGED, "resources": {"count/pods": "1"}}]}, str(user)), "kvquota_reserve")
        assert not res["changed"]
        assert [(s["quota"], s["backend"]) for s in res["skipped"]] == [(MANAGED, "aaq")]
        assert "%s/vm-quota" % NS in res["skipped"][0]["reason"]
        after = M.quota(aaq, NS, MANAGED)
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        assert after["spec"]["hard"] == {"count/pods": "1"}
    finally:
        aaq.delete(quota_path + "/" + MANAGED)
