# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""check() against the lab: a real kube-apiserver (quota admission), quota controller and the
KubeVirt emulator, with scenarios (a) and (b).

The decisive assertions use the apiserver itself as the judge: hard raised by the planned
headroom minus one unit still refuses the migration target pod; raised by exactly the
planned headroom, the migration goes through.

Runs when the lab binaries are built (make lab-build); KVQ_LAB_RUN_DIR attaches to a running
lab instead of starting one; KVQ_LAB_REQUIRED=1 turns a skip into a failure.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import secrets
import sys
import time
from fractions import Fraction
from pathlib import Path

import pytest

_LAB_DIR = Path(__file__).resolve().parents[1] / "lab"
if str(_LAB_DIR) not in sys.path:
    sys.path.insert(0, str(_LAB_DIR))

kvqlab = pytest.importorskip("kvqlab")
from kvqlab import emulator, scenarios  # noqa: E402
from kvqlab.emulator import _rest_for  # noqa: E402

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import check as c  # noqa: E402
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import cluster as cl  # noqa: E402
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.errors import NotFoundError  # noqa: E402
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.quantity import (  # noqa: E402
    format_quantity,
    parse_quantity,
    quantity_format,
)

KV = "/apis/kubevirt.io/v1"


def _required():
    return os.environ.get("KVQ_LAB_REQUIRED", "") not in ("", "0", "false", "no")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    run_dir = os.environ.get("KVQ_LAB_RUN_DIR")
    if run_dir:
        yield kvqlab.attach(run_dir)
        return
    try:
        kvqlab.find_bin_dir()
    except kvqlab.LabError as exc:
        if _required():
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    rd = tmp_path_factory.mktemp("kvqlab-check")
    started = kvqlab.up(run_dir=rd)
    try:
        yield started
    finally:
        kvqlab.down(rd)


@pytest.fixture(scope="module")
def emu(lab):
    handle = emulator.start(lab, source_pod_delay_seconds=1, migration_seconds=0.3)
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def rest(lab):
    return _rest_for(lab)


def connect(lab, admin=False):
    """A Cluster as the modules get one: the least-privilege identity unless admin."""
    kubeconfig = lab.admin_kubeconfig if admin else lab.user_kubeconfig
    return cl.connect({"kubeconfig": str(kubeconfig)})


