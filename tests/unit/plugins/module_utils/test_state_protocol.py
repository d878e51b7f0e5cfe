# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The write protocol of reservations.py against an in-memory API server with resourceVersions.

Ledgers live in the operator namespace, apart from the quota they describe, so a change takes several
writes (ledger intent, quota, ledger confirmed or deleted; Leases around them). These tests kill a run at
every write - before it reaches the server, or after it landed with the answer lost - re-run the same step,
and check the cluster ends exactly as after an uninterrupted run. They also check that nothing a tenant can
write in its namespace (a Lease named like ours, a ledger-looking annotation) changes what is written.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
import json

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners import rancher as rancher_owner
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import lease as lease_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import ledger as L
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import reservations as R
from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils import reservation_calls as V
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import store as S
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    ConflictError,
    ForbiddenError,
    InputError,
    NotFoundError,
    WaitTimeoutError,
)

OPERATOR = "kvquota-system"
BASE_HARD = {"limits.cpu": "4", "limits.memory": "8Gi", "pods": "10"}
RANCHER_ANNOTATION = '{"limit":{"limitsCpu":"4","limitsMemory":"8Gi"}}'


class Crash(BaseException):
    """The run was killed (SIGKILL) at this write: a BaseException, so no handler of the code under test
    swallows it, as none can catch a kill."""


# What this fake API server's discovery would answer: (apiVersion, kind) -> (plural, namespaced)
SERVED = {("v1", "Namespace"): ("namespaces", False), ("v1", "ResourceQuota"): ("resourcequotas", True),
          ("v1", "ConfigMap"): ("configmaps", True), ("coordination.k8s.io/v1", "Lease"): ("leases", True)}


def object_path(obj):
    """The API path of obj on this fake API server (cluster.Cluster.object_path asks discovery)."""
    api_version = obj.get("apiVersion") or "v1"
    plural, namespaced = SERVED[(api_version, obj["kind"])]
    path = "/apis/" + api_version if "/" in api_version else "/api/" + api_version
    if namespaced:
        path += "/namespaces/" + obj["metadata"]["namespace"]
    return "%s/%s/%s" % (path, plural, obj["metadata"]["name"])


