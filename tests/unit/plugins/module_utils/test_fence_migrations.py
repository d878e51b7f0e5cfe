# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The headroom fence lists the run's own migrations (issue 24): the keys it writes (pure), the order in which the
batch runner lists a migration it creates (name first, UID right after the create), and the unfencing of a
migration once it is final."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import pytest

from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils import service_fakes
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import batch_runner as br
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import fence as F
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import reservations
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.executor_config import ExecutorConfig
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.migration_state import (
    RUNNING,
    Batch,
    RunRecord,
)

VMI_A = "4f0c1f0e-0000-4000-8000-00000000000a"
VMI_B = "4f0c1f0e-0000-4000-8000-00000000000b"
MIG_1 = "7d1e2f3a-0000-4000-8000-000000000001"
MIG_2 = "7d1e2f3a-0000-4000-8000-000000000002"


def fenced(vmis=None, migrations=None, namespace="t"):
    return F.fence_data({}, namespace, vmis if vmis is not None else {VMI_A: "vm-a", VMI_B: "vm-b"}, "n",
                        migrations=F.normalize_migrations(namespace, migrations or []))


# ---------------------------------------------------------------------------
# pure

def test_a_migration_key_names_namespace_and_migration_and_its_value_the_vmi_and_the_uid():
    data = fenced(migrations=[{"name": "vm-a-kvq-1", "uid": MIG_1, "vm": "vm-a"},
                              {"name": "vm-b-kvq-1", "vmi_uid": VMI_B}])
    assert data["mig.t.vm-a-kvq-1"] == "%s/%s" % (VMI_A, MIG_1)
    assert data["mig.t.vm-b-kvq-1"] == "%s/" % VMI_B          # not created yet: admitted by name, for vm-b only
    assert F.fenced_migrations(data, "t") == {"vm-a-kvq-1": {"vmi": VMI_A, "uid": MIG_1},
                                              "vm-b-kvq-1": {"vmi": VMI_B, "uid": ""}}


def test_migration_names_with_dots_and_namespaces_sharing_a_prefix_parse_one_way():
    data = fenced({VMI_A: "vm-a"}, [{"name": "a.b.c", "uid": MIG_1, "vm": "vm-a"}], namespace="a")
    data = F.fence_data(data, "a-b", {VMI_B: "vm-b"}, "n",
                        migrations=F.normalize_migrations("a-b", [{"name": "c", "uid": MIG_2, "vm": "vm-b"}]))
    assert F.fenced_migrations(data, "a") == {"a.b.c": {"vmi": VMI_A, "uid": MIG_1}}
    assert F.fenced_migrations(data, "a-b") == {"c": {"vmi": VMI_B, "uid": MIG_2}}
    # a migration key never reads as a VMI or a namespace key
    assert F.fenced_vmis(data, "a") == {VMI_A: "vm-a"} and set(F.fenced_namespaces(data)) == {"a", "a-b"}


def test_a_migration_of_a_vmi_not_reserved_there_is_refused():
    with pytest.raises(InputError, match="migration t/m is of VMI vm-c, which is not reserved in namespace t"):
        fenced(migrations=[{"name": "m", "uid": MIG_1, "vm": "vm-c"}])
    with pytest.raises(InputError, match="not reserved"):
        fenced(migrations=[{"name": "m", "uid": MIG_1, "vmi_uid": MIG_2}])


def test_a_late_pending_write_never_widens_a_known_uid_and_the_uid_replaces_pending():
    pending = fenced(migrations=[{"name": "m", "vm": "vm-a"}])
    known = F.fence_data(pending, "t", {}, "n", migrations=F.normalize_migrations("t", [
        {"name": "m", "uid": MIG_1, "vm": "vm-a"}]))
    assert known["mig.t.m"] == "%s/%s" % (VMI_A, MIG_1)
    again, skipped = F.add_migrations_data(known, "t", F.normalize_migrations("t", [{"name": "m", "vm": "vm-a"}]))
    assert again["mig.t.m"] == "%s/%s" % (VMI_A, MIG_1) and skipped == []


def test_add_migrations_skips_an_unfenced_namespace_and_a_vmi_not_reserved():
    data = fenced()
    new, skipped = F.add_migrations_data(data, "t", F.normalize_migrations("t", [
        {"name": "m1", "uid": MIG_1, "vm": "vm-a"}, {"name": "m2", "uid": MIG_2, "vm": "vm-z"}]))
    assert F.fenced_migrations(new, "t") == {"m1": {"vmi": VMI_A, "uid": MIG_1}} and skipped == ["m2"]
    other, skipped = F.add_migrations_data(data, "u", F.normalize_migrations("u", [{"name": "m1", "vm": "vm-a"}]))
    assert other == data and skipped == ["m1"]


