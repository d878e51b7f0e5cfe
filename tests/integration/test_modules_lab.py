# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The real modules, run by ansible-playbook, against the lab (real kube-apiserver quota admission, quota
controller, scheduler; KubeVirt emulated), authenticated only through K8S_AUTH_KUBECONFIG pointing at the
lab's LEAST-PRIVILEGE user (bound only to roles/install/files/clusterrole.yml). Every assertion is on what the apiserver
holds afterwards: spec.hard byte for byte, ledger annotations, resourceVersions, migration phases.

Run: python3 -m pytest -q tests/integration/test_modules_lab.py
(uses $KVQ_LAB_RUN_DIR when set, else starts a lab of its own; skipped when the lab binaries are not built,
unless KVQ_LAB_REQUIRED=1, which turns that into a failure).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import secrets
import subprocess
import time

import pytest

import modlab as M

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import parse_quantity  # noqa: E402

pytestmark = pytest.mark.lab   # make lab-tests (conftest.py: every lab test has one such marker)

CHARGED = ("requests.cpu", "limits.cpu", "requests.memory", "limits.memory")


@pytest.fixture
def tenant(lab, emu, r, request):
    """A fresh tenant: one 2-CPU 4Gi VM (KubeVirt 1.3.1, ratio 1.5) near the top of a 5000Mi limits.memory
    quota, as in scenario a."""
    ns = "mod-%s-%s" % (request.node.name.split("[")[0][5:25].replace("_", "-").strip("-"), secrets.token_hex(2))
    M.make_tenant(lab, ns)
    yield ns
    M.delete_namespace(r, ns)


def pod_charge(pod):
    """What ResourceQuota charges for a pod, computed from the pod the emulator rendered: per name the larger of
    the sum over containers and the largest init container."""
    spec = pod["spec"]
    charge = {}
    for name in CHARGED:
        kind, resource = name.split(".", 1)
        total = sum(parse_quantity(((c.get("resources") or {}).get(kind) or {}).get(resource, "0"))
                    for c in spec["containers"])
        init = max([parse_quantity(((c.get("resources") or {}).get(kind) or {}).get(resource, "0"))
                    for c in spec.get("initContainers") or []] or [0])
        charge[name] = max(total, init)
    return charge


def amounts(rl):
    return dict((k, parse_quantity(v)) for k, v in rl.items())


def running_launcher(r, ns):
    pods = [p for p in M.launcher_pods(r, ns) if M.phase(p) == "Running"]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


def tenant_annotation(obj):
    """A kvquota ledger annotation on a tenant's object (kvquota must never write one)."""
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(M.LEDGER)


def assert_base_restored(r, ns, original):
    """spec.hard exactly the original strings, no ledger left in the operator namespace, nothing of kvquota's on
    the tenant's quota or namespace, no lock held, no lease in the tenant's namespace."""
    now = M.quota(r, ns, "compute")
    assert now["spec"]["hard"] == original["spec"]["hard"]
    assert json.dumps(now["spec"], sort_keys=True) == json.dumps(original["spec"], sort_keys=True)
    assert M.ledger(r, now) is None, M.ledger(r, now)
    assert tenant_annotation(now) is None and tenant_annotation(M.namespace(r, ns)) is None
    assert M.locks(r) == []
    leases = r.get("/apis/coordination.k8s.io/v1/namespaces/%s/leases" % ns)["items"]
    assert not leases, [item["metadata"]["name"] for item in leases]


# ---------------------------------------------------------------------------

def test_user_kubeconfig_is_least_privilege(lab, emu, user):
    """The identity the modules run as can do what roles/install/files/clusterrole.yml grants and nothing else (emu: KubeVirt's
    CRDs must be installed for kubectl to resolve their resources)."""
    def can_i(*args):
        proc = subprocess.run(["kubectl", "--kubeconfig", str(user), "auth", "can-i"] + list(args),
                              capture_output=True, text=True, check=False)
        return proc.stdout.strip()
    assert can_i("update", "resourcequotas", "-A") == "yes"
    assert can_i("create", "virtualmachineinstancemigrations.kubevirt.io", "-A") == "yes"
    assert can_i("delete", "pods", "-A") == "no"
    assert can_i("get", "secrets", "-A") == "no"
    assert can_i("create", "resourcequotas", "-A") == "no"
    assert can_i("delete", "resourcequotas", "-A") == "no"
    assert can_i("update", "virtualmachineinstances.kubevirt.io", "-A") == "no"