def wait(pred, timeout=30, what="condition", interval=0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError("timed out waiting for %s (last: %r)" % (what, last))


def migrate(rest, ns, vmi):
    name = "chk-%s-%s" % (vmi, secrets.token_hex(2))
    rest.create(KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns, {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": name}, "spec": {"vmiName": vmi}})
    return name


def vmim(rest, ns, name):
    return rest.get(KV + "/namespaces/%s/virtualmachineinstancemigrations/%s" % (ns, name))


def rejected(obj):
    return any(cond.get("type") == "migrationRejectedByResourceQuota" and cond.get("status") == "True"
               for cond in (obj.get("status") or {}).get("conditions") or [])


def quota_obj(rest, ns, name):
    return rest.get("/api/v1/namespaces/%s/resourcequotas/%s" % (ns, name))


def set_hard(rest, ns, name, values):
    """Set spec.hard entries (Fractions, printed in each entry's current format) and wait for status.hard."""
    current = quota_obj(rest, ns, name)
    hard = dict(current["spec"]["hard"])
    for key, value in values.items():
        hard[key] = format_quantity(value, quantity_format(hard[key]))
    rest.patch("/api/v1/namespaces/%s/resourcequotas/%s" % (ns, name), {"spec": {"hard": hard}})
    wait(lambda: all(parse_quantity(quota_obj(rest, ns, name)["status"]["hard"][k]) == v for k, v in values.items()),
         15, "status.hard of %s/%s" % (ns, name))


def settled(rest, ns, vm_count):
    """Quota usage counts exactly vm_count running launcher pods (nothing mid-migration)."""
    pods = rest.get("/api/v1/namespaces/%s/pods" % ns, labelSelector="kubevirt.io=virt-launcher")["items"]
    live = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")]
    if len(live) != vm_count:
        return False
    for quota in rest.get("/api/v1/namespaces/%s/resourcequotas" % ns)["items"]:
        if parse_quantity((quota.get("status") or {}).get("used", {}).get("pods", "0")) not in (0, vm_count):
            return False
    return True


@pytest.fixture(scope="module")
def scenario_a(lab, emu, rest):
    sc = scenarios.load("a")
    scenarios.apply(lab, sc, timeout=120)
    wait(lambda: settled(rest, "a-tenant", 1), 30, "scenario a settled")
    yield sc
    scenarios.delete(lab, sc)


@pytest.fixture(scope="module")
def scenario_b(lab, emu, rest):
    sc = scenarios.load("b")
    scenarios.apply(lab, sc, timeout=120)
    wait(lambda: settled(rest, "b-tenant", 3), 30, "scenario b settled")
    yield sc
    scenarios.delete(lab, sc)


def test_scenario_a_planned_headroom_is_exact(lab, rest, scenario_a):
    cluster = connect(lab)
    report = c.check(cluster, {"namespaces": ["a-tenant"]})
    assert report["requests"] <= 12, report["requests"]
    ns = report["namespaces"]["a-tenant"]
    assert report["verdict"] == ns["verdict"] == "needs_reservation", (report["blockers"], report["notes"])
    assert report["kubevirt"]["overhead_ratio"] == "1.5"
    (plan,) = ns["quotas"]
    assert plan["name"] == "a-tenant-quota"
    assert set(plan["needed"]) == {"limits.memory"}, plan
    needed = parse_quantity(plan["needed"]["limits.memory"])
    hard = parse_quantity(plan["hard"]["limits.memory"])
    used = parse_quantity(plan["used"]["limits.memory"])
    charge = parse_quantity(ns["vms"][0]["charge"]["limits.memory"])
    assert needed == used + charge - hard
    # the source pod the emulator rendered is what check sized the target as (no ratio change)
    assert ns["vms"][0]["growth"] == {}
    fix = [f for f in ns["fixes"] if f["resource"] == "limits.memory"][0]
    assert fix["text"].startswith("raise limits.memory of quota a-tenant/a-tenant-quota to ")

    # the apiserver's verdict: one byte short is refused, the planned headroom is admitted
    try:
        set_hard(rest, "a-tenant", "a-tenant-quota", {"limits.memory": hard + needed - 1})
        m1 = migrate(rest, "a-tenant", "a-vm-1")
        wait(lambda: rejected(vmim(rest, "a-tenant", m1)), 20, "one byte short: rejected")
        report = c.check(cluster, {"namespaces": ["a-tenant"]})
        kinds = [b["kind"] for b in report["namespaces"]["a-tenant"]["blockers"]]
        assert "migration_rejected_by_quota" in kinds
        blocker = [b for b in report["blockers"] if b["kind"] == "migration_rejected_by_quota"][0]
        assert blocker["shortfall"] == {"a-tenant-quota": {"limits.memory": "1"}}
        rest.delete(KV + "/namespaces/a-tenant/virtualmachineinstancemigrations/%s" % m1)
        wait(lambda: rest.get_or_none(KV + "/namespaces/a-tenant/virtualmachineinstancemigrations/%s" % m1) is None,
             20, "rejected migration deleted")
        wait(lambda: settled(rest, "a-tenant", 1), 20, "no target pod left")

        set_hard(rest, "a-tenant", "a-tenant-quota", {"limits.memory": hard + needed})
        m2 = migrate(rest, "a-tenant", "a-vm-1")
        wait(lambda: (vmim(rest, "a-tenant", m2).get("status") or {}).get("phase") == "Succeeded", 60,
             "migration with exactly the planned headroom")
        assert not rejected(vmim(rest, "a-tenant", m2))
    finally:
        set_hard(rest, "a-tenant", "a-tenant-quota", {"limits.memory": hard})
    wait(lambda: settled(rest, "a-tenant", 1), 30, "source pod completed")


def test_scenario_b_batches_and_node_scope(lab, rest, scenario_b):
    cluster = connect(lab)
    report = c.check(cluster, {"namespaces": ["b-tenant"]})
    ns = report["namespaces"]["b-tenant"]
    assert ns["verdict"] == "needs_reservation", (ns["blockers"], report["notes"])
    (plan,) = ns["quotas"]
    margin = {"limits.memory": Fraction(128 * 1024 ** 2), "limits.cpu": Fraction(1, 10),
              "requests.memory": Fraction(128 * 1024 ** 2), "requests.cpu": Fraction(1, 10)}
    charges = dict((vm["name"], vm["charge"]) for vm in ns["vms"])
    assert len(charges) == 3
    for batch in plan["batches"]:
        for name, text in batch["needed"].items():
            total = sum(parse_quantity(charges[vm][name]) for vm in batch["vms"])
            # the quota was made from the usage plus a margin: a batch needs its charge minus the margin
            assert parse_quantity(text) == total - margin[name], (name, batch)
    assert set(plan["needed"]) == set(margin)
    per_node = report["kubevirt"]["parallel_outbound_migrations_per_node"]
    for batch in report["batches"]:
        nodes = [vm["node"] for key in batch["vms"] for vm in ns["vms"] if "b-tenant/" + vm["name"] == key]
        assert all(nodes.count(n) <= per_node for n in nodes)

    # node scope: only the VMs on that node, and the same per-VM sizes
    node = ns["vms"][0]["node"]
    scoped = c.check(cluster, {"nodes": [node]})
    vms = scoped["namespaces"]["b-tenant"]["vms"]
    assert vms and all(vm["node"] == node for vm in vms)
    assert dict((vm["name"], vm["charge"]) for vm in vms) == dict((n, charges[n]) for n in (vm["name"] for vm in vms))
    assert scoped["requests"] <= 12

    # the apiserver agrees: one batch of the plan passes with hard raised by its headroom
    first = [b for b in plan["batches"] if b["index"] == 0][0]
    current = dict((k, parse_quantity(v)) for k, v in plan["hard"].items())
    raised = dict((k, current[k] + parse_quantity(v)) for k, v in first["needed"].items())
    try:
        set_hard(rest, "b-tenant", "b-tenant-quota", raised)
        names = [migrate(rest, "b-tenant", vm) for vm in first["vms"]]
        for name in names:
            wait(lambda: (vmim(rest, "b-tenant", name).get("status") or {}).get("phase") == "Succeeded", 60,
                 "batch migration %s" % name)
    finally:
        set_hard(rest, "b-tenant", "b-tenant-quota", current)
    wait(lambda: settled(rest, "b-tenant", 3), 30, "source pods completed")


def test_unknown_scope_names(lab, emu):
    cluster = connect(lab)
    with pytest.raises(NotFoundError) as info:
        c.check(cluster, {"nodes": ["no-such-node"]})
    assert "node 'no-such-node' not found" in str(info.value) and "kubectl get nodes" in str(info.value)
    with pytest.raises(NotFoundError):
        c.check(cluster, {"namespaces": ["no-such-namespace"]})
