# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Backends: who owns spec.hard, and what a reservation writes where (pure object transformations)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners import aaq
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners import harvester
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners import plain
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners import protocol
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners import rancher as rancher_owner
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners import registry
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import rancher_keys
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import ledger as L

T0 = 1735689600


def quota(hard=None, labels=None, annotations=None, name="default-abcde", namespace="tenant-a"):
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": "7", "uid": "q-uid",
                         "labels": dict(labels or {}), "annotations": dict(annotations or {})},
            "spec": {"hard": dict(hard or {"limits.cpu": "3", "limits.memory": "5000Mi", "pods": "10"})},
            "status": {"used": {"limits.cpu": "2", "limits.memory": "4000Mi", "pods": "3"}}}


def namespace(annotations=None, name="tenant-a"):
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "resourceVersion": "11", "annotations": dict(annotations or {})}}


RANCHER_LABELS = {rancher_owner.RANCHER_QUOTA_LABEL: "true"}
RANCHER_RAW = '{"limit": {"limitsCpu": "3000m", "limitsMemory": "5000Mi"}}'
PROJECT = {"apiVersion": "management.cattle.io/v3", "kind": "Project",
           "metadata": {"name": "p-xyz", "namespace": "c-abc"},
           "spec": {"displayName": "team", "resourceQuota": {"limit": {"limitsCpu": "10", "limitsMemory": "20Gi"}},
                    "namespaceDefaultResourceQuota": {"limit": {"limitsCpu": "2", "limitsMemory": "4Gi"}}}}


def step(backend, q, ns, rid, delta, now=T0, release=False, book=None):
    """What reservations.py does for one quota: take its ledger (book: the one the previous step returned, as the
    operator namespace's store would), observe, reserve/release, render."""
    ledger = book or L.new_ledger("tenant-a", q["metadata"]["name"], backend.name, q["metadata"]["uid"])
    current = backend.durable_hard(q, ns)
    ledger, _ignored = L.observe(ledger, current, now)
    if release:
        ledger, _ignored = L.release(ledger, rid, now)
    else:
        ledger, _ignored = L.reserve(ledger, rid, delta, current, now, ttl_seconds=600)
        ledger = backend.prepare(q, ns, ledger)
    ledger = L.mark_written(ledger)
    return ledger, backend.render(q, ns, ledger)


# ---------------------------------------------------------------------------
# selection

def test_select_plain():
    backend = registry.owner_of(quota(name="compute"), namespace(), {})
    assert isinstance(backend, plain.PlainOwner) and backend.name == "plain" and backend.written_on == "quota"


@pytest.mark.parametrize("labels", [RANCHER_LABELS, {rancher_owner.RANCHER_CREATOR_LABEL: "norman"}])
def test_select_rancher(labels):
    backend = registry.owner_of(quota(labels=labels), namespace(), {"rancher_projects": False})
    assert backend.name == "rancher" and backend.written_on == "namespace"
    assert any("downstream" in note for note in backend.notes)


def test_select_harvester_wraps_rancher():
    facts = {"harvester": True, "harvester_version": "v1.4.2"}
    backend = registry.owner_of(quota(labels=RANCHER_LABELS), namespace(), facts)
    assert backend.name == "harvester" and backend.inner.name == "rancher" and backend.written_on == "namespace"
    assert backend.describe()["owner"] == "rancher"


def test_harvester_before_142_does_not_scale_quotas():
    facts = {"harvester": True, "harvester_version": "v1.4.1"}
    assert registry.owner_of(quota(labels=RANCHER_LABELS), namespace(), facts).name == "rancher"
    newer = {"harvester": True, "harvester_version": "v1.5.0"}
    assert registry.owner_of(quota(labels=RANCHER_LABELS), namespace(), newer).name == "harvester"


def test_harvester_only_scales_rancher_quotas_unless_marked():
    assert registry.owner_of(quota(name="extra"), namespace(), {"harvester": True}).name == "plain"
    marked = quota(name="extra", annotations={"harvesterhci.io/migratingUID-abc": '{"limits.cpu":"1"}'})
    backend = registry.owner_of(marked, namespace(), {})
    assert backend.name == "harvester" and backend.inner.name == "plain"