def test_check_reports_tight_namespace_with_the_rendered_sizes(r, user, tenant, tmp_path):
    before = M.snapshot(r, {tenant, "kubevirt"})
    # by default the compact result: per namespace the verdict, counts and quotas, no VM entries
    res = M.assert_ok(M.run_module("kvquota_check", {"namespaces": [tenant]}, user))
    assert res["changed"] is False and res["report"] == "compact"
    assert res["verdict"] == "needs_reservation", (res["blockers"], res.get("notes"))
    report = res["namespaces"][tenant]
    assert report["verdict"] == "needs_reservation"
    assert report["summary"] == {"vms": 1, "migrating_vms": 1, "not_running": 0, "blockers": 0}
    assert "vms" not in report and "fixes" not in report
    assert res["batches"] == [{"index": 0, "vms": ["%s/vm-1" % tenant], "nodes": [res["batches"][0]["nodes"][0]]}]
    assert res["kubevirt"]["overhead_ratio"] == "1.5"
    q = M.quota(r, tenant, "compute")
    (plan,) = report["quotas"]
    assert plan["name"] == "compute" and plan["hard"] == q["spec"]["hard"] and "batches" not in plan
    hard, used = parse_quantity(q["spec"]["hard"]["limits.memory"]), parse_quantity(q["status"]["used"]["limits.memory"])
    assert set(plan["needed"]) == {"limits.memory"}
    assert res["fixes"][0]["text"].startswith("raise limits.memory of quota %s/compute to " % tenant)
    assert res["requests"] <= 12

    # report: full adds the VM entries; report_file writes the full report (0600) on the host the module ran on
    path = tmp_path / "check.json"
    full = M.assert_ok(M.run_module("kvquota_check", {"namespaces": [tenant], "report": "full",
                                                      "report_file": str(path)}, user))
    assert full["report"] == "full" and full["report_file"] == str(path) and full["changed"] is False
    assert path.stat().st_mode & 0o777 == 0o600
    written = json.loads(path.read_text())
    assert written["namespaces"] == full["namespaces"] and written["batches"] == full["batches"]
    report = full["namespaces"][tenant]
    (vm,) = report["vms"]
    pod = running_launcher(r, tenant)
    assert vm["name"] == "vm-1" and vm["source_pod"] == pod["metadata"]["name"]
    rendered = pod_charge(pod)
    # the target pod is sized exactly as the emulator rendered the running one (same version and ratio)
    for name in CHARGED:
        assert parse_quantity(vm["charge"][name]) == rendered[name], (name, vm["charge"], rendered)
    assert vm["charge"]["pods"] == "1"
    assert vm["growth"] == {}
    # ... and as the apiserver's own quota accounting charged it
    for name, quota_used in q["status"]["used"].items():
        assert parse_quantity(vm["charge"][name]) == parse_quantity(quota_used), name
    assert parse_quantity(plan["needed"]["limits.memory"]) == used + rendered["limits.memory"] - hard
    assert report["fixes"][0]["text"].startswith("raise limits.memory of quota %s/compute to " % tenant)
    M.assert_unchanged(before, M.snapshot(r, {tenant, "kubevirt"}))


