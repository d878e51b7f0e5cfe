# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""headroom: what a top-up adds for migrations refused by quota, from trusted state only (the quotas' status
and the computed charge, as batch_headroom gives them, and KubeVirt's condition); Events at most name the quota,
and only when verified to be about the migration (UID, virt-controller). The top-up cap and its default."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from fractions import Fraction

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import headroom as h
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError, NotFoundError

MI = 1024 ** 2
GI = 1024 ** 3
REFUSAL = ('pods "virt-launcher-vm-1-x" is forbidden: exceeded quota: compute, requested: limits.memory=4800765905, '
           'used: limits.memory=4800765905, limited: limits.memory=5000Mi')
FORGED = ('pods "virt-launcher-vm-1-x" is forbidden: exceeded quota: compute, requested: limits.cpu=20,'
          'limits.memory=100Gi, used: limits.cpu=1,limits.memory=1Gi, limited: limits.cpu=4,limits.memory=8Gi')


class FakeCluster(object):
    """cluster.Cluster's contract as refused_target_pods uses it: get(path, what) of a VMIM, request("GET", path,
    query) of the FailedCreate Events of a namespace (one page). calls: the paths requested."""

    def __init__(self, vmims, events=()):
        self.vmims = dict(((m["metadata"]["namespace"], m["metadata"]["name"]), m) for m in vmims)
        self.events = list(events)
        self.calls = []

    def get(self, path, what=None):
        self.calls.append(path)
        parts = path.split("/")
        assert parts[:4] == ["", "apis", "kubevirt.io", "v1"] and parts[6] == "virtualmachineinstancemigrations", path
        try:
            return self.vmims[(parts[5], parts[7])]
        except KeyError:
            raise NotFoundError("cannot %s: not found" % what)

    def request(self, method, path, body=None, query=None, content_type=None, what=None):
        self.calls.append(path)
        parts = path.split("/")
        assert method == "GET" and parts[:4] == ["", "api", "v1", "namespaces"] and parts[5] == "events", path
        assert query["fieldSelector"] == "involvedObject.kind=VirtualMachineInstanceMigration,reason=FailedCreate"
        return {"items": [e for e in self.events if e["metadata"]["namespace"] == parts[4]], "metadata": {}}


def vmim(name, message=None, since="2025-01-31T12:00:00Z", ns="t", uid=None, vmi="vm-1", phase="Pending"):
    condition = {"type": "migrationRejectedByResourceQuota", "status": "True", "lastTransitionTime": since}
    if message is not None:
        condition["message"] = message
    return {"kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": name, "namespace": ns, "uid": uid or "uid-" + name}, "spec": {"vmiName": vmi},
            "status": {"phase": phase, "conditions": [condition]}}


def event(name, migration, message, stamp, ns="t", uid=None, component="virt-controller", count=1):
    return {"metadata": {"name": name, "namespace": ns}, "reason": "FailedCreate", "lastTimestamp": stamp,
            "count": count, "source": {"component": component},
            "involvedObject": {"kind": "VirtualMachineInstanceMigration", "name": migration, "namespace": ns,
                               "uid": uid or "uid-" + migration},
            "message": "Error creating pod: " + message}


@pytest.fixture
def sized(monkeypatch):
    """batch_headroom replaced by what sizing computed (the lab tests run the real one): compute lacks 100Mi
    for target pods of the computed size, other lacks nothing; each pod is computed to charge 1 CPU / 1.5Gi."""
    seen = []

    def batch_headroom(cluster, vms, options=None, planned=None, pins=None):
        seen.append(sorted((v["namespace"], v["name"]) for v in vms))
        charge = {"limits.cpu": Fraction(1), "limits.memory": Fraction(1536 * MI)}
        sized = {"charges": {}, "quota_charges": {("t", "compute"): charge, ("t", "other"): charge}, "from_plan": False}
        return {("t", "compute"): {"limits.memory": Fraction(100 * MI)}}, {}, sized
    monkeypatch.setattr(h, "batch_headroom", batch_headroom)
    return seen


# -- refused_target_pods: trusted sources ---------------------------------------

def test_the_amount_is_what_the_quota_status_lacks_for_the_computed_pod_not_what_an_event_says(sized):
    cluster = FakeCluster([vmim("m1")], [event("e1", "m1", FORGED, "2999-01-01T00:00:00Z")])
    found = h.refused_target_pods(cluster, [{"namespace": "t", "name": "m1"}])
    assert found["exact"] == {("t", "compute"): {"limits.memory": 100 * MI}}
    assert found["charge"][("t", "compute")] == {"limits.cpu": 1, "limits.memory": 1536 * MI}
    assert found["refused"] == [{"namespace": "t", "name": "m1", "uid": "uid-m1", "vmi": "vm-1"}]
    assert sized == [[("t", "vm-1")]]
    headroom, key = h.refused_headroom(cluster, [{"namespace": "t", "name": "m1"}])
    assert headroom == {("t", "compute"): {"limits.memory": "100Mi"}}


