# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/node_maintenance.yml against the lab, scenario (a): a ratio-1.5 tenant near the top of its
quota. The maintenance succeeds, the quota goes back to its base byte for byte, no ledger (ConfigMap in the
operator namespace kvquota-system) or lock in force is left, every VM runs on another node; a second run
changes nothing; a failed migration is reported with how to resume and a re-run converges; an interrupted
run (killed mid-batch) is resumed; the policies for VMs that cannot live-migrate (fail, shutdown, skip) do what they say.

Runs as the least-privilege user of roles/install/files/clusterrole.yml and roles/install/files/operator-namespace.yml.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re
import signal

import pytest

from test_roles_lab import KV, base_fixture, lab_fixture, playbook, state
from kvqlab.procs import signal_tree

pytestmark = pytest.mark.roles   # make roles-tests (conftest.py: every lab test has one such marker)

NS = "a-tenant"


lab = lab_fixture("a")
base = base_fixture(NS)


def vm_node(lab, name="a-vm-1", ns=NS):
    return lab.get(KV + "/namespaces/%s/virtualmachineinstances/%s" % (ns, name))["status"]["nodeName"]


def uncordon(lab, node):
    lab.rest.patch("/api/v1/nodes/%s" % node, {"spec": {"unschedulable": False}})


def test_maintenance_succeeds_and_restores_the_base(lab, base):
    node = vm_node(lab)
    run = playbook(lab, "node_maintenance", {"node_maintenance_node": node})
    print(run.stdout[-4000:])
    assert run.rc == 0, run
    progress = [m for m in run.msgs() if m.startswith("batch 1/1 done")]
    assert progress and "a-tenant/a-vm-1" in progress[0] and "headroom a-tenant/a-tenant-quota +" in progress[0]
    assert "node_maintenance %s: succeeded" % node in run.stdout
    lab.assert_restored(base, [NS])
    lab.assert_vms_running_off(node, [NS])
    assert not lab.node(node)["spec"].get("unschedulable")


def test_second_run_changes_nothing(lab, base):
    node = vm_node(lab)
    first = playbook(lab, "node_maintenance", {"node_maintenance_node": node, "node_maintenance_uncordon": False})
    assert first.rc == 0, first
    second = playbook(lab, "node_maintenance", {"node_maintenance_node": node, "node_maintenance_uncordon": False})
    assert second.rc == 0, second
    assert second.changed() == 0, second
    assert "0 VM(s) to migrate" in second.stdout
    lab.assert_restored(base, [NS])
    lab.assert_vms_running_off(node, [NS])
    uncordon(lab, node)


