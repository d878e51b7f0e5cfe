# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Control-plane faults (kvqlab.faults) are real, and a module rides through them within api_outage_budget or
fails saying what happened (issue 11).

Always on a lab of its own (never $KVQ_LAB_RUN_DIR's): it kills, freezes and throttles that lab's control plane.
The rolling upgrade of a node that hosts the API server (issue 11 item 5) runs on a role lab of its own
(scenario b, test_roles_lab.py), started only when that test is selected.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import secrets
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

import modlab as M
from kvqlab.faults import Faults
from test_roles_lab import hook_recording_vmis_on_node, lab_fixture, playbook

pytestmark = pytest.mark.lab_faults   # make lab-tests-faults (conftest.py: every lab test has one such marker)

KUBECTL_TIMEOUT = "--request-timeout=3s"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A private lab: faults must never hit a lab other tests (or other people) use."""
    yield from M.private_lab(tmp_path_factory, "kvqlab-faults", nodes=1)


@pytest.fixture(scope="module")
def faults(lab):
    return Faults(lab, log=print)


@pytest.fixture(scope="module")
def tenant(lab, emu, r):
    ns = "faults-" + secrets.token_hex(3)
    M.make_tenant(lab, ns, vms=1)
    yield ns
    M.delete_namespace(r, ns)


def user_get(lab, path, timeout=3):
    """(HTTP status, Retry-After) of one GET as the least-privilege user; status None when nothing answered."""
    request = urllib.request.Request(lab.server + path)
    request.add_header("Authorization", "Bearer " + lab._token(admin=False))
    context = ssl.create_default_context(cafile=str(lab.ca_file))
    try:
        with urllib.request.urlopen(request, context=context, timeout=timeout) as response:
            return response.status, None
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("Retry-After")
    except OSError:
        return None, None


def admin_write_works(lab):
    name = "probe-" + secrets.token_hex(3)
    out = lab.kubectl(KUBECTL_TIMEOUT, "create", "configmap", name, "-n", "default", check=False, timeout=20)
    if "created" not in out:
        return False
    lab.kubectl("delete", "configmap", name, "-n", "default", "--wait=false", check=False)
    return True


def wait_down(lab, timeout=10):
    M.wait(lambda: user_get(lab, "/readyz", timeout=1)[0] is None, timeout, "the API server to stop answering")


# ---------------------------------------------------------------- each fault is real

def test_an_apiserver_restart_refuses_requests_while_down_and_answers_after(lab, faults):
    thread = faults.in_background(faults.restart, "kube-apiserver", down=5)
    wait_down(lab)
    assert user_get(lab, "/api/v1/namespaces/default")[0] is None
    event = thread.join(120)
    assert event["end"] - event["start"] >= 5
    assert user_get(lab, "/api/v1/namespaces/default")[0] == 200


def test_a_frozen_apiserver_answers_nothing_until_thawed(lab, faults):
    with faults.frozen("kube-apiserver"):
        started = time.monotonic()
        assert user_get(lab, "/api/v1/namespaces/default", timeout=2)[0] is None
        assert time.monotonic() - started >= 1.9   # a timeout, not a refusal: the socket is open, nobody reads
    M.wait(lambda: user_get(lab, "/api/v1/namespaces/default")[0] == 200, 20, "the thawed API server")


@pytest.mark.parametrize("fault", ["restart", "freeze"])
def test_etcd_down_or_frozen_fails_writes_until_it_is_back(lab, faults, fault):
    assert admin_write_works(lab)
    if fault == "restart":
        thread = faults.in_background(faults.restart, "etcd", down=8)
        time.sleep(1)
    else:
        thread = faults.in_background(faults.freeze_for, "etcd", 8)
        time.sleep(0.5)
    assert not admin_write_works(lab)
    thread.join(120)
    M.wait(lambda: admin_write_works(lab), 60, "a write after the etcd %s" % fault)


def test_a_frozen_scheduler_binds_nothing_until_thawed(lab, faults, r):
    ns = "sched-" + secrets.token_hex(3)
    lab.kubectl("create", "namespace", ns)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ns},
           "spec": {"containers": [{"name": "c", "image": "registry.invalid/none:0"}]}}
    try:
        with faults.frozen("kube-scheduler"):
            lab.kubectl("apply", "-f", "-", input=json.dumps(pod))
            time.sleep(4)
            assert not r.get("/api/v1/namespaces/%s/pods/p" % ns)["spec"].get("nodeName")
        M.wait(lambda: r.get("/api/v1/namespaces/%s/pods/p" % ns)["spec"].get("nodeName"), 30,
               "the pod bound after the scheduler thawed")
    finally:
        M.delete_namespace(r, ns)


def test_a_frozen_controller_manager_keeps_a_quota_stale_until_thawed(lab, faults, r):
    ns = "kcm-" + secrets.token_hex(3)
    lab.kubectl("create", "namespace", ns)
    lab.kubectl("create", "quota", "compute", "-n", ns, "--hard=configmaps=10")
    try:
        lab.wait_quota_ready(ns, "compute")
        lab.kubectl("create", "configmap", "c1", "-n", ns)
        M.wait(lambda: M.quota(r, ns, "compute")["status"]["used"]["configmaps"] == "1", 30, "quota counts c1")
        with faults.frozen("kube-controller-manager"):
            # admission counts a create, only the quota controller counts a delete
            lab.kubectl("delete", "configmap", "c1", "-n", ns)
            time.sleep(12)   # longer than the lab's --resource-quota-sync-period=10s
            assert M.quota(r, ns, "compute")["status"]["used"]["configmaps"] == "1"
        M.wait(lambda: M.quota(r, ns, "compute")["status"]["used"]["configmaps"] == "0", 30,
               "the quota recounted after the controller-manager thawed")
    finally:
        M.delete_namespace(r, ns)


def test_the_throttle_answers_the_kvquota_user_429_with_retry_after_and_nobody_else(lab, faults):
    assert user_get(lab, "/api/v1/namespaces/default")[0] == 200
    with faults.throttled() as load:
        time.sleep(1)
        answers = [user_get(lab, "/api/v1/namespaces/default") for _attempt in range(30)]
        admin = [lab.readyz() for _attempt in range(10)]
    refused = [a for a in answers if a[0] == 429]
    assert len(refused) >= 5, answers
    assert all(retry_after and int(retry_after) >= 1 for _status, retry_after in refused)
    assert load.counts.get(429, 0) > 0
    assert all(admin)
    assert [user_get(lab, "/api/v1/namespaces/default")[0] for _attempt in range(10)] == [200] * 10


# ---------------------------------------------------------------- a module through the faults

def audit_codes(lab, offset, agent="OpenAPI-Generator/"):
    """HTTP status codes of the least-privilege user's requests sent by the kubernetes Python client (the
    modules; not the throttle's load, which is http.client) in the audit log after offset."""
    with open(str(lab.audit_log)) as fh:
        fh.seek(offset)
        events = [json.loads(line) for line in fh if line.strip()]
    return [e.get("responseStatus", {}).get("code") for e in events
            if e.get("stage") == "ResponseComplete" and str(e.get("userAgent", "")).startswith(agent)]


def check_through_a_restart(lab, faults, tenant, user, budget, down=20):
    """kvquota_check started once kube-apiserver is down (killed, down for `down` s, started again).
    Returns (the module's result, how long it ran, the fault's event)."""
    thread = faults.in_background(faults.restart, "kube-apiserver", down=down)
    wait_down(lab)
    started = time.monotonic()
    res = M.run_module("kvquota_check", {"namespaces": [tenant], "api_outage_budget": budget}, user)
    took = time.monotonic() - started
    return res, took, thread.join(120)


def test_a_module_rides_through_a_20s_apiserver_restart_within_its_budget(lab, faults, tenant, user):
    calm = M.assert_ok(M.run_module("kvquota_check", {"namespaces": [tenant]}, user), "kvquota_check, no fault")
    res, took, event = check_through_a_restart(lab, faults, tenant, user, budget=60)
    M.assert_ok(res, "kvquota_check through a 20 s apiserver restart")
    for key in ("verdict", "blockers", "namespaces"):
        assert res[key] == calm[key], key
    assert tenant in res["namespaces"]
    # it waited the outage out: it began while the API server was down and ended after it was back
    assert took >= 18 and took >= event["end"] - event["start"] - 3


def test_a_module_with_a_short_budget_fails_saying_how_long_the_outage_lasted(lab, faults, tenant, user):
    res, took, _event = check_through_a_restart(lab, faults, tenant, user, budget=5)
    assert res.failed
    assert "did not answer usably for 5 s (api_outage_budget 5 s" in res.msg, res.msg
    assert "Connection refused" in res.msg, res.msg
    assert "raise api_outage_budget" in res["fix"]
    assert took < 18   # it gave up at its budget, not when the API server came back
    assert not M.run_module("kvquota_check", {"namespaces": [tenant]}, user).failed   # the API server is back


def test_a_module_rides_through_a_burst_of_429s(lab, faults, tenant, user):
    offset = lab.audit_offset()
    # the burst begins while ansible-playbook starts (the load slows everything down on a small machine) and
    # lasts long enough to cover the module's requests
    burst = faults.in_background(faults.throttle_for, 30, load=2, after=3)
    res = M.run_module("kvquota_check", {"namespaces": [tenant], "api_outage_budget": 60}, user)
    event = burst.join(60)
    M.assert_ok(res, "kvquota_check through a 30 s burst of 429s")
    assert tenant in res["namespaces"]
    assert event["load"].get(429, 0) > 0
    codes = audit_codes(lab, offset)
    assert 429 in codes, "the module saw no 429 (the throttle did nothing?): %s" % sorted(set(codes))


# ---------------------------------------------------------------- a role through the faults

UPGRADE_NS = "b-tenant"
upgrade_lab = lab_fixture("b")


def restart_apiserver_when_asked(faults, marker, down, timeout=900):
    """A thread that waits for marker (written by the upgrade hook), then restarts kube-apiserver (killed, down for
    `down` s, started again); .event is the fault's event, .error what went wrong."""
    def run():
        try:
            M.wait(marker.exists, timeout, "the upgrade hook to reboot the node", interval=0.2)
            thread.event = faults.restart("kube-apiserver", down=down)
        except Exception as err:   # reported by the test, not lost in the thread
            thread.error = err

    thread = threading.Thread(target=run, daemon=True)
    thread.event = None
    thread.error = None
    thread.start()
    return thread


def test_rolling_upgrade_of_the_node_hosting_the_apiserver_completes(upgrade_lab, tmp_path):
    """The hook of the upgraded node restarts the lab's kube-apiserver (a control-plane node reboots: down 20 s)
    and returns while it is down; the role's next API calls (the uncordon, the restart of stopped VMs, the health
    gate) ride through the outage within rolling_upgrade_api_outage_budget and the run completes."""
    lab = upgrade_lab
    base = {UPGRADE_NS: lab.hard(UPGRADE_NS)}
    node = lab.busiest_node([UPGRADE_NS])
    moved = [v["metadata"]["name"] for v in lab.vmis(UPGRADE_NS) if v["status"].get("nodeName") == node]
    assert moved, "scenario b has no VM on %s: nothing would migrate" % node
    apiserver = urllib.parse.urlsplit(lab.lab.server)
    marker = tmp_path / "reboot-asked"
    hook = tmp_path / "upgrade-control-plane-node.yml"
    hook.write_text(
        hook_recording_vmis_on_node(marker, name="Reboot the node, which hosts the API server") +
        "- name: Wait until the API server is down\n"
        "  ansible.builtin.wait_for:\n"
        "    host: %s\n"
        "    port: %d\n"
        "    state: stopped\n"
        "    timeout: 60\n" % (apiserver.hostname, apiserver.port))
    restart = restart_apiserver_when_asked(Faults(lab.lab, log=print), marker, down=20)
    try:
        run = playbook(lab, "upgrade", {"rolling_upgrade_tasks": str(hook), "rolling_upgrade_nodes": [node]},
                       timeout=1200)
        print(run.stdout[-5000:])
        restart.join(120)
        assert restart.error is None, "the apiserver restart failed: %r" % restart.error
        assert restart.event is not None, "the hook never asked for the reboot"
        assert restart.event["end"] - restart.event["start"] >= 20
        assert run.rc == 0, run
        assert marker.read_text() == "0", "the node was upgraded with VMs on it"
        # the run met the outage after the hook and waited it out, it did not just miss it
        retried = [line for line in run.stdout.splitlines()
                   if line.startswith("FAILED - RETRYING") and "Make the node schedulable again" in line]
        print("\n".join(retried))
        assert retried, run
        assert "rolling upgrade: 1 of 1 node(s) upgraded" in run.stdout
        assert not lab.node(node)["spec"].get("unschedulable"), "%s left cordoned" % node
        lab.assert_restored(base, [UPGRADE_NS])
        assert not lab.reservations(), "reservations still held: %s" % lab.reservations()
        lab.assert_vms_running_off(node, [UPGRADE_NS])
    finally:
        restart.join(120)
        lab.force_clean()
