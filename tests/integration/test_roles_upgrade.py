# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""rolling_upgrade, kubevirt_update and reaper against the lab (scenario b: three VMs under a quota just
above their use, so every migration needs a reservation).

- upgrade.yml upgrades every node in turn (the per-node tasks run while the node is empty) and leaves every
  quota at its base;
- kubevirt_update.yml in drive mode migrates the outdated VMIs node by node, batch by batch; in follow mode it
  carries the lab's workload updater (its rounds after a launcher image change), whose migrations would
  otherwise stay Pending on "exceeded quota";
- reaper.yml releases an expired reservation exactly.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import subprocess
import time

import pytest

from test_roles_lab import KV, FINAL, base_fixture, collections_path, hook_recording_vmis_on_node, lab_fixture, playbook

pytestmark = pytest.mark.roles   # make roles-tests (conftest.py: every lab test has one such marker)

NS = "b-tenant"
OUTDATED = "kubevirt.io/outdatedLauncherImage"


lab = lab_fixture("b")
base = base_fixture(NS)


def succeeded_since(lab, stamp):
    """namespace/vmi of migrations that succeeded after stamp (RFC 3339)."""
    out = set()
    for m in lab.vmims(NS):
        st = m.get("status") or {}
        if st.get("phase") == "Succeeded" and (st.get("migrationState") or {}).get("endTimestamp", "") >= stamp:
            out.add("%s/%s" % (NS, m["spec"]["vmiName"]))
    return out


def now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def label_outdated(lab):
    for vmi in lab.vmis(NS):
        lab.rest.patch(KV + "/namespaces/%s/virtualmachineinstances/%s" % (NS, vmi["metadata"]["name"]),
                       {"metadata": {"labels": {OUTDATED: ""}}})


def clear_outdated(lab):
    for vmi in lab.vmis(NS):
        lab.rest.patch(KV + "/namespaces/%s/virtualmachineinstances/%s" % (NS, vmi["metadata"]["name"]),
                       {"metadata": {"labels": {OUTDATED: None}}})


def test_rolling_upgrade_all_nodes(lab, base, tmp_path):
    marks = tmp_path / "upgraded"
    marks.mkdir()
    hook = tmp_path / "upgrade-node.yml"
    hook.write_text(hook_recording_vmis_on_node("%s/{{ node_maintenance_node }}" % marks))
    run = playbook(lab, "upgrade", {"rolling_upgrade_tasks": str(hook)}, timeout=1500)
    print(run.stdout[-3000:])
    assert run.rc == 0, run
    nodes = sorted(n["metadata"]["name"] for n in lab.get("/api/v1/nodes")["items"])
    assert sorted(p.name for p in marks.iterdir()) == nodes
    assert all(p.read_text() == "0" for p in marks.iterdir()), "a node was upgraded with VMs on it"
    assert "rolling upgrade: %d of %d node(s) upgraded" % (len(nodes), len(nodes)) in run.stdout
    lab.assert_restored(base, [NS])
    for vmi in lab.vmis(NS):
        assert vmi["status"]["phase"] == "Running"
    for node in nodes:
        assert not lab.node(node)["spec"].get("unschedulable")


def test_rolling_upgrade_stops_at_the_first_failing_node(lab, base, tmp_path):
    nodes = sorted(n["metadata"]["name"] for n in lab.get("/api/v1/nodes")["items"])
    hook = tmp_path / "upgrade-node.yml"
    hook.write_text(
        "- name: The upgrade of the second node breaks\n"
        "  ansible.builtin.fail:\n"
        "    msg: upgrade of {{ node_maintenance_node }} failed\n"
        "  when: node_maintenance_node == '%s'\n" % nodes[1])
    try:
        run = playbook(lab, "upgrade", {"rolling_upgrade_tasks": str(hook), "rolling_upgrade_nodes": nodes},
                       timeout=1500)
        print(run.stdout[-3000:])
        assert run.rc != 0, run
        assert "upgrade of %s failed" % nodes[1] in run.stdout
        summary = run.stdout.split("rolling upgrade: ")[-1].splitlines()
        rows = dict((line.split("|")[0].strip().strip('"'), line.split("|")[1].strip())
                    for line in summary if line.strip().startswith('"node-') and "|" in line)
        assert rows == {nodes[0]: "upgraded", nodes[1]: "failed", nodes[2]: "not reached"}, rows
        lab.assert_restored(base, [NS])
    finally:
        lab.force_clean()


