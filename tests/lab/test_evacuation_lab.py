"""KubeVirt's evacuation and workload updater in the lab, driven by a real `kubectl drain` and a KubeVirt upgrade.

What a real cluster does (facts from KubeVirt v1.6.6 / v1.7.4, see kvqlab/emulator/evacuation.py): kubectl drain
cordons the node and evicts every pod; virt-api's eviction webhook refuses the launcher pods with 429 (kubectl
retries every 5 s) and marks their VMIs for evacuation; the evacuation controller creates the migrations (before
the MigrationPriorityQueue gate: up to the parallel limits per pass; with it, v1.7+ opt-in and v1.9+ always: all at
once); the VMs move, their source pods complete, their evictions then pass and the drain ends. A migration whose
target pod the quota refuses stays Pending with migrationRejectedByResourceQuota and the drain does not end.
"""
import re
import secrets
import subprocess
import threading
import time

import pytest

from kvqlab import emulator, scenarios
from kvqlab.emulator import knobs as knobs_mod
from kvqlab.emulator.rest import Rest

pytestmark = pytest.mark.lab_faults   # make lab-tests-faults (conftest.py: every lab test has one such marker)

KV = "/apis/kubevirt.io/v1"
KV_CR = KV + "/namespaces/kubevirt/kubevirts/kubevirt"
REJECTED = "migrationRejectedByResourceQuota"

# (id, observed version, feature gates, every candidate at once?)
VERSIONS = [
    pytest.param("1.6.6", [], False, id="v1.6.6"),
    pytest.param("1.7.4", ["MigrationPriorityQueue"], True, id="v1.7.4-priority-queue"),
]


# ====================================================================== pure tests

def test_pure_helpers_follow_kubevirt():
    from kvqlab.emulator import evacuation, webhook
    assert evacuation.version_tuple("v1.7.4") == (1, 7, 4) and evacuation.version_tuple("1.9.0-rc.1") == (1, 9, 0)
    assert evacuation.parse_duration("1m30s") == 90 and evacuation.parse_duration("1h") == 3600
    # KubeVirt's IsRunning: Pending (and unset) migrations do not hold a slot in the controllers' counts
    assert not evacuation.migration_running({"status": {"phase": "Pending"}})
    assert not evacuation.migration_running({})
    assert evacuation.migration_running({"status": {"phase": "Scheduling"}})
    assert evacuation.denied("x") == {"allowed": False, "status": {"code": 429, "message": "x"}}
    vwc = webhook.webhook_configuration(4443, b"CA")
    (hook,) = vwc["webhooks"]
    assert vwc["metadata"]["name"] == "virt-api-validator"
    assert hook["name"] == "virt-launcher-eviction-interceptor.kubevirt.io" and hook["failurePolicy"] == "Fail"
    assert hook["rules"] == [{"operations": ["*"], "apiGroups": [""], "apiVersions": ["v1"],
                              "resources": ["pods/eviction"]}]
    assert hook["clientConfig"]["url"] == "https://127.0.0.1:4443/pod-eviction-validate"
    assert hook["matchConditions"][0]["expression"] == 'object.metadata.name.startsWith("virt-launcher")'


# ====================================================================== lab tests

@pytest.fixture(scope="module")
def rest(lab):
    return Rest(lab.api_client(admin=True))


@pytest.fixture(scope="module")
def emu(lab, rest):
    emulator.install_crds(lab)
    handle = emulator.start(lab, source_pod_delay_seconds=1, migration_seconds=1.0)
    emulator.set_knobs(lab, **{k: None for k in knobs_mod.Knobs.__dataclass_fields__})
    yield handle
    rest.patch(KV_CR, {"spec": {"imageTag": None, "workloadUpdateStrategy": None}})
    handle.stop()


