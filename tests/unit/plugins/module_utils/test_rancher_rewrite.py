# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Rancher project member rewrites field.cattle.io/resourceQuota while kvquota waits for Rancher to apply it.

Rancher lets a project member patch its Namespace's annotation (within the project limit) and then applies the
member's value to spec.hard, which no ledger value matches. The wait must adopt the rewrite like an
administrator's change (the member's value becomes the base, the reservations stay on top), under the
namespace's lock, write the annotation again and wait again; during the final release the member's value is
what is kept. Uses the in-memory API server of test_state_protocol.py, with a Rancher that applies the
annotation only when polled, so the member can act in between.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners import rancher as rancher_owner
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import lease as lease_mod
from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils import reservation_calls as V
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import store as S
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import KvquotaError

from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_state_protocol import (
    BASE_HARD,
    OPERATOR,
    RANCHER_ANNOTATION,
    TARGET,
    Clock,
    FakeApi,
    cluster_objects,
)

NAMESPACE_PATH = "/api/v1/namespaces/tenant-a"
QUOTA_PATH = NAMESPACE_PATH + "/resourcequotas/compute"
LOCK_PATH = lease_mod.leases_path(OPERATOR, lease_mod.namespace_lock_name("tenant-a"))
HOLDER = "job-1"


def member_value(cpu):
    """The annotation a project member writes: limitsCpu changed, limitsMemory as the base has it."""
    return json.dumps({"limit": {"limitsCpu": cpu, "limitsMemory": "8Gi"}}, separators=(",", ":"))


class MemberApi(FakeApi):
    """Rancher applies the annotation to spec.hard only when the quota is read (a poll), and a project member
    writes the next of `rewrites` just before Rancher applies a write of kvquota's: the member's value is what
    Rancher applies. Records kvquota's writes (kind, whether our lock was held) and its Events."""

    def __init__(self, objects, rewrites=(), clock=None):
        super(MemberApi, self).__init__(objects, clock=clock)
        self.rewrites = list(rewrites)
        self.pending = False
        self.written = []
        self.events = []

    def _rancher_follows(self, namespace):
        self.pending = True   # Rancher applies it at the next poll

    def replace(self, obj, what=None):
        lease = self.objects.get(LOCK_PATH)
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
        self.written.append((obj.get("kind"), holder == HOLDER))
        return super(MemberApi, self).replace(obj, what)

    def get_quota(self, namespace, name):
        if self.pending:
            self.pending = False
            ns = self.objects[NAMESPACE_PATH]
            if self.rewrites:
                ns["metadata"]["annotations"][rancher_owner.RANCHER_QUOTA_ANNOTATION] = self.rewrites.pop(0)
                self._bump(ns)
            FakeApi._rancher_follows(self, ns)
        return super(MemberApi, self).get_quota(namespace, name)

    def create_event(self, involved, reason, message, event_type="Normal", action="Update", namespace=None):
        self.events.append((reason, message))
        return {}


def reserve(api, rid, delta, clock):
    return V.reserve(api, rid, {TARGET: delta}, "job", "drain", 600, clock=clock, sleep=lambda s: None,
                     rancher_sync_timeout=5, lock={"holder": HOLDER, "wait_timeout": 0})


def release(api, rid, clock):
    return V.release(api, rid, wait_for_pods=False, clock=clock, sleep=lambda s: None, rancher_sync_timeout=5,
                     lock={"holder": HOLDER, "wait_timeout": 0})


def hard(objects):
    return objects[QUOTA_PATH]["spec"]["hard"]


def limit(objects):
    return json.loads(objects[NAMESPACE_PATH]["metadata"]["annotations"][rancher_owner.RANCHER_QUOTA_ANNOTATION])["limit"]


def ledgers(objects):
    return [S.ledger_of(obj) for key, obj in objects.items() if "/configmaps/" in key]


def only_namespace_writes_under_our_lock(api):
    """kvquota wrote no ResourceQuota (Rancher owns spec.hard) and every Namespace write held our lock."""
    kinds = set(kind for kind, _held in api.written)
    return "ResourceQuota" not in kinds and all(held for kind, held in api.written if kind == "Namespace")


def test_a_member_change_during_the_reserve_wait_becomes_the_base_with_the_reservation_on_top():
    objects = cluster_objects(rancher=True)
    clock = Clock()
    api = MemberApi(objects, [member_value("6")], clock)
    result = reserve(api, "a", {"limits.cpu": "1"}, clock)
    assert hard(objects)["limits.cpu"] == "7"
    assert limit(objects) == {"limitsCpu": "7", "limitsMemory": "8Gi"}
    (book,) = ledgers(objects)
    assert book.base["limits.cpu"] == "6"
    assert dict(book.reservations["a"].delta) == {"limits.cpu": "1"}
    assert any("changed to 6" in w and "new base" in w for w in result["warnings"])
    assert [reason for reason, _m in api.events].count("QuotaBaseChanged") == 2   # on the quota and its namespace
    assert only_namespace_writes_under_our_lock(api)
    # the release gives back exactly the member's value
    release(MemberApi(objects, clock=clock), "a", clock)
    assert hard(objects)["limits.cpu"] == "6"
    assert limit(objects) == {"limitsCpu": "6", "limitsMemory": "8Gi"}
    assert not ledgers(objects)