def test_reserve_migrate_release_flow(lab, emu, r, user, tenant):
    """check mode and diff, reserve, idempotence, a migration admitted by the apiserver, a release that waits
    for the lingering source pod, and spec.hard back to its base byte for byte: all as the least-privilege
    user, through ansible-playbook."""
    from kvqlab import emulator
    emulator.set_knobs(lab, source_pod_delay_seconds=8)
    ns, rid = tenant, "node-1-b0-%s" % secrets.token_hex(2)
    vms = [{"namespace": ns, "name": "vm-1"}]
    original = M.quota(r, ns, "compute")
    hard = amounts(original["spec"]["hard"])
    used = amounts(original["status"]["used"])
    source = running_launcher(r, ns)
    charge = pod_charge(source)
    needed = used["limits.memory"] + charge["limits.memory"] - hard["limits.memory"]
    assert needed > 0

    # check mode with diff: the plan, before/after, and nothing written
    before = M.snapshot(r, {ns})
    res = M.assert_ok(M.run_module("kvquota_reserve", {"reservation_id": rid, "vms": vms, "ttl": "1h"}, user,
                                   check=True, diff=True))
    assert res["changed"] is True
    key = "%s/compute" % ns
    assert res["diff"]["before"][key]["spec"]["hard"] == original["spec"]["hard"]
    planned = res["diff"]["after"][key]["spec"]["hard"]
    assert parse_quantity(planned["limits.memory"]) == hard["limits.memory"] + needed
    assert dict((k, v) for k, v in planned.items() if k != "limits.memory") == \
        dict((k, v) for k, v in original["spec"]["hard"].items() if k != "limits.memory")
    # ansible printed the diff: the old and the new value of the quota's limit
    assert "--- before" in res.stdout and "+++ after" in res.stdout
    assert '-                "limits.memory": "%s"' % original["spec"]["hard"]["limits.memory"] in res.stdout
    assert '+                "limits.memory": "%s"' % planned["limits.memory"] in res.stdout
    M.assert_unchanged(before, M.snapshot(r, {ns}))
    assert M.ledger(r, M.quota(r, ns, "compute")) is None

    # the target pod is refused as things stand (the apiserver's own verdict)
    refused = M.create_vmim(r, ns, "vm-1")
    M.wait(lambda: M.rejected(M.vmim(r, ns, refused)), 30, "migration rejected by quota before the reservation")
    r.delete(M.KV + "/namespaces/%s/virtualmachineinstancemigrations/%s" % (ns, refused))
    M.wait(lambda: r.get_or_none(M.KV + "/namespaces/%s/virtualmachineinstancemigrations/%s" % (ns, refused))
           is None, 30, "rejected migration gone")

    # reserve for real, with diff
    res = M.assert_ok(M.run_module("kvquota_reserve", {"reservation_id": rid, "vms": vms, "ttl": "1h",
                                                       "reason": "module lab test"}, user, diff=True))
    assert res["changed"] is True
    (item,) = res["quotas"]
    assert item["outcome"] == "created" and parse_quantity(item["delta"]["limits.memory"]) == needed
    reserved = M.quota(r, ns, "compute")
    assert reserved["spec"]["hard"] == res["diff"]["after"][key]["spec"]["hard"] == planned
    book = M.ledger(r, reserved)
    assert book["base"] == {"limits.memory": original["spec"]["hard"]["limits.memory"]}
    assert list(book["reservations"]) == [rid]
    assert book["reservations"][rid]["refs"]["sourcePods"][0]["name"] == source["metadata"]["name"]
    assert res["refs"]["sourcePods"][0]["name"] == source["metadata"]["name"]
    events = r.get("/api/v1/namespaces/%s/events" % ns, fieldSelector="reason=QuotaReserved")["items"]
    assert any(rid in e["message"] for e in events)

    # idempotence: the same reservation again changes nothing, not even the resourceVersion
    again = M.assert_ok(M.run_module("kvquota_reserve", {"reservation_id": rid, "vms": vms, "ttl": "1h",
                                                         "reason": "module lab test"}, user))
    assert again["changed"] is False
    assert M.quota(r, ns, "compute")["metadata"]["resourceVersion"] == reserved["metadata"]["resourceVersion"]

    # the migration's target pod is admitted by the real apiserver now
    mig = M.create_vmim(r, ns, "vm-1")
    M.wait(lambda: M.phase(M.vmim(r, ns, mig)) == "Succeeded", 60, "migration succeeded")
    assert not M.rejected(M.vmim(r, ns, mig))
    target = M.vmim(r, ns, mig)["status"]["migrationState"]["targetPod"]
    assert target != source["metadata"]["name"]
    assert M.phase(r.get("/api/v1/namespaces/%s/pods/%s" % (ns, target))) == "Running"
    lingering = r.get("/api/v1/namespaces/%s/pods/%s" % (ns, source["metadata"]["name"]))
    assert M.phase(lingering) == "Running", "the source pod must still count when the release starts"

    # check-mode release: shows what it would restore and that it would wait; writes nothing
    before = M.snapshot(r, {ns})
    dry = M.assert_ok(M.run_module("kvquota_release", {"reservation_id": rid}, user, check=True, diff=True))
    assert dry["changed"] is True
    assert dry["diff"]["after"][key]["spec"]["hard"] == original["spec"]["hard"]
    assert any(source["metadata"]["name"] in reason for reason in dry["quotas"][0].get("would_wait_for", []))
    M.assert_unchanged(before, M.snapshot(r, {ns}))

    # the release waits until the lingering source pod is gone from the quota, then restores the base
    started = time.monotonic()
    rel = M.assert_ok(M.run_module("kvquota_release", {"reservation_id": rid, "wait_timeout": 120}, user, diff=True))
    assert rel["changed"] is True and rel["pending"] == []
    assert rel["quotas"][0]["outcome"] == "released"
    assert M.phase(r.get("/api/v1/namespaces/%s/pods/%s" % (ns, source["metadata"]["name"]))) == "Succeeded"
    assert time.monotonic() - started > 2
    assert_base_restored(r, ns, original)
    events = r.get("/api/v1/namespaces/%s/events" % ns, fieldSelector="reason=QuotaReleased")["items"]
    assert any(rid in e["message"] and "base restored" in e["message"] for e in events)

    # releasing again: nothing to do, said so, nothing written
    before = M.snapshot(r, {ns})
    rel2 = M.assert_ok(M.run_module("kvquota_release", {"reservation_id": rid}, user))
    assert rel2["changed"] is False and rid in rel2["message"]
    M.assert_unchanged(before, M.snapshot(r, {ns}))
    emulator.set_knobs(lab, source_pod_delay_seconds=1)