def wait(pred, timeout=30, what="condition", interval=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError("timed out waiting for %s" % what)


def scenario(tag, version, gates, vms_per_ns, quotas=None, per_cluster=5, per_node=2):
    """One source node (evac-<tag>-src) with the VMs, two empty target nodes, two namespaces."""
    namespaces = []
    for i in (1, 2):
        ns = {"name": "ev-%s-%d" % (tag, i)}
        if quotas and quotas.get(i):
            ns["quotas"] = [dict(quotas[i], name="q")]
        namespaces.append(ns)
    config = {"evictionStrategy": "LiveMigrate",
              "migrations": {"parallelMigrationsPerCluster": per_cluster, "parallelOutboundMigrationsPerNode": per_node}}
    if gates:
        config["developerConfiguration"] = {"featureGates": list(gates)}
    return scenarios.from_dict({
        "name": "evac-" + tag,
        "kubevirt": {"version": version, "configuration": config},
        "emulator": {"source_pod_delay_seconds": 1, "migration_seconds": 1.0},
        "nodes": [{"name": "evac-%s-src" % tag, "cpu": "64", "memory": "256Gi", "pods": "110"},
                  {"name": "evac-%s-dst-{i}" % tag, "count": 2, "cpu": "64", "memory": "256Gi", "pods": "110"}],
        "namespaces": namespaces,
        "vms": [{"name": "vm-{i}", "count": vms_per_ns, "namespace": ns["name"], "node": "evac-%s-src" % tag,
                 "cpu": 1, "memory": "1Gi", "limits": {"cpu": "1", "memory": "1Gi"}} for ns in namespaces],
    })


def vmims(rest, namespaces):
    out = []
    for ns in namespaces:
        out += rest.get(KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns)["items"]
    return out


def vmis(rest, namespaces):
    out = []
    for ns in namespaces:
        out += rest.get(KV + "/namespaces/%s/virtualmachineinstances" % ns)["items"]
    return out


class MigrationWatcher(threading.Thread):
    """Samples the migrations every 0.1 s: the most in flight from the source node at once."""

    def __init__(self, rest, namespaces, source):
        super().__init__(daemon=True)
        self.rest, self.namespaces, self.source = rest, namespaces, source
        self.max_in_flight = 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            flying = 0
            for m in vmims(self.rest, self.namespaces):
                st = m.get("status") or {}
                if st.get("phase") in ("Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running") and \
                        (st.get("migrationState") or {}).get("sourceNode") == self.source:
                    flying += 1
            self.max_in_flight = max(self.max_in_flight, flying)
            time.sleep(0.1)


def kubectl_drain(lab, node, timeout):
    """A plain `kubectl drain` (no selectors, no force) with the lab's admin kubeconfig: (exit code, output)."""
    argv = ["/usr/bin/kubectl", "--kubeconfig", str(lab.admin_kubeconfig), "drain", node,
            "--timeout=%ds" % timeout]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 60, check=False)
    return res.returncode, res.stdout + res.stderr


def selections(emu, node):
    """KubeVirt's own log line of each evacuation pass for the node: [(candidates, selected), ...]."""
    pat = re.compile(r"node: %s, migrations: \d+, candidates: (\d+), selected: (\d+)" % re.escape(node))
    return [(int(c), int(s)) for c, s in pat.findall(emu.log_text())]


