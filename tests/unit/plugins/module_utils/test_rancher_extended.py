# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rancher 2.14's `extended` limits (rancher/rancher 52544, 56498): any ResourceQuota resource name capped per
project and namespace beside the fixed keys. Expected values follow Rancher's pkg/resourcequota/quota_validate.go
(ConvertLimitToResourceList: extended first, then the fixed keys, so a fixed key wins over an extended entry of the
same resource name)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import rancher_keys
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners import rancher as rancher_owner
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import ledger as L

from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_owners import RANCHER_LABELS, namespace, quota, step

ANN = rancher_owner.RANCHER_QUOTA_ANNOTATION
GPU = "requests.nvidia.com/gpu"
VMI = "count/virtualmachineinstances.kubevirt.io"
RAW = '{"limit":{"limitsCpu":"3","extended":{"requests.nvidia.com/gpu":"2","count/virtualmachineinstances.kubevirt.io":"4"}}}'
PROJECT = {"apiVersion": "management.cattle.io/v3", "kind": "Project",
           "metadata": {"name": "p-xyz", "namespace": "c-abc"},
           "spec": {"displayName": "team",
                    "resourceQuota": {"limit": {"limitsCpu": "10", "extended": {GPU: "4", VMI: "10"}}},
                    "namespaceDefaultResourceQuota": {"limit": {"limitsCpu": "2", "extended": {GPU: "1", VMI: "3"}}}}}


def hard():
    return {"limits.cpu": "3", GPU: "2", VMI: "4"}


def test_extended_names_are_read_as_quota_names():
    ns = namespace({ANN: RAW})
    assert rancher_owner.rancher_limit(ns) == {"limits.cpu": "3", GPU: "2", VMI: "4"}
    assert rancher_keys.limit_names({"limitsCpu": "3", "extended": {GPU: "2"}}) == {"limits.cpu": "3", GPU: "2"}


def test_a_fixed_key_wins_over_an_extended_entry_of_the_same_name():
    # Rancher: "in case of conflicts between arbitrary and fixed data the fixed data wins"
    ns = namespace({ANN: '{"limit":{"limitsCpu":"3","extended":{"limits.cpu":"300"}}}'})
    assert rancher_owner.rancher_limit(ns) == {"limits.cpu": "3"}
    # without the fixed key the extended entry is what Rancher applies
    ns = namespace({ANN: '{"limit":{"extended":{"limits.cpu":"300"}}}'})
    assert rancher_owner.rancher_limit(ns) == {"limits.cpu": "300"}


@pytest.mark.parametrize("raw", ['{"limit":{"extended":"gpu=2"}}', '{"limit":{"extended":{"requests.nvidia.com/gpu":{"a":1}}}}',
                                 '{"limit":{"extended":{"requests.nvidia.com/gpu":true}}}', '{"limit":{"extended":[1]}}',
                                 '{"limit":{"extended":{"requests.nvidia.com/gpu":"lots"}}}',
                                 '{"limit":{"extended":{"":"1"}}}', '{"limit":{"extended":{"a b":"1"}}}',
                                 # Kubernetes refuses these in spec.hard (found by an attack on the change)
                                 '{"limit":{"extended":{"Limits.cpu":"1"}}}', '{"limit":{"extended":{"foo":"1"}}}',
                                 '{"limit":{"extended":{"requests.nvidia.com/gpu":"-5"}}}'])
def test_a_malformed_extended_map_is_refused_by_name(raw):
    with pytest.raises(InputError) as err:
        rancher_owner.rancher_annotation(namespace({ANN: raw}))
    assert "extended" in str(err.value)


def test_extended_names_are_writable_when_the_project_caps_them():
    q = quota(labels=RANCHER_LABELS, hard=hard())
    assert rancher_owner.project_keys(PROJECT) == {"limits.cpu", GPU, VMI}
    backend = rancher_owner.RancherOwner(project=PROJECT)
    assert backend.durable_hard(q, namespace({ANN: RAW})) == {"limits.cpu": "3", GPU: "2", VMI: "4"}
    assert backend.operator_key(GPU) == "extended." + GPU