def test_a_killed_run_is_resumed(lab, base):
    node = vm_node(lab)
    lab.set_knobs(stall_migrations="all")
    proc = playbook(lab, "node_maintenance", {"node_maintenance_node": node}, background=True)
    try:
        lab.wait(lambda: [m for m in lab.vmims(NS) if (m.get("status") or {}).get("phase") == "Running"],
                 120, "a running migration")
        # no rescue, no always: as if the controller host died (the worker and the module with it: ansible-core
        # 2.19+ runs each worker in a process group of its own)
        signal_tree(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        lab.set_knobs(stall_migrations=None)
    # what the re-run resumes from: the killed run's ledger, in the operator namespace, nothing on the tenant's
    # quota or namespace but spec.hard
    held = dict((key, ledger) for key, ledger in lab.ledgers().items() if key[0] == NS)
    assert held and all("%s-b0" % node in (ledger.get("reservations") or {}) for ledger in held.values()), held
    assert not state.legacy_annotations(lab.rest, [NS])
    assert lab.hard(NS) != base[NS], "the killed run's reservation is not on the quota"
    rerun = playbook(lab, "node_maintenance", {"node_maintenance_node": node})
    print(rerun.stdout[-3000:])
    assert rerun.rc == 0, rerun
    assert "resuming: reservations %s-b0" % node in rerun.stdout
    lab.assert_restored(base, [NS])
    lab.assert_vms_running_off(node, [NS])


@pytest.fixture(scope="module")
def rwo_vm(lab):
    """A VM with a ReadWriteOnce volume (LiveMigratable False) on a-vm-1's node, in its own namespace."""
    node = vm_node(lab)
    lab.rest.create("/api/v1/namespaces", {"metadata": {"name": "a-rwo"}})
    lab.rest.create("/api/v1/namespaces/a-rwo/persistentvolumeclaims", {
        "metadata": {"name": "rwo-disk"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                 "storageClassName": "none"}})
    vm = lab.scenarios.vm_object({"name": "rwo-vm", "namespace": "a-rwo", "cpu": 1, "memory": "256Mi",
                                  "node": node, "volumes": [{"name": "data", "pvc": "rwo-disk"}]})
    lab.rest.create(KV + "/namespaces/a-rwo/virtualmachines", vm)
    lab.wait(lambda: (lab.get(KV + "/namespaces/a-rwo/virtualmachineinstances/rwo-vm").get("status") or {})
             .get("phase") == "Running" if list(lab.vmis("a-rwo")) else False, 60, "rwo-vm running")
    return node


def test_policy_fail_stops_before_anything_moves(lab, base, rwo_vm):
    node = rwo_vm
    run = playbook(lab, "node_maintenance", {"node_maintenance_node": node})
    assert run.rc != 0, run
    assert "is blocked, nothing was migrated" in run.stdout and "cannot live-migrate" in run.stdout, run
    assert vm_node(lab) == node and vm_node(lab, "rwo-vm", "a-rwo") == node
    assert not lab.node(node)["spec"].get("unschedulable"), "the node must be uncordoned when nothing moved"
    lab.assert_restored(base, [NS])


def test_policy_skip_leaves_the_vm(lab, base, rwo_vm):
    node = rwo_vm
    run = playbook(lab, "node_maintenance", {"node_maintenance_node": node, "node_maintenance_non_migratable": "skip"})
    assert run.rc == 0, run
    assert "policy skip: 1 VM(s)" in run.stdout
    assert vm_node(lab, "rwo-vm", "a-rwo") == node
    lab.assert_restored(base, [NS])
    lab.assert_vms_running_off(node, [NS])


def test_policy_shutdown_stops_and_restarts(lab, base, rwo_vm, tmp_path):
    node = rwo_vm
    # a-vm-1 back onto the node first, so that both kinds of VM are there
    lab.rest.patch("/api/v1/nodes/%s" % node, {"spec": {"unschedulable": False}})
    hook = tmp_path / "hook.yml"
    seen = tmp_path / "seen.txt"
    hook.write_text(
        "- name: Record which VMIs exist while the node is maintained\n"
        "  kubernetes.core.k8s_info:\n"
        "    api_version: kubevirt.io/v1\n"
        "    kind: VirtualMachineInstance\n"
        "    namespace: a-rwo\n"
        "  register: hook_vmis\n"
        "- name: Write them down\n"
        "  ansible.builtin.copy:\n"
        "    content: \"{{ hook_vmis.resources | length }}\"\n"
        "    dest: %s\n"
        "    mode: '0644'\n" % seen)
    run = playbook(lab, "node_maintenance", {"node_maintenance_node": node, "node_maintenance_non_migratable":
                                             "shutdown", "node_maintenance_hook_tasks": str(hook)})
    print(run.stdout[-3000:])
    assert run.rc == 0, run
    assert seen.read_text() == "0", "the VM that cannot migrate must be stopped during the hook"
    # stopped and started through KubeVirt's subresources (the lab's virt-api logs each, by user)
    virt_api = (lab.run_dir / "logs" / "virt-api.log").read_text()
    assert "stop a-rwo/rwo-vm: spec {'running': False}" in virt_api
    assert "start a-rwo/rwo-vm: spec {'running': True}" in virt_api
    vm = lab.get(KV + "/namespaces/a-rwo/virtualmachines/rwo-vm")
    assert vm["spec"].get("running") is True and "runStrategy" not in vm["spec"]
    assert "kvquota.io/stopped-for-maintenance" not in (vm["metadata"].get("labels") or {})
    # the record of stopped VMs in the operator namespace is gone once they run again
    records = [c["metadata"]["name"] for c in lab.get("/api/v1/namespaces/kvquota-system/configmaps")["items"]]
    assert "kvq-stopped-%s" % node not in records, records
    assert (lab.get(KV + "/namespaces/a-rwo/virtualmachineinstances/rwo-vm").get("status") or {}).get("phase") \
        == "Running"
    lab.assert_restored(base, [NS])


# The tests below run after the policy tests, whose rwo-vm (it cannot live-migrate) stays on its node: a-vm-1
# may have been scheduled next to it, and the fail policy would then stop them before anything moves.
SKIP_RWO = {"node_maintenance_non_migratable": "skip"}


def test_a_short_estimate_is_topped_up(lab, base):
    """Target pods 3 % larger than KubeVirt's formula: admission refuses, the reservation grows by exactly
    the refused amount, the migration goes through, and the base is restored."""
    node = vm_node(lab)
    lab.set_knobs(oversize_percent=3)
    try:
        run = playbook(lab, "node_maintenance", {"node_maintenance_node": node, **SKIP_RWO})
    finally:
        lab.set_knobs(oversize_percent=None)
    print(run.stdout[-3000:])
    assert run.rc == 0, run
    topped = [m for m in run.msgs() if "topped up" in m and "admission refused" in m]
    assert topped and "limits.memory" in topped[0], run.msgs()
    lab.assert_restored(base, [NS])
    lab.assert_vms_running_off(node, [NS])


def test_a_top_up_beyond_the_cap_stops_with_the_numbers(lab, base):
    node = vm_node(lab)
    lab.set_knobs(oversize_percent=3)
    try:
        run = playbook(lab, "node_maintenance", {"node_maintenance_node": node, **SKIP_RWO,
                                                 "node_maintenance_top_up_cap": {"limits.memory": "1Mi"},
                                                 "node_maintenance_rescue_release_timeout": 20})
        print(run.stdout[-3000:])
        assert run.rc != 0, run
        assert "top_up_cap" in run.stdout and "limits.memory" in run.stdout and "To resume" in run.stdout, run
        assert vm_node(lab) == node, "the refused migration must not have happened"
        assert not [m for m in lab.vmims(NS) if (m.get("status") or {}).get("phase") not in ("Succeeded", "Failed")], \
            "the refused migration must be cancelled"
    finally:
        lab.set_knobs(oversize_percent=None)
        lab.force_clean()
    lab.assert_restored(base, [NS])


def _task_outcome(run, name):
    """'skipping', 'ok' or 'changed': the first outcome line after the task's header in the default callback's output."""
    found = re.search(r"TASK \[[^\]]*: %s\][^\n]*\n+(skipping|ok|changed)" % re.escape(name), run.stdout)
    return found.group(1) if found else None


def test_the_drain_steps_run_only_where_the_node_holds_pods_for_them(lab, base):
    """Issue 29 (item 3): kvquota_migrate lists the node's pods after its batches (pods_left); node_maintenance runs
    kvquota_drain only where a pod labelled as a VM pod still runs, and k8s_drain only where another pod is for it.
    A node holding a bare pod and a pod posing as a virt-launcher (both bound to it by name, as a tenant can) has
    both evicted; a node holding neither runs neither module."""
    node = vm_node(lab)
    ns = "drain-probe"
    lab.rest.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    try:
        for name, labels in (("bare", {}), ("poser", {"kubevirt.io": "virt-launcher"})):
            # grace 0: the lab has no kubelet to end a terminating pod; the API server deletes such a pod at once
            lab.rest.create("/api/v1/namespaces/%s/pods" % ns, {"metadata": {"name": name, "labels": labels}, "spec": {
                "nodeName": node, "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "c", "image": "example.invalid/pause"}]}})
        run = playbook(lab, "node_maintenance", {"node_maintenance_node": node, "node_maintenance_drain_force": True,
                                                 "node_maintenance_uncordon": False, **SKIP_RWO})
        print(run.stdout[-3000:])
        assert run.rc == 0, run
        assert _task_outcome(run, "Evict the pods that only pose as VM pods (and list the node's other pods)") \
            == "changed", run
        assert _task_outcome(run, "Drain the node's other pods") == "changed", run
        for name in ("bare", "poser"):
            pod = lab.rest.get_or_none("/api/v1/namespaces/%s/pods/%s" % (ns, name))
            assert pod is None or pod["metadata"].get("deletionTimestamp"), "%s still on %s" % (name, node)
        # a node no VMI runs on (the policy tests' RWO VM may stay on the first one): nothing for either module
        busy = set((v.get("status") or {}).get("nodeName") for v in lab.get(KV + "/virtualmachineinstances")["items"])
        empty = sorted(n["metadata"]["name"] for n in lab.get("/api/v1/nodes")["items"]
                       if n["metadata"]["name"] not in busy)[0]
        uncordon(lab, node)
        again = playbook(lab, "node_maintenance", {"node_maintenance_node": empty})
        assert again.rc == 0, again
        # (the drain step is not even read: its include is skipped)
        assert _task_outcome(again, "Drain the remaining pods") == "skipping", again
        for task in ("Evict the pods that only pose as VM pods (and list the node's other pods)",
                     "Drain the node's other pods"):
            assert _task_outcome(again, task) is None, again
        assert not lab.node(empty)["spec"].get("unschedulable")
        lab.assert_restored(base, [NS])
    finally:
        lab.rest.delete("/api/v1/namespaces/" + ns)
        uncordon(lab, node)


def test_vms_stopped_for_a_maintenance_that_failed_before_its_hook_are_started_again(lab, base, rwo_vm):
    """helper-35 finding 2: the shutdown policy stopped a VM, then the run failed before its hook (here the drain: a
    bare pod bound to the node, without node_maintenance_drain_force). The maintenance did not happen, so the VM is
    started again at once (it used to stay stopped until a re-run's hook), and the state line says so."""
    node = vm_node(lab, "rwo-vm", "a-rwo")
    ns = "rescue-probe"
    lab.rest.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    try:
        lab.rest.create("/api/v1/namespaces/%s/pods" % ns, {"metadata": {"name": "bare"}, "spec": {
            "nodeName": node, "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "example.invalid/pause"}]}})
        started = "start a-rwo/rwo-vm: spec {'running': True}"
        starts_before = (lab.run_dir / "logs" / "virt-api.log").read_text().count(started)
        run = playbook(lab, "node_maintenance", {"node_maintenance_node": node,
                                                 "node_maintenance_non_migratable": "shutdown"})
        print(run.stdout[-3000:])
        assert run.rc != 0, run
        assert "failed in step drain" in run.stdout, run
        assert "stopped VMs: a-rwo/rwo-vm, started again: a-rwo/rwo-vm (the maintenance did not happen)" \
            in run.stdout, run
        assert (lab.run_dir / "logs" / "virt-api.log").read_text().count(started) == starts_before + 1
        lab.wait(lambda: (lab.get(KV + "/namespaces/a-rwo/virtualmachineinstances/rwo-vm").get("status") or {})
                 .get("phase") == "Running" if list(lab.vmis("a-rwo")) else False, 60, "rwo-vm running again")
        records = [c["metadata"]["name"] for c in lab.get("/api/v1/namespaces/kvquota-system/configmaps")["items"]]
        assert "kvq-stopped-%s" % node not in records, records
        lab.assert_restored(base, [NS])
    finally:
        lab.rest.delete("/api/v1/namespaces/" + ns)
        uncordon(lab, node)


# Last, and cleaning up after itself, so that a failure here cannot disturb the tests above. After a failed
# migration the source pod is still the VM's only pod: the reservation must be releasable all the same.
def test_failed_migration_is_reported_and_a_rerun_converges(lab, base):
    node = vm_node(lab)
    lab.set_knobs(fail_migrations="all")
    try:
        run = playbook(lab, "node_maintenance", {"node_maintenance_node": node, **SKIP_RWO,
                                                 "node_maintenance_rescue_release_timeout": 30})
    finally:
        lab.set_knobs(fail_migrations=None)
    assert run.rc != 0, run
    # each VM whose migration failed stays, named with KubeVirt's reason; the run stops before the drain
    assert "left out of its batch" in run.stdout and "failed (migration failed" in run.stdout, run
    assert "To resume" in run.stdout, run
    print(run.stdout[-2500:])
    try:
        rerun = playbook(lab, "node_maintenance", {"node_maintenance_node": node, **SKIP_RWO,
                                                   "node_maintenance_release_timeout": 120})
        print(rerun.stdout[-2500:])
        assert rerun.rc == 0, rerun
        lab.assert_restored(base, [NS])
        lab.assert_vms_running_off(node, [NS])
    finally:
        lab.force_clean()


def test_a_malformed_annotation_on_one_vm_leaves_it_and_the_others_migrate(lab, base):
    """Issue 24, attack 3: another tenant's VM on the node carries hooks.kubevirt.io/hookSidecars "{" on its running
    VMI. The plan blocks that VM alone (named with its namespace and the field), the node's other VMs migrate and
    their quota goes back to its base; the run then fails in its vacate step naming the VM and why, the node left
    cordoned with it on it (never "succeeded" with a VM left behind). Before: the plan failed for every VM."""
    node = vm_node(lab)
    lab.rest.create("/api/v1/namespaces", {"metadata": {"name": "a-hook"}})
    vm = lab.scenarios.vm_object({"name": "hook-vm", "namespace": "a-hook", "cpu": 1, "memory": "256Mi", "node": node})
    lab.rest.create(KV + "/namespaces/a-hook/virtualmachines", vm)
    try:
        lab.wait(lambda: (lab.get(KV + "/namespaces/a-hook/virtualmachineinstances/hook-vm").get("status") or {})
                 .get("phase") == "Running" if list(lab.vmis("a-hook")) else False, 60, "hook-vm running")
        lab.rest.patch(KV + "/namespaces/a-hook/virtualmachineinstances/hook-vm",
                       {"metadata": {"annotations": {"hooks.kubevirt.io/hookSidecars": "{"}}})
        run = playbook(lab, "node_maintenance", {"node_maintenance_node": node, **SKIP_RWO})
        print(run.stdout[-4000:])
        assert run.rc != 0, run
        assert "1 VM(s) blocked alone" in run.stdout
        assert "a-hook/hook-vm (blocked by the plan: VM a-hook/hook-vm cannot be sized, " \
               "metadata.annotations[hooks.kubevirt.io/hookSidecars]" in run.stdout, run
        # the state line (a-rwo/rwo-vm, left by the skip policy, is on the node too when the module's tests run in order)
        assert re.search(r"VM\(s\) still on the node: [^;]*a-hook/hook-vm", run.stdout), run
        assert "node left cordoned" in run.stdout
        assert "node_maintenance %s: failed" % node in run.stdout
        lab.assert_restored(base, [NS])
        lab.assert_vms_running_off(node, [NS])
        assert vm_node(lab, "hook-vm", "a-hook") == node
    finally:
        lab.rest.delete("/api/v1/namespaces/a-hook")
        uncordon(lab, node)


def test_kept_back_shutdown_stops_only_the_vms_kept_back_and_the_maintenance_goes_on(lab, base, tmp_path):
    """Issue 29, helper finding 4: a tenant can keep its VM on the node on every run (delete its migration, or make
    it fail; or an annotation the plan blocks it alone for), and with node_maintenance_kept_back fail (the default)
    the node's maintenance never happens. With shutdown, a-vm-1 (its migration fails) and hook-vm (blocked alone by
    its malformed annotation) are stopped through KubeVirt's stop subresource for the maintenance, the hook runs
    with neither on the node, and both are started again; no quota grows past its base after the run."""
    node = vm_node(lab)
    lab.rest.create("/api/v1/namespaces", {"metadata": {"name": "a-kept"}})
    vm = lab.scenarios.vm_object({"name": "hook-vm", "namespace": "a-kept", "cpu": 1, "memory": "256Mi", "node": node})
    lab.rest.create(KV + "/namespaces/a-kept/virtualmachines", vm)
    hook = tmp_path / "hook.yml"
    seen = tmp_path / "seen.txt"
    hook.write_text(
        "- name: Record which of the kept-back VMs run while the node is maintained\n"
        "  kubernetes.core.k8s_info:\n"
        "    api_version: kubevirt.io/v1\n"
        "    kind: VirtualMachineInstance\n"
        "    namespace: \"{{ item }}\"\n"
        "  loop: [a-tenant, a-kept]\n"
        "  register: hook_vmis\n"
        "- name: Write them down\n"
        "  ansible.builtin.copy:\n"
        "    content: \"{{ hook_vmis.results | map(attribute='resources') | flatten\n"
        "                 | selectattr('status.nodeName', 'defined') | selectattr('status.nodeName', 'equalto', '%s')\n"
        "                 | map(attribute='metadata.name') | list | to_json }}\"\n"
        "    dest: %s\n"
        "    mode: '0644'\n" % (node, seen))
    try:
        lab.wait(lambda: (lab.get(KV + "/namespaces/a-kept/virtualmachineinstances/hook-vm").get("status") or {})
                 .get("phase") == "Running" if list(lab.vmis("a-kept")) else False, 60, "hook-vm running")
        lab.rest.patch(KV + "/namespaces/a-kept/virtualmachineinstances/hook-vm",
                       {"metadata": {"annotations": {"hooks.kubevirt.io/hookSidecars": "{"}}})
        lab.set_knobs(fail_migrations="%s/a-vm-1" % NS)
        try:
            run = playbook(lab, "node_maintenance", {"node_maintenance_node": node, **SKIP_RWO,
                                                     "node_maintenance_kept_back": "shutdown",
                                                     "node_maintenance_hook_tasks": str(hook)})
        finally:
            lab.set_knobs(fail_migrations=None)
        print(run.stdout[-4000:])
        assert run.rc == 0, run
        kept = [m for m in run.msgs() if m.startswith("policy kept_back shutdown: 2 VM(s)")]
        assert kept and "a-tenant/a-vm-1 (" in kept[0] and "failed (migration failed" in kept[0], run.msgs()
        assert "a-kept/hook-vm (blocked by the plan: VM a-kept/hook-vm cannot be sized" in kept[0], kept
        assert seen.read_text() == "[]", "the kept-back VMs must be stopped while the node is maintained"
        virt_api = (lab.run_dir / "logs" / "virt-api.log").read_text()
        for key in ("a-tenant/a-vm-1", "a-kept/hook-vm"):
            assert "stop %s: spec {'running': False}" % key in virt_api, key
            assert "start %s: spec {'running': True}" % key in virt_api, key
        assert "node_maintenance %s: succeeded" % node in run.stdout
        records = [c["metadata"]["name"] for c in lab.get("/api/v1/namespaces/kvquota-system/configmaps")["items"]]
        assert "kvq-stopped-%s" % node not in records, records
        for ns, name in ((NS, "a-vm-1"), ("a-kept", "hook-vm")):
            assert (lab.get(KV + "/namespaces/%s/virtualmachineinstances/%s" % (ns, name)).get("status") or {}) \
                .get("phase") == "Running", (ns, name)
        assert not lab.node(node)["spec"].get("unschedulable")
        lab.assert_restored(base, [NS])
    finally:
        lab.rest.delete("/api/v1/namespaces/a-kept")
        uncordon(lab, node)
