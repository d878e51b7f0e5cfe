"""Self-tests of the KubeVirt / Rancher / Harvester emulator.

Pure tests (knobs, scenario expansion, Rancher arithmetic, work queue) run anywhere;
the rest run against the real lab (fixture `lab`) with the emulator as a subprocess.
The scale scenario (e) is in test_emulator_scale.py (marker lab_scale, make lab-scale).
"""
import json
import secrets
import time
from fractions import Fraction

import pytest

from kvqlab import emulator, scenarios
from kvqlab.emulator import knobs as knobs_mod
from kvqlab.emulator import metrics as metrics_mod
from kvqlab.emulator import rancher as rancher_mod
from kvqlab.emulator import render
from kvqlab.emulator.rest import Rest, WorkQueue

pytestmark = pytest.mark.lab   # make lab-tests (conftest.py: every lab test has one such marker)

KV = "/apis/kubevirt.io/v1"


# ====================================================================== pure tests

def test_overhead_metric_copies_the_status_field_as_virt_controller_v1_9_does():
    def vmi(ns, name, overhead=None):
        status = {} if overhead is None else {"memory": {"memoryOverhead": overhead}}
        return {"metadata": {"namespace": ns, "name": name}, "status": status}
    text = metrics_mod.exposition([vmi("b", "vm-2", "280984Ki"), vmi("a", "vm-1"), vmi("a", 'q"x', "1.5"),
                                   vmi("a", "bad", "lots-of-ram"), vmi("a", "dict", {"x": 1})])
    lines = text.splitlines()
    assert lines[:2] == ["# HELP kubevirt_vmi_launcher_memory_overhead_bytes Estimation of the memory amount required "
                         "for virt-launcher's infrastructure components (e.g. libvirt, QEMU).",
                         "# TYPE kubevirt_vmi_launcher_memory_overhead_bytes gauge"]
    # no field: 0; a fraction rounds up (Quantity.Value()); what Go could not decode is not served; sorted
    # values as client_golang prints them (strconv 'g', shortest): 280984Ki = 287727616 -> 2.87727616e+08
    assert lines[2:] == ['kubevirt_vmi_launcher_memory_overhead_bytes{name="q\\"x",namespace="a"} 2',
                         'kubevirt_vmi_launcher_memory_overhead_bytes{name="vm-1",namespace="a"} 0',
                         'kubevirt_vmi_launcher_memory_overhead_bytes{name="vm-2",namespace="b"} 2.87727616e+08']
    assert [metrics_mod.go_float(v) for v in (123456, 1234567, 1.5, 0.00001, 234881024, 2 ** 30)] == \
        ["123456", "1.234567e+06", "1.5", "1e-05", "2.34881024e+08", "1.073741824e+09"]


def test_knobs_parse_and_layering():
    base = knobs_mod.Knobs(source_pod_delay_seconds=30)
    k = knobs_mod.parse_knobs({"oversize_percent": "5", "oversize_bytes": "10Mi", "fail_migrations": "vm-a, ns/vm-b",
                               "stall_migrations": '["x"]', "migration_seconds": "1.5", "bogus": "1",
                               "time_scale": "not-a-number"}, base)
    assert k.oversize_percent == 5 and k.oversize_bytes == 10 * 2**20
    assert k.fails("any", "vm-a") and k.fails("ns", "vm-b") and not k.fails("other", "vm-b")
    assert k.stalls("n", "x") and not k.stalls("n", "y")
    assert k.migration_seconds == 1.5
    assert k.source_pod_delay_seconds == 30          # from the layered defaults
    assert k.time_scale == knobs_mod.Knobs().time_scale   # malformed value keeps the default
    assert knobs_mod.parse_knobs({"fail_migrations": "all"}).fails("x", "y")
    assert knobs_mod.knobs_to_data({"rancher": True, "fail_migrations": ["a", "b"]}) == \
        {"rancher": "true", "fail_migrations": "a,b"}
    with pytest.raises(ValueError):
        knobs_mod.knobs_to_data({"no_such_knob": 1})


def test_overhead_report_knob_and_quantity():
    k = knobs_mod.parse_knobs({"overhead_report_offsets": "vm-a=64Mi, ns/vm-b=-1"})
    assert (k.overhead_offset("x", "vm-a"), k.overhead_offset("ns", "vm-b"), k.overhead_offset("other", "vm-b")) == \
        (64 * 2**20, -1, 0)
    assert knobs_mod.parse_knobs({"overhead_report_offsets": '{"all": "1Ki"}'}).overhead_offset("a", "b") == 1024
    assert knobs_mod.parse_knobs({"overhead_report_offsets": ""}).overhead_report_offsets == ()
    assert knobs_mod.knobs_to_data({"overhead_report_offsets": {"vm-a": "64Mi"}}) == {"overhead_report_offsets": "vm-a=64Mi"}
    # resource.NewQuantity(n, BinarySI).String(), as virt-controller writes status.memory.memoryOverhead
    assert [render.binary_si(n) for n in (431591616, 287727616, 0, 1024, 1023)] == \
        ["431591616", "280984Ki", "0", "1Ki", "1023"]


def test_workqueue_dedup_delay_and_exclusive_processing():
    q = WorkQueue()
    q.add("a")
    q.add("a")
    q.add("b", delay=0.2)
    assert q.get() == "a"
    q.add("a")                      # re-added while processing: not handed out twice
    t0 = time.monotonic()
    assert q.get() == "b" and time.monotonic() - t0 >= 0.15
    q.done("a")                     # now it comes back
    assert q.get() == "a"
    q.done("a")
    q.done("b")
    q.close()
    assert q.get() is None


def test_scenario_files_load_and_expand():
    for name in ("a", "b", "c", "d", "e", "h"):
        sc = scenarios.load(name)
        assert sc.name == name and sc.description
    ex = scenarios.load("e").expand()
    assert len(ex["vms"]) == 5000
    assert len(ex["namespaces"]) == 500
    assert sum(len(n["quotas"]) for n in ex["namespaces"]) == 1000
    assert len({v["namespace"] for v in ex["vms"]}) == 500
    assert ex["vms"][0]["name"] == "e-vm-0001" and ex["vms"][0]["namespace"] == "e-t001"
    assert ex["vms"][0]["node"] == "e-node-01" and ex["vms"][20]["node"] == "e-node-01"
    d = scenarios.load("d").expand()
    assert {v["node"] for v in d["vms"]} == {"node-1"} and len(d["vms"]) == 20
    with pytest.raises(scenarios.ScenarioError):
        scenarios.from_dict({"vms": [{"name": "x", "namespace": "y", "cpus": 2}]})