def test_select_aaq_and_note():
    arq = {"apiVersion": "aaq.kubevirt.io/v1alpha1", "kind": "ApplicationAwareResourceQuota",
           "metadata": {"name": "arq", "namespace": "tenant-a"}, "spec": {"hard": {"limits.cpu": "3"}}}
    backend = registry.owner_of(arq, namespace(), {"aaq": True})
    assert backend.name == "aaq" and not backend.writable
    assert any("AAQ" in note for note in registry.owner_of(quota(), namespace(), {"aaq": True}).notes)


def test_parse_harvester_version():
    assert harvester.parse_harvester_version("v1.4.2") == (1, 4, 2)
    assert harvester.parse_harvester_version("1.5.0-rc1") == (1, 5, 0)
    assert harvester.parse_harvester_version("v1.5") == (1, 5, 0)
    assert harvester.parse_harvester_version("master") is None


# ---------------------------------------------------------------------------
# plain

def test_plain_reserve_and_restore_exact():
    backend = plain.PlainOwner()
    q, ns = quota(name="compute"), namespace()
    ledger, writes = step(backend, q, ns, "n1", {"limits.memory": "1Gi", "limits.cpu": "500m"})
    written = writes["quota"]
    assert set(writes) == {"quota"}
    assert written["spec"]["hard"] == {"limits.cpu": "3500m", "limits.memory": "6024Mi", "pods": "10"}
    assert written["metadata"]["resourceVersion"] == "7"
    # the ledger is not written on the tenant's objects: it lives in the operator namespace
    assert L.LEDGER_ANNOTATION not in written["metadata"]["annotations"]
    assert q["spec"]["hard"]["limits.cpu"] == "3"  # input untouched
    _ignored, writes = step(backend, written, ns, "n1", None, release=True, book=ledger)
    assert writes["quota"]["spec"]["hard"] == {"limits.cpu": "3", "limits.memory": "5000Mi", "pods": "10"}
    assert L.LEDGER_ANNOTATION not in writes["quota"]["metadata"]["annotations"]


def test_plain_followed():
    backend = plain.PlainOwner()
    ledger, writes = step(backend, quota(name="compute"), namespace(), "n1", {"limits.cpu": "1"})
    assert backend.followed(writes["quota"], ledger) == (True, [])
    assert backend.followed(quota(name="compute"), ledger) == (False, ["limits.cpu"])


# ---------------------------------------------------------------------------
# Rancher

def test_rancher_key_mapping():
    assert rancher_keys.rancher_key("limits.cpu") == "limitsCpu"
    assert rancher_keys.rancher_key("services.nodeports") == "servicesNodePorts"
    assert rancher_keys.rancher_key("count/pods") is None
    assert rancher_keys.quota_name_for("requestsStorage") == "requests.storage"
    assert rancher_owner.rancher_limit(namespace({rancher_owner.RANCHER_QUOTA_ANNOTATION: RANCHER_RAW})) == {
        "limits.cpu": "3000m", "limits.memory": "5000Mi"}


def test_rancher_durable_values_come_from_the_annotation_then_spec():
    backend = rancher_owner.RancherOwner()
    q = quota(labels=RANCHER_LABELS, hard={"limits.cpu": "3", "limits.memory": "5000Mi", "pods": "10",
                                           "count/pods": "10"})
    ns = namespace({rancher_owner.RANCHER_QUOTA_ANNOTATION: '{"limit": {"limitsCpu": "3000m"}}'})
    # count/pods has no fixed key: on a Rancher-built quota it came from an `extended` map (Rancher 2.14+)
    assert backend.durable_hard(q, ns) == {"limits.cpu": "3000m", "limits.memory": "5000Mi", "pods": "10",
                                           "count/pods": "10"}
    restricted = rancher_owner.RancherOwner(project=PROJECT)
    assert restricted.durable_hard(q, ns) == {"limits.cpu": "3000m", "limits.memory": "5000Mi"}