def test_end_migrations_removes_only_that_migration_and_keeps_the_namespace_fenced():
    data = fenced(migrations=[{"name": "m1", "uid": MIG_1, "vm": "vm-a"}, {"name": "m2", "vm": "vm-b"}])
    # another object of the same name (a different UID) is not the one that ended
    assert F.end_migrations_data(data, "t", [{"name": "m1", "uid": MIG_2}]) == data
    ended = F.end_migrations_data(data, "t", [{"name": "m1", "uid": MIG_1}, {"name": "m2", "uid": MIG_2}])
    assert F.fenced_migrations(ended, "t") == {}
    assert F.fenced_vmis(ended, "t") == {VMI_A: "vm-a", VMI_B: "vm-b"} and "ns.t" in ended
    assert F.end_migrations_data(data, "t", [{"name": "m1", "uid": None}])["mig.t.m2"] == "%s/" % VMI_B


def test_unfencing_a_vmi_removes_its_migrations_and_the_last_one_all():
    data = fenced(migrations=[{"name": "m1", "uid": MIG_1, "vm": "vm-a"}, {"name": "m2", "uid": MIG_2, "vm": "vm-b"}])
    one = F.unfence_data(data, "t", {VMI_A})
    assert F.fenced_migrations(one, "t") == {"m2": {"vmi": VMI_B, "uid": MIG_2}} and "ns.t" in one
    controllers = {"kvquota.controller": F.DEFAULT_CONTROLLER, "kvquota.claim_controller": F.DEFAULT_CLAIM_CONTROLLER}
    assert F.unfence_data(one, "t", {VMI_B}) == controllers
    assert F.unfence_data(data, "t") == controllers


def test_normalize_migrations_names_what_is_wrong():
    with pytest.raises(InputError, match="migration name 'M 1' is not a valid object name"):
        F.normalize_migrations("t", [{"name": "M 1", "vm": "vm-a"}])
    with pytest.raises(InputError, match="has no valid uid"):
        F.normalize_migrations("t", [{"name": "m", "uid": "not a uid", "vm": "vm-a"}])
    with pytest.raises(InputError, match="names no VMI"):
        F.normalize_migrations("t", [{"name": "m", "uid": MIG_1}])
    with pytest.raises(InputError, match="too long for the fence's ConfigMap key"):
        F.normalize_migrations("t", [{"name": "m" * 250, "uid": MIG_1, "vm": "vm-a"}])
    with pytest.raises(InputError, match="given twice"):
        F.normalize_migrations("t", [{"name": "m", "uid": MIG_1, "vm": "vm-a"}, {"name": "m", "vm": "vm-b"}])
    with pytest.raises(InputError, match="list of"):
        F.normalize_migrations("t", {"name": "m"})


# ---------------------------------------------------------------------------
# the batch runner's protocol

class _Cluster(object):
    """Creates migrations (UIDs handed out on create) and lists them; logs every call in order."""

    def __init__(self):
        self.calls = []
        self.vmims = {}

    def create(self, path, body, what):
        meta = body["metadata"]
        made = dict(body, metadata=dict(meta, uid="uid-of-" + meta["name"]))
        self.vmims[(meta["namespace"], meta["name"])] = made
        self.calls.append(("create", meta["name"]))
        return made

    def list_custom(self, group, version, plural, namespace=None):
        return [v for (ns, _n), v in sorted(self.vmims.items()) if ns == namespace]

    def list_pods(self, namespace=None, label_selector=None, field_selector=None):
        return []     # no target pod rendered: nothing to compare with a pin


def _runner(monkeypatch, cluster):
    config = ExecutorConfig.build("node-1", clock=lambda: 0.0, token="260101000000")
    runner = br.BatchRunner(cluster, config, RunRecord(config, []))
    monkeypatch.setattr(reservations, "admit_migrations", lambda _c, migrations, *a, **kw: cluster.calls.append(
        ("admit", [(m["name"], m["uid"], m["vm"]) for m in migrations])) or [])
    monkeypatch.setattr(reservations, "end_migrations", lambda _c, migrations, *a, **kw: cluster.calls.append(
        ("end", [(m["name"], m["uid"]) for m in migrations])) or [])
    service_fakes.patch(monkeypatch, "reserve", lambda _c, rid, needs, *a, **kw: cluster.calls.append(
        ("reserve", [(m["name"], m["uid"]) for m in kw["refs"]["migrations"]])) or {})
    service_fakes.patch(monkeypatch, "record_migrations", lambda _c, rid, targets, migrations, **kw: cluster.calls.append(
        ("record", rid, targets, [(m["name"], m["uid"]) for m in migrations])) or {})
    return runner