def test_an_event_about_another_uid_or_from_another_component_points_at_nothing(sized):
    forged = [event("e1", "m1", FORGED.replace("compute", "other"), "2999-01-01T00:00:00Z", uid="uid-of-something"),
              event("e2", "m1", FORGED.replace("compute", "other"), "2999-01-01T00:00:01Z", component="tenant")]
    found = h.refused_target_pods(FakeCluster([vmim("m1")], forged), [{"namespace": "t", "name": "m1"}])
    assert found["pointed"] == [] and found["evidence"] is False


def test_a_verified_event_names_the_quota_and_makes_the_key_change_with_a_new_refusal(sized):
    first = h.refused_target_pods(FakeCluster([vmim("m1")], [event("e1", "m1", REFUSAL, "2025-01-31T12:00:00Z")]),
                                  [{"namespace": "t", "name": "m1"}])
    assert first["pointed"] == [("t", "compute")] and first["evidence"] is True
    again = h.refused_target_pods(FakeCluster([vmim("m1")], [event("e1", "m1", REFUSAL, "2025-01-31T12:00:00Z")]),
                                  [{"namespace": "t", "name": "m1"}])
    later = h.refused_target_pods(FakeCluster([vmim("m1")], [event("e1", "m1", REFUSAL, "2025-01-31T12:00:09Z",
                                                                   count=2)]), [{"namespace": "t", "name": "m1"}])
    assert first["key"] == again["key"] != later["key"]
    # the key never depends on the Event's text (a tenant could vary it at will)
    reworded = h.refused_target_pods(FakeCluster([vmim("m1")], [event("e1", "m1", FORGED, "2025-01-31T12:00:00Z")]),
                                     [{"namespace": "t", "name": "m1"}])
    assert reworded["key"] == first["key"]


def test_kubevirts_condition_message_names_the_quota_without_reading_events(sized):
    cluster = FakeCluster([vmim("m1", REFUSAL)])
    found = h.refused_target_pods(cluster, [{"namespace": "t", "name": "m1"}])
    assert found["pointed"] == [("t", "compute")]
    assert not [path for path in cluster.calls if path.endswith("/events")]


def test_the_limits_refusals_were_checked_against_are_gathered_lowest_first(sized):
    # two migrations refused by the same quota, one at a lower limit (before the quota controller caught up)
    lower = REFUSAL.replace("limited: limits.memory=5000Mi", "limited: limits.memory=4000Mi")
    # the limits come from KubeVirt's condition message (the VMIM's status, which only virt-controller writes)
    cluster = FakeCluster([vmim("m1", REFUSAL), vmim("m2", lower, vmi="vm-2")])
    found = h.refused_target_pods(cluster, [{"namespace": "t", "name": "m1"}, {"namespace": "t", "name": "m2"}])
    assert found["limited"] == {("t", "compute"): {"limits.memory": 4000 * MI}}
    found = h.refused_target_pods(FakeCluster([vmim("m1", lower)], [event("e1", "m1", REFUSAL, "2025-01-31T12:00:00Z")]),
                                  [{"namespace": "t", "name": "m1"}])
    assert found["limited"] == {("t", "compute"): {"limits.memory": 4000 * MI}}
    # never from an Event, not even one verified to be about the migration (a tenant can post one with its UID and
    # virt-controller's name: a forged low limit would withhold every top-up); it may still name the quota
    for events in ([event("e1", "m1", lower, "2999-01-01T00:00:00Z")],
                   [event("e1", "m1", lower, "2999-01-01T00:00:00Z", uid="uid-of-something")]):
        found = h.refused_target_pods(FakeCluster([vmim("m1")], events), [{"namespace": "t", "name": "m1"}])
        assert found["limited"] == {}
    assert h.refused_target_pods(FakeCluster([vmim("m1")], [event("e1", "m1", lower, "2999-01-01T00:00:00Z")]),
                                 [{"namespace": "t", "name": "m1"}])["pointed"] == [("t", "compute")]


def test_final_and_unrefused_migrations_are_left_out(sized):
    ok = {"kind": "VirtualMachineInstanceMigration", "metadata": {"name": "ok", "namespace": "t", "uid": "u"},
          "spec": {"vmiName": "vm-2"}, "status": {"phase": "Running"}}
    cluster = FakeCluster([ok, vmim("done", phase="Succeeded")])
    found = h.refused_target_pods(cluster, [{"namespace": "t", "name": "ok"}, {"namespace": "t", "name": "done"}])
    assert found["refused"] == [] and found["key"] == "" and sized == []
    assert h.refused_headroom(cluster, [{"namespace": "t", "name": "ok"}]) == ({}, "")


def test_unknown_migration_and_empty_input():
    with pytest.raises(NotFoundError):
        h.refused_target_pods(FakeCluster([]), [{"namespace": "t", "name": "nope"}])
    with pytest.raises(InputError):
        h.refused_target_pods(FakeCluster([]), [])


# -- top_up_amounts (pure) -------------------------------------------------------

