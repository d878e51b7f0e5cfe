# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 29 (review M4): the VM's namespace may delete the run's migration of its VM or make it fail (its target pod
is the tenant's to delete). That VM stays where it is, left out and named with how its migration ended; the batch's
other migrations go on and the run finishes them (it used to stop the whole run, every other VM with it)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.migration_state import FINAL, RUNNING
from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_fence_migrations import (
    _Cluster,
    _prepared,
    _runner,
)

OURS = "vm-a-kvq-260101000000"


def _launched(monkeypatch):
    """A batch of vm-a (the run's own migration) and vm-b (one it follows), both running."""
    cluster = _Cluster()
    cluster.vmis = {}       # what get_custom serves: the VMIs' status (none: as if each had no migrationState)
    cluster.get_custom = lambda group, version, plural, name, namespace=None: cluster.vmis.get(
        (namespace, name), {"metadata": {"name": name, "namespace": namespace}, "status": {}})
    runner = _runner(monkeypatch, cluster)
    batch = _prepared(runner)
    runner.launch(batch)
    cluster.vmims[("t", "theirs")] = {"metadata": {"namespace": "t", "name": "theirs", "uid": "u-theirs"},
                                      "spec": {"vmiName": "vm-b"}, "status": {"phase": "Running"}}
    cluster.vmims[("t", OURS)]["status"] = {"phase": "Running"}
    batch.started, batch.launched, batch.timeout = 0.0, 0.0, 600
    runner.follow(batch)
    cluster.calls[:] = []
    return cluster, runner, batch


def test_a_migration_the_tenant_deletes_leaves_its_vm_out_named_and_the_others_go_on(monkeypatch):
    cluster, runner, batch = _launched(monkeypatch)
    del cluster.vmims[("t", OURS)]
    runner.follow(batch)                         # no error: the run goes on
    reason = runner.left_out[("t", "vm-a")]
    assert "t/vm-a: its migration t/%s was deleted before it ended, not by this run" % OURS in reason
    assert "a re-run migrates it again" in reason
    assert batch.state == RUNNING and [m["vm"] for m in batch.migrations] == ["vm-b"]
    assert batch.vms == [("t", "vm-b")]
    # its fence entry ends (a later migration of the VM gets no target pod), nothing is deleted or cancelled
    assert cluster.calls == [("end", [(OURS, "uid-of-" + OURS)])]
    assert runner.record.cancelled == []
    cluster.vmims[("t", "theirs")]["status"] = {"phase": "Succeeded"}
    runner.follow(batch)
    assert batch.state == FINAL and batch.moved


def test_a_migration_that_fails_leaves_its_vm_out_with_the_reason_and_the_others_go_on(monkeypatch):
    cluster, runner, batch = _launched(monkeypatch)
    cluster.vmims[("t", OURS)]["status"] = {"phase": "Failed", "migrationState": {
        "failureReason": "target pod terminated"}}
    runner.follow(batch)
    reason = runner.left_out[("t", "vm-a")]
    assert "t/vm-a: its migration t/%s failed (target pod terminated)" % OURS in reason
    assert "kubectl describe vmim -n t %s" % OURS in reason
    assert batch.failed == ["t/" + OURS] and batch.state == RUNNING
    assert [m["vm"] for m in batch.migrations] == ["vm-b"]
    assert runner.record.cancelled == []
    runner.follow(batch)                         # said once
    assert list(runner.left_out) == [("t", "vm-a")] and batch.failed == ["t/" + OURS]
    cluster.vmims[("t", "theirs")]["status"] = {"phase": "Succeeded"}
    runner.follow(batch)
    assert batch.state == FINAL and batch.moved


def test_a_batch_whose_every_migration_ended_so_is_final_with_nothing_moved(monkeypatch):
    cluster, runner, batch = _launched(monkeypatch)
    del cluster.vmims[("t", OURS)]
    cluster.vmims[("t", "theirs")]["status"] = {"phase": "Failed"}
    runner.follow(batch)
    assert sorted(runner.left_out) == [("t", "vm-a"), ("t", "vm-b")]
    assert "failed (no reason given)" in runner.left_out[("t", "vm-b")]
    assert batch.state == FINAL and not batch.moved and batch.migrations == []