class FakeApi(object):
    """The cluster.Cluster methods reservations.py uses, over a dict of objects keyed by API path. Writes are
    conditional on metadata.resourceVersion like the real apiserver. crash_at=n kills the run at the n-th write
    (1-based): before it is applied, or (after=True) once it is applied and its answer is lost. Rancher's
    controller is emulated: a Namespace write re-renders its Rancher-managed quota from the annotation."""

    def __init__(self, objects, crash_at=None, after=False, clock=None):
        self.objects = objects
        self.crash_at = crash_at
        self.after = after
        self.writes = 0
        self.clock = clock

    # -- faults -------------------------------------------------------------
    def _write(self, apply):
        self.writes += 1
        if self.crash_at == self.writes and not self.after:
            raise Crash("killed before write %d" % self.writes)
        result = apply()
        if self.crash_at == self.writes and self.after:
            raise Crash("killed after write %d" % self.writes)
        return copy.deepcopy(result)

    def _bump(self, obj):
        self.objects["rv"] = self.objects.get("rv", 100) + 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.objects["rv"])
        obj["metadata"].setdefault("uid", "uid-%d" % self.objects["rv"])

    # -- generic --------------------------------------------------------------
    def get(self, path, what=None):
        if path not in self.objects:
            raise NotFoundError("%s not found" % path)
        return copy.deepcopy(self.objects[path])

    def exists(self, path, what=None):
        try:
            return self.get(path)
        except NotFoundError:
            return None

    def create(self, path, body, what=None):
        def apply():
            target = path + "/" + body["metadata"]["name"]
            if target in self.objects:
                raise ConflictError("%s already exists" % target)
            obj = copy.deepcopy(body)
            self._bump(obj)
            self.objects[target] = obj
            return obj
        return self._write(apply)

    def replace(self, obj, what=None):
        def apply():
            path = object_path(obj)
            current = self.objects.get(path)
            if current is None:
                raise NotFoundError("%s not found" % path)
            if current["metadata"]["resourceVersion"] != obj["metadata"].get("resourceVersion"):
                raise ConflictError("%s changed" % path)
            new = copy.deepcopy(obj)
            new["metadata"]["uid"] = current["metadata"].get("uid")
            self._bump(new)
            self.objects[path] = new
            if new.get("kind") == "ResourceQuota":
                self._quota_controller_syncs(new)
            if new.get("kind") == "Namespace":
                self._rancher_follows(new)
            return new
        return self._write(apply)

    def delete(self, path, what=None, resource_version=None):
        def apply():
            current = self.objects.get(path)
            if current is None:
                raise NotFoundError("%s not found" % path)
            if resource_version and current["metadata"]["resourceVersion"] != resource_version:
                raise ConflictError("%s changed" % path)
            del self.objects[path]
        return self._write(apply)

    def request(self, method, path, body=None, query=None, content_type=None, what=None):
        assert method == "GET"
        selector = (query or {}).get("labelSelector")
        items = [copy.deepcopy(obj) for key, obj in sorted(self.objects.items())
                 if key.startswith(path + "/") and "/" not in key[len(path) + 1:]]
        if selector:
            label, value = selector.split("=")
            items = [i for i in items if (i["metadata"].get("labels") or {}).get(label) == value]
        return {"items": items}

    # -- typed ----------------------------------------------------------------
    def get_namespace(self, name):
        return self.get("/api/v1/namespaces/%s" % name)

    def list_namespaces(self, label_selector=None):
        return [copy.deepcopy(o) for k, o in sorted(self.objects.items())
                if k.startswith("/api/v1/namespaces/") and k.count("/") == 4]

    def get_quota(self, namespace, name):
        return self.get("/api/v1/namespaces/%s/resourcequotas/%s" % (namespace, name))

    def list_quotas(self, namespace=None):
        return [copy.deepcopy(o) for k, o in sorted(self.objects.items()) if "/resourcequotas/" in k]

    def list_pods(self, namespace=None, label_selector=None, field_selector=None):
        return []

    def get_custom(self, group, version, plural, name, namespace=None):
        raise NotFoundError("no %s" % plural)

    def list_custom(self, group, version, plural, namespace=None, label_selector=None):
        return []

    def create_event(self, involved, reason, message, event_type="Normal", action="Update", namespace=None):
        return {}

    def facts(self, refresh=False):
        return {"harvester": False, "rancher_projects": False, "aaq": False, "kubevirt": True}

    def _rancher_follows(self, namespace):
        limit = rancher_owner.rancher_limit(namespace)
        for key, quota in self.objects.items():
            if "/resourcequotas/" in key and quota["metadata"]["namespace"] == namespace["metadata"]["name"] \
                    and rancher_owner.is_rancher_managed(quota):
                hard = dict(BASE_HARD)
                hard.update(limit)
                if quota["spec"]["hard"] != hard:
                    quota["spec"]["hard"] = hard
                    self._quota_controller_syncs(quota)
                    self._bump(quota)

    def _quota_controller_syncs(self, quota):
        """kube-controller-manager's quota controller: status.hard follows spec.hard (at once here)."""
        quota.setdefault("status", {})["hard"] = dict(quota["spec"]["hard"])