@pytest.mark.parametrize("raw, hard, delta, written", [
    # the annotation's extended entries raised beside the fixed key
    (RAW, hard(), {GPU: "1", VMI: "1", "limits.cpu": "1"}, {"limitsCpu": "4", "extended": {GPU: "3", VMI: "5"}}),
    # Rancher's completeQuota replaces the default's whole extended map by the namespace's: a new map carries the
    # other extended names at the values Rancher applied (spec.hard), or they would change
    ('{"limit":{"limitsCpu":"2"}}', {"limits.cpu": "2", GPU: "1", VMI: "3"}, {GPU: "1"},
     {"limitsCpu": "2", "extended": {GPU: "2", VMI: "3"}}),
    # no annotation at all: written, then removed again; limits.cpu is copied too (the default may cap it through
    # its extended map alone, which the new map replaces; where the default has limitsCpu, that wins)
    (None, {"limits.cpu": "2", GPU: "1", VMI: "3"}, {VMI: "2"}, {"extended": {"limits.cpu": "2", GPU: "1", VMI: "5"}}),
])
def test_reserve_writes_extended_entries_and_release_restores_byte_for_byte(raw, hard, delta, written):
    backend = rancher_owner.RancherOwner(project=PROJECT)
    q, ns = quota(labels=RANCHER_LABELS, hard=hard), namespace({} if raw is None else {ANN: raw})
    ledger, writes = step(backend, q, ns, "n1", delta)
    assert json.loads(writes["namespace"]["metadata"]["annotations"][ANN]) == {"limit": written}
    _ignored, writes = step(backend, q, writes["namespace"], "n1", None, release=True, book=ledger)
    assert writes["namespace"]["metadata"]["annotations"] == ({} if raw is None else {ANN: raw})


EXTENDED_ONLY_PROJECT = {
    "apiVersion": "management.cattle.io/v3", "kind": "Project", "metadata": {"name": "p-xyz", "namespace": "c-abc"},
    "spec": {"displayName": "team", "resourceQuota": {"limit": {"extended": {"limits.cpu": "10", GPU: "4"}}},
             "namespaceDefaultResourceQuota": {"limit": {"extended": {"limits.cpu": "2", GPU: "1"}}}}}


def test_a_new_extended_map_keeps_a_cap_the_default_sets_only_through_extended():
    # the project default caps limits.cpu through extended alone; the namespace's annotation sets no limitsCpu.
    # Rancher replaces the default's extended map by the namespace's: without limits.cpu in it, Rancher would drop
    # the cap from spec.hard while the GPUs are raised
    backend = rancher_owner.RancherOwner(project=EXTENDED_ONLY_PROJECT)
    raw = '{"limit":{"requestsMemory":"1Gi"}}'
    q = quota(labels=RANCHER_LABELS, hard={"limits.cpu": "2", GPU: "1"})
    ledger, writes = step(backend, q, namespace({ANN: raw}), "n1", {GPU: "1"})
    assert json.loads(writes["namespace"]["metadata"]["annotations"][ANN]) == {
        "limit": {"requestsMemory": "1Gi", "extended": {"limits.cpu": "2", GPU: "2"}}}
    _ignored, writes = step(backend, q, writes["namespace"], "n1", None, release=True, book=ledger)
    assert writes["namespace"]["metadata"]["annotations"][ANN] == raw


def hard_of_quota(q):
    return dict(q["spec"]["hard"])


def _rancher_applies(default_limit, annotation):
    """spec.hard Rancher builds for a namespace: its limit over the project default's, its extended map replacing the
    default's whole (completeQuota), extended entries first and the fixed keys over them."""
    own = json.loads(annotation)["limit"]
    merged = dict(default_limit)
    merged.update(own)
    if "extended" in default_limit:
        merged["extended"] = own.get("extended", default_limit["extended"])
    return rancher_keys.limit_names(merged)