def _prepared(runner, fenced_namespaces=("t",)):
    batch = Batch(0, 1, [("t", "vm-a"), ("t", "vm-b")], "node-1-b0")
    batch.state, batch.targets = RUNNING, [("t", "q")]
    batch.migrations = [{"namespace": "t", "vm": "vm-a", "reused": False, "name": "vm-a-kvq-260101000000", "uid": None},
                        {"namespace": "t", "vm": "vm-b", "reused": True, "name": "theirs", "uid": "u-theirs"}]
    runner._record_reservation(batch, {"fence": [{"namespace": ns} for ns in fenced_namespaces], "quotas": []})
    return batch


def test_launch_lists_a_migration_by_name_before_creating_it_and_its_uid_right_after(monkeypatch):
    cluster = _Cluster()
    runner = _runner(monkeypatch, cluster)
    runner.launch(_prepared(runner))
    assert cluster.calls == [
        ("admit", [("vm-a-kvq-260101000000", None, "vm-a")]),          # pending: before virt-controller can act
        ("create", "vm-a-kvq-260101000000"),
        ("admit", [("vm-a-kvq-260101000000", "uid-of-vm-a-kvq-260101000000", "vm-a")]),
        # the batch's one reservation was made before (prepare); only the created migration's UID is recorded
        ("record", "node-1-b0", [("t", "q")], [("vm-a-kvq-260101000000", "uid-of-vm-a-kvq-260101000000")])]


def test_launch_lists_nothing_where_the_reservation_fenced_nothing(monkeypatch):
    cluster = _Cluster()
    runner = _runner(monkeypatch, cluster)
    runner.launch(_prepared(runner, fenced_namespaces=()))
    assert [c[0] for c in cluster.calls] == ["create", "record"]


def test_a_final_migration_is_unfenced_once_while_the_others_run(monkeypatch):
    cluster = _Cluster()
    runner = _runner(monkeypatch, cluster)
    batch = _prepared(runner)
    runner.launch(batch)
    cluster.calls[:] = []
    cluster.vmims[("t", "theirs")] = {"metadata": {"namespace": "t", "name": "theirs", "uid": "u-theirs"},
                                      "spec": {"vmiName": "vm-b"}, "status": {"phase": "Running"}}
    cluster.vmims[("t", "vm-a-kvq-260101000000")]["status"] = {"phase": "Succeeded"}
    batch.started, batch.launched, batch.timeout = 0.0, 0.0, 600
    runner.follow(batch)
    assert cluster.calls == [("end", [("vm-a-kvq-260101000000", "uid-of-vm-a-kvq-260101000000")])]
    runner.follow(batch)
    assert len(cluster.calls) == 1                                      # once
    cluster.vmims[("t", "theirs")]["status"] = {"phase": "Succeeded"}
    runner.follow(batch)
    assert cluster.calls[1:] == [("end", [("theirs", "u-theirs")])]


# ---------------------------------------------------------------------------
# a reservation lists the migrations of its refs

class _ApiCluster(object):
    """The fence ConfigMap (created, replaced) and migrations to read, by (namespace, name)."""

    def __init__(self, vmims):
        self.vmims = vmims
        self.configmap = None

    def exists(self, path, what):
        return self.configmap

    def create(self, path, body, what):
        self.configmap = dict(body, metadata=dict(body["metadata"], resourceVersion="1"))
        return self.configmap

    def replace(self, body, what=None):
        self.configmap = body
        return body

    def get_custom(self, group, version, plural, name, namespace=None):
        from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import NotFoundError
        if (namespace, name) not in self.vmims:
            raise NotFoundError("virtualmachineinstancemigrations %s not found" % name)
        return self.vmims[(namespace, name)]


class _FakeRun(object):
    check_mode = False

    def __init__(self, cluster):
        self.cluster = cluster
        self.store = type("S", (), {"namespace": "kvquota-system"})()

    @staticmethod
    def clock():
        return 0

    @staticmethod
    def fence_installed():
        return True

    @staticmethod
    def controller():
        return F.DEFAULT_CONTROLLER