@pytest.mark.parametrize("version,gates,all_at_once", VERSIONS)
def test_kubectl_drain_evacuates_like_kubevirt(lab, rest, emu, version, gates, all_at_once):
    tag = "d" + version.replace(".", "") + secrets.token_hex(1)
    sc = scenario(tag, version, gates, vms_per_ns=3)
    res = scenarios.apply(lab, sc, timeout=120)
    source = "evac-%s-src" % tag
    assert {v["status"]["nodeName"] for v in vmis(rest, res.namespaces)} == {source}
    watcher = MigrationWatcher(rest, res.namespaces, source)
    watcher.start()
    try:
        code, out = kubectl_drain(lab, source, timeout=120)
    finally:
        watcher.stop.set()
        watcher.join()
    try:
        assert code == 0, out
        # kubectl met KubeVirt's refusal and retried it
        assert "Eviction triggered evacuation of VMI" in out and "will retry after 5s" in out, out
        ms = vmims(rest, res.namespaces)
        assert len(ms) == 6 and all(m["status"]["phase"] == "Succeeded" for m in ms)
        assert all(m["metadata"]["name"].startswith("kubevirt-evacuation-") and
                   m["metadata"]["annotations"]["kubevirt.io/evacuationMigration"] == source and
                   m["metadata"]["labels"]["kubevirt.io/vmi-name"] == m["spec"]["vmiName"] for m in ms)
        assert all((m["spec"].get("priority") == "system-critical") == all_at_once for m in ms)
        moved = vmis(rest, res.namespaces)
        assert all(v["status"]["nodeName"] != source and not v["status"].get("evacuationNodeName") for v in moved)
        pods_left = rest.get("/api/v1/pods", fieldSelector="spec.nodeName=" + source)["items"]
        assert pods_left == []
        # the webhook marks the VMIs one eviction at a time, so passes see few candidates each; without the
        # gate no pass exceeds parallelOutboundMigrationsPerNode (see the taint test for one pass over all)
        passes = [p for p in selections(emu, source) if p[1]]
        assert sum(selected for _candidates, selected in passes) == 6
        if not all_at_once:
            assert all(selected <= 2 for _candidates, selected in passes)
        assert watcher.max_in_flight <= 2       # the migration controller's per-node limit either way
    finally:
        lab.kubectl("uncordon", source)
        scenarios.delete(lab, sc)


@pytest.mark.parametrize("version,gates,all_at_once", VERSIONS)
def test_drain_taint_evacuates_all_at_once_only_with_the_priority_queue(lab, rest, emu, version, gates, all_at_once):
    """nodeDrainTaintKey (kubevirt.io/drain:NoSchedule) makes every VMI of the node a candidate in one pass:
    before the gate the pass selects parallelOutboundMigrationsPerNode of them, with it all."""
    tag = "t" + version.replace(".", "") + secrets.token_hex(1)
    sc = scenario(tag, version, gates, vms_per_ns=3)
    res = scenarios.apply(lab, sc, timeout=120)
    source = "evac-%s-src" % tag
    try:
        lab.kubectl("taint", "node", source, "kubevirt.io/drain=draining:NoSchedule")
        wait(lambda: selections(emu, source), 20, "an evacuation pass")
        assert selections(emu, source)[0] == ((6, 6) if all_at_once else (6, 2))
        wait(lambda: all(v["status"]["nodeName"] != source for v in vmis(rest, res.namespaces)), 90,
             "every VMI off the tainted node")
        ms = vmims(rest, res.namespaces)
        assert len(ms) == 6 and all(m["status"]["phase"] == "Succeeded" for m in ms)
        assert all(not v["status"].get("evacuationNodeName") for v in vmis(rest, res.namespaces))
    finally:
        lab.kubectl("taint", "node", source, "kubevirt.io/drain:NoSchedule-", check=False)
        scenarios.delete(lab, sc)


@pytest.mark.parametrize("version,gates,all_at_once", VERSIONS)
def test_kubectl_drain_hangs_on_a_quota_refused_evacuation(lab, rest, emu, version, gates, all_at_once):
    tag = "q" + version.replace(".", "") + secrets.token_hex(1)
    # namespace 1: no room for a second launcher pod; namespace 2: no quota
    sc = scenario(tag, version, gates, vms_per_ns=1, quotas={1: {"hard": {"pods": "1"}}})
    res = scenarios.apply(lab, sc, timeout=120)
    source = "evac-%s-src" % tag
    tight, free = res.namespaces
    try:
        code, out = kubectl_drain(lab, source, timeout=20)
        assert code != 0 and "global timeout reached: 20s" in out, out
        (stuck,) = vmims(rest, [tight])
        assert stuck["status"]["phase"] == "Pending"
        assert any(c["type"] == REJECTED and c["status"] == "True" for c in stuck["status"].get("conditions") or [])
        assert emu.rejections(tight, stuck["metadata"]["name"])
        (done,) = vmims(rest, [free])
        assert done["status"]["phase"] == "Succeeded"
        (left,) = vmis(rest, [tight])
        assert left["status"]["nodeName"] == source and left["status"]["evacuationNodeName"] == source
        # room in the quota: the same migration is admitted and a second drain completes
        rest.patch("/api/v1/namespaces/%s/resourcequotas/q" % tight, {"spec": {"hard": {"pods": "2"}}})
        code, out = kubectl_drain(lab, source, timeout=60)
        assert code == 0, out
        assert vmims(rest, [tight])[0]["metadata"]["uid"] == stuck["metadata"]["uid"]
    finally:
        lab.kubectl("uncordon", source)
        scenarios.delete(lab, sc)