def test_a_member_revert_during_the_reserve_wait_is_re_applied():
    objects = cluster_objects(rancher=True)
    clock = Clock()
    api = MemberApi(objects, [RANCHER_ANNOTATION], clock)
    result = reserve(api, "a", {"limits.cpu": "1"}, clock)
    assert hard(objects)["limits.cpu"] == "5"
    (book,) = ledgers(objects)
    assert book.base["limits.cpu"] == "4"
    assert any("reverted to its base 4" in w for w in result["warnings"])
    assert "QuotaReverted" in [reason for reason, _m in api.events]
    release(MemberApi(objects, clock=clock), "a", clock)
    assert hard(objects) == BASE_HARD
    assert objects[NAMESPACE_PATH]["metadata"]["annotations"][rancher_owner.RANCHER_QUOTA_ANNOTATION] == RANCHER_ANNOTATION


def test_a_member_change_during_a_partial_release_keeps_the_other_reservation_on_top():
    objects = cluster_objects(rancher=True)
    clock = Clock()
    reserve(MemberApi(objects, clock=clock), "a", {"limits.cpu": "1"}, clock)
    reserve(MemberApi(objects, clock=clock), "b", {"limits.cpu": "500m"}, clock)
    assert hard(objects)["limits.cpu"] == "5500m"
    api = MemberApi(objects, [member_value("3")], clock)
    result = release(api, "a", clock)
    assert hard(objects)["limits.cpu"] == "3500m"
    (book,) = ledgers(objects)
    assert book.base["limits.cpu"] == "3" and sorted(book.reservations) == ["b"]
    assert any("changed to 3" in w for w in result["warnings"])
    assert only_namespace_writes_under_our_lock(api)
    release(MemberApi(objects, clock=clock), "b", clock)
    assert hard(objects)["limits.cpu"] == "3"
    assert not ledgers(objects)


def test_a_member_change_during_the_final_release_is_what_stays():
    objects = cluster_objects(rancher=True)
    clock = Clock()
    reserve(MemberApi(objects, clock=clock), "a", {"limits.cpu": "1"}, clock)
    api = MemberApi(objects, [member_value("4500m")], clock)
    result = release(api, "a", clock)
    assert [item["outcome"] for item in result["quotas"]] == ["released"]
    assert hard(objects)["limits.cpu"] == "4500m"
    assert limit(objects) == {"limitsCpu": "4500m", "limitsMemory": "8Gi"}
    assert not ledgers(objects)
    assert any("4500m stays" in w for w in result["warnings"])
    assert "QuotaBaseChanged" in [reason for reason, _m in api.events]
    assert only_namespace_writes_under_our_lock(api)


def test_a_member_who_keeps_rewriting_gets_one_clear_error_after_a_bounded_number_of_adoptions():
    objects = cluster_objects(rancher=True)
    clock = Clock()
    # never a value kvquota writes itself: 10, 20, 30, ... CPUs
    values = [member_value("%d" % (10 * n)) for n in range(1, rancher_owner.DEFAULT_RANCHER_ADOPTIONS + 3)]
    api = MemberApi(objects, values, clock)
    with pytest.raises(KvquotaError) as caught:
        reserve(api, "a", {"limits.cpu": "1"}, clock)
    err = caught.value
    last = 10 * (rancher_owner.DEFAULT_RANCHER_ADOPTIONS + 1)
    assert "namespace tenant-a was rewritten %d times" % (rancher_owner.DEFAULT_RANCHER_ADOPTIONS + 1) in err.message
    assert '"limitsCpu":"10"' in err.message and '"limitsCpu":"%d"' % last in err.message
    assert "limits.cpu=%d" % (last - 10 + 1) in err.message   # the last value written: adopted base + 1
    assert "leave its resource quota alone" in err.fix and "re-run" in err.fix
    # the reservation's annotation write and one per adoption
    assert [kind for kind, _held in api.written].count("Namespace") == 1 + rancher_owner.DEFAULT_RANCHER_ADOPTIONS
    assert only_namespace_writes_under_our_lock(api)
    # the ledger still holds the reservation on top of the last adopted value: a re-run converges
    (book,) = ledgers(objects)
    assert book.base["limits.cpu"] == "%d" % (last - 10) and sorted(book.reservations) == ["a"]
    reserve(MemberApi(objects, clock=clock), "a", {"limits.cpu": "1"}, clock)
    assert hard(objects)["limits.cpu"] == "%d" % (last + 1)   # the member's last value, seen at the re-run's read