def test_a_reservation_fences_only_the_recorded_migrations_of_its_own_vms():
    cluster = _ApiCluster({
        ("t", "m1"): {"metadata": {"name": "m1", "uid": MIG_1}, "spec": {"vmiName": "vm-a"}},
        # the name is another object now (its UID is not the recorded one)
        ("t", "renamed"): {"metadata": {"name": "renamed", "uid": "someone-elses"}, "spec": {"vmiName": "vm-a"}}})
    refs = {"vms": [{"namespace": "t", "name": "vm-a", "uid": VMI_A}, {"namespace": "u", "name": "vm-b", "uid": VMI_B}],
            "migrations": [{"namespace": "t", "name": "m1", "uid": MIG_1},          # its VMI read from the migration
                           {"namespace": "t", "name": "renamed", "uid": MIG_2},
                           {"namespace": "t", "name": "gone", "uid": MIG_2},         # deleted meanwhile
                           {"namespace": "t", "name": "m-z", "uid": MIG_2, "vm": "vm-z"},   # not a reserved VM
                           {"namespace": "u", "name": "m-b", "vm": "vm-b"}]}         # not created yet
    states = {("t", "q"): None, ("u", "q"): None}
    results = reservations._fence(_FakeRun(cluster), reservations.ReserveRequest("node-1-b0", {}, "ops", "", 600), states, refs)
    assert [r["namespace"] for r in results] == ["t", "u"]
    data = cluster.configmap["data"]
    assert sorted(k for k in data if k.startswith("mig.")) == ["mig.t.m1", "mig.u.m-b"]
    assert data["mig.t.m1"] == "%s/%s" % (VMI_A, MIG_1) and data["mig.u.m-b"] == "%s/" % VMI_B


# -- names the fence can list (issue 24 review) ---------------------------------------------------------------------

def test_the_runs_migration_name_stays_a_label_value_for_any_vm_name(monkeypatch):
    runner = _runner(monkeypatch, _Cluster())
    assert runner.migration_name("vm-a") == "vm-a-kvq-260101000000"
    long_a, long_b = "a" * 200 + "-x", "a" * 200 + "-y"            # VMI names may have 253 characters
    names = [runner.migration_name(n) for n in (long_a, long_b)]
    assert all(len(n) == br.MIGRATION_NAME_MAX and n.endswith("-kvq-260101000000") for n in names)
    assert names[0] != names[1]                                    # cut alike, told apart by the hash
    assert len(F.migration_key("t", names[0])) <= F.MAX_KEY_LENGTH


def test_a_vm_whose_migration_under_way_has_a_name_the_fence_cannot_list_is_left_out_named(monkeypatch):
    cluster = _Cluster()
    runner = _runner(monkeypatch, cluster)
    long_name = "m" * (F.MAX_KEY_LENGTH - len(F.migration_key("t", "")) + 1)
    for name, vm in ((long_name, "vm-a"), ("short", "vm-b")):
        cluster.vmims[("t", name)] = {"metadata": {"namespace": "t", "name": name, "uid": "u-" + vm},
                                      "spec": {"vmiName": vm}, "status": {"phase": "Pending"}}
    batch = Batch(0, 1, [("t", "vm-a"), ("t", "vm-b")], "node-1-b0")
    batch.vms = list(batch.keys)
    existing = runner._under_way(batch)
    assert existing == {("t", "vm-b"): ("short", "u-vm-b")}        # followed, not doubled
    assert batch.vms == [("t", "vm-b")]
    assert "too long for the headroom fence" in runner.left_out[("t", "vm-a")]
    assert long_name in runner.left_out[("t", "vm-a")]


# -- a target pod rendered larger than its VM's pin (issue 24: a tenant's change between create and render) -------