def test_a_members_entry_added_mid_window_keeps_the_seeded_copies_at_their_base():
    # found by the tenant campaign's rancher-extended attack: a project member added an entry to the map kvquota had
    # started; the release dropped kvquota's seeded copies and left the member's entry alone, so Rancher (whose
    # namespace map replaces the default's whole) dropped the reserved name from spec.hard: its base never came
    # back, the release waited for it until it failed, and the namespace lost caps its base had
    backend = rancher_owner.RancherOwner(project=PROJECT)
    default = PROJECT["spec"]["namespaceDefaultResourceQuota"]["limit"]
    raw = '{"limit":{"limitsCpu":"2"}}'
    q = quota(labels=RANCHER_LABELS, hard={"limits.cpu": "2", GPU: "1", VMI: "3"})
    assert _rancher_applies(default, raw) == hard_of_quota(q)
    ledger, writes = step(backend, q, namespace({ANN: raw}), "n1", {VMI: "2"})
    during = writes["namespace"]
    document = json.loads(during["metadata"]["annotations"][ANN])
    assert document == {"limit": {"limitsCpu": "2", "extended": {GPU: "1", VMI: "5"}}}
    document["limit"]["extended"]["requests.amd.com/gpu"] = "1"          # the member's own entry
    during["metadata"]["annotations"][ANN] = json.dumps(document)
    idle, writes = step(backend, q, during, "n1", None, release=True, book=ledger)
    final = writes["namespace"]["metadata"]["annotations"][ANN]
    # the base plus the member's entry, nothing of the reservation
    assert json.loads(final) == {
        "limit": {"limitsCpu": "2", "extended": {GPU: "1", VMI: "3", "requests.amd.com/gpu": "1"}}}
    applied = _rancher_applies(default, final)
    assert applied == dict(hard_of_quota(q), **{"requests.amd.com/gpu": "1"})
    # what the release waits for: Rancher's spec.hard shows the ledger's base
    assert backend.followed(quota(labels=RANCHER_LABELS, hard=applied), idle) == (True, [])


def test_a_map_of_nothing_but_the_seeded_copies_goes_at_the_release():
    backend = rancher_owner.RancherOwner(project=PROJECT)
    raw = '{"limit":{"limitsCpu":"2"}}'
    q = quota(labels=RANCHER_LABELS, hard={"limits.cpu": "2", GPU: "1", VMI: "3"})
    ledger, writes = step(backend, q, namespace({ANN: raw}), "n1", {VMI: "2"})
    _idle, writes = step(backend, q, writes["namespace"], "n1", None, release=True, book=ledger)
    assert writes["namespace"]["metadata"]["annotations"][ANN] == raw


def test_a_tenants_shadowing_extended_entry_does_not_set_the_amount():
    # a project member writes extended {"limits.cpu": "300"} beside limitsCpu: Rancher applies limitsCpu, so does
    # kvquota; the reservation writes the fixed key and leaves the member's entry as it is
    backend = rancher_owner.RancherOwner(project=PROJECT)
    raw = '{"limit":{"limitsCpu":"3","extended":{"limits.cpu":"300"}}}'
    q = quota(labels=RANCHER_LABELS, hard={"limits.cpu": "3"})
    ledger, writes = step(backend, q, namespace({ANN: raw}), "n1", {"limits.cpu": "1"})
    assert json.loads(writes["namespace"]["metadata"]["annotations"][ANN]) == {
        "limit": {"limitsCpu": "4", "extended": {"limits.cpu": "300"}}}
    assert L.desired_strings(ledger)["limits.cpu"] == "4"
    _ignored, writes = step(backend, q, writes["namespace"], "n1", None, release=True, book=ledger)
    assert writes["namespace"]["metadata"]["annotations"][ANN] == raw


def _ns(name, raw=None, project="c-abc:p-xyz"):
    annotations = {rancher_owner.RANCHER_PROJECT_ANNOTATION: project}
    if raw is not None:
        annotations[ANN] = raw
    return namespace(annotations, name=name)