def cluster_objects(rancher=False):
    objects = {}
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tenant-a", "annotations": {}}}
    quota = {"apiVersion": "v1", "kind": "ResourceQuota",
             "metadata": {"name": "compute", "namespace": "tenant-a", "labels": {}, "annotations": {}},
             "spec": {"hard": dict(BASE_HARD)}, "status": {"hard": dict(BASE_HARD), "used": {"limits.cpu": "1"}}}
    if rancher:
        ns["metadata"]["annotations"][rancher_owner.RANCHER_QUOTA_ANNOTATION] = RANCHER_ANNOTATION
        quota["metadata"]["labels"][rancher_owner.RANCHER_QUOTA_LABEL] = "true"
    operator = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR}}
    api = FakeApi(objects)
    for obj in (ns, operator):
        api._bump(obj)
        objects["/api/v1/namespaces/%s" % obj["metadata"]["name"]] = obj
    api._bump(quota)
    objects["/api/v1/namespaces/tenant-a/resourcequotas/compute"] = quota
    return objects


TARGET = ("tenant-a", "compute")
STEPS = [("reserve", "a", {"limits.cpu": "1"}), ("reserve", "b", {"limits.memory": "2Gi", "limits.cpu": "500m"}),
         ("release", "a", None), ("release", "b", None)]


def run_step(api, step, clock):
    kind, rid, delta = step
    if kind == "reserve":
        return V.reserve(api, rid, {TARGET: delta}, "job", "drain", 600, clock=clock, sleep=lambda s: None,
                         rancher_sync_timeout=0, lock={"holder": "job-1", "wait_timeout": 0})
    return V.release(api, rid, wait_for_pods=False, clock=clock, sleep=lambda s: None, rancher_sync_timeout=0,
                     lock={"holder": "job-1", "wait_timeout": 0})


def observable(objects, now=None):
    """What an uninterrupted run must leave: every quota's spec.hard, namespace annotations, the ledgers'
    reservations and deltas, and no lease (at now, a killed run's expired Lease counts as gone: any later
    lock takes it over, and the reaper deletes it)."""
    result = {}
    for key, obj in sorted(objects.items()):
        if key == "rv":
            continue
        if obj.get("kind") == "Lease" and now is not None and lease_mod.lease_status(obj, now)["expired"]:
            continue
        meta = obj["metadata"]
        if "/resourcequotas/" in key:
            result[key] = obj["spec"]["hard"]
        elif obj.get("kind") == "Namespace":
            result[key] = dict(meta.get("annotations") or {})
        elif obj.get("kind") == "ConfigMap":
            book = S.ledger_of(obj)
            result[key] = dict((rid, r.delta) for rid, r in book.reservations.items())
        else:
            result[key] = obj.get("kind")
    return result


class Clock(object):
    def __init__(self):
        self.now = 1735689600.0

    def __call__(self):
        self.now += 1
        return self.now


def reference_states(rancher):
    objects = cluster_objects(rancher)
    clock = Clock()
    states = []
    for step in STEPS:
        run_step(FakeApi(objects), step, clock)
        states.append(observable(objects))
    return states


@pytest.mark.parametrize("rancher", [False, True], ids=["plain", "rancher"])
def test_uninterrupted_run_ends_at_base_with_nothing_left(rancher):
    states = reference_states(rancher)
    quota = states[0]["/api/v1/namespaces/tenant-a/resourcequotas/compute"]
    assert quota["limits.cpu"] == "5"
    assert states[1]["/api/v1/namespaces/tenant-a/resourcequotas/compute"] == {
        "limits.cpu": "5500m", "limits.memory": "10Gi", "pods": "10"}
    final = states[-1]
    assert final["/api/v1/namespaces/tenant-a/resourcequotas/compute"] == BASE_HARD
    assert not [k for k in final if "/configmaps/" in k or "/leases/" in k]
    if rancher:
        assert final["/api/v1/namespaces/tenant-a"][rancher_owner.RANCHER_QUOTA_ANNOTATION] == RANCHER_ANNOTATION
    # the tenant's objects never carry kvquota's state
    for state in states:
        assert not any(L.LEDGER_ANNOTATION in (v if isinstance(v, dict) else {}) for v in state.values())