def test_workload_updater_round_after_a_launcher_image_change(lab, rest, emu):
    """spec.imageTag changes: every VMI outdated and labelled; each round creates migrations for
    parallelMigrationsPerCluster minus the running ones, Pending ones not counted (kubevirt issue 16353): the
    migrations the quota refuses pile up beyond the cap."""
    tag = "u" + secrets.token_hex(1)
    # namespace 1: 2 VMs, room for their targets; namespace 2: 3 VMs whose targets the quota refuses
    sc = scenario(tag, "1.6.6", [], vms_per_ns=2, per_cluster=2, per_node=2)
    sc.data["namespaces"][1]["quotas"] = [{"name": "q", "hard": {"pods": "3"}}]
    sc.data["vms"][1]["count"] = 3
    res = scenarios.apply(lab, sc, timeout=120)
    roomy, tight = res.namespaces
    emulator.set_knobs(lab, workload_update_period_seconds=4, migration_seconds=2.5)
    try:
        old_image = vmis(rest, res.namespaces)[0]["status"]["launcherContainerImageVersion"]
        emulator.roll_out_kubevirt(lab, "v1.6.6-" + tag)
        new_image = old_image.rsplit(":", 1)[0] + ":v1.6.6-" + tag
        wait(lambda: all("kubevirt.io/outdatedLauncherImage" in v["metadata"].get("labels", {})
                         for v in vmis(rest, res.namespaces)), 20, "outdatedLauncherImage labels")
        wait(lambda: rest.get(KV_CR)["status"].get("outdatedVirtualMachineInstanceWorkloads") == 5, 20,
             "outdated count 5")
        wait(lambda: vmims(rest, res.namespaces), 20, "first round")
        time.sleep(1.0)
        first = vmims(rest, res.namespaces)
        assert len(first) == 2                  # one round (period 4 s): cap 2, nothing running
        assert all(m["metadata"]["name"].startswith("kubevirt-workload-update-") and
                   "kubevirt.io/workloadUpdateMigration" in m["metadata"]["annotations"] for m in first)
        # the roomy namespace's VMs end on the new image; every tight one gets a migration that stays Pending
        wait(lambda: all(v["status"].get("launcherContainerImageVersion") == new_image and
                         "kubevirt.io/outdatedLauncherImage" not in v["metadata"].get("labels", {})
                         for v in vmis(rest, [roomy])), 90, "roomy namespace updated")
        stuck = wait(lambda: [m for m in vmims(rest, [tight]) if m["status"].get("phase") == "Pending"]
                     if len(vmims(rest, [tight])) == 3 else None, 40, "a migration for every tight VM")
        assert len(stuck) == 3 > 2              # beyond parallelMigrationsPerCluster: Pending is not running
        assert all(any(c["type"] == REJECTED for c in m["status"].get("conditions") or []) for m in stuck)
        wait(lambda: rest.get(KV_CR)["status"].get("outdatedVirtualMachineInstanceWorkloads") == 3, 15,
             "outdated count 3 (the tight namespace's VMs)")
        assert all(m["status"]["phase"] == "Succeeded" for m in vmims(rest, [roomy]))
        assert all("kubevirt.io/outdatedLauncherImage" in v["metadata"]["labels"] for v in vmis(rest, [tight]))
    finally:
        emulator.set_knobs(lab, workload_update_period_seconds=None, migration_seconds=None)
        rest.patch(KV_CR, {"spec": {"imageTag": None, "workloadUpdateStrategy": None}})
        scenarios.delete(lab, sc)