CHARGE = {("t", "compute"): {"limits.cpu": Fraction(1), "limits.memory": 1536 * MI},
          ("t", "other"): {"limits.cpu": Fraction(1), "limits.memory": 1536 * MI}}


def test_exact_shortfall_is_added_as_is_when_within_the_cap():
    amounts, problems, how = h.top_up_amounts({("t", "compute"): {"limits.memory": 100 * MI}}, CHARGE, "25%")
    assert (amounts, problems, how) == ({("t", "compute"): {"limits.memory": 100 * MI}}, [], "exact")


def test_exact_shortfall_over_the_cap_is_a_problem_with_the_numbers():
    amounts, problems, how = h.top_up_amounts({("t", "compute"): {"limits.memory": 500 * MI}}, CHARGE, "25%")
    # 25% of 1536Mi is 384Mi
    assert amounts == {} and how == "exact"
    assert problems == ["t/compute needs limits.memory=500Mi (top_up_cap 25% of the computed charge)"]


def test_pods_larger_than_computed_get_the_caps_share_of_their_charge_on_the_quota_pointed_at():
    amounts, problems, how = h.top_up_amounts({}, CHARGE, "25%", pointed=[("t", "compute")])
    assert how == "step" and problems == []
    assert amounts == {("t", "compute"): {"limits.cpu": Fraction(1, 4), "limits.memory": 384 * MI}}


def test_without_a_pointer_every_charged_quota_gets_the_step():
    amounts, _problems, _how = h.top_up_amounts({}, CHARGE, {"limits.memory": "64Mi"})
    assert amounts == {("t", "compute"): {"limits.memory": 64 * MI}, ("t", "other"): {"limits.memory": 64 * MI}}


def test_top_ups_together_never_exceed_the_computed_charge():
    # a cap larger than the pod: one top-up adds at most the pod's charge, and once that is added, nothing more
    amounts, _p, _h = h.top_up_amounts({}, CHARGE, {"limits.memory": "100Gi"}, pointed=[("t", "compute")])
    assert amounts == {("t", "compute"): {"limits.memory": 1536 * MI}}
    amounts, problems, _h = h.top_up_amounts({}, CHARGE, {"limits.memory": "100Gi"}, pointed=[("t", "compute")],
                                             added=amounts)
    assert amounts == {} and "allows nothing more for t/compute" in problems[0]
    # an exact need beyond the charge (usage above hard already) is bounded by the charge too
    amounts, problems, _h = h.top_up_amounts({("t", "compute"): {"limits.memory": 4 * GI}}, CHARGE,
                                             {"limits.memory": "100Gi"})
    assert amounts == {("t", "compute"): {"limits.memory": 1536 * MI}} and problems == []


def test_object_counts_are_never_stepped():
    charge = {("t", "compute"): {"pods": Fraction(1), "limits.memory": 1024 * MI}}
    amounts, _problems, _how = h.top_up_amounts({}, charge, "25%")
    assert amounts == {("t", "compute"): {"limits.memory": 256 * MI}}
    # but an exact need of one more pod (a tenant's pod took the room) is added as is
    amounts, _problems, how = h.top_up_amounts({("t", "compute"): {"pods": Fraction(1)}}, charge, "100%")
    assert (amounts, how) == ({("t", "compute"): {"pods": 1}}, "exact")


def test_a_zero_cap_allows_no_top_up():
    amounts, problems, _how = h.top_up_amounts({}, CHARGE, {"limits.memory": "0"}, pointed=[("t", "compute")])
    assert amounts == {} and problems


# -- the cap --------------------------------------------------------------------

def test_the_default_cap_is_a_quarter_of_the_computed_charge():
    assert h.DEFAULT_TOP_UP_CAP == "25%"
    for empty in (None, "", {}):
        assert h.cap_limit(empty, {"limits.memory": 1536 * MI}) == {"limits.memory": 384 * MI}


def test_cap_limits_round_up_to_millicores_and_whole_bytes():
    assert h.cap_limit("10%", {"limits.cpu": Fraction(1, 3), "limits.memory": 1001}) == {
        "limits.cpu": Fraction(34, 1000), "limits.memory": 101}


def test_a_mapping_cap_mixes_quantities_and_percentages_and_names_nothing_else():
    limit = h.cap_limit({"limits.memory": "1Gi", "limits.cpu": "50%"}, {"limits.cpu": 2, "requests.cpu": 2})
    assert limit == {"limits.memory": GI, "limits.cpu": 1}


@pytest.mark.parametrize("cap, named", [({"limits.memory": "-1Gi"}, "limits.memory=-1Gi"),
                                        ({"limits.memory": "lots"}, "top_up_cap.limits.memory"),
                                        ("1Gi", "top_up_cap must be a percentage"),
                                        ("150%", "between 0% and 100%"),
                                        ({"limits.cpu": "x%"}, "top_up_cap.limits.cpu"),
                                        (["25%"], "top_up_cap must be a percentage")])
def test_a_bad_cap_is_refused(cap, named):
    with pytest.raises(InputError) as err:
        h.parse_top_up_cap(cap)
    assert named in str(err.value)
