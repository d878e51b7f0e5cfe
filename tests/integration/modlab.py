# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Helpers for the module-level lab tests: run the real modules through ansible-playbook against the lab,
snapshot what the cluster holds, build tenants with the KubeVirt emulator.

Used by conftest.py (the lab fixtures of test_check_lab.py, test_reservations_lab.py, test_modules_lab.py and
test_bad_inputs_lab.py), those modules and test_roles_lab.py. Every module runs in a separate ansible-playbook
process with the collection found through ANSIBLE_COLLECTIONS_PATH (the symlink the repository-root
conftest.py makes) and authenticates only through K8S_AUTH_* variables.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import calendar
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time

import pytest

import kvqlab   # installed from tests/lab by make deps (tests/lab/pyproject.toml)
from kvqlab import emulator, scenarios
from kvqlab.emulator import _rest_for

from ansible_collections.kvquota.maintenance.plugins.module_utils import kvquota_module
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import parse_quantity  # noqa: E402
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import headroom  # noqa: E402

COLLECTIONS = os.environ["KVQ_COLLECTIONS_PATH"]  # set by the repository root conftest.py
KV = "/apis/kubevirt.io/v1"
LEDGER = "kvquota.maintenance/ledger"   # where 0.1.0 kept ledgers (annotations); kvquota must not write it now
OPERATOR_NS = "kvquota-system"           # where kvquota keeps ledgers (ConfigMaps) and locks (Leases)


def connect(auth, **options):
    """A Cluster for auth alone, opened as the modules open theirs (kvquota_module.connect: kubernetes.core's
    get_api_client; options: its timeout and outage_budget). kubernetes.core also reads K8S_AUTH_* variables: this process's are
    set aside meanwhile, as an ansible_env run has only the test's."""
    saved = dict((name, os.environ.pop(name)) for name in list(os.environ) if name.startswith("K8S_AUTH_"))
    try:
        return kvquota_module.connect(auth, **options)
    finally:
        os.environ.update(saved)


def required():
    return os.environ.get("KVQ_LAB_REQUIRED", "") not in ("", "0", "false", "no")


def require_lab_build():
    """Skip the calling test when the lab binaries are not built (make lab-build); fail with KVQ_LAB_REQUIRED=1."""
    try:
        kvqlab.find_bin_dir()
    except kvqlab.LabError as exc:
        if required():
            pytest.fail(str(exc))
        pytest.skip(str(exc))


def lab_fixture(tmp_path_factory, label):
    """Generator body of a module-scoped lab fixture (conftest.py's lab): attach to $KVQ_LAB_RUN_DIR, else
    start one, stopped afterwards."""
    run_dir = os.environ.get("KVQ_LAB_RUN_DIR")
    if run_dir:
        yield kvqlab.attach(run_dir)
        return
    yield from private_lab(tmp_path_factory, label)


def private_lab(tmp_path_factory, label, nodes=3):
    """Generator body of a module-scoped fixture whose lab is its own, never $KVQ_LAB_RUN_DIR's (a test that
    injects faults must not hit a lab other tests use): started with nodes nodes, stopped afterwards."""
    require_lab_build()
    rd = tmp_path_factory.mktemp(label)
    started = kvqlab.up(run_dir=rd, nodes=nodes)
    try:
        yield started
    finally:
        kvqlab.down(rd)


# ---------------------------------------------------------------------------
# running modules

def ansible_env(kubeconfig, extra=None):
    """The environment of an ansible-playbook run: only K8S_AUTH_* carries the connection."""
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith("K8S_AUTH_") and k != "KUBECONFIG")
    env.update({
        "ANSIBLE_COLLECTIONS_PATH": COLLECTIONS,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "K8S_AUTH_KUBECONFIG": str(kubeconfig),
        # nothing may fall back to the default kubeconfig behind the test's back
        "KUBECONFIG": "/nonexistent/kvq-test-kubeconfig",
    })
    env.update(extra or {})
    return env


class Result(dict):
    """A module's registered result, plus the ansible-playbook run that produced it."""

    stdout = ""
    stderr = ""
    seconds = 0.0

    @property
    def failed(self):
        return bool(self.get("failed"))

    @property
    def msg(self):
        return self.get("msg") or ""