def test_a_target_pod_larger_than_its_pin_has_its_migration_cancelled_and_the_vm_named(monkeypatch):
    from fractions import Fraction
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import versioned

    def target(vm, uid, cpu, name=None):
        return {"metadata": {"namespace": "t", "name": name or "virt-launcher-%s-x" % vm,
                             "labels": {"kubevirt.io/migrationJobUID": uid},
                             "annotations": {"kubevirt.io/migrationJobName": "%s-kvq-1" % vm},
                             "ownerReferences": [{"kind": "VirtualMachineInstance", "name": vm, "controller": True}]},
                "spec": {"containers": [{"name": "compute", "resources": {"limits": {"cpu": cpu, "memory": "1600Mi"},
                                                                          "requests": {"cpu": cpu, "memory": "1600Mi"}}}]},
                "status": {"phase": "Pending"}}

    class Cluster(_Cluster):
        deleted = []

        def list_pods(self, namespace=None, label_selector=None, field_selector=None):
            assert (namespace, label_selector) == ("t", "kubevirt.io/migrationJobUID")
            # the tenant's decoy (a pod of its own, labelled like vm-a's target pod) listed after the real one
            return [target("vm-a", "uid-a", "1225m"), target("vm-b", "uid-b", "1025m"),
                    target("vm-a", "uid-a", "10m", name="zz-decoy")]

        def delete(self, path, what):
            self.deleted.append(path.rsplit("/", 1)[1])

    cluster = Cluster()
    runner = _runner(monkeypatch, cluster)
    # what changed, as a fresh sizing tells it (headroom.grown_since_pin reads the namespaces: faked here)
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import headroom
    monkeypatch.setattr(headroom, "grown_since_pin", lambda _c, vms, *a, **kw: [
        {"namespace": vm["namespace"], "name": vm["name"], "reason": "changed: annotation hooks.kubevirt.io/hookSidecars"}
        for vm in vms])
    pin = {"charge": versioned.amounts({"limits.cpu": Fraction(1025, 1000), "requests.cpu": Fraction(1025, 1000),
                                        "limits.memory": Fraction(1600 * 2 ** 20)}), "what": "the planned"}
    runner.pins = {("t", "vm-a"): pin, ("t", "vm-b"): pin}
    batch = Batch(0, 1, [("t", "vm-a"), ("t", "vm-b")], "node-1-b0")
    batch.state, batch.vms, batch.launched = RUNNING, [("t", "vm-a"), ("t", "vm-b")], 0.0
    batch.migrations = [{"namespace": "t", "vm": vm, "reused": False, "name": "%s-kvq-1" % vm, "uid": "uid-" + vm[-1]}
                        for vm in ("vm-a", "vm-b")]
    seen = dict((("t", m["name"]), {"metadata": {"namespace": "t", "name": m["name"], "uid": m["uid"]},
                                    "spec": {"vmiName": m["vm"]},
                                    "status": {"phase": "Scheduling",
                                               "migrationState": {"targetPod": "virt-launcher-%s-x" % m["vm"]}}})
                for m in batch.migrations)
    runner._check_target_pods(batch, seen)
    assert cluster.deleted == ["vm-a-kvq-1"]                      # the run's own migration of the grown VM
    assert [m["vm"] for m in batch.migrations] == ["vm-b"] and batch.vms == [("t", "vm-b")]
    assert "limits.cpu=1225m instead of 1025m" in runner.left_out[("t", "vm-a")]
    assert "annotation hooks.kubevirt.io/hookSidecars" in runner.left_out[("t", "vm-a")]
    # each target pod is compared once
    cluster.deleted[:] = []
    runner._check_target_pods(batch, seen)
    assert cluster.deleted == []


def test_a_target_pod_larger_than_computed_with_no_input_changed_is_left_to_the_top_ups(monkeypatch):
    """A sizing that misses something (an overhead, a webhook) is not a tenant's growth: no cancel."""
    from fractions import Fraction
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import headroom
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import versioned

    class Cluster(_Cluster):
        deleted = []

        def list_pods(self, namespace=None, label_selector=None, field_selector=None):
            return [{"metadata": {"namespace": "t", "name": "virt-launcher-vm-a-x",
                                  "labels": {"kubevirt.io/migrationJobUID": "uid-a"},
                                  "annotations": {"kubevirt.io/migrationJobName": "vm-a-kvq-1"},
                                  "ownerReferences": [{"kind": "VirtualMachineInstance", "name": "vm-a",
                                                       "controller": True}]},
                     "spec": {"containers": [{"name": "compute", "resources": {"limits": {"cpu": "1100m"}}}]},
                     "status": {"phase": "Pending"}}]

        def delete(self, path, what):
            self.deleted.append(path)

    cluster = Cluster()
    runner = _runner(monkeypatch, cluster)
    monkeypatch.setattr(headroom, "grown_since_pin", lambda *a, **kw: [])      # every input as pinned
    runner.pins = {("t", "vm-a"): {"charge": versioned.amounts({"limits.cpu": Fraction(1)}), "what": "the planned"}}
    batch = Batch(0, 1, [("t", "vm-a")], "node-1-b0")
    batch.state, batch.vms, batch.launched = RUNNING, [("t", "vm-a")], 0.0
    batch.migrations = [{"namespace": "t", "vm": "vm-a", "reused": False, "name": "vm-a-kvq-1", "uid": "uid-a"}]
    runner._check_target_pods(batch, {("t", "vm-a-kvq-1"): {
        "metadata": {"namespace": "t", "name": "vm-a-kvq-1", "uid": "uid-a"}, "spec": {"vmiName": "vm-a"},
        "status": {"phase": "Scheduling"}}})
    assert cluster.deleted == [] and batch.vms == [("t", "vm-a")] and not runner.left_out
    assert any("the sizing misses something" in line for line in runner.record.log)


