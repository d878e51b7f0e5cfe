# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""rolling_upgrade in waves against the lab (scenario w: six VMs on node-1..node-3 in two namespaces under quotas
just above their use; node-4 is upgraded too, node-5 stands for a node upgraded already).

With rolling_upgrade_max_unavailable 3 the first wave is node-1..node-3, drained together by one executor: every
one of them cordoned before the first batch, so no VM lands on another node of the wave, and the steering taint on
node-4 (still to be upgraded) sends the VMs to node-5. Every VM moves once; the wave of node-4 moves nothing.
Killed in the middle of the wave's migrations (as if the controller host died: no rescue, no always), a re-run
resumes: the wave's reservations are released, no VM moves twice, every quota is back at its base byte for byte
and no taint is left.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import signal

from test_roles_lab import base_fixture, collections_path, hook_recording_vmis_on_node, lab_fixture, playbook
from kvqlab.procs import signal_tree

import pytest

pytestmark = pytest.mark.roles   # make roles-tests (conftest.py: every lab test has one such marker)

NAMESPACES = ["w-tenant-1", "w-tenant-2"]
WAVE = ["node-1", "node-2", "node-3"]
UPGRADED = ["node-1", "node-2", "node-3", "node-4"]
# the operator's order, kept (not sorted): the wave is node-3, node-1, node-2 and its reservations node-3-b<n>
ORDER = ["node-3", "node-1", "node-2", "node-4"]
TAINT = "kvquota.io/upgrade-pending"

lab = lab_fixture("w")
base = base_fixture(*NAMESPACES)


def migrations_per_vm(lab):
    """{namespace/vm: number of migrations that succeeded} over the scenario's namespaces."""
    counts = {}
    for ns in NAMESPACES:
        for m in lab.vmims(ns):
            if (m.get("status") or {}).get("phase") == "Succeeded":
                key = "%s/%s" % (ns, m["spec"]["vmiName"])
                counts[key] = counts.get(key, 0) + 1
    return counts


def tainted(lab):
    return sorted(n["metadata"]["name"] for n in lab.get("/api/v1/nodes")["items"]
                  if any(t.get("key") == TAINT for t in n["spec"].get("taints") or []))


def test_a_wave_of_three_nodes_killed_and_resumed_moves_every_vm_once(lab, base, tmp_path):
    assert collections_path()
    marks = tmp_path / "upgraded"
    marks.mkdir()
    hook = tmp_path / "upgrade-node.yml"
    hook.write_text(hook_recording_vmis_on_node("%s/{{ node_maintenance_node }}" % marks))
    # a record name of its own (rolling_upgrade_steering_record): the taints are recorded under it, and taken off
    # from it by the re-run
    extra = {"rolling_upgrade_tasks": str(hook), "rolling_upgrade_nodes": ORDER,
             "rolling_upgrade_max_unavailable": 3, "rolling_upgrade_steering_record": "pool-a"}
    before = dict((v["metadata"]["name"], v["status"]["nodeName"]) for ns in NAMESPACES for v in lab.vmis(ns))
    assert sorted(set(before.values())) == WAVE, before

    lab.set_knobs(stall_migrations="all")
    proc = playbook(lab, "upgrade", extra, background=True)
    try:
        # the wave's migrations under way: all three nodes cordoned by then, node-4 tainted
        lab.wait(lambda: [m for ns in NAMESPACES for m in lab.vmims(ns)
                          if (m.get("status") or {}).get("phase") == "Running"] or proc.poll() is not None,
                 240, "a running migration of the wave")
        assert proc.poll() is None, "the playbook ended before the wave migrated"
        cordoned = [n for n in WAVE if lab.node(n)["spec"].get("unschedulable")]
        assert cordoned == WAVE, cordoned
        assert tainted(lab) == UPGRADED, tainted(lab)
        assert [c["metadata"]["name"] for c in lab.get("/api/v1/namespaces/kvquota-system/configmaps")["items"]
                if c["metadata"]["name"].startswith("kvq-steering-")] == ["kvq-steering-pool-a"]
        signal_tree(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        lab.set_knobs(stall_migrations=None)
    held = lab.reservations()
    assert held and all(rid.startswith("node-3-b") for rid in held), held

    rerun = playbook(lab, "upgrade", extra, timeout=1500)
    print(rerun.stdout[-5000:])
    assert rerun.rc == 0, rerun
    assert "resuming: reservations node-3-b" in rerun.stdout
    assert "in 2 wave(s): node-3, node-1, node-2 | node-4" in rerun.stdout
    # every node upgraded empty, every VM moved once (to node-5, the node not left to upgrade)
    assert sorted(p.name for p in marks.iterdir()) == UPGRADED
    assert all(p.read_text() == "0" for p in marks.iterdir()), "a node was upgraded with VMs on it"
    moves = migrations_per_vm(lab)
    assert sorted(moves) == sorted("%s/%s" % (v["metadata"]["namespace"], v["metadata"]["name"])
                                   for ns in NAMESPACES for v in lab.vmis(ns)), moves
    assert set(moves.values()) == {1}, moves
    for ns in NAMESPACES:
        for vmi in lab.vmis(ns):
            assert vmi["status"]["phase"] == "Running" and vmi["status"]["nodeName"] == "node-5", vmi["status"]
    lab.assert_restored(base, NAMESPACES)
    assert tainted(lab) == []
    assert not [n for n in UPGRADED if lab.node(n)["spec"].get("unschedulable")]
    assert not [c for c in lab.get("/api/v1/namespaces/kvquota-system/configmaps")["items"]
                if c["metadata"]["name"].startswith("kvq-steering-")]