def test_rancher_reserve_writes_only_the_namespace_annotation():
    backend = rancher_owner.RancherOwner()
    q, ns = quota(labels=RANCHER_LABELS), namespace({rancher_owner.RANCHER_QUOTA_ANNOTATION: RANCHER_RAW, "other": "x"})
    ledger, writes = step(backend, q, ns, "n1", {"limits.cpu": "4015m", "limits.memory": "8940039936"})
    assert set(writes) == {"namespace"}
    annotations = writes["namespace"]["metadata"]["annotations"]
    assert json.loads(annotations[rancher_owner.RANCHER_QUOTA_ANNOTATION]) == {
        "limit": {"limitsCpu": "7015m", "limitsMemory": "14182919936"}}
    assert annotations["other"] == "x"
    assert L.LEDGER_ANNOTATION not in annotations
    assert ledger.reservations["n1"].delta == {"limits.cpu": "4015m", "limits.memory": "8940039936"}
    assert writes["namespace"]["metadata"]["resourceVersion"] == "11"
    # Rancher owns the quota: kvquota has no way to write its spec.hard
    assert not hasattr(backend, "push")


def test_a_0_1_0_ledger_annotation_is_dropped_by_the_next_write():
    backend = rancher_owner.RancherOwner()
    legacy = L.dump(L.new_ledger("tenant-a", "default-abcde"))
    q, ns = quota(labels=RANCHER_LABELS), namespace({rancher_owner.RANCHER_QUOTA_ANNOTATION: RANCHER_RAW,
                                                     L.LEDGER_ANNOTATION: legacy})
    _ledger, writes = step(backend, q, ns, "n1", {"limits.cpu": "1"})
    assert L.LEDGER_ANNOTATION not in writes["namespace"]["metadata"]["annotations"]


def test_rancher_release_restores_the_original_annotation_byte_for_byte():
    backend = rancher_owner.RancherOwner()
    q, ns = quota(labels=RANCHER_LABELS), namespace({rancher_owner.RANCHER_QUOTA_ANNOTATION: RANCHER_RAW})
    ledger, writes = step(backend, q, ns, "n1", {"limits.cpu": "1"})
    _ignored, writes = step(backend, q, writes["namespace"], "n1", None, release=True, book=ledger)
    annotations = writes["namespace"]["metadata"]["annotations"]
    assert annotations[rancher_owner.RANCHER_QUOTA_ANNOTATION] == RANCHER_RAW
    assert L.LEDGER_ANNOTATION not in annotations


def test_rancher_release_removes_an_annotation_that_was_absent():
    backend = rancher_owner.RancherOwner()
    q, ns = quota(labels=RANCHER_LABELS), namespace()
    ledger, writes = step(backend, q, ns, "n1", {"limits.memory": "1Gi"})
    assert json.loads(writes["namespace"]["metadata"]["annotations"][rancher_owner.RANCHER_QUOTA_ANNOTATION]) == {
        "limit": {"limitsMemory": "6024Mi"}}
    _ignored, writes = step(backend, q, writes["namespace"], "n1", None, release=True, book=ledger)
    assert writes["namespace"]["metadata"]["annotations"] == {}


def test_rancher_release_keeps_an_admin_change_and_other_keys():
    backend = rancher_owner.RancherOwner()
    q, ns = quota(labels=RANCHER_LABELS), namespace({rancher_owner.RANCHER_QUOTA_ANNOTATION: RANCHER_RAW})
    book, writes = step(backend, q, ns, "n1", {"limits.cpu": "1"})
    edited = writes["namespace"]
    doc = json.loads(edited["metadata"]["annotations"][rancher_owner.RANCHER_QUOTA_ANNOTATION])
    doc["limit"]["limitsCpu"] = "6"          # an administrator raised it in the Rancher UI
    doc["limit"]["pods"] = "20"              # and set a key kvquota does not manage
    edited["metadata"]["annotations"][rancher_owner.RANCHER_QUOTA_ANNOTATION] = json.dumps(doc)
    ledger, writes = step(backend, q, edited, "n1", None, release=True, book=book)
    assert json.loads(writes["namespace"]["metadata"]["annotations"][rancher_owner.RANCHER_QUOTA_ANNOTATION]) == {
        "limit": {"limitsCpu": "6", "limitsMemory": "5000Mi", "pods": "20"}}
    assert ledger.history[-1]["kind"] == L.ADMIN_CHANGE