def test_a_pod_the_tenant_labels_like_a_target_pod_neither_hides_it_nor_marks_it_checked(monkeypatch):
    from fractions import Fraction
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import versioned

    decoy = {"metadata": {"namespace": "t", "name": "decoy", "labels": {"kubevirt.io/migrationJobUID": "uid-a"},
                          "annotations": {"kubevirt.io/migrationJobName": "vm-a-kvq-1"},
                          "ownerReferences": [{"kind": "VirtualMachineInstance", "name": "vm-a", "controller": True}]},
             "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "10m"}}}]}, "status": {}}

    class Cluster(_Cluster):
        def list_pods(self, namespace=None, label_selector=None, field_selector=None):
            return [decoy]

    runner = _runner(monkeypatch, Cluster())
    runner.pins = {("t", "vm-a"): {"charge": versioned.amounts({"limits.cpu": Fraction(1)}), "what": "the planned"}}
    batch = Batch(0, 1, [("t", "vm-a")], "node-1-b0")
    batch.state, batch.vms, batch.launched = RUNNING, [("t", "vm-a")], 0.0
    batch.migrations = [{"namespace": "t", "vm": "vm-a", "reused": False, "name": "vm-a-kvq-1", "uid": "uid-a"}]
    vmim = {"metadata": {"namespace": "t", "name": "vm-a-kvq-1", "uid": "uid-a"}, "spec": {"vmiName": "vm-a"},
            "status": {"phase": "Scheduling"}}
    runner._check_target_pods(batch, {("t", "vm-a-kvq-1"): vmim})
    assert "uid-a" not in runner.targets_checked           # KubeVirt has named no target pod yet: looked at again
    vmim["status"]["migrationState"] = {"targetPod": "virt-launcher-vm-a-x"}
    runner._check_target_pods(batch, {("t", "vm-a-kvq-1"): vmim})
    assert "uid-a" not in runner.targets_checked           # the named pod is not among the claims yet


# ---------------------------------------------------------------------------
# issue 24, grow-during-batch: each migration's pinned size in the fence

def test_a_size_lists_the_four_pinned_amounts_in_order_and_goes_with_its_migration():
    size = {"cpu": "925m", "requests.memory": "1600Mi", "limits.cpu": "1025m", "limits.memory": "1677721601",
            "pods": "1", "count/pods": "1"}
    assert F.size_value(size) == "925m 1600Mi 1025m 1677721601"
    assert F.size_value({"limits.cpu": "1"}) == "0 0 1 0"        # a name the charge lacks: pinned at 0
    data = fenced(migrations=[{"name": "vm-a-kvq-1", "uid": MIG_1, "vm": "vm-a", "size": size},
                              {"name": "vm-b-kvq-1", "uid": MIG_2, "vm": "vm-b"}])
    assert data["size.t.vm-a-kvq-1"] == "925m 1600Mi 1025m 1677721601" and "size.t.vm-b-kvq-1" not in data
    listed = F.fenced_migrations(data, "t")
    assert listed["vm-a-kvq-1"]["size"]["limits.memory"] == 1677721601 and "size" not in listed["vm-b-kvq-1"]
    # a write without a size keeps it; one with a size replaces it
    kept = F.add_migrations_data(data, "t", F.normalize_migrations(
        "t", [{"name": "vm-a-kvq-1", "uid": MIG_1, "vm": "vm-a"}]))[0]
    assert kept["size.t.vm-a-kvq-1"] == data["size.t.vm-a-kvq-1"]
    raised = F.add_migrations_data(data, "t", F.normalize_migrations("t", [
        {"name": "vm-a-kvq-1", "uid": MIG_1, "vm": "vm-a", "size": dict(size, cpu="1")}]))[0]
    assert raised["size.t.vm-a-kvq-1"] == "1 1600Mi 1025m 1677721601"
    # ended, or its VMI unfenced: the size goes with the migration
    ended = F.end_migrations_data(data, "t", [{"name": "vm-a-kvq-1", "uid": MIG_1}])
    assert "size.t.vm-a-kvq-1" not in ended and "mig.t.vm-a-kvq-1" not in ended
    assert not [k for k in F.unfence_data(data, "t") if k.startswith("size.")]
    assert not [k for k in F.unfence_data(data, "t", [VMI_A]) if k.startswith("size.t.vm-a")]


def test_a_bad_size_names_the_migration_and_the_problem():
    with pytest.raises(InputError, match="migration t/m: .*mapping of resource names"):
        F.normalize_migrations("t", [{"name": "m", "uid": MIG_1, "vm": "vm-a", "size": "1"}])
    with pytest.raises(InputError, match="migration t/m: "):
        F.normalize_migrations("t", [{"name": "m", "uid": MIG_1, "vm": "vm-a", "size": {"limits.cpu": "lots"}}])
    with pytest.raises(InputError, match="must not be negative"):
        F.normalize_migrations("t", [{"name": "m", "uid": MIG_1, "vm": "vm-a", "size": {"limits.cpu": "-1"}}])
    assert F.parse_size_value("1 2") is None and F.parse_size_value("a b c d") is None


def test_the_policy_refuses_a_larger_target_pod_with_the_words_the_runner_looks_for():
    import os
    import yaml
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), *([os.pardir] * 4))
    with open(os.path.join(root, "roles", "install", "files", "fence.yml")) as fh:
        policy = yaml.safe_load(fh)["items"][0]["spec"]
    messages = " ".join(" ".join(v["messageExpression"].split()) for v in policy["validations"])
    assert F.SIZE_REFUSAL in messages
    names = [v["name"] for v in policy["variables"]]
    assert "withinPin" in names and "variables.withinPin" in policy["validations"][1]["expression"]