def _playbook(task, out):
    return [{
        "hosts": "localhost",
        "gather_facts": False,
        "tasks": [
            dict(task, name="module under test", register="kvq_result", ignore_errors=True),
            {"name": "save the result", "ansible.builtin.copy": {"content": "{{ kvq_result | to_json }}",
                                                                 "dest": out},
             "check_mode": False, "diff": False},
        ],
    }]


def run_task(task, kubeconfig, check=False, diff=False, env=None, extra_vars=None, timeout=600):
    """Run one task (a dict such as {"kvquota.maintenance.kvquota_check": {...}}) with ansible-playbook;
    returns its registered result as a Result."""
    with tempfile.TemporaryDirectory(prefix="kvq-ansible-") as tmp:
        out = os.path.join(tmp, "result.json")
        book = os.path.join(tmp, "play.yml")
        with open(book, "w") as fh:
            json.dump(_playbook(task, out), fh)   # JSON is YAML
        cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
               if os.path.exists(os.path.join(os.path.dirname(sys.executable), "ansible-playbook"))
               else "ansible-playbook", "-i", "localhost,", "-c", "local", book]
        if extra_vars:
            vars_file = os.path.join(tmp, "vars.json")
            with open(vars_file, "w") as fh:
                json.dump(extra_vars, fh)
            cmd += ["-e", "@" + vars_file]
        if check:
            cmd.append("--check")
        if diff:
            cmd.append("--diff")
        started = time.monotonic()
        proc = subprocess.run(cmd, env=ansible_env(kubeconfig, env), capture_output=True, text=True,
                              timeout=timeout, cwd=tmp, check=False)
        if not os.path.exists(out):
            raise AssertionError("ansible-playbook produced no result (rc %s)\nstdout:\n%s\nstderr:\n%s"
                                 % (proc.returncode, proc.stdout[-4000:], proc.stderr[-4000:]))
        with open(out) as fh:
            result = Result(json.load(fh))
    result.stdout, result.stderr, result.seconds = proc.stdout, proc.stderr, time.monotonic() - started
    return result


def run_module(name, args, kubeconfig, **kwargs):
    """Run kvquota.maintenance.<name> with args (a dict) through ansible-playbook."""
    return run_task({"kvquota.maintenance.%s" % name: args}, kubeconfig, **kwargs)


def assert_ok(result, what="module"):
    assert not result.failed, "%s failed: %s\n%s" % (what, result.msg, json.dumps(result, indent=1)[:4000])
    return result


def assert_one_line_error(result, *fragments):
    """A failed result whose msg is one line, contains 'Fix:' and every fragment; returns msg."""
    assert result.failed, "expected a failure, got %s" % json.dumps(result, indent=1)[:3000]
    msg = result.msg
    assert "\n" not in msg, "not one line: %r" % msg
    assert "Fix:" in msg, "no 'Fix:' in %r" % msg
    assert "Traceback" not in msg and "MODULE FAILURE" not in msg, msg
    for fragment in fragments:
        assert fragment in msg, "%r not in %r" % (fragment, msg)
    return msg


# ---------------------------------------------------------------------------
# reading the cluster (as admin, raw JSON)

def rest(lab):
    return _rest_for(lab)


