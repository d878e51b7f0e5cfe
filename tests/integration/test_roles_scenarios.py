# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_maintenance and preflight against lab scenarios (b), (c) and (d) of the issue.

(b) three VMs under a quota just above their use: the maintenance succeeds and the emulator's log shows
    no "exceeded quota" retry loop (no target pod was ever refused);
(c) a Rancher-managed namespace whose quota Rancher rebuilds from the namespace annotation, with the
    cattle-cluster-agent restarted during the drain: succeeds, base restored (quota and annotation);
(d) the overhead ratio raised from 1.5 to 4.5 while a VM runs: the preflight names the namespace whose
    usage will exceed its quota after migration and the fix; node_maintenance (policy fail) stops before
    anything moves; once the fix is applied, the maintenance succeeds and the quota returns to the new base.

Each scenario runs in its own lab, one after the other.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json

import pytest

from test_roles_lab import KV, finish, playbook, start_lab

pytestmark = pytest.mark.roles   # make roles-tests (conftest.py: every lab test has one such marker)

RANCHER_ANNOTATION = "field.cattle.io/resourceQuota"


@pytest.fixture
def lab_for(tmp_path_factory, request):
    labs = []

    def start(scenario):
        started = start_lab(tmp_path_factory, scenario)
        labs.append(started)
        return started
    yield start
    for started in labs:
        started.stop()


def test_b_no_exceeded_quota_loop(lab_for):
    lab = lab_for("b")
    ns = "b-tenant"
    base = {ns: lab.hard(ns)}
    node = lab.busiest_node([ns])
    lab.mark()
    run = playbook(lab, "node_maintenance", {"node_maintenance_node": node})
    print(run.stdout[-3000:])
    assert run.rc == 0, run
    log = lab.emulator_log()
    refusals = [line for line in log.splitlines() if "exceeded quota" in line]
    assert not refusals, "target pods were refused:\n" + "\n".join(refusals[:5])
    assert "migration" in log and "Succeeded" in log
    lab.assert_restored(base, [ns])
    lab.assert_vms_running_off(node, [ns])


def test_c_rancher_agent_restart_during_the_drain(lab_for):
    lab = lab_for("c")
    namespaces = ["c-tenant", "c-neighbour"]
    base = dict((ns, lab.hard(ns)) for ns in namespaces)
    annotations = dict((ns, lab.namespace(ns)["metadata"]["annotations"][RANCHER_ANNOTATION]) for ns in namespaces)
    node = lab.busiest_node(["c-tenant"])
    proc = playbook(lab, "node_maintenance", {"node_maintenance_node": node}, background=True)
    restarted = False
    try:
        # once the first reservation is in place (the namespace annotation was raised), restart the agent
        lab.wait(lambda: lab.namespace("c-tenant")["metadata"]["annotations"][RANCHER_ANNOTATION]
                 != annotations["c-tenant"] or proc.poll() is not None, 180, "the reservation")
        if proc.poll() is None:
            lab.rancher_agent_restart()
            restarted = True
    finally:
        run = finish(proc)
    print(run.stdout[-3000:])
    assert restarted, "the playbook ended before the reservation was seen"
    assert run.rc == 0, run
    assert "cattle-cluster-agent restarted" in lab.emulator_log()
    lab.assert_restored(base, namespaces)
    for ns in namespaces:
        assert lab.namespace(ns)["metadata"]["annotations"][RANCHER_ANNOTATION] == annotations[ns]
    lab.assert_vms_running_off(node, ["c-tenant"])


def test_d_overhead_ratio_raised_while_a_vm_runs(lab_for, tmp_path):
    lab = lab_for("a")
    ns = "a-tenant"
    node = lab.busiest_node([ns])
    kubevirt = lab.get(KV + "/kubevirts")["items"][0]
    lab.rest.patch(KV + "/namespaces/%s/kubevirts/%s" % (kubevirt["metadata"]["namespace"],
                                                         kubevirt["metadata"]["name"]),
                   {"spec": {"configuration": {"additionalGuestMemoryOverheadRatio": "4.5"}}},
                   content_type="application/merge-patch+json")
    base = {ns: lab.hard(ns)}

    # the preflight names the namespace and the fix
    run = playbook(lab, "preflight", {"preflight_report_dir": str(tmp_path), "preflight_nodes": [node]})
    assert run.rc != 0, run
    report = json.loads((tmp_path / "preflight.json").read_text())
    assert report["namespaces"][ns]["verdict"] == "blocked"
    permanent = [f for f in report["fixes"] if f["permanent"] and f["namespace"] == ns]
    assert permanent and permanent[0]["resource"] == "limits.memory", report["fixes"]
    assert "raise limits.memory of quota a-tenant/a-tenant-quota to %s" % permanent[0]["suggested"] in run.stdout

    # node_maintenance follows its policy: nothing moves, nothing changes, the node is schedulable again
    run = playbook(lab, "node_maintenance", {"node_maintenance_node": node})
    assert run.rc != 0, run
    assert "is blocked, nothing was migrated" in run.stdout and "usage_above_hard" in run.stdout
    lab.assert_restored(base, [ns])
    assert lab.busiest_node([ns]) == node
    assert not lab.node(node)["spec"].get("unschedulable")

    # apply the fix the preflight gave; then the maintenance succeeds and restores the new base exactly
    quota = permanent[0]["quota"]
    lab.rest.patch("/api/v1/namespaces/%s/resourcequotas/%s" % (ns, quota),
                   {"spec": {"hard": {"limits.memory": permanent[0]["suggested"]}}},
                   content_type="application/merge-patch+json")
    lab.wait(lambda: lab.quotas(ns)[quota].get("status", {}).get("hard", {}).get("limits.memory")
             == permanent[0]["suggested"], 30, "status.hard")
    new_base = {ns: lab.hard(ns)}
    run = playbook(lab, "node_maintenance", {"node_maintenance_node": node})
    print(run.stdout[-3000:])
    assert run.rc == 0, run
    lab.assert_restored(new_base, [ns])
    lab.assert_vms_running_off(node, [ns])