def _pinned_runner(monkeypatch, cluster, cpu="1025m"):
    from fractions import Fraction
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import versioned
    runner = _runner(monkeypatch, cluster)
    if hasattr(cluster, "events"):
        monkeypatch.setattr(br, "failed_create_events", lambda _c, namespaces: cluster.events())
    charge = {"requests.cpu": Fraction(925, 1000), "limits.cpu": Fraction(cpu[:-1] if cpu.endswith("m") else cpu) /
              (1000 if cpu.endswith("m") else 1), "limits.memory": Fraction(1600 * 2 ** 20), "pods": Fraction(1)}
    pin = {"charge": versioned.amounts(dict(charge, **{"requests.storage": Fraction(10 * 2 ** 20)})),
           "pod_charge": versioned.amounts(charge), "what": "the planned"}
    runner.pins = {("t", "vm-a"): pin, ("t", "vm-b"): pin}
    return runner


def test_launch_lists_each_migration_with_its_vms_pinned_target_pod_size(monkeypatch):
    cluster = _Cluster()
    runner = _pinned_runner(monkeypatch, cluster)
    listed = []
    monkeypatch.setattr(reservations, "admit_migrations", lambda _c, migrations, *a, **kw: listed.append(
        [(m["name"], m["uid"], m["size"]) for m in migrations]) or [])
    runner.launch(_prepared(runner), just_prepared=True)
    size = {"limits.cpu": "1025m", "limits.memory": "1600Mi", "requests.cpu": "925m"}
    # the pod's own charge (not the backend PVC's storage, not the pod count), in the pending write and the UID's
    assert listed == [[("vm-a-kvq-260101000000", None, size)],
                      [("vm-a-kvq-260101000000", "uid-of-vm-a-kvq-260101000000", size)]]


class _Refused(_Cluster):
    """A fenced namespace where virt-controller reported the fence's size refusal for the run's migration."""

    def __init__(self, count=1, forged=False):
        _Cluster.__init__(self)
        self.count = count
        self.forged = forged
        self.deleted = []

    def events(self):
        reporter = "virt-controller" if not self.forged else "tenant"
        return [{"metadata": {"name": "ev-1", "namespace": "t"}, "reason": "FailedCreate",
                 "involvedObject": {"kind": "VirtualMachineInstanceMigration", "namespace": "t",
                                    "name": "vm-a-kvq-1", "uid": "uid-a"},
                 "source": {"component": reporter}, "reportingComponent": "" if not self.forged else reporter,
                 "count": self.count, "lastTimestamp": "2026-11-27T15:00:0%dZ" % self.count,
                 "message": "Error creating pod: ... denied request: kvquota.maintenance: ... The target pod of "
                            "migration vm-a-kvq-1 charges more than the maintenance run planned for its VM (at "
                            "most ...)"}]

    def delete(self, path, what):
        self.deleted.append(path.rsplit("/", 1)[1])


def _waiting_batch(runner):
    batch = Batch(0, 1, [("t", "vm-a")], "node-1-b0")
    batch.state, batch.vms, batch.launched = RUNNING, [("t", "vm-a")], 0.0
    batch.migrations = [{"namespace": "t", "vm": "vm-a", "reused": False, "name": "vm-a-kvq-1", "uid": "uid-a"}]
    runner._record_reservation(batch, {"fence": [{"namespace": "t"}], "quotas": []})
    runner._fence_size(batch.migrations[0])
    seen = {("t", "vm-a-kvq-1"): {"metadata": {"namespace": "t", "name": "vm-a-kvq-1", "uid": "uid-a"},
                                  "spec": {"vmiName": "vm-a"}, "status": {"phase": "Pending"}}}
    return batch, seen