def test_rancher_revert_is_seen_as_revert():
    backend = rancher_owner.RancherOwner()
    q, ns = quota(labels=RANCHER_LABELS), namespace({rancher_owner.RANCHER_QUOTA_ANNOTATION: RANCHER_RAW})
    ledger, writes = step(backend, q, ns, "n1", {"limits.cpu": "1"})
    reverted = writes["namespace"]
    reverted["metadata"]["annotations"][rancher_owner.RANCHER_QUOTA_ANNOTATION] = RANCHER_RAW
    observed, changes = L.observe(ledger, backend.durable_hard(q, reverted), T0)
    assert [c["kind"] for c in changes] == [L.REVERTED]
    assert L.desired_strings(observed)["limits.cpu"] == "4"


def test_project_fit_names_the_numbers():
    mine = namespace({rancher_owner.RANCHER_PROJECT_ANNOTATION: "c-abc:p-xyz", rancher_owner.RANCHER_QUOTA_ANNOTATION: RANCHER_RAW})
    other = namespace({rancher_owner.RANCHER_PROJECT_ANNOTATION: "c-abc:p-xyz",
                       rancher_owner.RANCHER_QUOTA_ANNOTATION: '{"limit": {"limitsCpu": "5"}}'}, name="tenant-b")
    defaulted = namespace({rancher_owner.RANCHER_PROJECT_ANNOTATION: "c-abc:p-xyz"}, name="tenant-c")
    stranger = namespace({rancher_owner.RANCHER_PROJECT_ANNOTATION: "c-abc:p-other",
                          rancher_owner.RANCHER_QUOTA_ANNOTATION: '{"limit": {"limitsCpu": "50"}}'}, name="tenant-d")
    everything = [mine, other, defaulted, stranger]
    ok, problems = rancher_owner.project_fit(PROJECT, everything, "tenant-a", {"limits.cpu": "3", "limits.memory": "5000Mi"})
    assert ok and problems == []
    ok, problems = rancher_owner.project_fit(PROJECT, everything, "tenant-a", {"limits.cpu": "4015m"})
    assert not ok
    assert "c-abc:p-xyz" in problems[0] and "limitsCpu to 10" in problems[0] and "11015m" in problems[0]
    assert "tenant-b 5" in problems[0] and "tenant-c 2" in problems[0] and "tenant-d" not in problems[0]
    assert rancher_owner.project_ref(mine) == ("c-abc", "p-xyz")


# ---------------------------------------------------------------------------
# Harvester

@pytest.mark.parametrize("previous", [None, "false", "true"])
def test_harvester_opt_out_is_put_back_exactly(previous):
    annotations = {} if previous is None else {harvester.HARVESTER_SKIP_ANNOTATION: previous}
    backend = harvester.HarvesterOwner(rancher_owner.RancherOwner())
    q = quota(labels=RANCHER_LABELS, annotations=annotations)
    ns = namespace({rancher_owner.RANCHER_QUOTA_ANNOTATION: RANCHER_RAW})
    ledger, writes = step(backend, q, ns, "n1", {"limits.cpu": "1"})
    assert ledger.state["harvesterSkip"] == {"present": previous is not None, "value": previous}
    opted = backend.before_expand(q, ledger)
    if previous == "true":
        assert opted is None
        opted = q
    assert opted["metadata"]["annotations"][harvester.HARVESTER_SKIP_ANNOTATION] == "true"
    released, _ignored = L.release(ledger, "n1", T0)
    restored = backend.after_release(opted, released)
    if previous == "true":
        assert restored is None
    else:
        annotations_after = restored["metadata"]["annotations"]
        assert annotations_after.get(harvester.HARVESTER_SKIP_ANNOTATION) == previous
        assert (harvester.HARVESTER_SKIP_ANNOTATION in annotations_after) == (previous is not None)
    assert backend.after_release(opted, ledger) is None  # not idle yet: leave it


