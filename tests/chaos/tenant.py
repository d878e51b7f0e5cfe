# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tenant campaign (issue 10, item 9): every tenant attack on kvquota's state, each during a real drain.

    python3 tests/chaos/tenant.py [--quick] [--json FILE] [--keep] [--only a,b]

One lab (tests/lab) with tests/chaos/scenarios/tenant.yaml (two plain tenant namespaces with tight quotas and a
Rancher-managed one), the headroom fence installed as documented (kubectl apply -f roles/install/files/fence.yml; the lab user
is bound to every role of roles/install/files/*.yml), the Rancher 2.14+ quota lock-down on. For each attack,
playbooks/node_maintenance.yml drains the node that holds the attacked namespace's VMs, run with
ansible-playbook as the least-privilege lab user, and the attack is made AS A TENANT (kvqlab.tenants: a
ServiceAccount bound to edit or admin in its namespace, or a Rancher project member who may patch the project's
Namespaces) at the moment the namespace holds a reservation (a kvq-ledger-* ConfigMap with an active
reservation for one of its quotas in the operator namespace), or before the drain where the attack is a trap.

Issue 24's attacks (run first: each drains a node of its own in the scenario, node-5 to node-8) go after what a
tenant writes or starts after the plan: a PVC taking the headroom of a backend-storage PVC (pvc-capture), a VM of a
later batch grown through a hook-sidecar annotation or the namespace's auto-memory-limits-ratio label (grow-*), the
same label before the plan, an invalid annotation beside other tenants' VMs, the tenant's own migrations of its
reserved VMs in drive and follow mode (the maintenance_window role beside `kubectl drain`), and a new VM during the
window. One that is not contained is followed by the administrator's forced cleanup (reset), so that the next
attacks start from the base.

Issue 27's attacks go after Rancher 2.14's `extended` limits and KubeVirt 1.9's memory overhead report: a project
member rewriting the extended map kvquota started in its namespace's annotation (rancher-extended), and hostile
values in a VMI's status.memory.memoryOverhead / status.migrationState.targetMemoryOverhead (hostile-memory-overhead;
written by the administrator in the lab, whose VMI has a status subresource the edit role cannot write, where on
KubeVirt the edit tenant can).

Checked for every attack:
- the drain completes, or fails only where it must (headroom taken without the fence, our migration deleted by
  the tenant) with a message naming the cause, and a re-run or the reaper then converges;
- no quota is ever above its base without an active reservation (a sampler reads every quota's spec.hard and
  the ledgers every ~0.3 s while the play runs);
- every quota ends at its base byte for byte (and the Rancher namespace annotation too); no kvq-ledger-*
  ConfigMap, no unexpired kvq-lock-* Lease, no fence entry is left;
- what the tenant tried on the operator namespace was refused (403).

Prints one line per attack and then
    tenant: N/N attacks contained (0 quota above base, 0 runs blocked, K refused by the fence)
--quick runs the reduced set meant for `make test`.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import argparse
import calendar
import datetime
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from kubernetes.client.exceptions import ApiException

# harness first: it puts the repository's test code and the collection on the path
from harness import LIVE as _LIVE, REPO, RUN_ROOT, kill_live as _kill_live, logger, quantities
from test_roles_lab import RoleLab, collections_path
from kvqlab import tenants
from kvqlab.procs import signal_tree
from kvqlab.emulator import rancher as rancher_mod
from kvqlab.emulator.rest import Rest


SCENARIO = str(REPO / "tests" / "chaos" / "scenarios" / "tenant.yaml")
FENCE_FILE = REPO / "roles" / "install" / "files" / "fence.yml"
OPERATOR_NS = "kvquota-system"
KV = "/apis/kubevirt.io/v1"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
FENCE_POLICY = "kvquota-headroom-fence"
FENCE_CONFIGMAP = "kvq-fence"
LEDGER_LABEL = "kvquota.maintenance/ledger=true"
LEDGER_QUOTA_ANNOTATION = "kvquota.maintenance/quota"
OLD_LEDGER = "kvquota.maintenance/ledger"           # 0.1.0's ledger annotation
RANCHER_ANNOTATION = rancher_mod.QUOTA_ANNOTATION
PLAIN = ("t-plain-1", "t-plain-2")
RANCHER_NS = "t-rancher"
# issue 24's tenants (tests/chaos/scenarios/tenant.yaml): a VM with a persistent EFI (backend-storage PVC), plain
# tenants beside others, and a Rancher namespace whose VMs take KubeVirt's automatic memory limit
PVC_NS, OTHER_NS, GROW_NS, AUTO_NS = "t-pvc", "t-other", "t-grow", "t-auto"
RANCHER_NAMESPACES = (RANCHER_NS, AUTO_NS)
ALL_NS = PLAIN + (RANCHER_NS, PVC_NS, OTHER_NS, GROW_NS, AUTO_NS)
HOOK_SIDECARS = "hooks.kubevirt.io/hookSidecars"
RATIO_LABEL = "alpha.kubevirt.io/auto-memory-limits-ratio"
ATTACK_LABEL = "kvqlab.io/tenant-attack"
FINAL = ("Succeeded", "Failed")
# bounded waits (as the chaos campaigns): a run that cannot release fails in a minute, not in the role's 10
BOUNDED = {"node_maintenance_release_timeout": 60, "node_maintenance_rescue_release_timeout": 20,
           "node_maintenance_poll_interval": 1}
RUN_TIMEOUT = 600
QUICK = False   # --quick: an attack with several drains may run only the one that matters most (see ATTACKS)


log = logger("tenant")


_num = quantities


def _now_stamp(offset=0):
    return (datetime.datetime.utcnow() + datetime.timedelta(seconds=offset)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _epoch(stamp):
    return calendar.timegm(time.strptime(stamp.split(".")[0].rstrip("Z"), "%Y-%m-%dT%H:%M:%S"))


def attempt(fn, *args, **kwargs):
    """(status, body text): 0 when the request went through, else the API's status code."""
    try:
        fn(*args, **kwargs)
        return 0, ""
    except ApiException as exc:
        return exc.status, " ".join(str(exc.body).split())


# ---------------------------------------------------------------------------------------------------------
# the lab

class Campaign(object):
    """The lab, the tenants, the bases, the playbook runs and the checks."""

    def __init__(self, keep=False):
        self.dir = Path(tempfile.mkdtemp(prefix="kvq-tenant-", dir=str(RUN_ROOT)))
        self.keep = keep
        log("lab in %s" % self.dir)
        try:
            self.r = RoleLab(self.dir, SCENARIO, knobs={"rancher_lockdown": True})
        except BaseException:
            import kvqlab
            kvqlab.down(str(self.dir))
            raise
        self.rest = self.r.rest
        self.install_fence()
        self.base = dict((ns, self.r.hard(ns)) for ns in ALL_NS)
        self.base_annotation = self.annotation(RANCHER_NS)
        self.base_annotations = dict((ns, self.annotation(ns)) for ns in RANCHER_NAMESPACES)
        self.tenants = {}
        for ns in PLAIN + (PVC_NS, OTHER_NS, GROW_NS):
            self.tenants[ns] = tenants.make(self.r.lab, ns, roles=("edit", "admin"))
        for ns in RANCHER_NAMESPACES:
            self.tenants[ns] = tenants.make(self.r.lab, ns, project_namespaces=[ns])
        self.runs = 0
        self.proc = None   # the playbook run drain() waits for (an attack's during() may look at it)

    def stop(self):
        if self.keep:
            log("lab left running in %s" % self.dir)
            return
        try:
            self.r.stop()
        except Exception as exc:  # noqa: BLE001 - best effort
            log("stopping %s: %s" % (self.dir, exc))
        shutil.rmtree(str(self.dir), ignore_errors=True)

    def tenant(self, ns, role="edit"):
        return Rest(self.tenants[ns][role].api_client())

    # -- the fence, installed and removed as the administrator does -----------------------------------
    def install_fence(self):
        self.r.lab.kubectl("apply", "-f", str(FENCE_FILE))

    def uninstall_fence(self):
        """The documented opt-out minus the ClusterRole (the lab user keeps its binding to it)."""
        for kind in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
            attempt(self.rest.delete, "%s/%s/%s" % (ADMISSION, kind, FENCE_POLICY))

    # -- reads --------------------------------------------------------------------------------------
    def annotation(self, ns):
        return (self.r.namespace(ns)["metadata"].get("annotations") or {}).get(RANCHER_ANNOTATION)

    def ledgers(self):
        """{"ns/quota": ledger} of the ledgers in the operator namespace."""
        items = self.rest.get("/api/v1/namespaces/%s/configmaps" % OPERATOR_NS, labelSelector=LEDGER_LABEL)["items"]
        out = {}
        for cm in items:
            key = (cm["metadata"].get("annotations") or {}).get(LEDGER_QUOTA_ANNOTATION) or cm["metadata"]["name"]
            try:
                out[key] = json.loads((cm.get("data") or {}).get("ledger") or "{}")
            except ValueError:
                out[key] = {"unparsable": True}
        return out

    def active(self, ns=None):
        """Keys "ns/quota" whose ledger holds an active reservation (of namespace ns)."""
        return sorted(k for k, v in self.ledgers().items()
                      if v.get("reservations") and (ns is None or k.split("/")[0] == ns))

    def locks(self):
        now = time.time()
        out = []
        for lease in self.rest.get("/apis/coordination.k8s.io/v1/namespaces/%s/leases" % OPERATOR_NS)["items"]:
            spec = lease.get("spec") or {}
            renewed = spec.get("renewTime") or spec.get("acquireTime")
            live = spec.get("holderIdentity") and renewed and \
                _epoch(renewed) + int(spec.get("leaseDurationSeconds") or 0) > now
            if lease["metadata"]["name"].startswith("kvq-lock-") and live:
                out.append("%s (holder %s)" % (lease["metadata"]["name"], spec.get("holderIdentity")))
        return out

    def fence_entries(self):
        cm = self.rest.get_or_none("/api/v1/namespaces/%s/configmaps/%s" % (OPERATOR_NS, FENCE_CONFIGMAP)) or {}
        return sorted(k for k in (cm.get("data") or {}) if k.startswith(("ns.", "vmi.")))

    def vmi_nodes(self, ns=None):
        return dict((v["metadata"]["name"], (v.get("status") or {}).get("nodeName"))
                    for v in self.r.vmis(ns))

    def node_for(self, ns):
        """The node holding most VMs of namespace ns (ties: the node holding most VMs)."""
        counts, total = {}, {}
        for vmi in self.r.vmis():
            node = (vmi.get("status") or {}).get("nodeName")
            total[node] = total.get(node, 0) + 1
            if vmi["metadata"]["namespace"] == ns:
                counts[node] = counts.get(node, 0) + 1
        return sorted(counts, key=lambda n: (-counts[n], -total[n], n))[0]

    def charge_on(self, ns, node):
        """Sum of the limits of ns's launcher pods on node: what draining node reserves there, computed."""
        total = {}
        for pod in self.rest.get("/api/v1/namespaces/%s/pods" % ns, labelSelector="kubevirt.io=virt-launcher")["items"]:
            if pod["spec"].get("nodeName") != node or (pod.get("status") or {}).get("phase") in FINAL:
                continue
            for c in pod["spec"]["containers"]:
                for name, value in _num((c.get("resources") or {}).get("limits") or {}).items():
                    total["limits." + name] = total.get("limits." + name, 0) + value
        return total

    # -- the state every attack must leave ----------------------------------------------------------
    def problems(self, base=None, annotation=None, node=None):
        base = base or self.base
        annotation = self.base_annotation if annotation is None else annotation
        out = []
        for ns, hard in sorted(base.items()):
            now = self.r.hard(ns)
            if now != hard:
                out.append("quota of %s not at base: %s != %s" % (ns, json.dumps(now, sort_keys=True),
                                                                  json.dumps(hard, sort_keys=True)))
        if self.annotation(RANCHER_NS) != annotation:
            out.append("namespace %s annotation %s is %r, was %r" % (RANCHER_NS, RANCHER_ANNOTATION,
                                                                     self.annotation(RANCHER_NS), annotation))
        for ns in RANCHER_NAMESPACES:
            if ns != RANCHER_NS and self.annotation(ns) != self.base_annotations[ns]:
                out.append("namespace %s annotation %s is %r, was %r" % (ns, RANCHER_ANNOTATION, self.annotation(ns),
                                                                         self.base_annotations[ns]))
        left = sorted(self.ledgers())
        if left:
            out.append("ledger(s) left: %s" % left)
        if self.locks():
            out.append("unexpired lock(s) left: %s" % self.locks())
        if self.fence_entries():
            out.append("fence entries left: %s" % self.fence_entries())
        unfinished = ["%s/%s" % (m["metadata"]["namespace"], m["metadata"]["name"]) for m in self.r.vmims()
                      if (m.get("status") or {}).get("phase") not in FINAL
                      and not m["metadata"].get("labels", {}).get("kvqlab.io/tenant-attack")]
        if unfinished:
            out.append("migrations unfinished: %s" % unfinished)
        for v in self.r.vmis():
            st = v.get("status") or {}
            if st.get("phase") != "Running":
                out.append("VM %s/%s is %s" % (v["metadata"]["namespace"], v["metadata"]["name"], st.get("phase")))
            elif node and st.get("nodeName") == node:
                out.append("VM %s/%s still on %s" % (v["metadata"]["namespace"], v["metadata"]["name"], node))
        return out

    # -- playbook runs ------------------------------------------------------------------------------
    def start(self, extra_vars, name="node_maintenance", playbook=None):
        """ansible-playbook as the least-privilege lab user, in its own process group (playbook: a path instead of
        the collection's playbooks/<name>.yml)."""
        self.runs += 1
        tag = "%s-%d" % (name, self.runs)
        vars_file = self.dir / ("%s.vars.json" % tag)
        vars_file.write_text(json.dumps(extra_vars))
        out_file = self.dir / ("%s.out" % tag)
        env = dict(os.environ)
        env.update({
            "ANSIBLE_COLLECTIONS_PATH": collections_path(),
            "K8S_AUTH_KUBECONFIG": str(self.r.lab.user_kubeconfig),
            "KUBECONFIG": "/nonexistent/kvq-tenant-kubeconfig",
            "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_LOCALHOST_WARNING": "0", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
            "ANSIBLE_RETRY_FILES_ENABLED": "0", "PYTHONUNBUFFERED": "1",
        })
        cmd = ["ansible-playbook", str(playbook or REPO / "playbooks" / ("%s.yml" % name)), "-e", "@%s" % vars_file]
        with open(str(out_file), "w") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=str(self.dir),
                                    start_new_session=True)
        proc.out_file, proc.started = out_file, time.monotonic()
        _LIVE.append(proc)
        return proc

    def finish(self, proc, timeout=RUN_TIMEOUT):
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            signal_tree(proc.pid, signal.SIGKILL)
            proc.wait(60)
        _LIVE.remove(proc)
        return proc.returncode, Path(proc.out_file).read_text(errors="replace"), time.monotonic() - proc.started

    def run(self, extra_vars, name="node_maintenance"):
        return self.finish(self.start(extra_vars, name))

    def uncordon_all(self):
        for n in self.rest.get("/api/v1/nodes")["items"]:
            if n["spec"].get("unschedulable"):
                self.rest.patch("/api/v1/nodes/%s" % n["metadata"]["name"], {"spec": {"unschedulable": False}})

    def wait(self, pred, timeout, what, interval=0.2):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = pred()
            if value:
                return value
            time.sleep(interval)
        raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))


class Sampler(threading.Thread):
    """Every ~0.3 s while a play runs: every quota's spec.hard against its base, and the ledgers.

    A quota above its base is a leak only when no ledger covers it: kvquota writes its intent to the ledger before
    the quota (a reservation added, or removed on release) and deletes the ledger only once the quota is back at
    its base (Rancher: once spec.hard followed the annotation), so while a ledger exists it says what the quota
    must return to. The ledgers are read before and after the quotas (either order alone races with a write),
    and a quota counts as covered when either read has its ledger. peak: the largest value above the base seen
    per quota and resource."""

    def __init__(self, campaign, base):
        super(Sampler, self).__init__(daemon=True)
        self.c = campaign
        self.base = dict((ns, dict((q, _num(h)) for q, h in hard.items())) for ns, hard in base.items())
        self.stop_flag = threading.Event()
        self.uncovered = []
        self.peak = {}
        self.samples = 0

    def run(self):
        while not self.stop_flag.is_set():
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - the apiserver may be busy; look again
                pass
            self.stop_flag.wait(0.3)

    def stop(self):
        self.stop_flag.set()
        self.join(10)

    def sample(self):
        before = set(self.c.ledgers())
        quotas = self.c.rest.get("/api/v1/resourcequotas")["items"]
        after = None
        for q in quotas:
            ns, name = q["metadata"]["namespace"], q["metadata"]["name"]
            base = (self.base.get(ns) or {}).get(name)
            if not base:
                continue
            hard = _num((q.get("spec") or {}).get("hard"))
            above = dict((res, value - base[res]) for res, value in hard.items() if res in base and value > base[res])
            if not above:
                continue
            key = "%s/%s" % (ns, name)
            peak = self.peak.setdefault(key, {})
            for res, extra in above.items():
                peak[res] = max(peak.get(res, 0), extra)
            if key in before:
                continue
            if after is None:
                after = set(self.c.ledgers())
            if key not in after:
                self.uncovered.append("%s above base by %s with no ledger"
                                      % (key, dict((r, str(v)) for r, v in above.items())))
        self.samples += 1


# ---------------------------------------------------------------------------------------------------------
# one attack = one drain with a tenant acting during it

class Attack(object):
    """What one attack did and found."""

    def __init__(self, name, ns, what):
        self.name, self.ns, self.what = name, ns, what
        self.notes = []            # what happened, for the report
        self.failures = []         # what was not contained
        self.forbidden = []        # tenant requests refused by RBAC (403) where expected
        self.fence_refusals = 0
        self.uncovered = []
        self.blocked = False
        self.runs = []             # (playbook, rc, seconds)
        self.seconds = 0.0

    def fail(self, text):
        self.failures.append(text)

    def expect_forbidden(self, label, status_body):
        status, body = status_body
        if status == 403:
            self.forbidden.append(label)
        else:
            self.fail("%s: expected 403, got %s %s" % (label, status or "success", body[:300]))

    def to_json(self):
        return {"attack": self.name, "namespace": self.ns, "what": self.what, "contained": not self.failures,
                "failures": self.failures, "notes": self.notes, "forbidden": self.forbidden,
                "fence_refusals": self.fence_refusals, "quota_above_base": self.uncovered, "blocked": self.blocked,
                "runs": [{"playbook": p, "rc": rc, "seconds": round(s, 1)} for p, rc, s in self.runs],
                "seconds": round(self.seconds, 1)}

    def line(self):
        verdict = "contained" if not self.failures else "NOT CONTAINED: " + "; ".join(self.failures)
        extra = []
        if self.fence_refusals:
            extra.append("%d refused by the fence" % self.fence_refusals)
        if self.forbidden:
            extra.append("%d forbidden" % len(self.forbidden))
        runs = ", ".join("%s rc=%s %.0fs" % (p, rc, s) for p, rc, s in self.runs)
        tail = "; " + ", ".join(extra) if extra else ""
        return "  %-26s %-10s %s (%s%s)" % (self.name, self.ns, verdict, runs, tail)


def drain(c, attack, node, during=None, expect_ok=True, extra_vars=None, trigger="reservation"):
    """Drain node with playbooks/node_maintenance.yml; call during() once the attacked namespace holds a
    reservation (trigger "reservation") or a migration of it exists (trigger "migration"). Returns (rc, output)."""
    sampler = c.sampler = Sampler(c, c.base)
    sampler.start()
    earlier = set(m["metadata"]["uid"] for m in c.r.vmims(attack.ns))   # a previous drain's migrations
    proc = c.proc = c.start(dict(BOUNDED, node_maintenance_node=node, **(extra_vars or {})))
    fired = []
    try:
        if during is not None:
            deadline = time.monotonic() + RUN_TIMEOUT
            while proc.poll() is None and time.monotonic() < deadline:
                if trigger == "reservation":
                    ready = c.active(attack.ns)
                elif trigger == "migration":
                    ready = [m for m in c.r.vmims(attack.ns) if (m.get("status") or {}).get("phase") not in FINAL
                             and "kvq" in m["metadata"]["name"] and m["metadata"]["uid"] not in earlier]
                else:   # "migrated": a migration of the run is over and its reservation still held
                    ready = c.active(attack.ns) and [
                        m for m in c.r.vmims(attack.ns) if (m.get("status") or {}).get("phase") == "Succeeded"
                        and "kvq" in m["metadata"]["name"] and m["metadata"]["uid"] not in earlier]
                if ready:
                    fired.append(time.monotonic() - proc.started)
                    during()
                    break
                time.sleep(0.1)
        rc, out, secs = c.finish(proc)
    finally:
        sampler.stop()
    attack.runs.append(("node_maintenance", rc, secs))
    attack.uncovered.extend(sampler.uncovered)
    attack.peak = sampler.peak
    if during is not None and not fired:
        attack.fail("the drain never reached the attack's moment (%s of %s)" % (trigger, attack.ns))
    else:
        if fired:
            attack.notes.append("attacked %.1fs into the run" % fired[0])
    if expect_ok and rc != 0:
        attack.blocked = True
        attack.fail("drain of %s failed (rc %s): %s" % (node, rc, _failure_text(out)))
    return rc, out


def _failure_text(out):
    lines = [ln.strip() for ln in out.splitlines() if '"msg"' in ln or "fatal:" in ln or "FAILED!" in ln]
    return " | ".join(lines[-3:])[:1500] or out[-1500:]


def settle(c, attack, node=None, base=None, annotation=None):
    """The end state: quotas at base (waited for a little: Rancher follows its annotation), nothing left."""
    deadline = time.monotonic() + 30
    probs = c.problems(base, annotation, node)
    while probs and time.monotonic() < deadline:
        time.sleep(1)
        probs = c.problems(base, annotation, node)
    for p in probs:
        attack.fail(p)
    if attack.uncovered:
        attack.fail("%d sample(s) with a quota above its base and no ledger, first: %s"
                    % (len(attack.uncovered), attack.uncovered[0]))
    c.uncordon_all()


# -- the attacks ----------------------------------------------------------------------------------------

def attack_forged_event(c, attack):
    """A FailedCreate Event about our migration, huge amounts, future timestamp, posted as edit while the target
    pods (90Mi larger than computed, as the VMs' running pods are) are refused for real by quota admission and the
    run tops up (from trusted state only)."""
    ns = attack.ns
    node = c.node_for(ns)
    charge = c.charge_on(ns, node)
    tenant = c.tenant(ns)
    posted = []

    def forge():
        stop = time.monotonic() + 60
        seen = set()
        while time.monotonic() < stop and len(seen) < 2:
            for m in c.r.vmims(ns):
                uid = m["metadata"]["uid"]
                if uid in seen or "kvq" not in m["metadata"]["name"]:
                    continue
                seen.add(uid)
                quota = sorted(c.base[ns])[0]
                body = {
                    "metadata": {"name": "%s.forged%s" % (m["metadata"]["name"], secrets.token_hex(3)),
                                 "namespace": ns},
                    "involvedObject": {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                                       "name": m["metadata"]["name"], "namespace": ns, "uid": uid},
                    "reason": "FailedCreate", "type": "Warning", "count": 1,
                    "message": 'Error creating pod: pods "virt-launcher-%s-forged" is forbidden: exceeded quota: %s, '
                               "requested: limits.cpu=20,limits.memory=100Gi, used: limits.cpu=2050m,"
                               "limits.memory=3356213456, limited: limits.cpu=2153m,limits.memory=3524024129"
                               % (m["spec"].get("vmiName"), quota),
                    "source": {"component": "virt-controller"}, "reportingComponent": "virt-controller",
                    "firstTimestamp": _now_stamp(3600), "lastTimestamp": _now_stamp(7200)}
                status, text = attempt(tenant.create, "/api/v1/namespaces/%s/events" % ns, body)
                posted.append(status)
                if status not in (0, 403):
                    attack.fail("posting the forged Event: %s %s" % (status, text[:200]))
            time.sleep(0.2)

    # launcher pods 90Mi larger than computed (less than the quotas' 200Mi margin, so that usage fits the base once
    # the sources are gone) and migrations slow enough that the first does not end before the second's target
    # pod is retried: admission refuses it for real and the run tops up, the forged Event there to mislead it. The
    # VMs are restarted with the knob on first, so that their running pods are that size too: the headroom fence
    # admits a target pod up to the size its VM runs with (issue 24), and only quota admission refuses it
    c.r.set_knobs(oversize_bytes="90Mi", migration_seconds=20)
    try:
        vms = [vm for _ns, vm in _vms_on(c, node, ns)]
        _restart(c, ns, vms)
        node = c.node_for(ns)
        charge = c.charge_on(ns, node)
        rc, out = drain(c, attack, node, during=forge, trigger="migration")
    finally:
        c.r.set_knobs(oversize_bytes=None, migration_seconds=None)
    top_ups = re.findall(r"reservation \S+ topped up by [^\"]*", out)
    attack.notes.extend(top_ups)
    if not top_ups:
        attack.fail("no batch was topped up: the forged Event was never in the way of a real refusal")
    attack.notes.append("forged Events posted: %d (%d refused by RBAC)" % (posted.count(0), posted.count(403)))
    if not posted:
        attack.fail("no forged Event was posted")
    # what the run reserved and topped up never exceeds twice the computed charge (reservation + top-ups
    # bounded by the refused pods' computed charge), and never comes near the forged 20 CPU / 100Gi
    for key, peak in sorted(getattr(attack, "peak", {}).items()):
        if key.split("/")[0] != ns:
            continue
        for res, extra in peak.items():
            bound = 2 * charge.get(res, 0)
            attack.notes.append("%s peak +%s %s (computed charge %s)"
                                % (key, _fmt(extra, res), res, _fmt(charge.get(res, 0), res)))
            if extra > bound:
                attack.fail("%s %s rose by %s, more than twice the computed charge %s"
                            % (key, res, _fmt(extra, res), _fmt(charge.get(res, 0), res)))
    settle(c, attack, node)
    # back to the size they are computed at, for the attacks after this one
    _restart(c, ns, vms)


def _fmt(value, res):
    if "memory" in res:
        return "%.0fMi" % (float(value) / 2 ** 20)
    return "%gm" % round(float(value) * 1000) if "cpu" in res else str(value)


def attack_forged_ledger(c, attack):
    """Rancher project member: a 0.1.0 ledger annotation with a forged base on its Namespace during the window;
    edit/admin tenants try to read, alter and delete kvquota's state in the operator namespace (403)."""
    ns = attack.ns
    node = c.node_for(ns)
    member = c.tenant(ns, "project-member")
    forged = json.dumps({"v": 1, "backend": "rancher", "base": {"limits.cpu": "64", "limits.memory": "512Gi"},
                         "written": {"limits.cpu": "64", "limits.memory": "512Gi"},
                         "state": {"rancherAnnotation": '{"limit": {"limitsCpu": "64000m", "limitsMemory": "512Gi"}}'},
                         "reservations": {"%s-b0" % node: {"delta": {"limits.cpu": "-60"},
                                                           "expires": "2099-01-01T00:00:00Z"}}})

    def tamper():
        status, text = attempt(member.patch, "/api/v1/namespaces/" + ns,
                               {"metadata": {"annotations": {OLD_LEDGER: forged}}})
        if status:
            attack.fail("the project member could not patch its Namespace: %s %s" % (status, text[:200]))
        else:
            attack.notes.append("forged 0.1.0 ledger annotation written on Namespace %s" % ns)
        for role in ("edit", "admin"):
            for plain in PLAIN[:1]:
                _try_operator_namespace(c, attack, c.tenant(plain, role), "%s of %s" % (role, plain))
        _try_operator_namespace(c, attack, member, "project member of %s" % ns)

    drain(c, attack, node, during=tamper)
    left = (c.r.namespace(ns)["metadata"].get("annotations") or {}).get(OLD_LEDGER)
    attack.notes.append("forged annotation %s after the run"
                        % ("removed" if left is None else "still there (never read)"))
    if left is not None:
        c.rest.patch("/api/v1/namespaces/" + ns, {"metadata": {"annotations": {OLD_LEDGER: None}}})
    settle(c, attack, node)


def _try_operator_namespace(c, attack, rest, who):
    """Everything a tenant might try on kvquota's own state: each must be refused (403)."""
    base = "/api/v1/namespaces/%s/configmaps" % OPERATOR_NS
    attack.expect_forbidden("%s lists ledgers" % who, attempt(rest.get, base))
    ledgers = c.rest.get(base, labelSelector=LEDGER_LABEL)["items"]
    for cm in ledgers[:1]:
        name = cm["metadata"]["name"]
        attack.expect_forbidden("%s deletes %s" % (who, name), attempt(rest.delete, base + "/" + name))
        attack.expect_forbidden("%s patches %s" % (who, name), attempt(
            rest.patch, base + "/" + name, {"data": {"ledger": '{"v": 2, "reservations": {}}'}}))
    attack.expect_forbidden("%s creates a ledger" % who, attempt(rest.create, base, {
        "metadata": {"name": "kvq-ledger-forged", "labels": {"kvquota.maintenance/ledger": "true"}},
        "data": {"ledger": "{}"}}))
    attack.expect_forbidden("%s deletes the fence parameters" % who,
                            attempt(rest.delete, base + "/" + FENCE_CONFIGMAP))
    leases = "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % OPERATOR_NS
    for lease in c.rest.get(leases)["items"][:1]:
        attack.expect_forbidden("%s deletes lock %s" % (who, lease["metadata"]["name"]),
                                attempt(rest.delete, leases + "/" + lease["metadata"]["name"]))
    attack.expect_forbidden("%s deletes the fence policy binding" % who, attempt(
        rest.delete, "%s/validatingadmissionpolicybindings/%s" % (ADMISSION, FENCE_POLICY)))


def attack_lock_squat(c, attack):
    """edit tenant: Leases named like the old lock (kvquota-maintenance) and like the new one (kvq-lock-<ns>) in
    its namespace, held by it for ~11 days; and the same in the operator namespace (403)."""
    ns = attack.ns
    node = c.node_for(ns)
    tenant = c.tenant(ns)
    now = datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%S.000000Z")
    for name in ("kvquota-maintenance", "kvq-lock-" + ns):
        body = {"metadata": {"name": name},
                "spec": {"holderIdentity": "tenant-squatter", "leaseDurationSeconds": 999999,
                         "acquireTime": now, "renewTime": now}}
        status, text = attempt(tenant.create, "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % ns, body)
        if status:
            attack.fail("squatting Lease %s/%s: %s %s" % (ns, name, status, text[:200]))
        attack.expect_forbidden("edit creates %s in %s" % (name, OPERATOR_NS), attempt(
            tenant.create, "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % OPERATOR_NS, body))
    attack.notes.append("Leases kvquota-maintenance and kvq-lock-%s squatted in %s" % (ns, ns))

    def squat_more():
        # during the window: try to take over the lock the run holds in the operator namespace
        name = "kvq-lock-" + ns
        path = "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s" % (OPERATOR_NS, name)
        attack.expect_forbidden("edit updates %s" % name, attempt(
            tenant.patch, path, {"spec": {"holderIdentity": "tenant-squatter"}}))

    rc, out = drain(c, attack, node, during=squat_more)
    if "is held by" in out:
        attack.fail("the run waited for a lock: %s" % _failure_text(out))
    for name in ("kvquota-maintenance", "kvq-lock-" + ns):
        c.rest.delete("/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s" % (ns, name))
    settle(c, attack, node)


def _wait_expanded(c, ns, timeout=15):
    """Wait until a quota of ns is above its base as the quota controller sees it (status.hard): the reservation's
    headroom is there to take (the ledger is written before the quota)."""
    base = dict((q, _num(h)) for q, h in c.base[ns].items())

    def expanded():
        for q in c.rest.get("/api/v1/namespaces/%s/resourcequotas" % ns)["items"]:
            hard = _num((q.get("status") or {}).get("hard"))
            if any(v > base.get(q["metadata"]["name"], {}).get(r, v) for r, v in hard.items()):
                return True
        return False
    try:
        c.wait(expanded, timeout, "the quota of %s to expand" % ns)
    except AssertionError:
        pass


def _capture_pod(c, ns, name):
    """A pod sized to take every bit of room the quota has now (the reservation's headroom)."""
    free = {}
    for q in c.rest.get("/api/v1/namespaces/%s/resourcequotas" % ns)["items"]:
        hard, used = _num(q["status"].get("hard")), _num(q["status"].get("used"))
        for res in ("limits.cpu", "limits.memory"):
            if res in hard:
                room = hard[res] - used.get(res, 0)
                free[res] = room if res not in free else min(free[res], room)
    cpu = max(int(free.get("limits.cpu", 0) * 1000), 10)
    mem = max(int(free.get("limits.memory", 0) / 2 ** 20), 16)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"containers": [{"name": "c", "image": "example.invalid/grab",
                                     "resources": {"limits": {"cpu": "%dm" % cpu, "memory": "%dMi" % mem}}}]}}


def attack_capture_fenced(c, attack):
    """edit and admin tenants start a pod that would take the headroom while the namespace holds a reservation:
    the fence refuses both."""
    ns = attack.ns
    node = c.node_for(ns)

    def grab():
        _wait_expanded(c, ns)
        for role in ("edit", "admin"):
            body = _capture_pod(c, ns, "grab-%s-%s" % (role, secrets.token_hex(2)))
            status, text = attempt(c.tenant(ns, role).create, "/api/v1/namespaces/%s/pods" % ns, body)
            if status == 403 and "is fenced" in text:
                attack.fence_refusals += 1
            elif status == 0:
                attack.fail("%s's pod %s was admitted during the reservation" % (role, body["metadata"]["name"]))
            else:
                attack.fail("%s's pod: refused but not by the fence: %s %s" % (role, status, text[:300]))
        # a tenant naming a reserved VMI as owner does not pass either
        vmi = c.r.vmis(ns)[0]["metadata"]
        body = _capture_pod(c, ns, "grab-owned-" + secrets.token_hex(2))
        body["metadata"]["ownerReferences"] = [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                                "name": vmi["name"], "uid": vmi["uid"], "controller": True}]
        status, text = attempt(c.tenant(ns).create, "/api/v1/namespaces/%s/pods" % ns, body)
        if status == 403 and "is fenced" in text:
            attack.fence_refusals += 1
        else:
            attack.fail("a pod owned by a reserved VMI, created by the tenant: %s %s"
                        % (status or "admitted", text[:300]))

    drain(c, attack, node, during=grab)
    settle(c, attack, node)


def attack_capture_unfenced(c, attack, early=False):
    """The fence uninstalled: the edit tenant's pod takes the headroom freed by a source pod that ended, before
    the release. Issue 24 item 4: no expansion outlives its migrations, so the quota goes back to its base with the
    tenant's pod still running (it is over its quota, not given the headroom), the run names the pod and never
    tells the administrator to delete a VM's pods; a re-run (and the reaper, if anything is held) converges without
    a forced release and without removing the tenant's pod. (Until issue 24 the run failed naming the pod and the
    reservation was kept until the pod was gone.)"""
    ns = attack.ns
    node = c.node_for(ns)
    c.uninstall_fence()
    grabbed = []

    def grab():
        # the source pods end after their migrations: the room they free under the expanded quota is the
        # headroom the tenant takes, before the run gives it back
        if early:
            _wait_expanded(c, ns)
        deadline = time.monotonic() + 60
        status, text = None, ""
        while time.monotonic() < deadline:
            body = _capture_pod(c, ns, "grab-" + secrets.token_hex(3))
            limits = body["spec"]["containers"][0]["resources"]["limits"]
            if int(limits["cpu"].rstrip("m")) >= 500:
                status, text = attempt(c.tenant(ns).create, "/api/v1/namespaces/%s/pods" % ns, body)
                if status == 0:
                    grabbed.append(body["metadata"]["name"])
                    attack.notes.append("tenant pod %s took %s" % (body["metadata"]["name"], limits))
                    return
            if not c.active(ns):
                break
            time.sleep(0.05)
        attack.notes.append("the reservation was released before the tenant could take its headroom (%s %s)"
                            % (status, text[:200]))
    try:
        c.wait(lambda: c.rest.get_or_none("%s/validatingadmissionpolicybindings/%s" % (ADMISSION, FENCE_POLICY))
               is None, 20, "the fence binding to go")
        time.sleep(2)   # the API server's policy cache
        rc, out = drain(c, attack, node, during=grab, expect_ok=False, trigger="reservation" if early else "migrated",
                        extra_vars={"node_maintenance_reservation_ttl": "2m", "node_maintenance_poll_interval": 3})
        if not grabbed:
            return settle(c, attack, node)
        pod = grabbed[0]
        if pod not in out:
            attack.fail("the run did not name pod %s that took the headroom: %s" % (pod, _failure_text(out)))
        else:
            attack.notes.append("run rc=%s naming %s" % (rc, pod))
        if "(or delete them)" in out:
            attack.fail("the run's fix tells the administrator to delete pods: %s" % _failure_text(out))
        # anything still held (a run stopped mid-batch): the reaper converges once it expired, the pod still there
        if c.active():
            expires = [e.get("expires") for led in c.ledgers().values()
                       for e in (led.get("reservations") or {}).values() if isinstance(e, dict) and e.get("expires")]
            if expires:
                time.sleep(max(0, max(_epoch(x) for x in expires) - time.time() + 2))
            rc2, out2, secs2 = c.run({"reaper_wait": True, "reaper_wait_timeout": 60}, name="reaper")
            attack.runs.append(("reaper", rc2, secs2))
            if rc2 != 0:
                attack.fail("the reaper did not converge with the tenant's pod %s still running: %s"
                            % (pod, _failure_text(out2)))
        # the VMs a stopped run left on the node: a re-run moves them (the tenant's pod still running)
        if any(n == node for n in c.vmi_nodes().values()):
            c.uncordon_all()
            rc4, out4, secs4 = c.run(dict(BOUNDED, node_maintenance_node=node))
            attack.runs.append(("node_maintenance", rc4, secs4))
            if rc4 != 0:
                attack.fail("the re-run failed: %s" % _failure_text(out4))
        if c.rest.get_or_none("/api/v1/namespaces/%s/pods/%s" % (ns, pod)) is None:
            attack.fail("the tenant's pod %s is gone: nothing of kvquota may delete it" % pod)
        settle(c, attack, node)
        # the tenant's own cleanup, for the next attacks
        c.rest.delete("/api/v1/namespaces/%s/pods/%s" % (ns, pod))
        c.wait(lambda: c.rest.get_or_none("/api/v1/namespaces/%s/pods/%s" % (ns, pod)) is None, 60, "pod gone")
    finally:
        c.install_fence()


def attack_capture_unfenced_early(c, attack):
    """The fence uninstalled: the edit tenant's pod takes the headroom as soon as the quota grew, before KubeVirt
    creates the target pods. The run names the pod (it may stop: no top-up past the cap); the quota ends at its
    base with the pod still running, and a re-run (the reaper if anything is held) converges without removing it."""
    attack_capture_unfenced(c, attack, early=True)


def attack_launcher_labels(c, attack):
    """edit tenant: before the drain, two pods bound to the drained node posing as virt-launcher pods: one with the
    labels kubevirt.io=virt-launcher, kubevirt.io/created-by and vm.kubevirt.io/name only (a bare pod), one also
    with a controller ownerReference to the real VMI's UID (which the tenant can read). The drain must evict both
    like any pod (the bare one needs force, as for any bare pod), and the release must not be held up by them.
    (created-by names no real VMI: the lab's emulated virt-handler finds source pods by that label and would
    complete a fake instead of the real source pod, which real KubeVirt does not do.)"""
    ns = attack.ns
    node = c.node_for(ns)
    vmi = [v for v in c.r.vmis(ns) if (v.get("status") or {}).get("nodeName") == node][0]["metadata"]
    token = secrets.token_hex(2)
    fakes = {"fake-launcher-" + token: None,
             "forged-owner-" + token: [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                        "name": vmi["name"], "uid": vmi["uid"], "controller": True}]}
    for number, (name, owners) in enumerate(sorted(fakes.items()), start=1):
        meta = {"name": name, "namespace": ns, "labels": {
            "kubevirt.io": "virt-launcher", "kubevirt.io/created-by": "00000000-0000-4000-8000-%012d" % number,
            "vm.kubevirt.io/name": vmi["name"], "kubevirt.io/domain": vmi["name"]}}
        if owners:
            meta["ownerReferences"] = owners
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                "spec": {"nodeName": node, "containers": [{"name": "compute", "image": "example.invalid/fake",
                                                           "resources": {"limits": {"cpu": "10m", "memory": "16Mi"}}}]}}
        status, text = attempt(c.tenant(ns).create, "/api/v1/namespaces/%s/pods" % ns, body)
        if status:
            attack.fail("creating the fake launcher %s: %s %s" % (name, status, text[:300]))
    drain(c, attack, node, extra_vars={"node_maintenance_drain_force": True})
    for name, owners in sorted(fakes.items()):
        kind = "with a forged ownerReference to VMI %s" % vmi["name"] if owners else "with the labels only"
        pod = c.rest.get_or_none("/api/v1/namespaces/%s/pods/%s" % (ns, name))
        if pod and pod["spec"].get("nodeName") == node and not pod["metadata"].get("deletionTimestamp"):
            attack.fail("the fake launcher %s (%s) is still on %s: the drain took it for a VM's pod"
                        % (name, kind, node))
        else:
            attack.notes.append("fake launcher %s (%s) drained like any pod" % (name, kind))
        if pod:
            # the lab has no kubelet to finish a terminating pod
            attempt(c.rest.delete, "/api/v1/namespaces/%s/pods/%s" % (ns, name), body={"gracePeriodSeconds": 0},
                    gracePeriodSeconds=0)
    settle(c, attack, node)


def attack_vmim_labels(c, attack):
    """edit tenant: before the drain, a migration carrying the collection's labels (managed-by, kvquota.io/node,
    kvquota.io/reservation) for a VMI that does not exist, and during it one for a VM of the batch labelled as
    another run's: neither is taken for ours (nothing waits for, records or cancels them)."""
    ns = attack.ns
    node = c.node_for(ns)
    tenant = c.tenant(ns)
    labels = {"app.kubernetes.io/managed-by": "kvquota.maintenance", "kvquota.io/node": node,
              "kvquota.io/reservation": "%s-b0" % node, "kvqlab.io/tenant-attack": "true"}
    path = KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns
    ghost = "ghost-kvq-" + secrets.token_hex(2)
    status, text = attempt(tenant.create, path, {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": ghost, "labels": labels}, "spec": {"vmiName": "no-such-vm"}})
    if status:
        attack.fail("creating the labelled migration: %s %s" % (status, text[:300]))
    drain(c, attack, node)
    left = c.rest.get_or_none(path + "/" + ghost)
    attack.notes.append("tenant's labelled migration %s %s" % (ghost, "left alone" if left else "deleted by someone"))
    if left is None:
        attack.fail("the tenant's migration %s was deleted: taken for ours by its labels" % ghost)
    else:
        c.rest.delete(path + "/" + ghost)
    settle(c, attack, node)


def attack_rancher_annotation(c, attack):
    """Rancher project member: while the run waits for Rancher to apply its expanded field.cattle.io/resourceQuota,
    rewrites it (what Rancher lets it do anyway) to the base values (a 'revert') and then +100m CPU above the base
    (a change). The run adopts the rewrite under its lock, keeps its reservation on top, restores the member's value,
    and nothing of the headroom is left on it."""
    ns = attack.ns
    node = c.node_for(ns)
    member = c.tenant(ns, "project-member")
    base_limit = json.loads(c.base_annotation)["limit"]
    changed = dict(base_limit, limitsCpu="%dm" % (int(base_limit["limitsCpu"].rstrip("m")) + 100))
    new_annotation = json.dumps({"limit": changed}, sort_keys=True)

    def rewrite():
        # Rancher's agent is paused, so the run is still waiting for it once it has written its annotation: the
        # member's rewrite lands inside that wait (the agent applies it as soon as it resumes)
        c.wait(lambda: c.annotation(ns) != c.base_annotation, 60, "the run to write its annotation")
        # from now on the member's value is the base the quota must not exceed without a ledger
        quota_name = sorted(c.base[ns])[0]
        c.sampler.base[ns][quota_name]["limits.cpu"] = _num({"limits.cpu": changed["limitsCpu"]})["limits.cpu"]
        for value in (c.base_annotation, new_annotation):
            status, text = attempt(member.patch, "/api/v1/namespaces/" + ns,
                                   {"metadata": {"annotations": {RANCHER_ANNOTATION: value}}})
            if status:
                attack.fail("the project member could not patch its annotation: %s %s" % (status, text[:200]))
            time.sleep(2)
        c.r.set_knobs(rancher=None)
        c.r.rancher_agent_restart()   # the agent resumes and resyncs every namespace
        attack.notes.append("Rancher's agent paused until the member had rewritten the annotation twice")

    c.r.set_knobs(rancher=False)
    try:
        _rc, out = drain(c, attack, node, during=rewrite)
    finally:
        c.r.set_knobs(rancher=None)
    adopted = "was changed to %s by someone else" % changed["limitsCpu"]
    if adopted not in " ".join(out.split()):   # Ansible wraps its warnings
        attack.fail("the run never reported the member's %s as the new base (%r not in its output)"
                    % (changed["limitsCpu"], adopted))
    final = c.annotation(ns)
    try:
        final_limit = json.loads(final or "{}").get("limit")
    except ValueError:
        final_limit = None
    if final_limit != changed:
        attack.fail("annotation ended as %r, the member set %r" % (final, new_annotation))
    expected = dict(c.base)
    quota = sorted(c.base[ns])[0]
    hard = dict(c.base[ns][quota])
    expected_cpu = _num({"limits.cpu": changed["limitsCpu"]})["limits.cpu"]
    expected[ns] = {quota: hard}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _num(c.r.hard(ns)[quota]).get("limits.cpu") != expected_cpu:
        time.sleep(1)
    now = c.r.hard(ns)[quota]
    if _num(now).get("limits.cpu") != expected_cpu or _num(now).get("limits.memory") != _num(hard).get("limits.memory"):
        attack.fail("quota ended at %s, the member's value is limits.cpu=%s" % (now, changed["limitsCpu"]))
    expected[ns] = {quota: now}
    settle(c, attack, node, base=expected, annotation=final)
    # the administrator puts the base back for the next attacks (as Rancher itself would be told to)
    c.rest.patch("/api/v1/namespaces/" + ns, {"metadata": {"annotations": {RANCHER_ANNOTATION: c.base_annotation}}})
    c.wait(lambda: c.r.hard(ns) == c.base[ns], 60, "Rancher to apply the base again")


PROJECT = "/apis/management.cattle.io/v3/namespaces/local/projects/p-tenants"
# no fixed Rancher key: a project caps it through `extended` only (Rancher 2.14+); every launcher pod requests it
# (50M for the compute container), and a completed source pod stops charging it
EPHEMERAL = "requests.ephemeral-storage"
WIDGETS = "requests.example.com/widgets"
MARGIN = 10 * 1000 ** 2        # above the namespaces' use: less than one target pod's 50M, so a batch needs more
RAISE = 20 * 1000 ** 2         # the member's raise of the extended entry, over its base


def _limit(text):
    try:
        document = json.loads(text or "{}")
    except ValueError:
        return None
    return document.get("limit") if isinstance(document, dict) else None


def _rancher_applies(c, ns):
    """spec.hard Rancher applies for ns's annotation as it is now (Rancher's rules, kvqlab.emulator.rancher)."""
    return rancher_mod.rancher_limit_to_hard(rancher_mod.effective_limit(c.r.namespace(ns), c.rest.get(PROJECT)))


def _same_hard(a, b):
    return sorted(a) == sorted(b) and _num(a) == _num(b) and bool(_num(a)) == bool(a)


def _member_extended(kind, extended, base):
    """The project member's rewrite of the extended map it reads (kvquota's, with its reservation): (the map to
    write or None to delete it, {name: value} the member set itself). base: the extended entry's base (bytes)."""
    extended = dict(extended or {})
    if kind == "add":            # an entry of its own beside the rest as read (kvquota's values kept)
        extended[WIDGETS] = "5"
        return extended, {WIDGETS: "5"}
    if kind == "raise":          # the entry kvquota seeded and reserves, set to its base + 20M (absolute)
        extended[EPHEMERAL] = str(base + RAISE)
        return extended, {EPHEMERAL: extended[EPHEMERAL]}
    return None, {}              # "delete": the whole map


def _rancher_extended_variant(c, attack, kind):
    """One drain of t-rancher's VMs with the member's rewrite `kind` of the extended map mid-window."""
    ns = attack.ns
    node = c.node_for(ns)
    member = c.tenant(ns, "project-member")
    quota = sorted(c.base[ns])[0]
    base_limit = _limit(c.base_annotation)
    base_bytes = int(_num(c.base[ns][quota])[EPHEMERAL])
    seen = {}

    def rewrite():
        # kvquota's map written and applied by Rancher (the entry above its base in both): then the member's write
        def reserved():
            extended = (_limit(c.annotation(ns)) or {}).get(rancher_mod.EXTENDED) or {}
            hard = _num(c.r.hard(ns)[quota])
            return EPHEMERAL in extended and _num(extended).get(EPHEMERAL, 0) > base_bytes \
                and hard.get(EPHEMERAL, 0) > base_bytes and extended
        seen["kvquota"] = dict(c.wait(reserved, 30, "kvquota's extended %s applied on %s" % (EPHEMERAL, ns)))
        limit = _limit(c.annotation(ns))
        extended, own = _member_extended(kind, limit.get(rancher_mod.EXTENDED), base_bytes)
        if extended is None:
            limit.pop(rancher_mod.EXTENDED, None)
        else:
            limit[rancher_mod.EXTENDED] = extended
        seen["own"] = own
        if EPHEMERAL in own:
            # from now on the member's value is the base the quota must not exceed without a ledger
            c.sampler.base[ns][quota][EPHEMERAL] = _num(own)[EPHEMERAL]
        status, text = attempt(member.patch, "/api/v1/namespaces/" + ns,
                               {"metadata": {"annotations": {RANCHER_ANNOTATION: json.dumps({"limit": limit})}}})
        if status:
            attack.fail("%s: the project member could not patch its annotation: %s %s" % (kind, status, text[:200]))
        attack.notes.append("%s: kvquota's extended %s, the member wrote %s"
                            % (kind, json.dumps(seen["kvquota"], sort_keys=True),
                               json.dumps(extended, sort_keys=True) if extended is not None else "no map"))

    # this drain's samples alone, so that a later variant's settle does not report them again
    earlier, attack.uncovered = attack.uncovered, []
    c.r.set_knobs(migration_seconds=5)
    try:
        _rc, out = drain(c, attack, node, during=rewrite)
    finally:
        c.r.set_knobs(migration_seconds=None)
    flat = " ".join(out.split())
    own = seen.get("own", {})
    # the annotation ends at the base plus the member's own entries, kvquota's reservation gone: with no entry of the
    # member's left, byte for byte the base; else the map it wrote, kvquota's seeded copy back at its base beside it
    # (Rancher replaces the default's whole map by the namespace's: without the copy the cap would go)
    final = c.annotation(ns)
    got = _limit(final) or {}
    want = dict(base_limit)
    want_extended = dict(((EPHEMERAL, str(base_bytes)),), **own)
    if not own:
        if final != c.base_annotation:
            attack.fail("%s: annotation ended as %r, not the base %r byte for byte" % (kind, final, c.base_annotation))
    elif dict((k, v) for k, v in got.items() if k != rancher_mod.EXTENDED) != want \
            or not _same_hard(got.get(rancher_mod.EXTENDED) or {}, want_extended):
        attack.fail("%s: annotation ended as %r, base + the member's own change is %r"
                    % (kind, final, json.dumps({"limit": dict(want, extended=want_extended)}, sort_keys=True)))
    # spec.hard: what Rancher applies for that annotation, never kvquota's reservation
    try:
        c.wait(lambda: _same_hard(c.r.hard(ns)[quota], _rancher_applies(c, ns)), 30,
               "Rancher to apply the final annotation of %s" % ns)
    except AssertionError:
        pass
    now = c.r.hard(ns)[quota]
    applies = _rancher_applies(c, ns)
    if not _same_hard(now, applies):
        attack.fail("%s: spec.hard ended as %s, Rancher applies %s for the final annotation" % (kind, now, applies))
    base = dict(c.base[ns][quota])
    for name, value in sorted(_num(now).items()):
        allowed = _num(own).get(name, _num(base).get(name))
        if allowed is None or value > allowed:
            attack.fail("%s: %s=%s in spec.hard after the release, more than base + the member's own change (%s)"
                        % (kind, name, now.get(name), "none" if allowed is None else _fmt(allowed, name)))
    if own.get(EPHEMERAL):
        changed = "%s on %s/%s was changed to %s by someone else" % (EPHEMERAL, ns, quota, own[EPHEMERAL])
        if changed not in flat:
            attack.fail("raise: the run never reported the member's %s=%s (%r not in its output)"
                        % (EPHEMERAL, own[EPHEMERAL], changed))
        else:
            attack.notes.append("raise: the run reported %r" % changed)
    else:
        reported = re.findall(r"%s on \S+ was [^\"]*?(?:someone else|its base)[^\"]*?[;)]" % re.escape(EPHEMERAL), flat)
        attack.notes.append("%s: the run reported %s" % (kind, reported[:1] or "no change of the names it manages"))
    attack.notes.append("%s: annotation ended %s, spec.hard %s" % (kind, final, json.dumps(now, sort_keys=True)))
    expected = dict(c.base)
    expected[ns] = {quota: now}
    settle(c, attack, node, base=expected, annotation=final)
    attack.uncovered = earlier + attack.uncovered
    # the administrator puts the base back for the next variant (as Rancher itself would be told to)
    c.rest.patch("/api/v1/namespaces/" + ns, {"metadata": {"annotations": {RANCHER_ANNOTATION: c.base_annotation}}})
    c.wait(lambda: c.r.hard(ns) == c.base[ns], 60, "Rancher to apply the base of %s again" % ns)


def attack_rancher_extended(c, attack):
    """Rancher project member: the project caps requests.ephemeral-storage through Rancher 2.14's `extended` map only
    (namespace default: the use + 10M, none in t-rancher's own annotation, so kvquota starts a map there, seeded with
    what Rancher applied, and reserves the target pods' 50M each in it); mid-window the member rewrites that map: adds
    an entry of its own (the rest as read), sets the entry kvquota seeded and reserves to its base + 20M, or deletes
    the map, one drain each (--quick: the added entry only). Each drain must succeed; after the release the
    annotation and spec.hard hold the base plus the member's own change (never kvquota's reservation), the raise
    reported."""
    ns = attack.ns
    kinds = ("add",) if QUICK else ("add", "raise", "delete")
    original = dict((n, c.base[n]) for n in RANCHER_NAMESPACES)

    def used(n):
        return [_num((q.get("status") or {}).get("used")).get(EPHEMERAL)
                for q in c.rest.get("/api/v1/namespaces/%s/resourcequotas" % n)["items"]]
    try:
        # a cap far above the use first (the quota controller then counts the use), then the use + MARGIN
        c.rest.patch(PROJECT, {"spec": {
            "resourceQuota": {"limit": {"extended": {EPHEMERAL: "1Ti"}}},
            "namespaceDefaultResourceQuota": {"limit": {"extended": {EPHEMERAL: "100Gi"}}}}})
        uses = dict((n, c.wait(lambda n=n: all(u is not None for u in used(n)) and used(n), 60,
                               "the use of %s in %s" % (EPHEMERAL, n))) for n in RANCHER_NAMESPACES)
        default = str(int(max(max(u) for u in uses.values())) + MARGIN)
        c.rest.patch(PROJECT, {"spec": {
            "namespaceDefaultResourceQuota": {"limit": {"extended": {EPHEMERAL: default}}}}})
        for n in RANCHER_NAMESPACES:
            c.wait(lambda n=n: all(_num(h).get(EPHEMERAL) == int(default) for h in c.r.hard(n).values()), 60,
                   "Rancher to apply the project default's %s on %s" % (EPHEMERAL, n))
            c.base[n] = c.r.hard(n)
        shown = dict((n, [int(x) for x in u]) for n, u in uses.items())
        attack.notes.append("project p-tenants caps %s through extended only (1Ti; namespace default %s, the use "
                            "%s + 10M): %s" % (EPHEMERAL, default, shown, c.base[ns]))
        for kind in kinds:
            _rancher_extended_variant(c, attack, kind)
    finally:
        c.rest.patch(PROJECT, {"spec": {"resourceQuota": {"limit": {"extended": None}},
                                        "namespaceDefaultResourceQuota": {"limit": {"extended": None}}}})
        c.base.update(original)
        for n in RANCHER_NAMESPACES:
            if c.annotation(n) != c.base_annotations[n]:
                c.rest.patch("/api/v1/namespaces/" + n,
                             {"metadata": {"annotations": {RANCHER_ANNOTATION: c.base_annotations[n]}}})
        try:
            for n in RANCHER_NAMESPACES:
                c.wait(lambda n=n: c.r.hard(n) == c.base[n], 60, "the quota of %s back at its base" % n)
        except AssertionError as exc:
            attack.fail(str(exc))
    if attack.failures:
        reset(c, attack)


# KubeVirt 1.9's report of a launcher pod's memory overhead (VmiMemoryOverheadReport): report-only in kvquota
OVERHEAD_FIELDS = ("status.memory.memoryOverhead", "status.migrationState.targetMemoryOverhead")
# huge (past int64, past a float), negative, garbage of several JSON types, tiny
HOSTILE_OVERHEADS = ("1e400", "8Ei", "64Gi", 123456789012345678901234567890, "-5Gi", "lots-of-ram", "9" * 4000,
                     {"memoryOverhead": ["1Gi"]}, [1, 2], True, "1", "0")
CHECK_PLAY = [{"hosts": "localhost", "gather_facts": False, "tasks": [{
    "name": "kvquota_check as the least-privilege user, the full report to a file",
    "kvquota.maintenance.kvquota_check": {"namespaces": "{{ check_namespaces }}",
                                          "report_file": "{{ check_file }}", "node_capacity": False}}]}]


def _overhead_status(field, value):
    """A VMI status patch setting one of OVERHEAD_FIELDS to value."""
    _status, parent, leaf = field.split(".")
    return {parent: {leaf: value}}


def _run_check(c, namespaces, tag):
    """kvquota_check as the least-privilege lab user: (rc, the full report or None, output)."""
    play = c.dir / "check.yml"
    if not play.exists():
        play.write_text(json.dumps(CHECK_PLAY))
    report = c.dir / ("check-%s-%d.json" % (tag, c.runs + 1))
    rc, out, _secs = c.finish(c.start({"check_namespaces": list(namespaces), "check_file": str(report)},
                                      name="check-" + tag, playbook=play), timeout=180)
    try:
        return rc, json.loads(report.read_text()), out
    except (OSError, ValueError):
        return rc, None, out


def _sizes(report, namespaces):
    """{"ns/vm": target pod charge} of a full check report."""
    out = {}
    for ns in namespaces:
        for vm in ((report or {}).get("namespaces") or {}).get(ns, {}).get("vms") or []:
            out["%s/%s" % (ns, vm.get("name"))] = vm.get("pod_charge") or vm.get("charge")
    return out


def _check_overheads(c, attack, report, rc, out, ns, others, hostile, baseline, when):
    """The check ran (rc 0), sized every VM as before (baseline: {"ns/vm": size}), and named exactly ns's VMs with
    hostile values (hostile: {vm: set of fields}) under overhead_differences, no VM of another namespace."""
    if rc != 0 or report is None:
        attack.fail("%s: kvquota_check failed (rc %s): %s" % (when, rc, _failure_text(out)))
        return
    if "Traceback" in out or "exception occurred" in out:
        attack.fail("%s: kvquota_check raised: %s" % (when, _failure_text(out)))
    differences = report.get("overhead_differences") or []
    named = {}
    for d in differences:
        if d.get("namespace") != ns:
            attack.fail("%s: overhead_differences names %s/%s, which no tenant touched"
                        % (when, d.get("namespace"), d.get("vm")))
        named.setdefault(d.get("vm"), set()).add(d.get("field"))
    for vm, fields in sorted(hostile.items()):
        if not fields <= named.get(vm, set()):
            attack.fail("%s: overhead_differences does not name %s/%s for %s (it names %s)"
                        % (when, ns, vm, sorted(fields - named.get(vm, set())), sorted(named.get(vm, ()))))
    sizes = _sizes(report, (ns,) + tuple(others))
    for key, size in sorted(baseline.items()):
        if sizes.get(key) != size:
            attack.fail("%s: %s is sized %s, %s before the tenant's values" % (when, key, sizes.get(key), size))
    for other in others:
        verdict = (report.get("namespaces") or {}).get(other, {}).get("verdict")
        if not verdict or not [k for k in sizes if k.startswith(other + "/")]:
            attack.fail("%s: the other tenant %s was not checked (verdict %s)" % (when, other, verdict))
    shown = ["%s %s %s" % (d.get("vm"), d.get("field", "").rsplit(".", 1)[-1],
                           ("malformed: " + d["malformed"][:40]) if d.get("malformed") else
                           "reported %s, computed %s" % (d.get("reported_quantity"), d.get("computed_quantity")))
             for d in differences]
    attack.notes.append("%s: kvquota_check rc=%s, verdict %s, %d difference(s): %s"
                        % (when, rc, report.get("verdict"), len(differences), "; ".join(shown)[:600]))


def attack_hostile_memory_overhead(c, attack):
    """A tenant writes its VMIs' status.memory.memoryOverhead and status.migrationState.targetMemoryOverhead (KubeVirt
    1.9's overhead report) huge, negative, garbage and tiny: before the drain, rotated through every value while its
    migrations run, and left hostile after. Sizing and reservations are unaffected (kvquota computes them; the report
    is compared only), the drain succeeds, and kvquota_check (before, during and after) names exactly those VMs under
    overhead_differences while it sizes and checks every VM of both namespaces as before."""
    ns, others = attack.ns, tuple(n for n in PLAIN if n != attack.ns)
    node = c.node_for(ns)
    vms = [vm for _ns, vm in _vms_on(c, node, ns)]
    path = KV + "/namespaces/%s/virtualmachineinstances/" % ns
    tenant = c.tenant(ns)
    # who can write a VMI's status: on KubeVirt the VMI has no status subresource, so edit can (virt-api refuses only
    # spec and reserved-label changes); the lab's CRD has one, and edit (no virtualmachineinstances/status) cannot
    probe = {"status": _overhead_status(OVERHEAD_FIELDS[0], "1e400")}
    status, text = attempt(tenant.patch, path + vms[0] + "/status", probe)
    writer, who = (tenant, "the edit tenant") if status == 0 else (c.rest, "the administrator")
    attack.notes.append("edit tenant PATCH %s/status: %s" % (vms[0], "allowed" if status == 0 else
                                                             "%s %s" % (status, text[:120])))
    status2, _text = attempt(tenant.patch, path + vms[0], probe)
    kept = ((c.rest.get(path + vms[0]).get("status") or {}).get("memory") or {}).get("memoryOverhead")
    attack.notes.append("edit tenant PATCH of the VMI itself with status: %s, status.memory.memoryOverhead %s"
                        % ("accepted" if status2 == 0 else "refused %s" % status2,
                           "written" if kept == "1e400" else "unchanged (%r): the status subresource drops it" % kept))
    if writer is c.rest:
        attack.notes.append("the lab's VMI has a status subresource the edit role cannot write: %s writes the values "
                            "(as an edit tenant can on KubeVirt)" % who)

    def write(vm, field, value):
        st, body = attempt(writer.patch, path + vm + "/status", {"status": _overhead_status(field, value)})
        if st:
            attack.notes.append("%s=%r on %s refused: %s %s" % (field, value, vm, st, body[:120]))
        return st == 0

    checked = (ns,) + others
    rc0, before, out0 = _run_check(c, checked, "before")
    baseline = _sizes(before, checked)
    if rc0 != 0 or not baseline:
        attack.fail("the baseline kvquota_check failed (rc %s): %s" % (rc0, _failure_text(out0)))
        return
    # what the drain must reserve: the need the check computes with no reported value about (the node holds only
    # this namespace's VMs, in one batch), and never more than their computed charge
    needed = dict(("%s/%s" % (ns, q), _num(n)) for q, n in
                  (((before.get("namespaces") or {}).get(ns) or {}).get("needed") or {}).items())
    charge = c.charge_on(ns, node)
    # the trap: every VM of the node hostile before the plan
    trap = {}
    for i, vm in enumerate(vms):
        if write(vm, OVERHEAD_FIELDS[0], ("64Gi", "8Ei", "1e400")[i % 3]):   # huge: a valid quantity, past int64
            trap[vm] = {OVERHEAD_FIELDS[0]}
    during_result = {}

    def rotate():
        # KubeVirt's migrations run (their targetMemoryOverhead is read while not completed): every value on every
        # VM of the batch, then a check while they still run
        for value in HOSTILE_OVERHEADS:
            for vm in vms:
                for field in OVERHEAD_FIELDS:
                    write(vm, field, value)
        for i, vm in enumerate(vms):
            write(vm, OVERHEAD_FIELDS[0], HOSTILE_OVERHEADS[(i + 3) % len(HOSTILE_OVERHEADS)])
            write(vm, OVERHEAD_FIELDS[1], HOSTILE_OVERHEADS[(i + 6) % len(HOSTILE_OVERHEADS)])
        during_result["check"] = _run_check(c, checked, "during")

    c.r.set_knobs(migration_seconds=8)
    try:
        rc, out = drain(c, attack, node, during=rotate, trigger="migration")
    finally:
        c.r.set_knobs(migration_seconds=None)
    if "Traceback" in out or "exception occurred" in out:
        attack.fail("the drain raised: %s" % _failure_text(out))
    top_ups = re.findall(r"reservation \S+ topped up by [^\"]*", out)
    if top_ups:
        attack.fail("the run topped up (its reservation was short): %s" % top_ups[0])
    # the reservation is what kvquota computes: never above the computed charge of the VMs it moved
    peaks = dict((k, v) for k, v in getattr(attack, "peak", {}).items() if k.split("/")[0] == ns)
    if not peaks:
        attack.fail("no quota of %s was expanded: the drain reserved nothing" % ns)
    for key, peak in sorted(peaks.items()):
        for res, extra in sorted(peak.items()):
            need = needed.get(key, {}).get(res)
            attack.notes.append("%s peak +%s %s (the check's need +%s, computed charge %s)"
                                % (key, _fmt(extra, res), res, _fmt(need or 0, res), _fmt(charge.get(res, 0), res)))
            if extra > charge.get(res, 0):
                attack.fail("%s %s rose by %s, more than the computed charge %s: a reported overhead was reserved"
                            % (key, res, _fmt(extra, res), _fmt(charge.get(res, 0), res)))
            elif need is not None and extra != need:
                attack.fail("%s %s rose by %s, the need kvquota computes is %s: the reported overhead changed it"
                            % (key, res, _fmt(extra, res), _fmt(need, res)))
    if "check" in during_result:
        drc, dreport, dout = during_result["check"]
        # the targets' field is read only while a migration is under way: what the check saw decides what it names
        _check_overheads(c, attack, dreport, drc, dout, ns, others, dict((vm, {OVERHEAD_FIELDS[0]}) for vm in vms),
                         baseline, "during the window")
    # left hostile after the drain: the check names them and sizes every VM as before
    after = {}
    for i, vm in enumerate(vms):
        if write(vm, OVERHEAD_FIELDS[0], ("1", "-5Gi", "lots-of-ram")[i % 3]):   # tiny (reported), negative, garbage
            after[vm] = {OVERHEAD_FIELDS[0]}
    rc2, report, out2 = _run_check(c, checked, "after")
    _check_overheads(c, attack, report, rc2, out2, ns, others, after, baseline, "after the drain")
    settle(c, attack, node)
    # the administrator clears the tenant's values (virt-controller would, on KubeVirt 1.9)
    for vm in vms:
        attempt(c.rest.patch, path + vm + "/status", {"status": {"memory": {"memoryOverhead": None},
                                                                 "migrationState": {"targetMemoryOverhead": None}}})
    if attack.failures:
        reset(c, attack)


def _migration_deleter(c, ns, deleted, deleted_vm):
    """A function that has the edit tenant of ns delete the run's first migration of ns not yet final, noting its
    name in deleted and its VM in deleted_vm."""
    tenant = c.tenant(ns)

    def cancel():
        for m in c.r.vmims(ns):
            if "kvq" in m["metadata"]["name"] and (m.get("status") or {}).get("phase") not in FINAL:
                status, _text = attempt(tenant.delete, KV + "/namespaces/%s/virtualmachineinstancemigrations/%s"
                                        % (ns, m["metadata"]["name"]))
                if status == 0:
                    deleted.append(m["metadata"]["name"])
                    deleted_vm.append((ns, m["spec"]["vmiName"]))
                break
    return cancel


def attack_delete_migration(c, attack):
    """edit tenant deletes the run's migration of its VM during the window: only its VM stays (the run fails in its
    vacate step naming it), every other VM of the node moves, quotas go back to their base, and a re-run completes
    the drain."""
    ns = attack.ns
    node = c.node_for(ns)
    on_node = _vms_on(c, node)
    deleted, deleted_vm = [], []
    cancel = _migration_deleter(c, ns, deleted, deleted_vm)
    c.r.set_knobs(migration_seconds=3)
    try:
        rc, out = drain(c, attack, node, during=cancel, expect_ok=False, trigger="migration")
    finally:
        c.r.set_knobs(migration_seconds=None)
    if deleted:
        if rc == 0:
            attack.notes.append("drain rc=0 although %s was deleted (followed to its end)" % deleted[0])
        elif deleted[0] not in out:
            attack.fail("the drain failed without naming the deleted migration %s: %s"
                        % (deleted[0], _failure_text(out)))
        else:
            attack.notes.append("drain failed naming the deleted migration %s" % deleted[0])
        # issue 29 (review M4): a deleted migration keeps back its own VM, never another (the tenant's or others')
        stayed = [vm for vm in _vms_on(c, node) if vm != deleted_vm[0]]
        if stayed:
            attack.fail("other VMs stayed on %s after %s was deleted: %s (the run stopped for everyone)"
                        % (node, deleted[0], stayed))
        else:
            attack.notes.append("the other %d VM(s) of %s moved: %s" % (
                len(on_node) - 1, node, ", ".join("/".join(vm) for vm in on_node if vm != deleted_vm[0])))
    else:
        attack.notes.append("no migration was still running to delete")
    probs = c.problems(None, None, None)
    if [p for p in probs if "quota" in p or "ledger" in p]:
        attack.notes.append("after the failed run: %s" % probs)
    c.uncordon_all()
    rc2, out2, secs2 = c.run(dict(BOUNDED, node_maintenance_node=node))
    attack.runs.append(("node_maintenance", rc2, secs2))
    if rc2 != 0:
        attack.blocked = True
        attack.fail("the re-run failed: %s" % _failure_text(out2))
    settle(c, attack, node)


def attack_delete_migration_kept_back_shutdown(c, attack):
    """The veto of the attack above, on every run, against node_maintenance_kept_back shutdown: the edit tenant
    deletes the run's migration of its VM; the run stops that VM for the maintenance (through KubeVirt's stop
    subresource) and starts it again after it, every other VM of the node moves, and the run succeeds: the tenant
    no longer keeps the node from its maintenance. Quotas at their base, no record of stopped VMs left."""
    ns = attack.ns
    node = c.node_for(ns)
    on_node = _vms_on(c, node)
    deleted, deleted_vm = [], []
    c.r.set_knobs(migration_seconds=3)
    try:
        rc, out = drain(c, attack, node, during=_migration_deleter(c, ns, deleted, deleted_vm), expect_ok=True,
                        extra_vars={"node_maintenance_kept_back": "shutdown"}, trigger="migration")
    finally:
        c.r.set_knobs(migration_seconds=None)
    if not deleted:
        attack.notes.append("no migration was still running to delete")
    elif rc == 0:
        key = "%s/%s" % deleted_vm[0]
        if "policy kept_back shutdown: 1 VM(s)" not in out or key not in out:
            attack.fail("the run succeeded without saying it stopped %s for the maintenance" % key)
        # stopped and started through KubeVirt's subresources (the lab's virt-api logs each)
        virt_api = (c.r.run_dir / "logs" / "virt-api.log").read_text()
        for action, running in (("stop", False), ("start", True)):
            if "%s %s: spec {'running': %s}" % (action, key, running) not in virt_api:
                attack.fail("no %s of %s through KubeVirt's %s subresource" % (action, key, action))
        vmi = c.r.get(KV + "/namespaces/%s/virtualmachineinstances/%s" % deleted_vm[0])
        if ((vmi or {}).get("status") or {}).get("phase") != "Running":
            attack.fail("%s does not run again after the maintenance: %s" % (key, (vmi or {}).get("status")))
        moved = [vm for vm in on_node if vm != deleted_vm[0]]
        stayed = [vm for vm in moved if vm in _vms_on(c, node)]
        if stayed:
            attack.fail("other VMs stayed on %s: %s" % (node, stayed))
        attack.notes.append("%s deleted: its VM stopped for the maintenance and started again, the other %d VM(s) "
                            "moved, rc 0" % (deleted[0], len(moved)))
    records = [m["metadata"]["name"] for m in c.r.get("/api/v1/namespaces/kvquota-system/configmaps")["items"]
               if m["metadata"]["name"].startswith("kvq-stopped-")]
    if records:
        attack.fail("records of stopped VMs left: %s" % records)
    # (not settle's "no VM on the node": the stopped VM starts again once the node is schedulable, and may land there)
    settle(c, attack)


# -- issue 24: what a tenant writes after the plan, or admits into the headroom -------------------------

# one VM per batch, each batch started only once the previous one is released: a VM of a later batch is sized
# (again) after the tenant's change
ONE_BY_ONE = {"node_maintenance_parallel_migrations_per_cluster": 1,
              "node_maintenance_parallel_outbound_migrations_per_node": 1,
              "node_maintenance_batch_overlap": False}
THREE_SIDECARS = json.dumps([{"image": "example.invalid/tenant-hook:%d" % i, "args": ["--version", "v1alpha2"]}
                             for i in range(1, 4)])


def _launcher(c, ns, vmi_name):
    """The VMI's running (non-final) launcher pod on its current node, or None."""
    vmi = c.rest.get_or_none(KV + "/namespaces/%s/virtualmachineinstances/%s" % (ns, vmi_name))
    if not vmi:
        return None
    node = (vmi.get("status") or {}).get("nodeName")
    for pod in c.rest.get("/api/v1/namespaces/%s/pods" % ns,
                          labelSelector="kubevirt.io/created-by=%s" % vmi["metadata"]["uid"])["items"]:
        if pod["spec"].get("nodeName") == node and (pod.get("status") or {}).get("phase") not in FINAL \
                and not pod["metadata"].get("deletionTimestamp"):
            return pod
    return None


def _pod_size(pod):
    """(limits {limits.cpu: .., limits.memory: ..}, number of containers) of a pod."""
    total = {}
    for cont in (pod or {}).get("spec", {}).get("containers") or []:
        for name, value in _num((cont.get("resources") or {}).get("limits") or {}).items():
            total["limits." + name] = total.get("limits." + name, 0) + value
    return total, len((pod or {}).get("spec", {}).get("containers") or [])


def _vms_on(c, node, ns=None):
    """[(namespace, name)] of the VMIs on node (of namespace ns)."""
    return sorted((v["metadata"]["namespace"], v["metadata"]["name"]) for v in c.r.vmis(ns)
                  if (v.get("status") or {}).get("nodeName") == node)


def _run_migrations(c, ns, earlier):
    """{VMI name: migration} of this run's migrations in ns (created after `earlier` was taken)."""
    return dict((m["spec"].get("vmiName"), m) for m in c.r.vmims(ns)
                if "kvq" in m["metadata"]["name"] and m["metadata"]["uid"] not in earlier)


def _restart(c, ns, names):
    """The administrator restarts VMs (their VMIs deleted together, so that their old launchers free the quota first;
    each VM starts a new VMI sized from its spec)."""
    paths = dict((name, KV + "/namespaces/%s/virtualmachineinstances/%s" % (ns, name)) for name in names)
    old = dict((name, (c.rest.get_or_none(path) or {}).get("metadata", {}).get("uid")) for name, path in paths.items())
    for path in paths.values():
        attempt(c.rest.delete, path)

    def running_anew(path, name):
        vmi = c.rest.get_or_none(path)
        return vmi and vmi["metadata"]["uid"] != old[name] and (vmi.get("status") or {}).get("phase") == "Running"
    for name, path in sorted(paths.items()):
        c.wait(lambda path=path, name=name: running_anew(path, name), 120, "VM %s/%s to run again" % (ns, name),
               interval=0.5)

    def settled():
        # the old launchers gone and the quota controller caught up with the new ones: what the next plan reads
        # (a drain planned in between sized its batches from a namespace still in motion: make test, 13:18)
        pods = c.rest.get("/api/v1/namespaces/%s/pods" % ns)["items"]
        if any(ref.get("uid") in old.values() for p in pods if (p.get("status") or {}).get("phase") not in FINAL
               for ref in (p["metadata"].get("ownerReferences") or [])):
            return False
        live = {}
        for p in pods:
            if (p.get("status") or {}).get("phase") in FINAL:
                continue
            for ct in p["spec"]["containers"]:
                for rname, value in _num((ct.get("resources") or {}).get("limits") or {}).items():
                    live["limits." + rname] = live.get("limits." + rname, 0) + value
        for q in c.rest.get("/api/v1/namespaces/%s/resourcequotas" % ns)["items"]:
            used = _num((q.get("status") or {}).get("used") or {})
            if any(used.get(rname, 0) != value for rname, value in live.items() if rname in used):
                return False
        return True
    c.wait(settled, 60, "namespace %s settled after the restart (old launchers gone, quota usage caught up)" % ns,
           interval=0.5)


def reset(c, attack):
    """After an attack that was not contained: the administrator's forced cleanup, so that the next attacks start
    from the base (every quota and Rancher annotation back to it, kvquota's ledgers, locks, fence entries and window
    records deleted, every node uncordoned). Noted on the attack; its failures stay."""
    cms = "/api/v1/namespaces/%s/configmaps" % OPERATOR_NS
    done = []
    for cm in c.rest.get(cms)["items"]:
        name = cm["metadata"]["name"]
        if name.startswith(("kvq-ledger-", "kvq-window-")):
            attempt(c.rest.delete, cms + "/" + name)
            done.append(name)
    entries = c.fence_entries()
    if entries:
        c.rest.patch(cms + "/" + FENCE_CONFIGMAP, {"data": dict((k, None) for k in entries)})
        done.append("%d fence entries" % len(entries))
    leases = "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % OPERATOR_NS
    for lease in c.rest.get(leases)["items"]:
        if lease["metadata"]["name"].startswith("kvq-lock-"):
            attempt(c.rest.delete, leases + "/" + lease["metadata"]["name"])
    for ns in RANCHER_NAMESPACES:
        if c.annotation(ns) != c.base_annotations[ns]:
            c.rest.patch("/api/v1/namespaces/" + ns,
                         {"metadata": {"annotations": {RANCHER_ANNOTATION: c.base_annotations[ns]}}})
            done.append("annotation of " + ns)
    for ns, quotas in sorted(c.base.items()):
        if ns in RANCHER_NAMESPACES:
            continue    # Rancher applies the annotation (the lock-down refuses anyone else's write)
        for name, hard in sorted(quotas.items()):
            path = "/api/v1/namespaces/%s/resourcequotas/%s" % (ns, name)
            cur = c.rest.get(path)
            if (cur.get("spec") or {}).get("hard") != hard:
                cur["spec"]["hard"] = hard
                status, text = attempt(c.rest.replace, path, cur)
                done.append("quota %s/%s%s" % (ns, name, " (refused: %s %s)" % (status, text[:100]) if status else ""))
    c.uncordon_all()
    if done:
        attack.notes.append("administrator's forced cleanup after the attack: %s" % ", ".join(done))
    try:
        c.wait(lambda: not c.problems(), 60, "the lab back at its base")
    except AssertionError:
        attack.notes.append("after the cleanup: %s" % c.problems())


def _check_sizes(c, attack, ns, before, node, out, what, one_per_batch=True):
    """The VMs of ns that the attack grew: none reserved for more than the plan (a quota's peak above its base is at
    most the largest planned VM with one VM per batch, else all of them), none back bigger, and one left on the node
    is named with what changed. before: {vm: (limits, containers)} read before the drain."""
    plan_max = {}
    for limits, _n in before.values():
        for res, value in limits.items():
            plan_max[res] = max(plan_max.get(res, 0), value) if one_per_batch else plan_max.get(res, 0) + value
    for key, peak in sorted(getattr(attack, "peak", {}).items()):
        if key.split("/")[0] != ns:
            continue
        for res, extra in sorted(peak.items()):
            if res in plan_max and extra > plan_max[res]:
                attack.fail("%s reserved +%s %s, more than the plan's %s (+%s): the tenant's growth was reserved for"
                            % (key, _fmt(extra, res), res, "largest VM" if one_per_batch else "VMs",
                               _fmt(plan_max[res], res)))
            elif res in plan_max:
                attack.notes.append("%s peak +%s %s (plan: +%s %s)" % (
                    key, _fmt(extra, res), res, _fmt(plan_max[res], res), "per VM" if one_per_batch else "in all"))
    flat = " ".join(out.split())
    for vm, (limits, containers) in sorted(before.items()):
        now, count = _pod_size(_launcher(c, ns, vm))
        grown = dict((r, v) for r, v in now.items() if v > limits.get(r, 0))
        if grown or count > containers:
            attack.fail("VM %s/%s came back bigger: %s, %d containers (was %s, %d)"
                        % (ns, vm, dict((r, _fmt(v, r)) for r, v in now.items()), count,
                           dict((r, _fmt(v, r)) for r, v in limits.items()), containers))
        if (ns, vm) in _vms_on(c, node, ns):
            if vm in flat and what in flat:
                attack.notes.append("VM %s/%s left on %s, named with %s" % (ns, vm, node, what))
            else:
                attack.fail("VM %s/%s left on %s without the run naming it with %s: %s"
                            % (ns, vm, node, what, _failure_text(out)))


def attack_pvc_capture(c, attack):
    """edit tenant: a 10Mi PVC created while the namespace holds the reservation of a VM with a persistent EFI (the
    reservation adds persistentvolumeclaims and requests.storage for the target's backend-storage PVC; once the
    migration handed the VM's state over to the target PVC, KubeVirt deleted the source's and the room is free until
    the release): the fence must refuse it."""
    ns = attack.ns
    node = c.node_for(ns)
    created = []
    tries = []

    def grab():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and c.active(ns):
            body = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": "grab-pvc-" + secrets.token_hex(2), "namespace": ns},
                    "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem",
                             "resources": {"requests": {"storage": "10Mi"}}}}
            status, text = attempt(c.tenant(ns).create, "/api/v1/namespaces/%s/persistentvolumeclaims" % ns, body)
            tries.append(status)
            if status == 403 and "is fenced" in text:
                attack.fence_refusals += 1
                attack.notes.append("PVC %s refused by the fence" % body["metadata"]["name"])
                return
            if status == 0:
                created.append(body["metadata"]["name"])
                attack.fail("the tenant's PVC %s was admitted during the reservation (%s)" % (
                    body["metadata"]["name"],
                    _quota_line(c, ns, ("persistentvolumeclaims", "requests.storage"))))
                return
            if "exceeded quota" not in text:
                attack.fail("the tenant's PVC: refused but not by the fence: %s %s" % (status, text[:300]))
                return
            time.sleep(0.1)
        attack.fail("no PVC of the tenant was decided during the reservation (%d refused by quota admission only)"
                    % len(tries))

    c.r.set_knobs(migration_seconds=4)
    try:
        drain(c, attack, node, during=grab, trigger="migrated")
    finally:
        c.r.set_knobs(migration_seconds=None)
    for name in created:
        attempt(c.rest.delete, "/api/v1/namespaces/%s/persistentvolumeclaims/%s" % (ns, name))
    pvcs = c.rest.get("/api/v1/namespaces/%s/persistentvolumeclaims" % ns)["items"]
    attack.notes.append("PVCs after the run: %s" % ", ".join(sorted(
        "%s%s" % (p["metadata"]["name"], " (migration %s)" % p["metadata"]["labels"]["kubevirt.io/migrationName"]
                  if "kubevirt.io/migrationName" in (p["metadata"].get("labels") or {}) else "") for p in pvcs)))
    settle(c, attack, node)
    if attack.failures:
        reset(c, attack)


def _quota_line(c, ns, names):
    out = []
    for q in c.rest.get("/api/v1/namespaces/%s/resourcequotas" % ns)["items"]:
        st = q.get("status") or {}
        out.append("%s: %s" % (q["metadata"]["name"], ", ".join(
            "%s %s/%s" % (n, (st.get("used") or {}).get(n), (st.get("hard") or {}).get(n)) for n in names)))
    return "; ".join(out)


def _grow_attack(c, attack, change, undo, what):
    """A VM of a later batch grows after the plan: change(vm) once the run's first migration exists (one VM per
    batch), then the sizes checked (_check_sizes) and the change undone."""
    ns = attack.ns
    node = c.node_for(ns)
    on_node = [vm for _ns, vm in _vms_on(c, node, ns)]
    if len(on_node) < 2:
        attack.fail("premise: %s holds %d VM(s) of %s, two are needed (a later batch)" % (node, len(on_node), ns))
        return
    before = dict((vm, _pod_size(_launcher(c, ns, vm))) for vm in on_node)
    earlier = set(m["metadata"]["uid"] for m in c.r.vmims(ns))
    grown = []

    def grow():
        started = _run_migrations(c, ns, earlier)
        later = [vm for vm in on_node if vm not in started]
        if not later:
            attack.fail("every VM of %s was already migrating: no later batch to grow" % ns)
            return
        status, text = change(later[-1])
        if status:
            attack.fail("the tenant's change was refused: %s %s" % (status, text[:300]))
            return
        grown.append(later[-1])
        attack.notes.append("%s while %s migrates, before %s's batch" % (what, sorted(started), later[-1]))

    c.r.set_knobs(migration_seconds=4)
    try:
        _rc, out = drain(c, attack, node, during=grow, expect_ok=False, trigger="migration", extra_vars=ONE_BY_ONE)
    finally:
        c.r.set_knobs(migration_seconds=None)
    _check_sizes(c, attack, ns, before, node, out, what.split()[0])
    left = [vm for _ns, vm in _vms_on(c, node, ns)]
    if attack.runs[-1][1] != 0 and not left:
        attack.fail("the drain failed (rc %s) although every VM left: %s" % (attack.runs[-1][1], _failure_text(out)))
    settle(c, attack, node if not left else None)
    undo()
    if attack.failures:
        reset(c, attack)
    # a grown VM is restarted (its launcher sized from its spec again); one left on the node stays for a re-run
    bigger = [vm for vm in grown if _pod_size(_launcher(c, ns, vm)) != before[vm]]
    if bigger:
        _restart(c, ns, bigger)
        attack.notes.append("VM(s) %s of %s restarted by the administrator to shrink them back" % (bigger, ns))
    c.uncordon_all()


def attack_grow_annotation(c, attack):
    """edit tenant: three hook sidecars (hooks.kubevirt.io/hookSidecars on its running VMI, which virt-api allows)
    on a VM of a later batch, after the plan: that VM must not be reserved for more than the plan, nor come back
    bigger; it is named and left out (or the run stops naming it)."""
    ns = attack.ns
    path = KV + "/namespaces/%s/virtualmachineinstances/" % ns
    changed = []

    def change(vm):
        changed.append(vm)
        return attempt(c.tenant(ns).patch, path + vm, {"metadata": {"annotations": {HOOK_SIDECARS: THREE_SIDECARS}}})

    def undo():
        for vm in changed:
            attempt(c.rest.patch, path + vm, {"metadata": {"annotations": {HOOK_SIDECARS: None}}})
    _grow_attack(c, attack, change, undo, "%s (three sidecars)" % HOOK_SIDECARS)


def attack_grow_ratio_label(c, attack):
    """Rancher project member: namespace label alpha.kubevirt.io/auto-memory-limits-ratio=8 once the run's first
    migration exists (VMs without a memory limit, one per batch): no batch reserves more than the plan, no VM comes
    back bigger, a VM left out is named with the label."""
    ns = attack.ns

    def change(_vm):
        return attempt(c.tenant(ns, "project-member").patch, "/api/v1/namespaces/" + ns,
                       {"metadata": {"labels": {RATIO_LABEL: "8"}}})

    def undo():
        attempt(c.rest.patch, "/api/v1/namespaces/" + ns, {"metadata": {"labels": {RATIO_LABEL: None}}})
    _grow_attack(c, attack, change, undo, "%s=8" % RATIO_LABEL)


def attack_grow_during_batch(c, attack):
    """edit tenant: one hook sidecar (+200m) on its VMs once the run's migrations exist, before KubeVirt renders their
    target pods (emulator knob target_pod_delay_seconds): the target pods are larger than planned. Nothing the tenant
    asked for may be reserved (no top-up for it) or admitted into the headroom: no VM may come back bigger, a VM
    left out is named with the annotation."""
    ns = attack.ns
    node = c.node_for(ns)
    on_node = [vm for _ns, vm in _vms_on(c, node, ns)]
    before = dict((vm, _pod_size(_launcher(c, ns, vm))) for vm in on_node)
    earlier = set(m["metadata"]["uid"] for m in c.r.vmims(ns))
    path = KV + "/namespaces/%s/virtualmachineinstances/" % ns
    sidecar = json.dumps([{"image": "example.invalid/tenant-hook:1", "args": ["--version", "v1alpha2"]}])
    changed = []

    def grow():
        for vm in on_node:
            status, text = attempt(c.tenant(ns).patch, path + vm,
                                   {"metadata": {"annotations": {HOOK_SIDECARS: sidecar}}})
            if status:
                attack.fail("the tenant's annotation of %s was refused: %s %s" % (vm, status, text[:300]))
            else:
                changed.append(vm)

    # KubeVirt renders the target pods 3 s after the migrations get their slots: the tenant's change lands first
    c.r.set_knobs(target_pod_delay_seconds=3)
    try:
        _rc, out = drain(c, attack, node, during=grow, expect_ok=False, trigger="migration")
    finally:
        c.r.set_knobs(target_pod_delay_seconds=None)
    # the moment: KubeVirt rendered the run's target pods after the change (they carry the sidecar)
    targets = []
    for m in _run_migrations(c, ns, earlier).values():
        for pod in c.rest.get("/api/v1/namespaces/%s/pods" % ns, labelSelector="kubevirt.io/migrationJobUID=%s"
                              % m["metadata"]["uid"])["items"]:
            targets.append(len(pod["spec"]["containers"]))
    grown_targets = [n for n in targets if n > max(cnt for _l, cnt in before.values())]
    attack.notes.append("run's target pods: %d, %d of them with the tenant's sidecar; top-ups: %s"
                        % (len(targets), len(grown_targets), re.findall(r"topped up by [^\"]*", out)[:2] or "none"))
    if changed and not grown_targets and HOOK_SIDECARS not in " ".join(out.split()):
        attack.fail("the run's target pods were rendered before the tenant's change (the attack's moment passed)")
    _check_sizes(c, attack, ns, before, node, out, HOOK_SIDECARS, one_per_batch=False)
    left = [vm for _ns, vm in _vms_on(c, node, ns)]
    settle(c, attack, node if not left else None)
    for vm in changed:
        attempt(c.rest.patch, path + vm, {"metadata": {"annotations": {HOOK_SIDECARS: None}}})
    if attack.failures:
        reset(c, attack)
    bigger = [vm for vm in changed if _pod_size(_launcher(c, ns, vm)) != before[vm]]
    if bigger:
        _restart(c, ns, bigger)
        attack.notes.append("VM(s) %s of %s restarted by the administrator to shrink them back" % (bigger, ns))
    c.uncordon_all()


def _blocked_beside_others(c, attack, ns, node, out, what):
    """Only ns's VMs may stay on node, each named with what; every other namespace's VM left."""
    flat = " ".join(out.split())
    for other_ns, vm in _vms_on(c, node):
        if other_ns != ns:
            attack.fail("VM %s/%s of another tenant stayed on %s: %s" % (other_ns, vm, node, _failure_text(out)))
        elif vm in flat and other_ns in flat and what in flat:
            attack.notes.append("VM %s/%s left on %s, named with %s" % (ns, vm, node, what))
        else:
            attack.fail("VM %s/%s left on %s without being named with its namespace and %s: %s"
                        % (ns, vm, node, what, _failure_text(out)))


def attack_ratio_label_before_plan(c, attack):
    """Rancher project member: label alpha.kubevirt.io/auto-memory-limits-ratio=8 on its namespace before the drain,
    on a node that holds other tenants' VMs too: only its VMs may be blocked, each named with the label; the others
    leave the node."""
    ns = attack.ns
    node = c.node_for(ns)
    others = [k for k in _vms_on(c, node) if k[0] != ns]
    if not others:
        attack.fail("premise: no other tenant's VM beside %s's on %s" % (ns, node))
        return
    status, text = attempt(c.tenant(ns, "project-member").patch, "/api/v1/namespaces/" + ns,
                           {"metadata": {"labels": {RATIO_LABEL: "8"}}})
    if status:
        attack.fail("the project member could not label its namespace: %s %s" % (status, text[:300]))
        return
    try:
        _rc, out = drain(c, attack, node, expect_ok=False)
        _blocked_beside_others(c, attack, ns, node, out, RATIO_LABEL)
        settle(c, attack)
    finally:
        attempt(c.rest.patch, "/api/v1/namespaces/" + ns, {"metadata": {"labels": {RATIO_LABEL: None}}})
    if attack.failures:
        reset(c, attack)
    c.uncordon_all()


def attack_invalid_annotation(c, attack):
    """edit tenant: hooks.kubevirt.io/hookSidecars: "{" on its running VMI beside another tenant's VMs: the others
    leave the node, the bad VM is named with its namespace, name and the annotation; once it is fixed a re-run
    completes."""
    ns = attack.ns
    node, bad = None, None
    for vmi in c.r.vmis(ns):
        where = (vmi.get("status") or {}).get("nodeName")
        if any(k[0] != ns for k in _vms_on(c, where)):
            node, bad = where, vmi["metadata"]["name"]
            break
    if node is None:
        attack.fail("premise: no VM of %s beside another tenant's VM" % ns)
        return
    path = KV + "/namespaces/%s/virtualmachineinstances/%s" % (ns, bad)
    status, text = attempt(c.tenant(ns).patch, path, {"metadata": {"annotations": {HOOK_SIDECARS: "{"}}})
    if status:
        attack.fail("the tenant could not annotate its VMI: %s %s" % (status, text[:300]))
        return
    try:
        _rc, out = drain(c, attack, node, expect_ok=False)
        _blocked_beside_others(c, attack, ns, node, out, HOOK_SIDECARS)
    finally:
        attempt(c.tenant(ns).patch, path, {"metadata": {"annotations": {HOOK_SIDECARS: None}}})
    c.uncordon_all()
    if _vms_on(c, node):
        rc2, out2, secs2 = c.run(dict(BOUNDED, node_maintenance_node=node))
        attack.runs.append(("node_maintenance", rc2, secs2))
        if rc2 != 0:
            attack.fail("the re-run once the annotation was fixed failed: %s" % _failure_text(out2))
    settle(c, attack, node)
    if attack.failures:
        reset(c, attack)


def _tenant_migrations(c, ns, tag):
    return [m for m in c.r.vmims(ns) if (m["metadata"].get("labels") or {}).get(ATTACK_LABEL) == tag]


class OwnMigrations(object):
    """The tenant migrates VMs again and again: one migration of its own per VM not final at any time. A target pod
    of one of them created while the namespace held a reservation was admitted into the headroom."""

    def __init__(self, c, attack, ns):
        self.c, self.attack, self.ns = c, attack, ns
        self.tag = secrets.token_hex(3)
        self.path = KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns
        self.admitted = {}     # migration name -> target pod admitted during a reservation
        self.created = []
        self.refused = set()

    def step(self, vms):
        mine = _tenant_migrations(self.c, self.ns, self.tag)
        if self.c.active(self.ns):
            found = {}
            for m in mine:
                name = m["metadata"]["name"]
                if name not in self.admitted:
                    pods = self.c.rest.get("/api/v1/namespaces/%s/pods" % self.ns, labelSelector=(
                        "kubevirt.io/migrationJobUID=%s" % m["metadata"]["uid"]))["items"]
                    if pods:
                        found[name] = pods[0]["metadata"]["name"]
            if found and self.c.active(self.ns):   # held before and after the pods were read
                self.admitted.update(found)
        busy = set(m["spec"].get("vmiName") for m in mine if (m.get("status") or {}).get("phase") not in FINAL)
        for vm in vms:
            if vm in busy or len(self.created) >= 40:
                continue
            name = "%s-tenant-%s-%d" % (vm, self.tag, len(self.created))
            status, text = attempt(self.c.tenant(self.ns).create, self.path, {
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                "metadata": {"name": name, "labels": {ATTACK_LABEL: self.tag}}, "spec": {"vmiName": vm}})
            if status:
                self.attack.fail("the tenant could not create migration %s: %s %s" % (name, status, text[:200]))
                return False
            self.created.append(name)
        return True

    def fence_refusals(self):
        names = set(self.created)
        count = 0
        for ev in self.c.rest.get("/api/v1/namespaces/%s/events" % self.ns)["items"]:
            if ev.get("involvedObject", {}).get("name") in names and "is fenced" in (ev.get("message") or ""):
                count += int(ev.get("count") or 1)
        return count

    def finish(self, out):
        """Checks, then the tenant's migrations deleted."""
        self.attack.fence_refusals += self.fence_refusals()
        self.attack.notes.append("tenant migrations created: %d, target pods admitted during a reservation: %d, "
                                 "refusals by the fence: %d" % (len(self.created), len(self.admitted),
                                                                self.fence_refusals()))
        if not self.created:
            self.attack.fail("the tenant never migrated while the reservation was held")
        for name, pod in sorted(self.admitted.items())[:3]:
            self.attack.fail("target pod %s of the tenant's migration %s was admitted while %s held a reservation"
                             % (pod, name, self.ns))
        for m in _tenant_migrations(self.c, self.ns, self.tag):
            attempt(self.c.rest.delete, self.path + "/" + m["metadata"]["name"])
        self.c.wait(lambda: not [m for m in _tenant_migrations(self.c, self.ns, self.tag)
                                 if (m.get("status") or {}).get("phase") not in FINAL], 60,
                    "the tenant's migrations to end")


def attack_own_migration_drive(c, attack):
    """edit tenant (create on virtualmachineinstancemigrations, as KubeVirt's edit up to 1.4): migrates its VMs of the
    batch again and again while the reservation is held: its target pods must be refused by the fence; the run
    completes (or fails naming the tenant's migration), quotas end at their base."""
    ns = attack.ns
    node = c.node_for(ns)
    vms = [vm for _ns, vm in _vms_on(c, node, ns)]
    own = OwnMigrations(c, attack, ns)

    def keep_migrating():
        deadline = time.monotonic() + 150
        while c.proc.poll() is None and time.monotonic() < deadline:
            if not own.step(vms):
                break
            time.sleep(0.3)

    c.r.set_knobs(migration_seconds=3)
    try:
        rc, out = drain(c, attack, node, during=keep_migrating, expect_ok=False, trigger="migration")
    finally:
        c.r.set_knobs(migration_seconds=None)
    own.finish(out)
    if rc != 0:
        named = [n for n in own.created if n in out]
        if named:
            attack.notes.append("drain failed naming the tenant's migration %s" % named[0])
        else:
            attack.blocked = True
            attack.fail("drain of %s failed (rc %s) without naming the tenant's migrations: %s"
                        % (node, rc, _failure_text(out)))
    settle(c, attack, node if rc == 0 else None)
    if attack.failures:
        reset(c, attack)
    if _vms_on(c, node):
        rc2, out2, secs2 = c.run(dict(BOUNDED, node_maintenance_node=node))
        attack.runs.append(("node_maintenance", rc2, secs2))
        if rc2 != 0:
            attack.fail("the re-run failed: %s" % _failure_text(out2))
        settle(c, attack, node)


def attack_own_migration_follow(c, attack):
    """edit tenant beside `kubectl drain` with the maintenance_window role: keeps migrating the node's VMs after
    they left it; the fence must refuse its target pods, the window must end (or fail naming the tenant's
    migration) with every quota at its base."""
    ns = attack.ns
    node = c.node_for(ns)
    vms = [vm for _ns, vm in _vms_on(c, node, ns)]
    own = OwnMigrations(c, attack, ns)
    sampler = c.sampler = Sampler(c, c.base)
    sampler.start()
    proc = c.proc = c.start({"maintenance_window_nodes": [node], "maintenance_window_until": "nodes_schedulable",
                             "maintenance_window_deadline_seconds": 150, "maintenance_window_poll_interval": 1,
                             "maintenance_window_reservation_ttl": "10m",
                             "maintenance_window_top_up_settle_seconds": 5}, name="maintenance_window")
    drained = {}
    c.r.set_knobs(migration_seconds=3)
    try:
        time.sleep(8)   # the window is up before the drain evicts anything
        if proc.poll() is not None:
            attack.fail("the window ended before the drain: %s" % _failure_text(Path(proc.out_file).read_text()))
        else:
            def kubectl_drain():
                res = subprocess.run(["kubectl", "--kubeconfig", str(c.r.lab.admin_kubeconfig), "drain", node,
                                      "--timeout=200s"], capture_output=True, text=True, timeout=260, check=False)
                drained["rc"], drained["out"] = res.returncode, res.stdout + res.stderr
            drainer = threading.Thread(target=kubectl_drain, daemon=True)
            drainer.start()
            # the node stays cordoned 20 s after the drain (the window watches on), the tenant migrating the VMs
            # that left it; then it is uncordoned, and the tenant stops 20 s later: the window must end by itself
            drained_at = uncordoned_at = None
            deadline = time.monotonic() + 200
            while proc.poll() is None and time.monotonic() < deadline:
                left = [vm for vm in vms if (ns, vm) not in _vms_on(c, node, ns)]
                if left and not own.step(left):
                    break
                if "rc" in drained and drained_at is None:
                    drained_at = time.monotonic()
                if drained_at and uncordoned_at is None and time.monotonic() - drained_at > 20:
                    c.r.lab.kubectl("uncordon", node)
                    uncordoned_at = time.monotonic()
                if uncordoned_at and time.monotonic() - uncordoned_at > 20:
                    break
                time.sleep(0.3)
            if not own.created:
                attack.fail("none of %s's VMs left %s while the window ran" % (ns, node))
            drainer.join(260)
            if drained.get("rc"):
                attack.fail("kubectl drain failed: %s" % drained.get("out", "")[-600:])
    finally:
        c.r.set_knobs(migration_seconds=None)
        rc, out, secs = c.finish(proc)
        sampler.stop()
        c.r.lab.kubectl("uncordon", node, check=False)
    attack.runs.append(("maintenance_window", rc, secs))
    attack.uncovered.extend(sampler.uncovered)
    own.finish(out)
    if rc != 0:
        named = [n for n in own.created if n in out]
        if named:
            attack.notes.append("window failed naming the tenant's migration %s" % named[0])
        else:
            attack.blocked = True
            attack.fail("the window failed (rc %s) without naming the tenant's migrations: %s"
                        % (rc, _failure_text(out)))
    # the node was uncordoned: the tenant's last migrations may have moved a VM back onto it
    settle(c, attack)
    if attack.failures:
        reset(c, attack)


def attack_new_vm_window(c, attack):
    """edit tenant: a new VM and a bare VMI started while the namespace holds a reservation: their launcher pods must
    be refused by the fence."""
    ns = attack.ns
    node = c.node_for(ns)
    token = secrets.token_hex(2)
    names = ("tenant-new-vm-" + token, "tenant-bare-vmi-" + token)
    spec = {"domain": {"cpu": {"cores": 1}, "resources": {"requests": {"memory": "64Mi"},
                                                          "limits": {"cpu": "100m", "memory": "64Mi"}},
                       "devices": {"disks": []}}, "terminationGracePeriodSeconds": 0}
    outcome = {}

    def start_vms():
        _wait_expanded(c, ns)
        status, text = attempt(c.tenant(ns).create, KV + "/namespaces/%s/virtualmachines" % ns, {
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": names[0]},
            "spec": {"running": True, "template": {"metadata": {"labels": {ATTACK_LABEL: token}}, "spec": spec}}})
        if status:
            attack.fail("creating the VM: %s %s" % (status, text[:200]))
        status, text = attempt(c.tenant(ns).create, KV + "/namespaces/%s/virtualmachineinstances" % ns, {
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": names[1], "labels": {ATTACK_LABEL: token}}, "spec": spec})
        if status:
            attack.fail("creating the bare VMI: %s %s" % (status, text[:200]))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(outcome) < 2 and c.active(ns):
            for name in names:
                vmi = c.rest.get_or_none(KV + "/namespaces/%s/virtualmachineinstances/%s" % (ns, name))
                if not vmi or name in outcome:
                    continue
                pods = c.rest.get("/api/v1/namespaces/%s/pods" % ns, labelSelector="kubevirt.io/created-by=%s"
                                  % vmi["metadata"]["uid"])["items"]
                conds = [x for x in (vmi.get("status") or {}).get("conditions") or []
                         if x.get("reason") == "FailedCreate"]
                if pods:
                    outcome[name] = "admitted"
                elif conds and "is fenced" in (conds[0].get("message") or ""):
                    outcome[name] = "fenced"
                elif conds:
                    outcome[name] = "refused: " + conds[0].get("message", "")[:200]
            time.sleep(0.3)

    c.r.set_knobs(migration_seconds=8)
    try:
        drain(c, attack, node, during=start_vms)
    finally:
        c.r.set_knobs(migration_seconds=None)
        attempt(c.rest.delete, KV + "/namespaces/%s/virtualmachines/%s" % (ns, names[0]))
        attempt(c.rest.delete, KV + "/namespaces/%s/virtualmachineinstances/%s" % (ns, names[1]))
    for name in names:
        result = outcome.get(name)
        if result == "fenced":
            attack.fence_refusals += 1
            attack.notes.append("%s: launcher pod refused by the fence" % name)
        elif result is None:
            attack.fail("%s: no launcher pod tried while the reservation was held" % name)
        else:
            attack.fail("%s: launcher pod %s during the reservation" % (name, result))
    c.wait(lambda: not [v for v in c.r.vmis(ns) if v["metadata"]["name"] in names], 60, "the tenant's VMs gone")
    settle(c, attack, node)
    if attack.failures:
        reset(c, attack)


def _mark(rest, path, body):
    """A tenant's patch of a VMI's status, once more after a 409 (the emulator wrote the status meanwhile)."""
    for _try in range(10):
        status, text = attempt(rest.patch, path, body)
        if status != 409:
            return status, text
        time.sleep(0.2)
    return status, text


def attack_forged_marks_window(c, attack):
    """edit tenant that also writes its VMIs' status (on KubeVirt a VMI has no status subresource and edit writes
    it; the lab grants virtualmachineinstances/status to stand for that), beside `kubectl drain` with the
    maintenance_window role until idle over the whole cluster (what the always-on rulebook runs): from before the
    drain until the window ends it marks its VMIs for evacuation from nodes that are not cordoned (another every
    3 s, one of them no node name) and labels them as running an outdated launcher. A forged mark counts only while
    the node it names is cordoned, the label only while the KubeVirt CR counts outdated workloads: the window must
    end idle soon after the drain, long before its deadline, reserve for no migration but the drain's, and leave
    every quota at its base."""
    ns = attack.ns
    node = c.node_for(ns)
    drained_vms = [vm for _ns, vm in _vms_on(c, node, ns)]
    role = "kvq-attack-vmi-status"
    c.rest.create("/apis/rbac.authorization.k8s.io/v1/namespaces/%s/roles" % ns, {
        "metadata": {"name": role}, "rules": [{"apiGroups": ["kubevirt.io"], "verbs": ["patch"],
                                               "resources": ["virtualmachineinstances/status"]}]})
    c.rest.create("/apis/rbac.authorization.k8s.io/v1/namespaces/%s/rolebindings" % ns, {
        "metadata": {"name": role}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant-edit", "namespace": ns}]})
    tenant = c.tenant(ns)
    deadline_seconds, idle_seconds = 240, 10
    sampler = c.sampler = Sampler(c, c.base)
    sampler.start()
    proc = c.proc = c.start({"maintenance_window_until": "idle", "maintenance_window_idle_seconds": idle_seconds,
                             "maintenance_window_deadline_seconds": deadline_seconds,
                             "maintenance_window_poll_interval": 1, "maintenance_window_reservation_ttl": "10m",
                             "maintenance_window_top_up_settle_seconds": 5}, name="maintenance_window")
    drained, marks, marked = {}, 0, set()
    c.r.set_knobs(migration_seconds=3)
    try:
        deadline = time.monotonic() + deadline_seconds + 60
        drainer = None
        while proc.poll() is None and time.monotonic() < deadline:
            # a VMI of the tenant's not on the node being drained (a mark for its own node is a real evacuation)
            others = sorted((vm, n) for vm, n in c.vmi_nodes(ns).items() if n and n != node)
            free = sorted(n["metadata"]["name"] for n in c.rest.get("/api/v1/nodes")["items"]
                          if not (n.get("spec") or {}).get("unschedulable"))
            if others:
                vm, its_node = others[marks % len(others)]
                elsewhere = [n for n in free if n not in (its_node, node)] or ["node-none"]
                target = "{{ 7*7 }}" if marks % 4 == 3 else elsewhere[marks % len(elsewhere)]
                path = KV + "/namespaces/%s/virtualmachineinstances/%s" % (ns, vm)
                status, text = _mark(tenant, path + "/status", {"status": {"evacuationNodeName": target}})
                if status:
                    attack.fail("the tenant could not mark %s: %s %s" % (vm, status, text[:200]))
                    break
                attempt(tenant.patch, path, {"metadata": {"labels": {"kubevirt.io/outdatedLauncherImage": "x"}}})
                marked.add(vm)
                marks += 1
            if drainer is None and (marks >= 2 or time.monotonic() - proc.started > 8):
                def kubectl_drain():
                    res = subprocess.run(["kubectl", "--kubeconfig", str(c.r.lab.admin_kubeconfig), "drain", node,
                                          "--timeout=200s"], capture_output=True, text=True, timeout=260, check=False)
                    drained["rc"], drained["out"], drained["at"] = res.returncode, res.stdout + res.stderr, time.monotonic()
                drainer = threading.Thread(target=kubectl_drain, daemon=True)
                drainer.start()
            if "at" in drained and not (drained.get("uncordoned")):
                c.r.lab.kubectl("uncordon", node)
                drained["uncordoned"] = True
            time.sleep(3)
        if drainer is not None:
            drainer.join(260)
        if drainer is None or drained.get("rc"):
            attack.fail("kubectl drain did not run or failed: %s" % drained.get("out", "")[-600:])
    finally:
        c.r.set_knobs(migration_seconds=None)
        rc, out, secs = c.finish(proc)
        ended = time.monotonic()
        sampler.stop()
        c.r.lab.kubectl("uncordon", node, check=False)
        for vm in marked:     # the administrator takes the tenant's marks back
            path = KV + "/namespaces/%s/virtualmachineinstances/%s" % (ns, vm)
            _mark(c.rest, path + "/status", {"status": {"evacuationNodeName": None}})
            attempt(c.rest.patch, path, {"metadata": {"labels": {"kubevirt.io/outdatedLauncherImage": None}}})
        attempt(c.rest.delete, "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/rolebindings/%s" % (ns, role))
        attempt(c.rest.delete, "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/roles/%s" % (ns, role))
    attack.runs.append(("maintenance_window", rc, secs))
    attack.uncovered.extend(sampler.uncovered)
    after_drain = "%.0f s" % (ended - drained["at"]) if "at" in drained else "?"
    attack.notes.append("%d forged marks on %s; the window ended %s after the drain (idle %d s, deadline %d s)"
                        % (marks, ", ".join(sorted(marked)) or "nothing", after_drain, idle_seconds, deadline_seconds))
    if rc != 0:
        attack.blocked = True
        attack.fail("the window failed (rc %s): %s" % (rc, _failure_text(out)))
    elif "at" not in drained or ended - drained["at"] > idle_seconds + 45:
        attack.fail("the window ran %s after the drain: the forged marks kept it open" % after_drain)
    if marks < 3:
        attack.fail("the tenant forged only %d marks while the window ran" % marks)
    if "deadline_seconds" in out:
        attack.fail("the window ran to its deadline")
    followed = set(re.findall(r"%s/(kubevirt-evacuation-[a-z0-9-]+)" % re.escape(ns), out))
    vm_of = dict((m["metadata"]["name"], m["spec"].get("vmiName")) for m in c.r.vmims(ns))
    strays = sorted("%s (VM %s)" % (m, vm_of.get(m)) for m in followed if vm_of.get(m) not in drained_vms)
    if not followed and drained_vms:
        attack.fail("the window followed none of the drain's migrations of %s" % ns)
    if strays:
        attack.fail("the window followed migrations the drain did not start: %s" % strays)
    if "7*7" in out or "49" in re.findall(r"evacuationNodeName[^,]*", out):
        attack.fail("the window's output carries the tenant's mark text")
    settle(c, attack, node)
    if attack.failures:
        reset(c, attack)


# name, namespace, function, in --quick
ATTACKS = (
    # issue 24 first: each needs the layout its nodes have at first (node-5 to node-8)
    ("pvc-capture", PVC_NS, attack_pvc_capture, True),
    ("ratio-label-before-plan", AUTO_NS, attack_ratio_label_before_plan, True),
    ("grow-ratio-label", AUTO_NS, attack_grow_ratio_label, False),
    ("invalid-annotation", OTHER_NS, attack_invalid_annotation, True),
    ("grow-annotation", GROW_NS, attack_grow_annotation, True),
    ("own-migration-drive", GROW_NS, attack_own_migration_drive, True),
    ("grow-during-batch", GROW_NS, attack_grow_during_batch, False),
    ("own-migration-follow", OTHER_NS, attack_own_migration_follow, False),
    ("new-vm-window", PVC_NS, attack_new_vm_window, False),
    ("forged-marks-window", OTHER_NS, attack_forged_marks_window, True),
    ("forged-event", PLAIN[0], attack_forged_event, True),
    ("forged-ledger", RANCHER_NS, attack_forged_ledger, True),
    ("lock-squat", PLAIN[1], attack_lock_squat, True),
    ("headroom-capture-fenced", PLAIN[0], attack_capture_fenced, True),
    ("headroom-capture-unfenced", PLAIN[1], attack_capture_unfenced, False),
    ("headroom-capture-early", PLAIN[0], attack_capture_unfenced_early, False),
    ("launcher-labels", PLAIN[0], attack_launcher_labels, False),
    ("vmim-labels", PLAIN[1], attack_vmim_labels, False),
    ("rancher-annotation", RANCHER_NS, attack_rancher_annotation, False),
    # --quick: the added entry only (one drain, ~30 s), the one that found the defect
    ("rancher-extended", RANCHER_NS, attack_rancher_extended, True),
    ("hostile-memory-overhead", PLAIN[1], attack_hostile_memory_overhead, True),
    ("delete-migration", PLAIN[0], attack_delete_migration, True),
    ("delete-migration-kept-back-shutdown", PLAIN[1], attack_delete_migration_kept_back_shutdown, True),
)


def summary(results):
    contained = sum(1 for a in results if not a.failures)
    above = sum(len(a.uncovered) for a in results)
    blocked = sum(1 for a in results if a.blocked)
    fenced = sum(a.fence_refusals for a in results)
    return ("tenant: %d/%d attacks contained (%d quota above base, %d runs blocked, %d refused by the fence)"
            % (contained, len(results), above, blocked, fenced))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    ap.add_argument("--quick", action="store_true", help="the reduced set for make test")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--keep", action="store_true", help="leave the lab running")
    ap.add_argument("--only", help="comma-separated attack names")
    args = ap.parse_args(argv)
    global QUICK   # pylint: disable=global-statement
    QUICK = args.quick
    signal.signal(signal.SIGTERM, _kill_live)
    chosen = [a for a in ATTACKS if (not args.quick or a[3]) and (not args.only or a[0] in args.only.split(","))]
    started = time.monotonic()
    results = []
    c = Campaign(keep=args.keep)
    setup = time.monotonic() - started
    log("lab ready in %.0fs; %d attack(s)" % (setup, len(chosen)))
    try:
        for name, ns, fn, _quick in chosen:
            attack = Attack(name, ns, (fn.__doc__ or "").split("\n")[0].strip())
            t0 = time.monotonic()
            log("%s (%s)" % (name, ns))
            try:
                fn(c, attack)
            except Exception as exc:  # noqa: BLE001 - one attack's crash is its failure, the campaign goes on
                attack.fail("campaign error: %s" % exc)
                log(traceback.format_exc())
                c.uncordon_all()
            attack.seconds = time.monotonic() - t0
            results.append(attack)
            log(attack.line().strip())
    finally:
        _kill_live()
        c.stop()
    total = time.monotonic() - started
    print("tenant attacks (%s, %.0fs, lab %.0fs):" % ("quick" if args.quick else "full", total, setup))
    for attack in results:
        print(attack.line())
        for note in attack.notes:
            print("      %s" % note)
    line = summary(results)
    print(line)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({
            "quick": args.quick, "seconds": round(total, 1), "lab_seconds": round(setup, 1), "line": line,
            "attacks": [a.to_json() for a in results],
            "contained": sum(1 for a in results if not a.failures), "total": len(results),
            "quota_above_base": sum(len(a.uncovered) for a in results),
            "runs_blocked": sum(1 for a in results if a.blocked),
            "refused_by_fence": sum(a.fence_refusals for a in results)}, indent=1))
    return 0 if results and all(not a.failures for a in results) else 1


if __name__ == "__main__":
    sys.exit(main())