def test_a_target_pod_the_fence_refuses_as_grown_has_its_migration_cancelled_and_the_change_named(monkeypatch):
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import headroom
    cluster = _Refused()
    runner = _pinned_runner(monkeypatch, cluster)
    monkeypatch.setattr(headroom, "grown_since_pin", lambda _c, vms, *a, **kw: [
        {"namespace": "t", "name": "vm-a", "reason": "t/vm-a: changed: annotation hooks.kubevirt.io/hookSidecars"}])
    batch, seen = _waiting_batch(runner)
    runner._answer_fence_refusals(batch, seen, 1.0)                  # before top_up_settle_seconds: not looked at
    assert cluster.deleted == []
    runner._answer_fence_refusals(batch, seen, 100.0)
    assert cluster.deleted == ["vm-a-kvq-1"] and batch.vms == [] and batch.state != RUNNING
    assert "hooks.kubevirt.io/hookSidecars" in runner.left_out[("t", "vm-a")]
    assert "the headroom fence refused the target pod of migration t/vm-a-kvq-1" in runner.left_out[("t", "vm-a")]


def test_a_refused_target_pod_of_an_unchanged_vm_is_cancelled_and_named_never_given_more(monkeypatch):
    """No input the sizing reads changed (a container KubeVirt adds without resources, sized by a LimitRange's
    defaults: the sizing cannot see it): the fence's size is never raised, the VM stays, named."""
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import headroom
    cluster = _Refused()
    runner = _pinned_runner(monkeypatch, cluster)
    monkeypatch.setattr(headroom, "grown_since_pin", lambda *a, **kw: [])      # every input as pinned
    listed = []
    monkeypatch.setattr(reservations, "admit_migrations", lambda _c, migrations, *a, **kw: listed.append(migrations))
    batch, seen = _waiting_batch(runner)
    runner._answer_fence_refusals(batch, seen, 100.0)
    assert listed == [] and runner.fence_sizes[("t", "vm-a-kvq-1")]["limits.cpu"] == F.Fraction(1025, 1000)
    assert cluster.deleted == ["vm-a-kvq-1"] and batch.vms == [] and batch.state != RUNNING
    reason = runner.left_out[("t", "vm-a")]
    assert "a fresh sizing shows no change" in reason and "limits.cpu=1025m" in reason, reason
    assert "LimitRange" in reason


def test_an_event_in_another_namespace_about_the_migration_is_not_taken(monkeypatch):
    cluster = _Refused()
    events = cluster.events()
    events[0]["metadata"]["namespace"] = "other-tenant"
    cluster.events = lambda: events
    runner = _pinned_runner(monkeypatch, cluster)
    batch, seen = _waiting_batch(runner)
    runner._answer_fence_refusals(batch, seen, 100.0)
    assert cluster.deleted == [] and batch.vms == [("t", "vm-a")]


def test_the_fence_size_is_the_larger_of_the_computed_pod_and_the_running_one_per_name():
    from fractions import Fraction
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import headroom
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import versioned
    pin = {"charge": {}, "pod_charge": versioned.amounts({"limits.cpu": Fraction(1), "limits.memory": Fraction(100)}),
           "source": versioned.amounts({"limits.cpu": Fraction(12, 10), "requests.cpu": Fraction(1, 10)})}
    assert headroom.pinned_pod_size(pin) == {"limits.cpu": Fraction(12, 10), "limits.memory": Fraction(100),
                                             "requests.cpu": Fraction(1, 10)}
    assert headroom.pinned_pod_size(dict(pin, source=None))["limits.cpu"] == 1
    assert headroom.pinned_pod_size(None) is None


def test_a_migration_name_is_checked_against_its_longest_key():
    ns = "n" * 60
    name = "m" * (F.MAX_KEY_LENGTH - len(F.migration_key(ns, "")))     # fits mig.<ns>.<name>, not claims.<ns>.<name>
    with pytest.raises(InputError, match="too long for the fence's ConfigMap keys"):
        F.normalize_migrations(ns, [{"name": name, "uid": MIG_1, "vm": "vm-a"}])
    with pytest.raises(InputError, match=r"claims\.n+\.<name> at most 253"):
        F.normalize_migrations(ns, [{"name": name[:-2], "uid": MIG_1, "vm": "vm-a"}])
    assert F.normalize_migrations(ns, [{"name": name[:-3], "uid": MIG_1, "vm": "vm-a"}])


def test_an_event_not_from_virt_controller_stops_nothing(monkeypatch):
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import headroom
    cluster = _Refused(forged=True)
    runner = _pinned_runner(monkeypatch, cluster)
    monkeypatch.setattr(headroom, "grown_since_pin", lambda *a, **kw: pytest.fail("no sizing for a forged Event"))
    batch, seen = _waiting_batch(runner)
    runner._answer_fence_refusals(batch, seen, 100.0)
    assert cluster.deleted == [] and batch.vms == [("t", "vm-a")]