def test_harvester_with_plain_owner_writes_opt_out_with_the_quota():
    backend = harvester.HarvesterOwner(plain.PlainOwner())
    q = quota(name="extra", annotations={harvester.HARVESTER_SKIP_ANNOTATION: "false"})
    ledger, writes = step(backend, q, namespace(), "n1", {"limits.cpu": "1"})
    assert writes["quota"]["metadata"]["annotations"][harvester.HARVESTER_SKIP_ANNOTATION] == "true"
    _ignored, writes = step(backend, writes["quota"], namespace(), "n1", None, release=True, book=ledger)
    assert writes["quota"]["metadata"]["annotations"] == {harvester.HARVESTER_SKIP_ANNOTATION: "false"}
    assert writes["quota"]["spec"]["hard"] == q["spec"]["hard"]


def test_harvester_blocks_when_it_is_already_scaling():
    backend = harvester.HarvesterOwner(rancher_owner.RancherOwner())
    busy = quota(labels=RANCHER_LABELS, annotations={"harvesterhci.io/migratingUID-123": '{"limits.cpu":"1"}'})
    problems = backend.blockers(busy, namespace(), L.new_ledger("tenant-a", "default-abcde"))
    assert problems and "migratingUID-123" in problems[0]
    busy["metadata"]["annotations"][harvester.HARVESTER_SKIP_ANNOTATION] = "true"
    assert backend.blockers(busy, namespace(), L.new_ledger("tenant-a", "default-abcde")) == []


def test_harvester_v19_compensation_counts_as_scaling_and_its_resync_flag_does_not():
    # Harvester v1.9 (PR 10197): harvesterhci.io/migratingCompensation holds +128Mi slack after a refusal; the flag
    # harvesterhci.io/migratingScalingResyncNeeded stays on the quota as "false" once synced
    backend = harvester.HarvesterOwner(rancher_owner.RancherOwner())
    compensated = quota(labels=RANCHER_LABELS, annotations={
        "harvesterhci.io/migratingCompensation": '{"limits.memory":"1152Mi"}',
        "harvesterhci.io/migratingScalingResyncNeeded": "false"})
    problems = backend.blockers(compensated, namespace(), L.new_ledger("tenant-a", "default-abcde"))
    assert len(problems) == 1 and "migratingCompensation" in problems[0], problems
    assert "ResyncNeeded" not in problems[0]
    flag_only = quota(labels=RANCHER_LABELS, annotations={"harvesterhci.io/migratingScalingResyncNeeded": "false"})
    assert backend.blockers(flag_only, namespace(), L.new_ledger("tenant-a", "default-abcde")) == []


class RefusingIO(object):
    """What reservations' run gives an owner's guard: a cluster whose quota update an admission control refuses."""
    attempts = 3

    def __init__(self, q, refusal):
        self.warnings = []
        self.writes = []
        io = self

        class Cluster(object):
            def get_quota(self, namespace, name):
                return json.loads(json.dumps(q))

            def replace(self, body, what):
                io.writes.append(what)
                raise refusal
        self.cluster = Cluster()

    def sleep(self, seconds):
        pass

    def warn(self, text):
        self.warnings.append(text)


LOCKDOWN_REFUSAL = ('an admission webhook refused to update resourcequota default-abcde in namespace tenant-a '
                    '(Harvester opt-out): admission webhook "rancher.cattle.io.resourcequotas" denied the request: '
                    'users are forbidden from changing resources managed by Rancher')


def test_harvester_under_rancher_lock_down_reserves_through_the_namespace_alone():
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import KvquotaError
    backend = harvester.HarvesterOwner(rancher_owner.RancherOwner())
    q = quota(labels=RANCHER_LABELS)
    ns = namespace({rancher_owner.RANCHER_QUOTA_ANNOTATION: RANCHER_RAW})
    ledger, writes = step(backend, q, ns, "n1", {"limits.cpu": "1"})
    io = RefusingIO(q, KvquotaError(LOCKDOWN_REFUSAL, "read the webhook's message"))
    backend.guard(io, ("tenant-a", "default-abcde"), ledger)     # no error: the reservation goes on
    assert io.writes == ["update resourcequota default-abcde in namespace tenant-a (Harvester opt-out)"]
    assert backend.locked_down
    [warning] = io.warnings
    assert "Rancher's quota lock-down" in warning and "Harvester's own scaling" in warning
    # the namespace's Rancher limit carries the reservation, the quota itself is not written
    assert set(writes) == {"namespace"}
    # nothing to put back on release: the opt-out was never written
    released, _ignored = L.release(ledger, "n1", T0)
    assert backend.after_release(q, released) is None