def test_project_fit_counts_extended_names_against_the_projects_extended_caps():
    mine = _ns("tenant-a", RAW)                                           # gpu 2
    other = _ns("tenant-b", '{"limit":{"extended":{"requests.nvidia.com/gpu":"1"}}}')   # gpu 1
    defaulted = _ns("tenant-c")                                           # default: gpu 1
    stranger = _ns("tenant-d", '{"limit":{"extended":{"requests.nvidia.com/gpu":"9"}}}', project="c-abc:p-other")
    everything = [mine, other, defaulted, stranger]
    ok, problems = rancher_owner.project_fit(PROJECT, everything, "tenant-a", {GPU: "2"})
    assert ok and problems == []
    ok, problems = rancher_owner.project_fit(PROJECT, everything, "tenant-a", {GPU: "3"})
    assert not ok and len(problems) == 1
    assert "extended.%s to 4" % GPU in problems[0] and "would need 5" in problems[0]
    assert "tenant-b 1" in problems[0] and "tenant-c 1" in problems[0] and "tenant-d" not in problems[0]


def test_project_fit_uses_the_fixed_cap_when_a_project_sets_both():
    project = json.loads(json.dumps(PROJECT))
    project["spec"]["resourceQuota"]["limit"]["extended"]["limits.cpu"] = "1000"
    ok, problems = rancher_owner.project_fit(project, [_ns("tenant-a", RAW)], "tenant-a", {"limits.cpu": "11"})
    assert not ok and "limitsCpu to 10" in problems[0]


# ---------------------------------------------------------------------------
# the check: a name without a fixed key (count/pods) capped through the project's extended map

def _extended_project(cap):
    from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_check import (
        make_quota, make_vmi, snapshot)
    project = {"metadata": {"name": "p-abc", "namespace": "c-xyz"},
               "spec": {"displayName": "tenants", "resourceQuota": {"limit": {"extended": {"count/pods": cap}}},
                        "namespaceDefaultResourceQuota": {"limit": {"extended": {"count/pods": "1"}}}}}
    labels = {rancher_owner.RANCHER_QUOTA_LABEL: "true"}
    namespaces = {}
    for ns in ("r1", "r2"):
        namespaces[ns] = ([make_quota("default-" + ns, ns, {"count/pods": "1"}, used={"count/pods": "1"},
                                      labels=labels)], [make_vmi("vm", ns, node="worker-" + ns)])
    snap = snapshot(namespaces, rancher_projects=[project])
    for ns in ("r1", "r2"):
        snap["namespaces"][ns]["metadata"]["annotations"] = {
            rancher_owner.RANCHER_PROJECT_ANNOTATION: "c-xyz:p-abc", ANN: '{"limit":{"extended":{"count/pods":"1"}}}'}
    return project, snap


def test_check_counts_an_extended_name_against_the_projects_extended_cap():
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import check as c
    from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_check import NOW
    # count/pods counts the completed source pod too: each namespace needs a permanent 2 (usage after the
    # migrations) plus the window's 1, and both migrate in the first batch: 6 > 3
    project, snap = _extended_project("3")
    report = c.evaluate(snap, {"now": NOW})
    blockers = [b for b in report["blockers"] if b["kind"] == "rancher_project_limit"]
    assert len(blockers) == 1
    assert "limits extended.count/pods to 3" in blockers[0]["message"]
    assert "would need 6 (r1 3, r2 3)" in blockers[0]["message"]
    assert "raise the project's limit in Rancher" in blockers[0]["fix"]
    fix = report["namespaces"]["r1"]["fixes"][0]
    assert fix["rancher_key"] == "extended.count/pods" and ANN in fix["text"]
    project["spec"]["resourceQuota"]["limit"]["extended"]["count/pods"] = "6"
    report = c.evaluate(snap, {"now": NOW})
    assert [b["kind"] for b in report["blockers"]] == ["usage_above_hard", "usage_above_hard"]


def test_a_tenants_malformed_extended_entry_blocks_only_its_namespace_by_name():
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import check as c
    from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_check import NOW
    _project, snap = _extended_project("100")
    snap["namespaces"]["r1"]["metadata"]["annotations"][ANN] = '{"limit":{"extended":{"count/pods":"lots"}}}'
    report = c.evaluate(snap, {"now": NOW})
    assert report["verdict"] == "blocked"
    text = json.dumps(report["namespaces"]["r1"])
    assert "is not a JSON object whose" in text and "extended" in text
    assert "is not a JSON object whose" not in json.dumps(report["namespaces"]["r2"])