@settings(max_examples=60, deadline=None)
@given(rancher=st.booleans(), step_index=st.integers(0, len(STEPS) - 1), crash_at=st.integers(1, 12),
       after=st.booleans())
def test_a_run_killed_at_any_write_converges_when_re_run(rancher, step_index, crash_at, after):
    expected = reference_states(rancher)
    objects = cluster_objects(rancher)
    clock = Clock()
    for index, step in enumerate(STEPS):
        if index == step_index:
            try:
                run_step(FakeApi(objects, crash_at, after), step, clock)
            except Crash:
                # the killed run's Lease stays behind until it expires; the re-run waits it out
                clock.now += R.lock_duration(0) + 1
            run_step(FakeApi(objects), step, clock)
        else:
            run_step(FakeApi(objects), step, clock)
        assert observable(objects, clock.now) == expected[index], "after step %d (%s)" % (index, step)
    reaped = V.release_expired(FakeApi(objects), clock=clock, sleep=lambda s: None, rancher_sync_timeout=0)
    assert not [k for k in objects if "/leases/" in k], reaped


def test_a_lease_a_tenant_creates_in_its_namespace_blocks_nothing():
    objects = cluster_objects()
    squatter = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "kvquota-maintenance", "namespace": "tenant-a"},
                "spec": {"holderIdentity": "tenant", "leaseDurationSeconds": 10 ** 9,
                         "renewTime": "2099-01-01T00:00:00.000000Z"}}
    objects["/apis/coordination.k8s.io/v1/namespaces/tenant-a/leases/kvquota-maintenance"] = squatter
    squatter["metadata"]["resourceVersion"] = "1"
    run_step(FakeApi(objects), STEPS[0], Clock())
    assert objects["/api/v1/namespaces/tenant-a/resourcequotas/compute"]["spec"]["hard"]["limits.cpu"] == "5"


def test_a_forged_namespace_ledger_is_not_honoured():
    """Under Rancher a project member may annotate its Namespace: a 0.1.0-style ledger with a forged base must
    not decide what is restored."""
    objects = cluster_objects(rancher=True)
    forged = L.new_ledger("tenant-a", "compute", "rancher")
    forged, _outcome = L.reserve(forged, "a", {"limits.cpu": "1"}, {"limits.cpu": "40", "limits.memory": "80Gi"},
                                 1735689600, ttl_seconds=600)
    data = L.mark_written(forged).to_json()
    data["v"] = L.LEGACY_FORMAT_VERSION
    ns = objects["/api/v1/namespaces/tenant-a"]
    ns["metadata"]["annotations"][L.LEDGER_ANNOTATION] = json.dumps(data)
    clock = Clock()
    result = run_step(FakeApi(objects), STEPS[0], clock)
    assert any("does not match the quota" in w for w in result["warnings"])
    run_step(FakeApi(objects), STEPS[2], clock)
    assert objects["/api/v1/namespaces/tenant-a/resourcequotas/compute"]["spec"]["hard"] == BASE_HARD
    annotations = objects["/api/v1/namespaces/tenant-a"]["metadata"]["annotations"]
    assert annotations == {rancher_owner.RANCHER_QUOTA_ANNOTATION: RANCHER_ANNOTATION}


def test_a_0_1_0_ledger_that_matches_is_adopted_and_removed():
    objects = cluster_objects()
    quota = objects["/api/v1/namespaces/tenant-a/resourcequotas/compute"]
    book = L.new_ledger("tenant-a", "compute")
    book, _outcome = L.reserve(book, "old-run", {"limits.cpu": "2"}, dict(BASE_HARD), 1735689600, ttl_seconds=600)
    data = L.mark_written(book).to_json()
    data["v"] = L.LEGACY_FORMAT_VERSION
    quota["metadata"]["annotations"][L.LEDGER_ANNOTATION] = json.dumps(data)
    quota["spec"]["hard"]["limits.cpu"] = "6"
    found = R.find_ledgers(FakeApi(objects))
    assert sorted(found[TARGET].reservations) == ["old-run"]
    V.release(FakeApi(objects), "old-run", wait_for_pods=False, sleep=lambda s: None, rancher_sync_timeout=0)
    quota = objects["/api/v1/namespaces/tenant-a/resourcequotas/compute"]
    assert quota["spec"]["hard"] == BASE_HARD and L.LEDGER_ANNOTATION not in quota["metadata"]["annotations"]
    assert not [k for k in objects if "/configmaps/" in k]