def test_top_up_adds_exactly_the_refused_shortfall(lab, emu, r, user, tenant):
    """A reservation 100Mi short: the real apiserver refuses the target pod, the migration reports
    migrationRejectedByResourceQuota, and a top-up from that migration adds exactly the 100Mi (what the quota's
    status lacks for the computed target pod; no amount is read from the FailedCreate Event); a top_up_cap
    below it fails with the numbers and changes nothing."""
    ns, rid = tenant, "short-%s" % secrets.token_hex(2)
    original = M.quota(r, ns, "compute")
    hard = amounts(original["spec"]["hard"])
    used = amounts(original["status"]["used"])
    charge = pod_charge(running_launcher(r, ns))
    needed = used["limits.memory"] + charge["limits.memory"] - hard["limits.memory"]
    short = 100 * 1024 ** 2
    estimate = "%d" % (needed - short)
    M.assert_ok(M.run_module("kvquota_reserve", {"reservation_id": rid, "ttl": "1h", "headroom": [
        {"namespace": ns, "quota": "compute", "resources": {"limits.memory": estimate}}]}, user))
    mig = M.create_vmim(r, ns, "vm-1")
    M.wait(lambda: M.rejected(M.vmim(r, ns, mig)), 30, "migration rejected by quota")
    M.wait(lambda: r.get("/api/v1/namespaces/%s/events" % ns, fieldSelector="reason=FailedCreate")["items"], 10,
           "FailedCreate event")

    # the cap is below the shortfall: fails with the numbers, nothing changes
    before = M.snapshot(r, {ns})
    res = M.run_module("kvquota_reserve", {"reservation_id": rid, "migrations": [{"namespace": ns, "name": mig}],
                                           "top_up_cap": {"limits.memory": "50Mi"}}, user)
    msg = M.assert_one_line_error(res, "top_up_cap", "limits.memory=100Mi", "50Mi", "%s/compute" % ns)
    assert "nothing was changed" in msg
    M.assert_unchanged(before, M.snapshot(r, {ns}))

    # within the cap: exactly the shortfall is added
    res = M.assert_ok(M.run_module("kvquota_reserve", {"reservation_id": rid, "migrations": [
        {"namespace": ns, "name": mig}], "top_up_cap": {"limits.memory": "1Gi"}}, user))
    assert res["changed"] is True and res["headroom"] == {"%s/compute" % ns: {"limits.memory": "100Mi"}}
    topped = M.quota(r, ns, "compute")
    assert parse_quantity(topped["spec"]["hard"]["limits.memory"]) == hard["limits.memory"] + needed
    book = M.ledger(r, topped)
    assert parse_quantity(book["reservations"][rid]["delta"]["limits.memory"]) == needed
    assert len(book["reservations"][rid]["topUps"]) == 1

    # the same refusal is never added twice
    res = M.assert_ok(M.run_module("kvquota_reserve", {"reservation_id": rid, "migrations": [
        {"namespace": ns, "name": mig}], "top_up_cap": {"limits.memory": "1Gi"}}, user))
    assert res["changed"] is False
    assert M.quota(r, ns, "compute")["spec"]["hard"] == topped["spec"]["hard"]

    # KubeVirt retries on the quota change and the target pod now fits
    M.wait(lambda: M.phase(M.vmim(r, ns, mig)) == "Succeeded", 60, "topped-up migration succeeded")
    M.assert_ok(M.run_module("kvquota_release", {"reservation_id": rid, "wait_timeout": 120}, user))
    assert_base_restored(r, ns, original)