@pytest.mark.parametrize("refusal", [
    'an admission policy refused to update resourcequota default-abcde in namespace tenant-a (Harvester opt-out): '
    'ValidatingAdmissionPolicy \'platform-quotas\' denied request: quotas are frozen during the change window',
    'the API server refused to update resourcequota default-abcde: managed by Rancher'])
def test_harvester_opt_out_refused_otherwise_still_fails_the_reservation(refusal):
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import KvquotaError
    backend = harvester.HarvesterOwner(rancher_owner.RancherOwner())
    q = quota(labels=RANCHER_LABELS)
    ledger, _writes = step(backend, q, namespace({rancher_owner.RANCHER_QUOTA_ANNOTATION: RANCHER_RAW}), "n1",
                           {"limits.cpu": "1"})
    io = RefusingIO(q, KvquotaError(refusal, "fix"))
    with pytest.raises(KvquotaError) as err:
        backend.guard(io, ("tenant-a", "default-abcde"), ledger)
    assert "cannot set Harvester's opt-out" in err.value.message and "nothing was changed" in err.value.message
    assert not backend.locked_down and io.warnings == []


# ---------------------------------------------------------------------------
# property: any reserve/release sequence through Rancher ends at the original namespace

@settings(max_examples=150, deadline=None)
@given(st.sampled_from([None, RANCHER_RAW, '{"limit":{"limitsCpu":"3"},"extra":1}']),
       st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["1", "250m"]),
                          st.sampled_from(["1Gi", "100Mi"])), max_size=6))
def test_rancher_round_trip_restores_namespace(raw, reservations):
    backend = rancher_owner.RancherOwner()
    q = quota(labels=RANCHER_LABELS)
    ns = namespace({} if raw is None else {rancher_owner.RANCHER_QUOTA_ANNOTATION: raw})
    original = json.loads(json.dumps(ns))
    current = ns
    held = []
    book = None
    for rid, cpu, mem in reservations:
        if rid in held:
            continue
        book, writes = step(backend, q, current, rid, {"limits.cpu": cpu, "limits.memory": mem}, book=book)
        current = writes["namespace"]
        held.append(rid)
    for rid in held:
        book, writes = step(backend, q, current, rid, None, release=True, book=book)
        current = writes["namespace"]
    assert current["metadata"]["annotations"] == original["metadata"]["annotations"]


# ---------------------------------------------------------------------------
# the owner protocol (issue 25)

def test_every_owner_answers_the_whole_protocol():
    """Callers ask an owner its protocol only: every owner is a QuotaOwner, so nothing is probed with getattr."""
    project = {"spec": {"resourceQuota": {"limit": {"limitsCpu": "4"}}}}
    on_quota, on_namespace, read_only = plain.PlainOwner(), rancher_owner.RancherOwner(project=project), aaq.AAQOwner()
    on_plain = harvester.HarvesterOwner(plain.PlainOwner())
    on_rancher = harvester.HarvesterOwner(rancher_owner.RancherOwner(project=project))
    owners = [on_quota, on_namespace, read_only, on_plain, on_rancher]
    assert all(isinstance(owner, protocol.QuotaOwner) for owner in owners)
    assert [o.writable for o in owners] == [True, True, False, True, True]
    assert [o.written_on for o in owners] == ["quota", "namespace", None, "quota", "namespace"]
    assert [o.guards_the_quota for o in owners] == [False, False, False, False, True]
    assert [o.applies_later for o in owners] == [False, True, False, False, True]
    assert [o.refuses_below_usage for o in owners] == [False, False, False, False, True]
    assert [o.project for o in owners] == [None, project, None, None, project]
    quota = {"metadata": {"name": "q", "namespace": "n"}, "spec": {"hard": {"limits.cpu": "1"}}}
    assert on_quota.writable_names(quota) is None and on_plain.writable_names(quota) is None
    assert on_rancher.writable_names(quota) == on_namespace.writable_names(quota)
    assert all(o.WRITE_ORDER == ("quota", "namespace") for o in owners)