@pytest.mark.parametrize("corrupt", [
    '{"v":2,"released":5}',
    '{"v":2,"base":{"limits.cpu":"4"},"written":{"limits.cpu":"4"},"reservations":{"x":{"delta":{"limits.cpu":"%s"}}}}'
    % ("9" * 5000),
    '{"v":2,"base":{"limits.cpu":"4"},"written":{"limits.cpu":"4"},"reservations":{"x":{"delta":{"limits.cpu":"-3"}}}}',
    '{"v":2,"base":{"limits.cpu":"4"},"written":{"limits.cpu":"4"},"reservations":{"x":{"delta":{"limits.cpu":"1"},'
    '"expires":"soon"}}}',
])
def test_a_corrupt_ledger_is_named_and_skipped_by_readers_and_refused_by_writers(corrupt):
    objects = cluster_objects()
    quota = objects["/api/v1/namespaces/tenant-a/resourcequotas/compute"]
    name = S.ledger_name(quota["metadata"]["uid"])
    objects["/api/v1/namespaces/%s/configmaps/%s" % (OPERATOR, name)] = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": OPERATOR, "resourceVersion": "5",
                     "labels": {S.LEDGER_LABEL: "true"}, "annotations": {S.QUOTA_ANNOTATION: "tenant-a/compute"}},
        "data": {S.LEDGER_KEY: corrupt}}
    warnings = []
    assert R.find_ledgers(FakeApi(objects), warnings) == {}
    assert len(warnings) == 1 and "tenant-a/compute" in warnings[0] and "corrupt" in warnings[0]
    with pytest.raises(InputError) as err:
        run_step(FakeApi(objects), STEPS[0], Clock())
    assert "tenant-a/compute" in str(err.value)
    assert quota["spec"]["hard"] == BASE_HARD


class RefusingApi(FakeApi):
    """An API server whose admission refuses every quota write (missing RBAC, a webhook)."""

    def replace(self, obj, what=None):
        if obj.get("kind") == "ResourceQuota":
            raise ForbiddenError("resourcequotas is forbidden")
        return FakeApi.replace(self, obj, what)


def test_a_refused_quota_write_leaves_no_ledger_behind():
    objects = cluster_objects()
    before = observable(objects)
    with pytest.raises(ForbiddenError):
        run_step(RefusingApi(objects), STEPS[0], Clock())
    assert observable(objects) == before


class LaggingQuotaController(FakeApi):
    """kube-controller-manager's quota controller copies spec.hard to status.hard only at the catch_up-th read of
    the quota after a write (None: never), as after an API server restart while its informers re-list."""

    def __init__(self, objects, catch_up, clock=None):
        super(LaggingQuotaController, self).__init__(objects, clock=clock)
        self.catch_up = catch_up
        self.behind = []
        self.reads_since_write = 0

    def _quota_controller_syncs(self, quota):
        self.behind.append(quota)
        self.reads_since_write = 0

    def get_quota(self, namespace, name):
        self.reads_since_write += 1
        if self.behind and self.catch_up is not None and self.reads_since_write >= self.catch_up:
            for quota in self.behind:
                FakeApi._quota_controller_syncs(self, quota)
            self.behind = []
        return super(LaggingQuotaController, self).get_quota(namespace, name)


QUOTA_PATH = "/api/v1/namespaces/tenant-a/resourcequotas/compute"