def test_a_migration_the_tenant_replaces_under_the_same_name_is_not_taken_for_the_runs(monkeypatch):
    cluster, runner, batch = _launched(monkeypatch)
    cluster.vmims[("t", OURS)] = {"metadata": {"namespace": "t", "name": OURS, "uid": "tenants-own"},
                                  "spec": {"vmiName": "vm-a"}, "status": {"phase": "Succeeded"}}
    runner.follow(batch)
    assert "was deleted before it ended" in runner.left_out[("t", "vm-a")]
    assert batch.state == RUNNING and [m["vm"] for m in batch.migrations] == ["vm-b"]


def test_at_the_batch_timeout_the_late_migrations_are_cancelled_and_their_vms_named_the_run_goes_on(monkeypatch):
    """helper-33's finding 3: a namespace that holds its migration back (deletes a Secret its VM mounts: the target pod
    never starts, and KubeVirt gives up on it only after 15 minutes) used to stop the whole run at the batch's
    timeout. Now the run cancels its own late migration (one it follows is only no longer followed), names the VM
    with the migration's phase, and goes on."""
    cluster, runner, batch = _launched(monkeypatch)
    deleted = []
    cluster.delete = lambda path, what: deleted.append(path.rsplit("/", 1)[1])
    cluster.vmims[("t", OURS)]["status"] = {"phase": "Scheduling"}
    batch.launched, batch.timeout = -601.0, 600         # the run's clock says 0.0: 601 s after the launch
    runner.follow(batch)                          # no error
    assert deleted == [OURS] and runner.record.cancelled == ["t/" + OURS]
    reason = runner.left_out[("t", "vm-a")]
    assert "t/vm-a: its migration t/%s did not finish within the batch's 600s" % OURS in reason
    assert "phase Scheduling" in reason and "stopped at the batch's timeout; its migration was cancelled" in reason
    assert "did not finish within the batch's 600s" in runner.left_out[("t", "vm-b")]   # followed: not deleted
    assert batch.state == FINAL and not batch.moved


def test_a_migration_gone_after_it_succeeded_counts_as_moved_by_its_vmis_migration_state(monkeypatch):
    """helper-33's finding 5: the tenant (or KubeVirt's clean-up of finished migrations) deletes the run's migration
    after it succeeded. Its VMI's status.migrationState (KubeVirt's alone) names the migration's UID, completed:
    the VM moved, it is not left out, and the batch counts as migrated."""
    cluster, runner, batch = _launched(monkeypatch)
    del cluster.vmims[("t", OURS)]
    cluster.vmis[("t", "vm-a")] = {"metadata": {"name": "vm-a", "namespace": "t"}, "status": {"migrationState": {
        "migrationUid": "uid-of-" + OURS, "completed": True}}}
    cluster.vmims[("t", "theirs")]["status"] = {"phase": "Succeeded"}
    runner.follow(batch)
    assert runner.left_out == {} and batch.state == FINAL and batch.moved
    assert [m["vm"] for m in batch.migrations] == ["vm-a", "vm-b"]


def test_a_vmi_whose_migration_state_names_another_migration_or_a_failure_does_not_count(monkeypatch):
    for state in ({"migrationUid": "someone-elses", "completed": True},
                  {"migrationUid": "uid-of-" + OURS, "completed": True, "failed": True}):
        cluster, runner, batch = _launched(monkeypatch)
        del cluster.vmims[("t", OURS)]
        cluster.vmis[("t", "vm-a")] = {"metadata": {"name": "vm-a", "namespace": "t"},
                                       "status": {"migrationState": state}}
        runner.follow(batch)
        assert "was deleted before it ended" in runner.left_out[("t", "vm-a")]