def test_only_the_owners_package_knows_an_owner_by_name():
    """Outside state/owners nothing branches on an owner's name, probes an owner with getattr or lists the kinds
    an owner writes: registry.py is the one place that knows the owners (a new owner touches its own module and
    that file)."""
    import os
    import re
    core = os.path.join(os.path.dirname(os.path.abspath(__file__)), *([os.pardir] * 4 + [
        "plugins", "module_utils", "kvquota"]))
    offences = []
    for dirpath, _dirs, filenames in os.walk(core):
        if os.path.basename(dirpath) == "owners":
            continue
        for filename in filenames:
            if not filename.endswith(".py"):
                continue
            with open(os.path.join(dirpath, filename)) as fh:
                source = fh.read()
            for pattern in (r"(backend|owner)\.name\s*[!=]=", r"[!=]=\s*[\"'](plain|rancher|harvester|aaq)[\"']",
                            r"[!=]=\s*(HARVESTER|RANCHER|PLAIN|AAQ)\b", r"getattr\([^)]*(backend|owner)",
                            r"\(\"quota\", \"namespace\"\)", r"\b(PlainOwner|HarvesterOwner|AAQOwner)\b"):
                offences.extend("%s: %s" % (filename, m.group(0)) for m in re.finditer(pattern, source))
    assert offences == []


def test_a_new_owner_is_a_module_and_a_line_in_the_registry(monkeypatch):
    """What a fourth owner of spec.hard needs: a QuotaOwner of its own, listed in registry.OWNERS. Its ledgers
    are read back (the ledger knows no owner names), and the service asks it only the protocol."""
    class TenantOwner(plain.PlainOwner):
        name = "capsule"

        @classmethod
        def claims(cls, quota, facts):
            return (quota.get("metadata") or {}).get("labels", {}).get("capsule.clastix.io/tenant") is not None

    monkeypatch.setattr(registry, "OWNERS", (TenantOwner,) + registry.OWNERS)
    owned = quota(labels={"capsule.clastix.io/tenant": "t1"})
    owner = registry.owner_of(owned, namespace(), {})
    assert isinstance(owner, TenantOwner) and registry.owner_of(quota(), namespace(), {}).name == "plain"
    book, _writes = step(owner, owned, namespace(), "n1", {"limits.cpu": "1"})
    assert L.load(L.dump(book), "tenant-a", owned["metadata"]["name"]).backend == "capsule"


def test_every_registered_owner_name_is_one_a_ledger_records():
    assert registry.NAMES == ("aaq", "rancher", "plain", "harvester")
    assert all(L.OWNER_NAME.match(name) for name in registry.NAMES)
    book = L.new_ledger("tenant-a", "q", "plain", "u")
    data = json.loads(L.dump(book))
    data["backend"] = "Not A Name!"
    with pytest.raises(InputError) as err:
        L.load(json.dumps(data), "tenant-a", "q")
    assert "not the name of a quota owner" in err.value.message


def test_rancher_refusal_is_read_from_cattle_status():
    condition = {"Type": "ResourceQuotaValidated", "Status": "False",
                 "Message": "Resource quota [limitsCpu=5] exceeds project limit"}
    namespace = {"metadata": {"annotations": {"cattle.io/status": json.dumps({"Conditions": [condition]})}}}
    assert "exceeds project limit" in rancher_owner._rancher_refusal(namespace)
    condition["Status"] = "True"
    namespace["metadata"]["annotations"]["cattle.io/status"] = json.dumps({"Conditions": [condition]})
    assert rancher_owner._rancher_refusal(namespace) is None
    assert rancher_owner._rancher_refusal({"metadata": {}}) is None