def test_scenario_vm_object_shape():
    vm = scenarios.vm_object({"name": "v", "namespace": "n", "cpu": 2, "memory": "4Gi",
                              "limits": {"cpu": "2", "memory": "4Gi"}, "node": "node-2",
                              "volumes": [{"name": "d", "pvc": "disk"}]})
    spec = vm["spec"]["template"]["spec"]
    assert vm["spec"]["running"] is True
    assert spec["domain"]["cpu"]["cores"] == 2
    assert spec["domain"]["resources"] == {"requests": {"memory": "4Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}}
    assert spec["volumes"] == [{"name": "d", "persistentVolumeClaim": {"claimName": "disk"}}]
    assert vm["metadata"]["annotations"]["kvqlab.io/initial-node"] == "node-2"


def test_rancher_pure_functions():
    ns = {"metadata": {"name": "t", "annotations": {
        rancher_mod.QUOTA_ANNOTATION: json.dumps({"limit": {"limitsCpu": "3000m", "limitsMemory": "5000Mi",
                                                            "unknownKey": "1"}}),
        rancher_mod.PROJECT_ANNOTATION: "local:p-1"}}}
    project = {"spec": {"resourceQuota": {"limit": {"limitsCpu": "4", "limitsMemory": "8Gi"}},
                        "namespaceDefaultResourceQuota": {"limit": {"limitsCpu": "1", "pods": "10"}}}}
    assert rancher_mod.project_ref(ns) == ("local", "p-1")
    lim = rancher_mod.effective_limit(ns, project)
    assert lim == {"limitsCpu": "3000m", "limitsMemory": "5000Mi", "pods": "10", "unknownKey": "1"}
    assert rancher_mod.rancher_limit_to_hard(lim) == {"limits.cpu": "3000m", "limits.memory": "5000Mi", "pods": "10"}
    assert rancher_mod.same_hard({"limits.cpu": "3", "limits.memory": "5000Mi"},
                                 {"limits.cpu": "3000m", "limits.memory": "5242880000"})
    assert rancher_mod.project_violation(ns, project, [ns]) is None
    other = json.loads(json.dumps(ns))
    other["metadata"]["name"] = "u"
    msg = rancher_mod.project_violation(ns, project, [ns, other])
    assert "limitsCpu" in msg and "exceeds project limit" in msg
    assert rancher_mod.used_limit(project, [ns, other]) == {"limitsCpu": "6", "limitsMemory": "10000Mi"}
    rq = {"metadata": {"annotations": {rancher_mod.HARVESTER_MIGRATING_PREFIX + "u1":
                                       json.dumps({"limits.cpu": "2015m", "limits.memory": "1Gi"})}},
          "spec": {"hard": {"limits.cpu": "3", "limits.memory": "5000Mi", "pods": "10"}}}
    want = rancher_mod.harvester_desired_hard(rq, {"limits.cpu": "3", "limits.memory": "5000Mi"})
    assert want == {"limits.cpu": "5015m", "limits.memory": "6024Mi", "pods": "10"}
    rq["metadata"]["annotations"][rancher_mod.HARVESTER_SKIP] = "true"
    assert rancher_mod.harvester_desired_hard(rq, {"limits.cpu": "3"}) is None


def test_harvester_v19_compensation_arithmetic():
    """Harvester v1.9 (PR 10197): spec.hard limits.memory = base + deltas + migratingCompensation (limits.cpu gets
    no compensation, a resource without a base is left alone); a compensation is used + target - hard + 128Mi,
    only when positive."""
    rq = {"metadata": {"annotations": {
        rancher_mod.HARVESTER_MIGRATING_PREFIX + "u1": '{"limits.cpu":"1","limits.memory":"1405Mi"}',
        rancher_mod.HARVESTER_COMPENSATION: '{"limits.memory":"192Mi"}',
        rancher_mod.HARVESTER_RESYNC: "false"}},
        "spec": {"hard": {"limits.cpu": "3", "limits.memory": "2900Mi", "pods": "10"}},
        "status": {"used": {"limits.cpu": "2050m", "limits.memory": "3000Mi"}}}
    base = {"limits.cpu": "3", "limits.memory": "2900Mi"}
    assert rancher_mod.harvester_desired_hard(rq, base, compensation=True) == \
        {"limits.cpu": "4", "limits.memory": "4497Mi", "pods": "10"}
    assert rancher_mod.harvester_desired_hard(rq, base) == {"limits.cpu": "4", "limits.memory": "4305Mi", "pods": "10"}
    assert rancher_mod.harvester_desired_hard(rq, {"limits.cpu": "3"}, compensation=True) == \
        {"limits.cpu": "4", "limits.memory": "2900Mi", "pods": "10"}
    assert rancher_mod.harvester_compensation(rq) == 192 * 2**20
    rq["metadata"]["annotations"][rancher_mod.HARVESTER_COMPENSATION] = "not json"
    assert rancher_mod.harvester_compensation(rq) == 0
    # hard 4305Mi, used 3000Mi, target 1405Mi: 100Mi short, + 128Mi
    rq["spec"]["hard"]["limits.memory"] = "4305Mi"
    assert json.loads(rancher_mod.harvester_compensation_needed(rq, 1405 * 2**20)) == {"limits.memory": "228Mi"}
    assert rancher_mod.harvester_compensation_needed(rq, 1305 * 2**20) is None      # fits exactly
    assert rancher_mod.harvester_compensation_needed({"spec": {"hard": {"limits.cpu": "3"}}}, 1) is None
    assert [rancher_mod.parse_version(v) for v in ("v1.9.0-rc6", "1.8.2", "v1.10", "", None, "main")] == \
        [(1, 9, 0), (1, 8, 2), (1, 10, 0), None, None, None]
    assert knobs_mod.parse_knobs({"harvester_version": " v1.9.0 "}).harvester_version == "v1.9.0"


def test_rancher_extended_limits_like_rancher_2_14():
    # Rancher 2.14 pkg/resourcequota/quota_validate.go: extended first, then the fixed keys ("the fixed data wins")
    assert rancher_mod.rancher_limit_to_hard({"limitsCpu": "3", "extended": {"limits.cpu": "300", "count/pods": "4"}}) \
        == {"limits.cpu": "3", "count/pods": "4"}
    assert rancher_mod.rancher_limit_to_hard({"extended": {"limits.cpu": "300"}}) == {"limits.cpu": "300"}
    project = {"spec": {"resourceQuota": {"limit": {"limitsCpu": "10", "extended": {"count/pods": "5"}}},
                        "namespaceDefaultResourceQuota": {"limit": {"limitsCpu": "1", "extended": {
                            "count/pods": "2", "requests.nvidia.com/gpu": "1"}}}}}

    def ns(name, limit=None):
        annotations = {rancher_mod.PROJECT_ANNOTATION: "local:p-1"}
        if limit is not None:
            annotations[rancher_mod.QUOTA_ANNOTATION] = json.dumps({"limit": limit})
        return {"metadata": {"name": name, "annotations": annotations}}
    # completeQuota: the namespace's extended map replaces the default's whole
    mine = ns("t", {"limitsCpu": "2", "extended": {"count/pods": "3"}})
    assert rancher_mod.effective_limit(mine, project) == {"limitsCpu": "2", "extended": {"count/pods": "3"}}
    defaulted = ns("u")
    assert rancher_mod.rancher_limit_to_hard(rancher_mod.effective_limit(defaulted, project)) == {
        "limits.cpu": "1", "count/pods": "2", "requests.nvidia.com/gpu": "1"}
    # without an extended default the namespace's extended map is not applied
    bare = {"spec": {"namespaceDefaultResourceQuota": {"limit": {"limitsCpu": "1"}}}}
    assert rancher_mod.effective_limit(mine, bare) == {"limitsCpu": "2"}
    # the project caps count/pods at 5: 3 + 2 fits, 4 + 2 does not
    assert rancher_mod.project_violation(mine, project, [mine, defaulted]) is None
    assert rancher_mod.used_limit(project, [mine, defaulted]) == {"limitsCpu": "3", "extended": {"count/pods": "5"}}
    grown = ns("t", {"limitsCpu": "2", "extended": {"count/pods": "4"}})
    msg = rancher_mod.project_violation(grown, project, [grown, defaulted])
    assert "count/pods=6" in msg and "exceeds project limit" in msg


def test_render_launcher_and_target_pod():
    from kvqlab.emulator import render
    vmi = scenarios.vmi_object({"name": "v", "namespace": "n", "cpu": 2, "memory": "4Gi",
                                "limits": {"cpu": "2", "memory": "4Gi"}, "labels": {"app": "x"}})
    vmi["metadata"]["uid"] = "uid-1"
    vmi["metadata"]["labels"]["kubevirt.io/nodeName"] = "node-1"
    kv = scenarios.kubevirt_cr({"kubevirt": {"version": "1.3.1",
                                             "configuration": {"additionalGuestMemoryOverheadRatio": "1.5"}}})
    config = render.cluster_config(kv)
    tracks = frozenset(["limits.cpu", "limits.memory"])
    plain = render.launcher_pod(vmi, config, knobs_mod.Knobs(), tracks=tracks, initial_node="node-2")
    md = plain["metadata"]
    assert md["generateName"] == "virt-launcher-v-"
    assert md["labels"]["kubevirt.io"] == "virt-launcher" and md["labels"]["kubevirt.io/created-by"] == "uid-1"
    assert md["labels"]["app"] == "x" and "kubevirt.io/nodeName" not in md["labels"]
    assert md["ownerReferences"][0]["kind"] == "VirtualMachineInstance"
    assert [c["name"] for c in plain["spec"]["containers"]][0] == "compute"
    assert plain["spec"]["nodeSelector"]["kubevirt.io/schedulable"] == "true"
    term = plain["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term["matchExpressions"] == [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-2"]}]
    mig = {"metadata": {"uid": "mig-uid", "name": "m"}}
    target = render.launcher_pod(vmi, config, knobs_mod.Knobs(oversize_percent=10), tracks=tracks, migration=mig)
    assert target["metadata"]["labels"]["kubevirt.io/migrationJobUID"] == "mig-uid"
    anti = target["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["labelSelector"]["matchExpressions"][0]["values"] == ["uid-1"]
    assert "nodeAffinity" not in target["spec"]["affinity"]
    base = parse_rl(plain["spec"]["containers"][0]["resources"]["limits"])["memory"]
    grown = parse_rl(target["spec"]["containers"][0]["resources"]["limits"])["memory"]
    assert grown == -(-(base * Fraction(11, 10)) // 1)
    # the console-log container is never grown
    assert plain["spec"]["containers"][1]["resources"] == target["spec"]["containers"][1]["resources"]
    bulk = render.launcher_pod(vmi, config, knobs_mod.Knobs(), tracks=tracks, bulk_node="node-9")
    assert bulk["spec"]["nodeName"] == "node-9"


# ====================================================================== lab fixtures

@pytest.fixture(scope="module")
def rest(lab):
    return Rest(lab.api_client(admin=True))


KV_CONFIG = {
    "additionalGuestMemoryOverheadRatio": "1.5",
    "migrations": {"parallelMigrationsPerCluster": 5, "parallelOutboundMigrationsPerNode": 2,
                   "bandwidthPerMigration": "64Mi"},
}
KV_VERSION = "v1.5.0"


def set_kubevirt(rest, configuration, version=KV_VERSION):
    cur = rest.get_or_none(KV + "/namespaces/kubevirt/kubevirts/kubevirt")
    if cur is None:
        from kubernetes.client.exceptions import ApiException
        try:
            rest.create("/api/v1/namespaces", {"metadata": {"name": "kubevirt"}})
        except ApiException as exc:
            assert exc.status == 409
        rest.create(KV + "/namespaces/kubevirt/kubevirts", {
            "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": "kubevirt"}, "spec": {"configuration": configuration}})
    else:
        rest.patch(KV + "/namespaces/kubevirt/kubevirts/kubevirt", {"spec": {"configuration": None}})
        rest.patch(KV + "/namespaces/kubevirt/kubevirts/kubevirt", {"spec": {"configuration": configuration}})
    rest.patch(KV + "/namespaces/kubevirt/kubevirts/kubevirt/status",
               {"status": {"observedKubeVirtVersion": version, "phase": "Deployed"}})


@pytest.fixture(scope="module")
def emu(lab, rest):
    emulator.install_crds(lab)
    set_kubevirt(rest, KV_CONFIG)
    handle = emulator.start(lab, source_pod_delay_seconds=2, migration_seconds=0.5)
    emulator.set_knobs(lab, **{k: None for k in knobs_mod.Knobs.__dataclass_fields__})
    yield handle
    handle.stop()


@pytest.fixture
def knobs(lab, emu, rest):
    """Set knobs for one test; everything is reset to the process defaults afterwards."""
    def setter(**values):
        emulator.set_knobs(lab, **values)
        time.sleep(0.3)   # the emulator sees the ConfigMap through its watch
    yield setter
    emulator.set_knobs(lab, **{k: None for k in knobs_mod.Knobs.__dataclass_fields__})
    set_kubevirt(rest, KV_CONFIG)


@pytest.fixture
def ns(lab, rest, request):
    name = "emu-" + request.node.name.replace("_", "-").lower()[5:30].strip("-") + "-" + secrets.token_hex(2)
    rest.create("/api/v1/namespaces", {"metadata": {"name": name, "labels": {"kvqlab/test": "true"}}})
    yield name
    rest.delete("/api/v1/namespaces/" + name)


def wait(pred, timeout=30, what="condition", interval=0.1):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except Exception as exc:  # noqa: BLE001
            last = exc
        time.sleep(interval)
    raise AssertionError("timed out waiting for %s (%s)" % (what, last))


def make_quota(rest, lab, ns, hard, name="q"):
    rest.create("/api/v1/namespaces/%s/resourcequotas" % ns, {"metadata": {"name": name}, "spec": {"hard": hard}})
    lab.wait_quota_ready(ns, name)


def make_vm(rest, ns, name, cpu=1, memory="1Gi", limits=None, node=None, volumes=None):
    vm = scenarios.vm_object({"name": name, "namespace": ns, "cpu": cpu, "memory": memory,
                              "limits": limits if limits is not None else {"cpu": str(cpu), "memory": memory},
                              "node": node, "volumes": volumes})
    rest.create(KV + "/namespaces/%s/virtualmachines" % ns, vm)


def vmi(rest, ns, name):
    return rest.get(KV + "/namespaces/%s/virtualmachineinstances/%s" % (ns, name))


def wait_running(rest, ns, name, timeout=30):
    def running():
        v = vmi(rest, ns, name)
        return v if (v.get("status") or {}).get("phase") == "Running" else None
    return wait(running, timeout, "VMI %s/%s Running" % (ns, name))


def migrate(rest, ns, vmi_name, name=None):
    name = name or "mig-%s-%s" % (vmi_name, secrets.token_hex(2))
    rest.create(KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns, {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": name}, "spec": {"vmiName": vmi_name}})
    return name


def vmim(rest, ns, name):
    return rest.get(KV + "/namespaces/%s/virtualmachineinstancemigrations/%s" % (ns, name))


def phase_of(rest, ns, name):
    return (vmim(rest, ns, name).get("status") or {}).get("phase")


def launcher_pods(rest, ns, vmi_name=None):
    sel = "kubevirt.io=virt-launcher" + (",vm.kubevirt.io/name=%s" % vmi_name if vmi_name else "")
    return rest.get("/api/v1/namespaces/%s/pods" % ns, labelSelector=sel)["items"]


def quota(rest, ns, name="q"):
    return rest.get("/api/v1/namespaces/%s/resourcequotas/%s" % (ns, name))


def parse_rl(rl):
    from kvqlab.emulator import collection
    resources = collection.core()[1]
    return resources.parse_resource_list(rl or {})


# ====================================================================== lab tests

def test_vm_runs_with_launcher_pod_sized_by_core(lab, rest, emu, ns):
    from kvqlab.emulator import collection
    sizing, resources = collection.core()
    make_quota(rest, lab, ns, {"limits.cpu": "20", "limits.memory": "40Gi"})
    make_vm(rest, ns, "vm1", cpu=2, memory="4Gi")
    v = wait_running(rest, ns, "vm1")
    assert v["metadata"]["labels"]["kubevirt.io/nodeName"] == v["status"]["nodeName"]
    conds = {c["type"]: c["status"] for c in v["status"]["conditions"]}
    assert conds == {"Ready": "True", "LiveMigratable": "True"}
    assert v["status"]["migrationMethod"] == "BlockMigration"   # a containerDisk
    (pod,) = launcher_pods(rest, ns, "vm1")
    labels = pod["metadata"]["labels"]
    assert labels["kubevirt.io"] == "virt-launcher"
    assert labels["kubevirt.io/created-by"] == v["metadata"]["uid"]
    assert labels["vm.kubevirt.io/name"] == "vm1"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == v["metadata"]["uid"]
    assert pod["spec"]["nodeName"] == v["status"]["nodeName"]
    kv = rest.get(KV + "/namespaces/kubevirt/kubevirts/kubevirt")
    config = sizing.config_from_cluster(kv, None, kubevirt_version=KV_VERSION[1:])
    expected = sizing.launcher_pod(v, config, namespace_labels={},
                                   quota_tracks=frozenset(["limits.cpu", "limits.memory"]))
    got = {c["name"]: c["resources"] for c in pod["spec"]["containers"]}
    assert [c.name for c in expected.containers] == [c["name"] for c in pod["spec"]["containers"]]
    for c in expected.containers:
        assert parse_rl(got[c.name].get("requests")) == dict(c.requests), c.name
        assert parse_rl(got[c.name].get("limits")) == dict(c.limits), c.name
    # the quota charges exactly what the core says the pod charges
    used = wait(lambda: (quota(rest, ns).get("status") or {}).get("used", {}).get("limits.memory") not in (None, "0")
                and quota(rest, ns)["status"]["used"], what="quota used")
    assert parse_rl(used)["limits.memory"] == expected.charge["limits.memory"]
    assert parse_rl(used)["limits.cpu"] == expected.charge["limits.cpu"]


def test_non_rwx_pvc_makes_vmi_not_live_migratable(lab, rest, emu, ns):
    for name, mode in (("rwo", "ReadWriteOnce"), ("rwx", "ReadWriteMany")):
        rest.create("/api/v1/namespaces/%s/persistentvolumeclaims" % ns, {
            "metadata": {"name": name}, "spec": {"accessModes": [mode], "resources": {"requests": {"storage": "1Gi"}}}})
    make_vm(rest, ns, "shared", volumes=[{"name": "d", "pvc": "rwx"}])
    make_vm(rest, ns, "local", volumes=[{"name": "d", "pvc": "rwo"}])
    shared = wait_running(rest, ns, "shared")
    local = wait_running(rest, ns, "local")
    lm = {c["type"]: c for c in shared["status"]["conditions"]}["LiveMigratable"]
    assert lm["status"] == "True" and shared["status"]["migrationMethod"] == "LiveMigration"
    lm = {c["type"]: c for c in local["status"]["conditions"]}["LiveMigratable"]
    assert lm["status"] == "False" and lm["reason"] == "DisksNotLiveMigratable"
    m = migrate(rest, ns, "local")
    wait(lambda: phase_of(rest, ns, m) == "Failed", 15, "migration of a non-migratable VMI Failed")


def test_backend_storage_pvc_follows_the_migration(lab, rest, emu, ns, knobs):
    """A persistent EFI (v1.5): the target's backend-storage PVC is created by KubeVirt's identity before the target
    pod (labelled with the migration's name), quota admission charges it, and on success it becomes the VM's while
    the source's PVC is deleted (the PVC protection controller lets it go); target_pod_delay_seconds holds the target
    pod back."""
    knobs(target_pod_delay_seconds=2)
    make_quota(rest, lab, ns, {"persistentvolumeclaims": "2", "requests.storage": "20Mi"})
    rest.create("/api/v1/namespaces/%s/persistentvolumeclaims" % ns, {
        "metadata": {"name": "persistent-state-for-efi", "labels": {"persistent-state-for": "efi"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Mi"}}}})
    vm = scenarios.vm_object({"name": "efi", "namespace": ns, "cpu": 1, "memory": "1Gi",
                              "limits": {"cpu": "1", "memory": "1Gi"},
                              "firmware": {"bootloader": {"efi": {"persistent": True, "secureBoot": False}}}})
    rest.create(KV + "/namespaces/%s/virtualmachines" % ns, vm)
    wait_running(rest, ns, "efi")
    m = migrate(rest, ns, "efi")

    def pvcs():
        return dict((p["metadata"]["name"], p) for p in
                    rest.get("/api/v1/namespaces/%s/persistentvolumeclaims" % ns)["items"])
    target = wait(lambda: [p for p in pvcs().values()
                           if (p["metadata"].get("labels") or {}).get("kubevirt.io/migrationName") == m], 15,
                  "the target's backend-storage PVC")[0]
    assert target["metadata"]["name"].startswith("persistent-state-for-efi-")
    assert target["metadata"]["ownerReferences"][0]["kind"] == "VirtualMachine"
    # the delay knob: no target pod yet while the PVC exists
    assert not rest.get("/api/v1/namespaces/%s/pods" % ns, labelSelector="kubevirt.io/migrationJobUID=%s"
                        % vmim(rest, ns, m)["metadata"]["uid"])["items"]
    wait(lambda: phase_of(rest, ns, m) == "Succeeded", 30, "migration Succeeded")

    def only_target():
        got = pvcs()
        return got if list(got) == [target["metadata"]["name"]] else None
    left = wait(only_target, 30, "the source's PVC gone")
    assert left[target["metadata"]["name"]]["metadata"]["labels"] == {"persistent-state-for": "efi"}


def test_migration_rejected_by_quota_then_completes_after_raise(lab, rest, emu, ns, knobs):
    knobs(source_pod_delay_seconds=1)
    make_quota(rest, lab, ns, {"limits.cpu": "3", "limits.memory": "10Gi"})
    make_vm(rest, ns, "vm1", cpu=2, memory="2Gi")
    v = wait_running(rest, ns, "vm1")
    source = v["status"]["nodeName"]
    before = len(emu.rejections(ns))
    m = migrate(rest, ns, "vm1")

    def rejected():
        st = vmim(rest, ns, m).get("status") or {}
        return st.get("phase") == "Pending" and any(
            c["type"] == "migrationRejectedByResourceQuota" and c["status"] == "True" for c in st.get("conditions") or [])
    wait(rejected, 15, "condition migrationRejectedByResourceQuota")
    wait(lambda: len(emu.rejections(ns)) >= before + 2, 10, "retries with backoff in the log")
    lines = emu.rejections(ns, m)
    assert "reenqueuing Migration %s/%s" % (ns, m) in lines[0]
    assert "exceeded quota: q" in lines[0] and "limited: limits.cpu=3" in lines[0]
    events = rest.get("/api/v1/namespaces/%s/events" % ns)["items"]
    assert any(e["reason"] == "FailedCreate" and "exceeded quota" in e["message"] for e in events)
    # backoff: retries spread out, not a hot loop
    time.sleep(2)
    assert len(emu.rejections(ns, m)) < 10
    # raising the quota re-queues the migration at once (quota watch), no backoff wait
    q = quota(rest, ns)
    q["spec"]["hard"]["limits.cpu"] = "5"
    t0 = time.monotonic()
    rest.replace("/api/v1/namespaces/%s/resourcequotas/q" % ns, q)
    wait(lambda: phase_of(rest, ns, m) not in ("Pending", None), 5, "target pod created after quota raise")
    assert time.monotonic() - t0 < 3
    wait(lambda: phase_of(rest, ns, m) == "Succeeded", 20, "migration Succeeded")
    st = vmim(rest, ns, m)["status"]
    assert not any(c["type"] == "migrationRejectedByResourceQuota" for c in st.get("conditions") or [])
    assert [p["phase"] for p in st["phaseTransitionTimestamps"]] == [
        "Pending", "Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running", "Succeeded"]
    v = vmi(rest, ns, "vm1")
    ms = v["status"]["migrationState"]
    assert ms["completed"] is True and ms["sourceNode"] == source and ms["targetNode"] != source
    assert v["status"]["nodeName"] == ms["targetNode"] == v["metadata"]["labels"]["kubevirt.io/nodeName"]
    target = [p for p in launcher_pods(rest, ns, "vm1") if p["metadata"]["name"] == ms["targetPod"]][0]
    assert target["metadata"]["labels"]["kubevirt.io/migrationJobUID"] == vmim(rest, ns, m)["metadata"]["uid"]
    anti = target["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"


def test_parallel_migration_limits_hold(lab, rest, emu, ns, knobs):
    set_kubevirt(rest, {"additionalGuestMemoryOverheadRatio": "1.5",
                        "migrations": {"parallelMigrationsPerCluster": 3, "parallelOutboundMigrationsPerNode": 2}})
    knobs(migration_seconds=1.5, source_pod_delay_seconds=0.5)
    nodes = ["node-1", "node-2"]
    names = []
    for i in range(8):
        name = "p%d" % i
        make_vm(rest, ns, name, cpu=1, memory="512Mi", node=nodes[i % 2])
        names.append(name)
    for n in names:
        wait_running(rest, ns, n)
    migs = [migrate(rest, ns, n) for n in names]
    in_flight = ("Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running")
    max_total, max_node = 0, {}
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        items = rest.get(KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns)["items"]
        flying = [m for m in items if (m.get("status") or {}).get("phase") in in_flight]
        max_total = max(max_total, len(flying))
        per = {}
        for m in flying:
            src = (m["status"].get("migrationState") or {}).get("sourceNode")
            per[src] = per.get(src, 0) + 1
        for k, v in per.items():
            max_node[k] = max(max_node.get(k, 0), v)
        if all((m.get("status") or {}).get("phase") == "Succeeded" for m in items) and len(items) == len(migs):
            break
        time.sleep(0.05)
    else:
        raise AssertionError("migrations did not all succeed")
    assert max_total == 3, max_total
    assert max(max_node.values()) == 2 and all(v <= 2 for v in max_node.values()), max_node


def test_source_pod_completes_after_delay_and_usage_drops_then(lab, rest, emu, ns, knobs):
    delay = 4
    knobs(source_pod_delay_seconds=delay, migration_seconds=0.2)
    make_quota(rest, lab, ns, {"limits.cpu": "10", "limits.memory": "20Gi", "pods": "10"})
    make_vm(rest, ns, "vm1", cpu=1, memory="1Gi")
    wait_running(rest, ns, "vm1")
    (source,) = launcher_pods(rest, ns, "vm1")
    one = parse_rl(wait(lambda: (quota(rest, ns).get("status") or {}).get("used", {}).get("pods") == "1"
                        and quota(rest, ns)["status"]["used"], what="one pod charged"))
    m = migrate(rest, ns, "vm1")
    wait(lambda: phase_of(rest, ns, m) == "Succeeded", 20, "Succeeded", interval=0.05)
    t_succeeded = time.monotonic()
    used = parse_rl(quota(rest, ns)["status"]["used"])
    assert used["pods"] == 2 and used["limits.memory"] == 2 * one["limits.memory"]   # both pods still count

    def source_done():
        p = rest.get("/api/v1/namespaces/%s/pods/%s" % (ns, source["metadata"]["name"]))
        return (p.get("status") or {}).get("phase") == "Succeeded"
    wait(source_done, delay + 10, "source pod Succeeded", interval=0.05)
    took = time.monotonic() - t_succeeded
    assert delay - 1.0 <= took <= delay + 3, took
    wait(lambda: parse_rl(quota(rest, ns)["status"]["used"])["pods"] == 1, 10, "status.used drops")
    assert parse_rl(quota(rest, ns)["status"]["used"])["limits.memory"] == one["limits.memory"]


def test_fault_knobs_oversize_fail_and_stall(lab, rest, emu, ns, knobs):
    make_vm(rest, ns, "big", cpu=1, memory="1Gi")
    make_vm(rest, ns, "bad", cpu=1, memory="1Gi")
    make_vm(rest, ns, "slow", cpu=1, memory="1Gi")
    for n in ("big", "bad", "slow"):
        wait_running(rest, ns, n)
    (plain,) = launcher_pods(rest, ns, "big")
    base = parse_rl(plain["spec"]["containers"][0]["resources"]["limits"])["memory"]
    knobs(oversize_percent=10, oversize_bytes="1Mi", fail_migrations="bad", stall_migrations=f"{ns}/slow",
          migration_seconds=0.3)
    m_big, m_bad, m_slow = migrate(rest, ns, "big"), migrate(rest, ns, "bad"), migrate(rest, ns, "slow")
    wait(lambda: phase_of(rest, ns, m_big) == "Succeeded", 20, "big Succeeded")
    target = vmi(rest, ns, "big")["status"]["migrationState"]["targetPod"]
    tpod = rest.get("/api/v1/namespaces/%s/pods/%s" % (ns, target))
    grown = parse_rl(tpod["spec"]["containers"][0]["resources"]["limits"])["memory"]
    assert grown == -(-(base * Fraction(110, 100)) // 1) + 2**20
    wait(lambda: phase_of(rest, ns, m_bad) == "Failed", 20, "bad Failed")
    ms = vmi(rest, ns, "bad")["status"]["migrationState"]
    assert ms["failed"] is True
    wait(lambda: all(p["status"].get("phase") in ("Succeeded", "Failed") or p["metadata"].get("deletionTimestamp")
                     or p["spec"]["nodeName"] == ms["sourceNode"] for p in launcher_pods(rest, ns, "bad")),
         10, "failed target pod gone")
    assert vmi(rest, ns, "bad")["status"]["nodeName"] == ms["sourceNode"]
    wait(lambda: phase_of(rest, ns, m_slow) == "Running", 10, "slow Running")
    time.sleep(1.5)
    assert phase_of(rest, ns, m_slow) == "Running"
    knobs(stall_migrations=None)
    wait(lambda: phase_of(rest, ns, m_slow) == "Succeeded", 10, "slow Succeeded once un-stalled")


def test_restart_mid_migration_and_vmim_delete_aborts(lab, rest, emu, ns, knobs):
    knobs(migration_seconds=3)
    make_vm(rest, ns, "vm1")
    make_vm(rest, ns, "vm2")
    wait_running(rest, ns, "vm1")
    wait_running(rest, ns, "vm2")
    m1 = migrate(rest, ns, "vm1")
    wait(lambda: phase_of(rest, ns, m1) == "Running", 10, "Running")
    emu.restart()
    wait(lambda: phase_of(rest, ns, m1) == "Succeeded", 20, "Succeeded after emulator restart")
    knobs(stall_migrations="vm2")
    m2 = migrate(rest, ns, "vm2")
    wait(lambda: phase_of(rest, ns, m2) == "Running", 10, "vm2 Running")
    rest.delete(KV + "/namespaces/%s/virtualmachineinstancemigrations/%s" % (ns, m2))
    wait(lambda: rest.get_or_none(KV + "/namespaces/%s/virtualmachineinstancemigrations/%s" % (ns, m2)) is None,
         10, "VMIM deleted (finalizer released)")
    ms = vmi(rest, ns, "vm2")["status"]["migrationState"]
    assert ms["abortStatus"] == "Succeeded" and ms["failed"] is True


def test_rancher_reverts_direct_edit_on_namespace_change_and_agent_restart(lab, rest, emu, ns):
    ann = {rancher_mod.QUOTA_ANNOTATION: json.dumps({"limit": {"limitsCpu": "3000m", "limitsMemory": "5000Mi"}})}
    rest.patch("/api/v1/namespaces/" + ns, {"metadata": {"annotations": ann}})

    def rancher_quota():
        items = rest.get("/api/v1/namespaces/%s/resourcequotas" % ns)["items"]
        return [q for q in items if rancher_mod.is_rancher_quota(q)]
    (q,) = wait(rancher_quota, 10, "Rancher creates the namespace quota")
    assert q["metadata"]["name"].startswith("default-")
    assert parse_rl(q["spec"]["hard"]) == parse_rl({"limits.cpu": "3", "limits.memory": "5000Mi"})
    qpath = "/api/v1/namespaces/%s/resourcequotas/%s" % (ns, q["metadata"]["name"])

    def hard():
        return parse_rl(rest.get(qpath)["spec"]["hard"])
    # a direct edit survives ... until the namespace changes
    rest.patch(qpath, {"spec": {"hard": {"limits.cpu": "30"}}})
    time.sleep(0.5)
    assert hard()["limits.cpu"] == 30
    rest.patch("/api/v1/namespaces/" + ns, {"metadata": {"labels": {"touched": "1"}}})
    wait(lambda: hard()["limits.cpu"] == 3, 5, "revert on namespace change")
    # ... or until the agent restarts
    rest.patch(qpath, {"spec": {"hard": {"limits.cpu": "30", "limits.memory": "9Gi"}}})
    time.sleep(0.5)
    assert hard()["limits.cpu"] == 30
    emulator.rancher_agent_restart(lab)
    wait(lambda: hard() == parse_rl({"limits.cpu": "3", "limits.memory": "5000Mi"}), 5, "revert on agent restart")
    # the durable way: change the annotation; Rancher follows
    ann = {rancher_mod.QUOTA_ANNOTATION: json.dumps({"limit": {"limitsCpu": "4", "limitsMemory": "6000Mi"}})}
    rest.patch("/api/v1/namespaces/" + ns, {"metadata": {"annotations": ann}})
    wait(lambda: hard() == parse_rl({"limits.cpu": "4", "limits.memory": "6000Mi"}), 5, "follows the annotation")
    assert emu.count("spec.hard reset from") >= 2


def test_rancher_project_limit_blocks_namespace_over_it(lab, rest, emu):
    from kubernetes.client.exceptions import ApiException
    tag = secrets.token_hex(2)
    pname = "p-" + tag
    try:
        rest.create("/api/v1/namespaces", {"metadata": {"name": "local"}})
    except ApiException:
        pass
    rest.create("/apis/management.cattle.io/v3/namespaces/local/projects", {
        "apiVersion": "management.cattle.io/v3", "kind": "Project", "metadata": {"name": pname},
        "spec": {"clusterName": "local", "resourceQuota": {"limit": {"limitsMemory": "10Gi"}},
                 "namespaceDefaultResourceQuota": {"limit": {"limitsMemory": "2Gi"}}}})
    names = ["emu-proj-%s-%d" % (tag, i) for i in range(2)]
    try:
        for n in names:
            rest.create("/api/v1/namespaces", {"metadata": {"name": n, "annotations": {
                rancher_mod.PROJECT_ANNOTATION: "local:" + pname}}})
        # both get the project's namespace default
        for n in names:
            wait(lambda n=n: [q for q in rest.get("/api/v1/namespaces/%s/resourcequotas" % n)["items"]
                              if rancher_mod.is_rancher_quota(q)], 10, "default quota in " + n)
        wait(lambda: rest.get("/apis/management.cattle.io/v3/namespaces/local/projects/" + pname)
             ["spec"]["resourceQuota"].get("usedLimit") == {"limit": {"limitsMemory": "4Gi"}}, 10,
             "project usedLimit = both namespace defaults")
        # raising one namespace over the project limit is not applied
        ann = {rancher_mod.QUOTA_ANNOTATION: json.dumps({"limit": {"limitsMemory": "9Gi"}})}
        rest.patch("/api/v1/namespaces/" + names[0], {"metadata": {"annotations": ann}})

        def invalid():
            status = json.loads(rest.get("/api/v1/namespaces/" + names[0])["metadata"]["annotations"]
                                .get(rancher_mod.STATUS_ANNOTATION, "{}"))
            return [c for c in status.get("Conditions", []) if c["Type"] == "ResourceQuotaValidated"
                    and c["Status"] == "False"]
        (c,) = wait(invalid, 10, "ResourceQuotaValidated False")
        assert "exceeds project limit" in c["Message"]
        q = [q for q in rest.get("/api/v1/namespaces/%s/resourcequotas" % names[0])["items"]
             if rancher_mod.is_rancher_quota(q)][0]
        assert parse_rl(q["spec"]["hard"]) == parse_rl({"limits.memory": "2Gi"})
    finally:
        for n in names:
            rest.delete("/api/v1/namespaces/" + n)
        rest.delete("/apis/management.cattle.io/v3/namespaces/local/projects/" + pname)


def rancher_managed_quota(lab, rest, ns, limits_cpu, limits_memory):
    """ns's Rancher-managed quota, from the namespace's Rancher annotation with these limits (the emulated agent
    creates it), once its status is ready: (the quota, its API path)."""
    ann = {rancher_mod.QUOTA_ANNOTATION: json.dumps({"limit": {"limitsCpu": limits_cpu, "limitsMemory": limits_memory}})}
    rest.patch("/api/v1/namespaces/" + ns, {"metadata": {"annotations": ann}})
    (q,) = wait(lambda: [q for q in rest.get("/api/v1/namespaces/%s/resourcequotas" % ns)["items"]
                         if rancher_mod.is_rancher_quota(q)], 10, "Rancher quota")
    lab.wait_quota_ready(ns, q["metadata"]["name"])
    return q, "/api/v1/namespaces/%s/resourcequotas/%s" % (ns, q["metadata"]["name"])


def test_harvester_ratio_setting_and_quota_scaling(lab, rest, emu, ns, knobs):
    from kubernetes.client.exceptions import ApiException
    from kvqlab.emulator import collection
    sizing = collection.core()[0]
    setting = "/apis/harvesterhci.io/v1beta1/settings/additional-guest-memory-overhead-ratio"
    body = {"apiVersion": "harvesterhci.io/v1beta1", "kind": "Setting",
            "metadata": {"name": "additional-guest-memory-overhead-ratio"}, "default": "1.5", "value": "2.0"}
    try:
        rest.create("/apis/harvesterhci.io/v1beta1/settings", body)
    except ApiException:
        rest.patch(setting, {"value": "2.0"})
    knobs(harvester=True, migration_seconds=1.5, source_pod_delay_seconds=3)
    q, qpath = rancher_managed_quota(lab, rest, ns, "10", "20Gi")
    make_vm(rest, ns, "vm1", cpu=2, memory="2Gi")
    v = wait_running(rest, ns, "vm1")
    kv = rest.get(KV + "/namespaces/kubevirt/kubevirts/kubevirt")
    settings = {"additional-guest-memory-overhead-ratio": rest.get(setting)}
    config = sizing.config_from_cluster(kv, settings, kubevirt_version=KV_VERSION[1:])
    expected = sizing.launcher_pod(v, config, quota_tracks=frozenset(["limits.cpu", "limits.memory"]))
    (pod,) = launcher_pods(rest, ns, "vm1")
    assert parse_rl(pod["spec"]["containers"][0]["resources"]["limits"]) == dict(expected.containers[0].limits)
    m = migrate(rest, ns, "vm1")
    key = rancher_mod.HARVESTER_MIGRATING_PREFIX + v["metadata"]["uid"]

    def scaled():
        cur = rest.get(qpath)
        return key in (cur["metadata"].get("annotations") or {}) and cur
    cur = wait(scaled, 10, "Harvester migrating annotation")
    delta = parse_rl(json.loads(cur["metadata"]["annotations"][key]))
    assert delta == {"limits.cpu": expected.containers[0].limits["cpu"],
                     "limits.memory": expected.containers[0].limits["memory"]}
    assert parse_rl(cur["spec"]["hard"])["limits.memory"] == parse_rl({"m": "20Gi"})["m"] + delta["limits.memory"]
    wait(lambda: phase_of(rest, ns, m) == "Succeeded", 20, "Succeeded")
    # Harvester gives the delta back when the migration is final, before the source pod is gone
    wait(lambda: key not in (rest.get(qpath)["metadata"].get("annotations") or {}), 10, "annotation removed")
    assert parse_rl(rest.get(qpath)["spec"]["hard"])["limits.memory"] == parse_rl({"m": "20Gi"})["m"]
    # the opt-out annotation leaves the quota alone
    rest.patch(qpath, {"metadata": {"annotations": {rancher_mod.HARVESTER_SKIP: "true"}}})
    m2 = migrate(rest, ns, "vm1")
    wait(lambda: phase_of(rest, ns, m2) in ("Running", "Succeeded"), 20, "second migration running")
    assert not [k for k in rest.get(qpath)["metadata"]["annotations"] if k.startswith(rancher_mod.HARVESTER_MIGRATING_PREFIX)]
    rest.delete(setting)


def test_harvester_v19_compensation_resync_flag_and_lock_down(lab, rest, emu, ns, knobs):
    """Harvester v1.9 (knob harvester_version): a namespace whose usage is above its Rancher limit (the overhead
    ratio grew after the VM started) migrates a VM. Harvester adds the VM's delta (memory limit + overhead, CPU
    limit) and the resync flag, its quota controller follows and clears the flag; the delta is not enough, the
    target pod is refused by quota, and Harvester compensates used + target - hard + 128Mi (= 64Mi short + 128Mi).
    The target pod is admitted. With Rancher's lock-down switched on mid-migration, Harvester's restore at the end
    is refused (it writes as its ServiceAccount, not Rancher's): the delta and the compensation stay behind, the
    refusal is logged and retried while the emulator goes on (the migration completes, the source pod too); once
    the lock-down is off the retry restores the quota to its base and leaves the flag "false"."""
    knobs(harvester=True, harvester_version="v1.9.0", migration_seconds=0.5, source_pod_delay_seconds=1)
    q, qpath = rancher_managed_quota(lab, rest, ns, "10", "8Gi")
    make_vm(rest, ns, "vm1", cpu=1, memory="1Gi")
    v = wait_running(rest, ns, "vm1")
    (pod,) = launcher_pods(rest, ns, "vm1")
    compute = parse_rl(pod["spec"]["containers"][0]["resources"]["limits"])
    used = wait(lambda: parse_rl(quota(rest, ns, q["metadata"]["name"])["status"].get("used")).get("limits.memory"),
                15, "usage charged")
    base_mem = used - 64 * 2**20                  # the VM's use is 64Mi above its namespace's limit
    ann = {rancher_mod.QUOTA_ANNOTATION: json.dumps({"limit": {"limitsCpu": "10", "limitsMemory": str(base_mem)}})}
    rest.patch("/api/v1/namespaces/" + ns, {"metadata": {"annotations": ann}})
    wait(lambda: parse_rl(rest.get(qpath)["spec"]["hard"])["limits.memory"] == base_mem, 10, "Rancher's new limit")
    key = rancher_mod.HARVESTER_MIGRATING_PREFIX + v["metadata"]["uid"]
    knobs(stall_migrations="vm1")                 # keep it Running once admitted: the scaled state stays to look at
    m = migrate(rest, ns, "vm1")
    wait(lambda: phase_of(rest, ns, m) == "Running", 30, "the migration admitted after the compensation")
    assert emu.rejections(ns, m), "the target pod was never refused by quota"
    cur = rest.get(qpath)
    a = cur["metadata"]["annotations"]
    assert parse_rl(json.loads(a[key])) == {"limits.cpu": 1, "limits.memory": compute["memory"]}   # + overhead
    assert parse_rl(json.loads(a[rancher_mod.HARVESTER_COMPENSATION])) == {"limits.memory": 192 * 2**20}
    assert a[rancher_mod.HARVESTER_RESYNC] == "false"
    assert parse_rl(cur["spec"]["hard"]) == {"limits.cpu": 11,
                                             "limits.memory": base_mem + compute["memory"] + 192 * 2**20}

    # Rancher's lock-down: Harvester's restore at the end of the migration is refused, logged, retried
    knobs(rancher_lockdown=True)
    emulator.wait_lockdown(lab, True)
    knobs(stall_migrations="")
    wait(lambda: phase_of(rest, ns, m) == "Succeeded", 20, "Succeeded")
    wait(lambda: emu.count("update of ResourceQuota %s refused" % q["metadata"]["name"]) >= 2, 20,
         "Harvester's refused, retried restore")
    wait(lambda: all(p["status"].get("phase") == "Succeeded" for p in launcher_pods(rest, ns, "vm1")
                     if p["spec"].get("nodeName") == v["status"]["nodeName"]), 20,
         "the source pod completed (the emulator goes on)")
    left = rest.get(qpath)["metadata"]["annotations"]
    assert key in left and rancher_mod.HARVESTER_COMPENSATION in left   # nobody but an administrator removes them
    assert emu.running()

    knobs(rancher_lockdown=False)
    emulator.wait_lockdown(lab, False)

    def restored():
        cur = rest.get(qpath)
        a = cur["metadata"].get("annotations") or {}
        return (key not in a and rancher_mod.HARVESTER_COMPENSATION not in a and a.get(rancher_mod.HARVESTER_RESYNC) ==
                "false" and parse_rl(cur["spec"]["hard"]) == {"limits.cpu": 10, "limits.memory": base_mem}) and cur
    wait(restored, 40, "Harvester's restore once the lock-down is off")


def test_scenario_a_loads_near_full(lab, rest, emu):
    sc = scenarios.load("a")
    try:
        result = scenarios.apply(lab, sc, timeout=60)
        assert result.vms == [("a-tenant", "a-vm-1")]

        def charged():
            current = quota(rest, "a-tenant", "a-tenant-quota")
            used_now = (current.get("status") or {}).get("used", {}).get("limits.memory")
            return current if used_now not in (None, "0") else None
        q = wait(charged, 15, "usage")
        used = parse_rl(q["status"]["used"])["limits.memory"]
        hard = parse_rl(q["status"]["hard"])["limits.memory"]
        ratio = float(used / hard)
        assert 0.885 <= ratio <= 0.925, ratio   # 91.6% with the core's v1.3.1 sizes
        # and its migration really is rejected by the quota
        m = migrate(rest, "a-tenant", "a-vm-1")
        wait(lambda: any(c["type"] == "migrationRejectedByResourceQuota"
                         for c in (vmim(rest, "a-tenant", m).get("status") or {}).get("conditions") or []),
             15, "rejected")
    finally:
        scenarios.delete(lab, sc)


def test_eviction_of_live_migratable_vm_pod_is_refused(lab, rest, emu, ns):
    """virt-api's eviction webhook: 429 with KubeVirt's message, the VMI marked for evacuation, no PDB (KubeVirt
    v1.x creates none); the evacuation controller then migrates the VM off its node."""
    from kubernetes.client.exceptions import ApiException
    vm = scenarios.vm_object({"name": "ev", "namespace": ns, "cpu": 1, "memory": "1Gi",
                              "limits": {"cpu": "1", "memory": "1Gi"}, "evictionStrategy": "LiveMigrate"})
    rest.create(KV + "/namespaces/%s/virtualmachines" % ns, vm)
    source = wait_running(rest, ns, "ev")["status"]["nodeName"]
    (pod,) = launcher_pods(rest, ns, "ev")
    with pytest.raises(ApiException) as err:
        rest.create("/api/v1/namespaces/%s/pods/%s/eviction" % (ns, pod["metadata"]["name"]), {
            "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod["metadata"]["name"]}})
    assert err.value.status == 429
    assert json.loads(err.value.body)["message"] == 'admission webhook "virt-launcher-eviction-interceptor.kubevirt.io" ' \
        'denied the request: Eviction triggered evacuation of VMI "%s/ev"' % ns
    assert rest.get("/apis/policy/v1/namespaces/%s/poddisruptionbudgets" % ns)["items"] == []
    (m,) = wait(lambda: rest.get(KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns)["items"], 10,
                "evacuation migration")
    assert m["metadata"]["generateName"] == "kubevirt-evacuation-"
    assert m["metadata"]["annotations"]["kubevirt.io/evacuationMigration"] == source
    wait(lambda: phase_of(rest, ns, m["metadata"]["name"]) == "Succeeded", 30, "evacuation migration Succeeded")
    moved = vmi(rest, ns, "ev")
    assert moved["status"]["nodeName"] != source
    assert not moved["status"].get("evacuationNodeName")   # cleared when the target took over


@pytest.mark.parametrize("name", ["b", "c", "d"])
def test_scenarios_b_c_d(lab, rest, emu, name):
    sc = scenarios.load(name)
    try:
        result = scenarios.apply(lab, sc, timeout=120)
        quotas = {}
        for ns in result.namespaces:
            for q in rest.get("/api/v1/namespaces/%s/resourcequotas" % ns)["items"]:
                quotas[(ns, q["metadata"]["name"])] = q
        assert sorted(quotas) == sorted(result.quotas)          # no stray Rancher default-xxxxx
        for q in quotas.values():                                # everything fits, with little room
            fits = all(parse_rl(q["status"]["used"])[k] <= v for k, v in parse_rl(q["status"]["hard"]).items())
            assert fits, q["status"]
        if name == "b":
            m = migrate(rest, "b-tenant", "b-vm-1")
            wait(lambda: any(c["type"] == "migrationRejectedByResourceQuota"
                             for c in (vmim(rest, "b-tenant", m).get("status") or {}).get("conditions") or []),
                 15, "rejected")
        if name == "c":
            emulator.wait_lockdown(lab, True)    # Rancher scenarios run with Rancher 2.14+'s quota lock-down
            want = parse_rl({"limitsCpu": "5100m", "limitsMemory": "10524Mi"})
            wait(lambda: parse_rl((rest.get("/apis/management.cattle.io/v3/namespaces/local/projects/p-kvq")
                                   ["spec"]["resourceQuota"].get("usedLimit") or {}).get("limit")) == want,
                 10, "project usedLimit")
        if name == "d":
            pods = [p for p in rest.get("/api/v1/pods", labelSelector="kubevirt.io=virt-launcher")["items"]
                    if p["metadata"]["namespace"].startswith("d-tenant-")]
            assert len(pods) == 20 and {p["spec"]["nodeName"] for p in pods} == {"node-1"}
    finally:
        scenarios.delete(lab, sc)


def test_back_to_back_migrations_complete_every_source_pod(lab, rest, emu, ns, knobs):
    knobs(source_pod_delay_seconds=3, migration_seconds=0.2)
    make_vm(rest, ns, "vm1")
    wait_running(rest, ns, "vm1")
    first = migrate(rest, ns, "vm1")
    wait(lambda: phase_of(rest, ns, first) == "Succeeded", 15, "first Succeeded")
    second = migrate(rest, ns, "vm1")
    wait(lambda: phase_of(rest, ns, second) == "Succeeded", 15, "second Succeeded")
    # two vacated source pods, each completing on its own clock; one pod left running
    wait(lambda: sorted((p.get("status") or {}).get("phase") for p in launcher_pods(rest, ns, "vm1"))
         == ["Running", "Succeeded", "Succeeded"], 15, "both source pods Succeeded")
    (live,) = [p for p in launcher_pods(rest, ns, "vm1") if p["status"]["phase"] == "Running"]
    assert live["spec"]["nodeName"] == vmi(rest, ns, "vm1")["status"]["nodeName"]
