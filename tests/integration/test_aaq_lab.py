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