def test_expired_reservations_are_released_only_by_the_reaper(lab, emu, r, user, tenant):
    ns = tenant
    expiring, live, unrelated = ("exp-%s" % secrets.token_hex(2), "live-%s" % secrets.token_hex(2),
                                 "other-%s" % secrets.token_hex(2))
    original = M.quota(r, ns, "compute")
    base = amounts(original["spec"]["hard"])
    M.assert_ok(M.run_module("kvquota_reserve", {"reservation_id": expiring, "ttl": "1s", "headroom": [
        {"namespace": ns, "quota": "compute", "resources": {"limits.memory": "1Gi"}}]}, user))
    M.assert_ok(M.run_module("kvquota_reserve", {"reservation_id": live, "ttl": "1h", "headroom": [
        {"namespace": ns, "quota": "compute", "resources": {"limits.memory": "512Mi", "limits.cpu": "1"}}]}, user))
    both = M.quota(r, ns, "compute")
    assert parse_quantity(both["spec"]["hard"]["limits.memory"]) == base["limits.memory"] + 1536 * 1024 ** 2
    time.sleep(1.5)   # the first one has expired now (module runs take longer anyway)

    # an unrelated release does not touch the expired reservation
    before = M.snapshot(r, {ns})
    res = M.assert_ok(M.run_module("kvquota_release", {"reservation_id": unrelated}, user))
    assert res["changed"] is False and unrelated in res["message"]
    M.assert_unchanged(before, M.snapshot(r, {ns}))
    assert set(M.ledger(r, M.quota(r, ns, "compute"))["reservations"]) == {expiring, live}

    # the reaper in check mode: says what it would release, writes nothing
    dry = M.assert_ok(M.run_module("kvquota_release", {"expired": True}, user, check=True))
    assert [(x["id"], x["namespace"]) for x in dry["released"]] == [(expiring, ns)]
    M.assert_unchanged(before, M.snapshot(r, {ns}))

    # the reaper releases exactly the expired one
    res = M.assert_ok(M.run_module("kvquota_release", {"expired": True}, user))
    assert res["changed"] is True
    assert [(x["id"], x["namespace"], x["quota"]) for x in res["released"]] == [(expiring, ns, "compute")]
    assert res["deferred"] == []
    after = M.quota(r, ns, "compute")
    assert parse_quantity(after["spec"]["hard"]["limits.memory"]) == base["limits.memory"] + 512 * 1024 ** 2
    assert parse_quantity(after["spec"]["hard"]["limits.cpu"]) == base["limits.cpu"] + 1
    assert list(M.ledger(r, after)["reservations"]) == [live]

    # a second reaper run finds nothing
    res = M.assert_ok(M.run_module("kvquota_release", {"expired": True}, user))
    assert res["changed"] is False and res["released"] == []

    M.assert_ok(M.run_module("kvquota_release", {"reservation_id": live}, user))
    assert_base_restored(r, ns, original)


def test_release_does_not_wait_for_a_vm_that_never_left_its_pod(lab, emu, r, user, tenant):
    """A run killed between reserve and creating the migration (or a failed migration) leaves a reservation
    whose recorded source pod is still the VM's active pod. Release must not wait for that pod to end (it
    never will): the reservation is given back at once and the quota is exactly its base again."""
    ns, rid = tenant, "killed-%s" % secrets.token_hex(2)
    original = M.quota(r, ns, "compute")
    source = running_launcher(r, ns)
    res = M.assert_ok(M.run_module("kvquota_reserve", {"reservation_id": rid, "ttl": "1h",
                                                       "vms": [{"namespace": ns, "name": "vm-1"}]}, user))
    assert res["changed"] is True
    assert res["refs"]["sourcePods"] == [{"namespace": ns, "name": source["metadata"]["name"],
                                          "uid": source["metadata"]["uid"]}]   # identity by UID
    assert M.quota(r, ns, "compute")["spec"]["hard"] != original["spec"]["hard"]
    # no migration is created: the VM stays on its pod
    res = M.assert_ok(M.run_module("kvquota_release", {"reservation_id": rid, "wait": False}, user))
    assert res["changed"] is True, res
    assert M.phase(running_launcher(r, ns)) == "Running"
    assert_base_restored(r, ns, original)