def test_a_reserve_returns_once_quota_admission_enforces_it():
    objects = cluster_objects()
    api = LaggingQuotaController(objects, catch_up=4)
    result = V.reserve(api, "a", {TARGET: {"limits.cpu": "1"}}, "job", "drain", 600, clock=Clock(),
                       sleep=lambda s: None, rancher_sync_timeout=0, lock={"holder": "job-1", "wait_timeout": 0})
    assert objects[QUOTA_PATH]["status"]["hard"]["limits.cpu"] == "5" == objects[QUOTA_PATH]["spec"]["hard"]["limits.cpu"]
    assert result["status_hard_wait_seconds"] > 0


def test_a_reserve_never_enforced_fails_naming_spec_and_status_and_stays_held():
    objects = cluster_objects()
    api = LaggingQuotaController(objects, catch_up=None)
    with pytest.raises(WaitTimeoutError) as err:
        V.reserve(api, "a", {TARGET: {"limits.cpu": "1"}}, "job", "drain", 600, clock=Clock(), sleep=lambda s: None,
                  rancher_sync_timeout=0, lock={"holder": "job-1", "wait_timeout": 0}, enforce_timeout=30)
    assert "tenant-a/compute: spec.hard limits.cpu=5, status.hard limits.cpu=4" in err.value.message
    assert "release 'a'" in err.value.fix
    ledgers = [v for k, v in observable(objects).items() if "/configmaps/" in k]
    assert ledgers == [{"a": {"limits.cpu": "1"}}]


def test_enforce_timeout_0_does_not_wait():
    objects = cluster_objects()
    api = LaggingQuotaController(objects, catch_up=None)
    result = V.reserve(api, "a", {TARGET: {"limits.cpu": "1"}}, "job", "drain", 600, clock=Clock(),
                       sleep=lambda s: None, rancher_sync_timeout=0, lock={"holder": "job-1", "wait_timeout": 0},
                       enforce_timeout=0)
    assert result["status_hard_wait_seconds"] == 0.0
    assert objects[QUOTA_PATH]["status"]["hard"]["limits.cpu"] == "4"


class EventCountingApi(FakeApi):
    """FakeApi that counts an Event as a write too."""

    def create_event(self, involved, reason, message, event_type="Normal", action="Update", namespace=None):
        self.writes += 1
        return {}


@pytest.mark.parametrize("rancher", [False, True], ids=["plain", "rancher"])
def test_check_mode_writes_nothing_and_reports_what_the_real_run_then_does(rancher):
    """The dry run (reservations._DryRun) answers every write as if it had been made: at each step of the
    sequence, the check-mode call makes no write at all (not a Lease, an Event or a ledger) and reports the same
    change and the same spec.hard after as the real call made right after it."""
    objects = cluster_objects(rancher)
    clock = Clock()
    for kind, rid, delta in STEPS:
        dry_api = EventCountingApi(objects)
        options = dict(clock=clock, sleep=lambda s: None, rancher_sync_timeout=0, check_mode=True,
                       lock={"holder": "job-1", "wait_timeout": 0})
        if kind == "reserve":
            dry = V.reserve(dry_api, rid, {TARGET: delta}, "job", "drain", 600, **options)
        else:
            dry = V.release(dry_api, rid, wait_for_pods=False, **options)
        assert dry_api.writes == 0 and dry["check_mode"] is True
        real = run_step(FakeApi(objects), (kind, rid, delta), clock)
        assert dry["changed"] is True and real["changed"] is True
        assert [q["after"] for q in dry["quotas"]] == [q["after"] for q in real["quotas"]]
    dry_api = EventCountingApi(objects)
    V.release_expired(dry_api, clock=clock, sleep=lambda s: None, rancher_sync_timeout=0, check_mode=True)
    V.reconcile(dry_api, clock=clock, sleep=lambda s: None, rancher_sync_timeout=0, check_mode=True)
    assert dry_api.writes == 0