def wait(pred, timeout=30, what="condition", interval=0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError("timed out after %ss waiting for %s (last: %r)" % (timeout, what, last))


def quota(r, ns, name):
    return r.get("/api/v1/namespaces/%s/resourcequotas/%s" % (ns, name))


def quotas(r, ns):
    return r.get("/api/v1/namespaces/%s/resourcequotas" % ns)["items"]


def namespace(r, ns):
    return r.get("/api/v1/namespaces/%s" % ns)


def ledger(r, quota_obj):
    """The ledger (decoded JSON) kvquota keeps for a quota in the operator namespace, or None."""
    cm = r.get_or_none("/api/v1/namespaces/%s/configmaps/kvq-ledger-%s" % (OPERATOR_NS, quota_obj["metadata"]["uid"]))
    return json.loads(cm["data"]["ledger"]) if cm else None


def ledgers(r):
    """{"ns/quota": ledger} of every ledger in the operator namespace."""
    items = r.get("/api/v1/namespaces/%s/configmaps" % OPERATOR_NS, labelSelector="kvquota.maintenance/ledger=true")
    return dict((cm["metadata"]["annotations"]["kvquota.maintenance/quota"], json.loads(cm["data"]["ledger"]))
                for cm in items["items"])


def locks(r, include_expired=False):
    """Names of kvquota's namespace locks in the operator namespace (expired ones, left by a killed run and free
    to take, only with include_expired)."""
    now = time.time()
    names = []
    for lease in r.get("/apis/coordination.k8s.io/v1/namespaces/%s/leases" % OPERATOR_NS)["items"]:
        spec = lease.get("spec") or {}
        renewed = spec.get("renewTime") or spec.get("acquireTime")
        expired = not spec.get("holderIdentity") or (renewed and calendar.timegm(time.strptime(
            renewed.split(".")[0].rstrip("Z"), "%Y-%m-%dT%H:%M:%S")) + int(spec.get("leaseDurationSeconds") or 0) <= now)
        if lease["metadata"]["name"].startswith("kvq-lock-") and (include_expired or not expired):
            names.append(lease["metadata"]["name"])
    return sorted(names)


def launcher_pods(r, ns):
    return r.get("/api/v1/namespaces/%s/pods" % ns, labelSelector="kubevirt.io=virt-launcher")["items"]


def vmim(r, ns, name):
    return r.get(KV + "/namespaces/%s/virtualmachineinstancemigrations/%s" % (ns, name))


def create_vmim(r, ns, vmi, name=None):
    name = name or "kvq-%s-%s" % (vmi, secrets.token_hex(2))
    r.create(KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns, {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": name}, "spec": {"vmiName": vmi}})
    return name


def rejected(obj):
    return any(c.get("type") == "migrationRejectedByResourceQuota" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def phase(obj):
    return (obj.get("status") or {}).get("phase")


SNAPSHOT_KINDS = (
    ("resourcequotas", "/api/v1/resourcequotas"),
    ("namespaces", "/api/v1/namespaces"),
    ("virtualmachines", KV + "/virtualmachines"),
    ("virtualmachineinstances", KV + "/virtualmachineinstances"),
    ("virtualmachineinstancemigrations", KV + "/virtualmachineinstancemigrations"),
    ("leases", "/apis/coordination.k8s.io/v1/leases"),
    ("configmaps", "/api/v1/namespaces/%s/configmaps" % OPERATOR_NS),
    ("kubevirts", KV + "/kubevirts"),
)


def snapshot(r, namespaces=None):
    """{kind: {namespace/name: resourceVersion}} of every namespace, VM, VMI, VMIM, lease, KubeVirt CR and operator
    namespace ConfigMap (leases of kube-node-lease, renewed by kwok's heartbeats, left out), the spec and
    metadata of every quota, plus the events kvquota created."""
    result = {}
    for kind, path in SNAPSHOT_KINDS:
        items = r.get(path)["items"]
        entries = {}
        for item in items:
            meta = item["metadata"]
            if kind == "leases" and meta.get("namespace") == "kube-node-lease":
                continue
            if namespaces is not None and kind != "kubevirts":
                ns = meta["name"] if kind == "namespaces" else meta.get("namespace")
                if ns not in namespaces and ns != OPERATOR_NS:
                    continue
            key = "%s/%s" % (meta.get("namespace") or "", meta["name"])
            if kind == "resourcequotas":
                # status.used moves with the tenant's pods (the quota controller writes it): what kvquota could
                # write is the spec and the metadata
                entries[key] = json.dumps([item.get("spec"), meta.get("annotations"), meta.get("labels")],
                                          sort_keys=True)
            else:
                entries[key] = meta["resourceVersion"]
        result[kind] = entries
    events = r.get("/api/v1/events", labelSelector="app.kubernetes.io/managed-by=kvquota.maintenance")["items"]
    result["kvquota_events"] = dict(("%s/%s" % (e["metadata"]["namespace"], e["metadata"]["name"]),
                                     e["metadata"]["resourceVersion"]) for e in events
                                    if namespaces is None or e["metadata"]["namespace"] in namespaces)
    return result


def assert_unchanged(before, after):
    for kind in before:
        if before[kind] != after[kind]:
            changed = sorted(k for k in set(before[kind]) | set(after[kind])
                             if before[kind].get(k) != after[kind].get(k))
            raise AssertionError("%s changed: %s" % (kind, changed[:20]))


# ---------------------------------------------------------------------------
# tenants

KUBEVIRT_A = {"version": "1.3.1", "configuration": {
    "additionalGuestMemoryOverheadRatio": "1.5",
    "migrations": {"parallelMigrationsPerCluster": 5, "parallelOutboundMigrationsPerNode": 2,
                   "bandwidthPerMigration": "64Mi", "completionTimeoutPerGiB": 800, "progressTimeout": 150}}}


def tenant_scenario(ns, vms=1, hard=None, kubevirt=None):
    """A scenario dict in the shape of tests/lab/scenarios/a.yaml (one tenant near the top of its
    limits.memory quota) in namespace ns with vms 2-CPU 4Gi VMs."""
    return {
        "name": "mod-" + ns,
        "kubevirt": kubevirt or KUBEVIRT_A,
        "namespaces": [{"name": ns, "labels": {"kvqlab/test": "true"}, "quotas": [{
            "name": "compute",
            "hard": hard or {"limits.memory": "%dMi" % (5000 * vms), "limits.cpu": str(6 * vms),
                             "requests.cpu": str(4 * vms), "pods": str(10 * vms)}}]}],
        "vms": [{"name": "vm-%d" % (i + 1), "namespace": ns, "cpu": 2, "memory": "4Gi",
                 "limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "200m"}} for i in range(vms)],
    }


def make_tenant(lab, ns, vms=1, hard=None):
    """Apply a tenant scenario (the emulator must be running) and wait until it is settled."""
    sc = scenarios.from_dict(tenant_scenario(ns, vms, hard))
    scenarios.apply(lab, sc, timeout=120)
    r = rest(lab)
    wait(lambda: settled(r, ns, vms), 30, "tenant %s settled" % ns)
    return sc


def settled(r, ns, vm_count):
    """Exactly vm_count launcher pods count and every quota's status.used says so."""
    live = [p for p in launcher_pods(r, ns) if phase(p) not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")]
    if len(live) != vm_count or any(phase(p) != "Running" for p in live):
        return False
    for q in quotas(r, ns):
        st = q.get("status") or {}
        if "pods" in (st.get("used") or {}) and int(st["used"]["pods"]) != vm_count:
            return False
        if st.get("hard") != (q.get("spec") or {}).get("hard"):
            return False
    return True


def delete_namespace(r, ns):
    try:
        r.delete("/api/v1/namespaces/" + ns)
    except Exception:  # noqa: BLE001 - best effort clean-up
        pass


def start_emulator(lab, **defaults):
    defaults.setdefault("migration_seconds", 0.3)
    defaults.setdefault("source_pod_delay_seconds", 1)
    return emulator.start(lab, **defaults)


def largest_batch_need(user, batches):
    """{namespace: {resource: the largest need of one batch}} from headroom.batch_headroom, before the run."""
    cluster = connect({"kubeconfig": str(user)})
    largest = {}
    for batch in batches:
        vms = [dict(zip(("namespace", "name"), k.split("/", 1))) for k in batch["vms"]]
        needs, _refs, _report = headroom.batch_headroom(cluster, vms)
        per_ns = {}
        for (ns, _quota), rl in needs.items():
            for res, value in rl.items():
                per_ns.setdefault(ns, {}).setdefault(res, 0)
                per_ns[ns][res] += parse_quantity(value)
        for ns, rl in per_ns.items():
            for res, value in rl.items():
                largest.setdefault(ns, {})[res] = max(largest.get(ns, {}).get(res, 0), value)
    return largest