def test_kubevirt_update_drive(lab, base):
    label_outdated(lab)
    start = now_rfc3339()
    try:
        run = playbook(lab, "kubevirt_update", {"kubevirt_update_mode": "drive", "kubevirt_update_namespaces": [NS]})
    finally:
        clear_outdated(lab)
    print(run.stdout[-3000:])
    assert run.rc == 0, run
    vms = set("%s/%s" % (NS, v["metadata"]["name"]) for v in lab.vmis(NS))
    assert succeeded_since(lab, start) >= vms
    assert [m for m in run.msgs() if m.startswith("batch 1/")]
    lab.assert_restored(base, [NS])


def test_kubevirt_update_follows_the_workload_updater(lab, base):
    """A KubeVirt update (the lab's: a new launcher image tag, workloadUpdateMethods [LiveMigrate]): the lab's
    workload updater labels every VMI outdated and migrates them in rounds; without reservations each one would
    be refused by quota and stay Pending. The role follows them until no VMI is outdated."""
    start = now_rfc3339()
    lab.set_knobs(workload_update_period_seconds=4)
    lab.emulator_mod.roll_out_kubevirt(lab.lab, "v-kvq-update-" + start.replace(":", "").lower())
    try:
        run = playbook(lab, "kubevirt_update", {"kubevirt_update_namespaces": [NS], "kubevirt_update_idle_seconds": 15,
                                                "kubevirt_update_deadline_seconds": 400})
    finally:
        lab.set_knobs(workload_update_period_seconds=None)
        lab.rest.patch(KV + "/namespaces/kubevirt/kubevirts/kubevirt", {"spec": {"imageTag": None, "workloadUpdateStrategy": None}})
    print(run.stdout[-3000:])
    assert run.rc == 0, run
    vmis = lab.vmis(NS)
    vms = set("%s/%s" % (NS, v["metadata"]["name"]) for v in vmis)
    assert succeeded_since(lab, start) >= vms
    assert not [v for v in vmis if OUTDATED in (v["metadata"].get("labels") or {})]
    updater = [m for m in lab.vmims(NS) if m["metadata"]["name"].startswith("kubevirt-workload-update-")]
    assert len(updater) >= len(vms)
    assert "KubeVirt update window: succeeded, %d VM(s) to update" % len(vms) in run.stdout
    lab.wait(lambda: all((m.get("status") or {}).get("phase") in FINAL for m in lab.vmims(NS)), 60, "migrations final")
    lab.assert_restored(base, [NS])


def test_reaper_releases_an_expired_reservation(lab, base):
    quota = sorted(base[NS])[0]
    args = json.dumps({"reservation_id": "forgotten-job", "ttl": "1",
                       "headroom": [{"namespace": NS, "quota": quota, "resources": {"limits.cpu": "1"}}]})
    env = {"ANSIBLE_COLLECTIONS_PATH": collections_path(), "K8S_AUTH_KUBECONFIG": str(lab.lab.user_kubeconfig),
           "PATH": __import__("os").environ["PATH"], "HOME": __import__("os").environ["HOME"]}
    reserved = subprocess.run(["ansible", "localhost", "-m", "kvquota.maintenance.kvquota_reserve", "-a", args],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    assert reserved.returncode == 0, reserved.stdout
    assert lab.hard(NS) != base[NS]
    assert lab.reservations() == ["forgotten-job"], "its ledger is not in the operator namespace"
    time.sleep(2)
    run = playbook(lab, "reaper")
    print(run.stdout[-2000:])
    assert run.rc == 0, run
    assert "released   | forgotten-job" in run.stdout
    lab.assert_restored(base, [NS])
    again = playbook(lab, "reaper")
    assert again.rc == 0 and again.changed() == 0, again
