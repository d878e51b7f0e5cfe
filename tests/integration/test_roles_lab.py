# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared helpers for the role tests (test_roles_*.py, test_preflight_html.py): no tests here.

Each role test module starts its own lab (a real kube-apiserver, quota controller, scheduler and the
KubeVirt emulator; tests/lab), applies a scenario, runs a playbook of the collection with
ansible-playbook as the least-privilege user of roles/install/files/clusterrole.yml (and roles/install/files/operator-namespace.yml's Role in
kvquota-system), and asserts on the cluster state afterwards: the quotas, and what the collection keeps in the
operator namespace (ledger ConfigMaps, lock Leases; read through kvqlab.state).

Environment:
  KVQ_LAB_REQUIRED=1         a missing lab build fails instead of skipping
  KVQ_ROLES_COLLECTIONS_PATH where ansible finds kvquota.maintenance (default: KVQ_COLLECTIONS_PATH, the
                             symlink farm of this checkout that the repository's conftest.py creates)
  KVQ_ROLES_KEEP_LAB=1       leave the labs running (their run dirs are printed)
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from kvqlab import rbacusage, state
from modlab import require_lab_build, run_module, wait

REPO = Path(__file__).resolve().parents[2]
# every request the least-privilege user made in the labs of this pytest session, read from each lab's audit log
# when it stops (test_rbac_usage_lab.py checks them all against the shipped roles): [(lab run dir, Request)]
RECORDED_REQUESTS = []

KV = "/apis/kubevirt.io/v1"
FINAL = ("Succeeded", "Failed")


def collections_path():
    return os.environ.get("KVQ_ROLES_COLLECTIONS_PATH", os.environ["KVQ_COLLECTIONS_PATH"])


class RoleLab(object):
    """One lab with one scenario applied, the emulator running, and helpers to look at it."""

    def __init__(self, run_dir, scenario, emulator_defaults=None, knobs=None):
        import kvqlab
        from kvqlab import emulator, scenarios
        from kvqlab.emulator import _rest_for
        self.run_dir = Path(run_dir)
        self.kvqlab = kvqlab
        self.emulator_mod = emulator
        self.scenarios = scenarios
        self.lab = kvqlab.up(run_dir=str(run_dir))
        self.emu = emulator.start(self.lab, knobs=knobs, **(emulator_defaults or {}))
        self.scenario = scenarios.load(scenario)
        scenarios.apply(self.lab, self.scenario, timeout=180)
        self.rest = _rest_for(self.lab)
        self.log_offset = 0

    # -- lifecycle -----------------------------------------------------------------------------------
    def stop(self):
        self.record_requests()
        if os.environ.get("KVQ_ROLES_KEEP_LAB"):
            print("lab left running in %s" % self.run_dir)
            return
        try:
            self.emu.stop()
        finally:
            self.kvqlab.down(str(self.run_dir))

    def record_requests(self):
        """Add what the least-privilege user asked of this lab (its audit log) to RECORDED_REQUESTS, once."""
        if getattr(self, "_recorded", False):
            return
        self._recorded = True
        log = self.lab.audit_log
        if log.exists():
            RECORDED_REQUESTS.extend((str(self.run_dir), request)
                                     for request in rbacusage.read_audit(log, self.lab.user_name))

    def set_knobs(self, **values):
        self.emulator_mod.set_knobs(self.lab, **values)

    def rancher_agent_restart(self):
        self.emulator_mod.rancher_agent_restart(self.lab)

    # -- reads ---------------------------------------------------------------------------------------
    def get(self, path, **params):
        return self.rest.get(path, **params)

    def quotas(self, namespace):
        return dict((q["metadata"]["name"], q) for q in
                    self.get("/api/v1/namespaces/%s/resourcequotas" % namespace)["items"])

    def hard(self, namespace):
        """{quota: spec.hard} of a namespace, strings as stored (byte-for-byte comparison)."""
        return dict((name, dict(q["spec"]["hard"])) for name, q in self.quotas(namespace).items())

    def namespace(self, name):
        return self.get("/api/v1/namespaces/%s" % name)

    def vmis(self, namespace=None):
        path = KV + ("/namespaces/%s/virtualmachineinstances" % namespace if namespace else
                     "/virtualmachineinstances")
        return self.get(path)["items"]

    def vmims(self, namespace=None):
        path = KV + ("/namespaces/%s/virtualmachineinstancemigrations" % namespace if namespace else
                     "/virtualmachineinstancemigrations")
        return self.get(path)["items"]

    def node(self, name):
        return self.get("/api/v1/nodes/%s" % name)

    def busiest_node(self, namespaces=None):
        """The node running most VMIs (of the given namespaces)."""
        counts = {}
        for vmi in self.vmis():
            if namespaces and vmi["metadata"]["namespace"] not in namespaces:
                continue
            node = (vmi.get("status") or {}).get("nodeName")
            if node:
                counts[node] = counts.get(node, 0) + 1
        return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]

    def emulator_log(self):
        """The emulator's log written since the last mark()."""
        path = self.run_dir / "emulator" / "emulator.log"
        with open(path, "rb") as fh:
            fh.seek(self.log_offset)
            return fh.read().decode("utf-8", "replace")

    def mark(self):
        path = self.run_dir / "emulator" / "emulator.log"
        self.log_offset = path.stat().st_size if path.exists() else 0

    def wait(self, pred, timeout=60, what="condition", interval=0.5):
        return wait(pred, timeout, what, interval)

    # -- clean-up after a test that failed half way ----------------------------------------------------
    def ledgers(self):
        """{(namespace, quota): ledger dict} of every ledger in the operator namespace."""
        return state.ledgers(self.rest)

    def reservations(self):
        """Every reservation id held in a ledger."""
        return state.reservation_ids(self.ledgers().values())

    def force_clean(self):
        """Release every reservation (force), cancel unfinished migrations, uncordon every node."""
        for rid in self.reservations():
            module(self, "kvquota_release", {"reservation_id": rid, "force": True})
        for m in self.vmims():
            if (m.get("status") or {}).get("phase") not in FINAL:
                self.rest.delete(KV + "/namespaces/%s/virtualmachineinstancemigrations/%s"
                                 % (m["metadata"]["namespace"], m["metadata"]["name"]))
        for node in self.get("/api/v1/nodes")["items"]:
            if node["spec"].get("unschedulable"):
                self.rest.patch("/api/v1/nodes/%s" % node["metadata"]["name"], {"spec": {"unschedulable": False}})

    # -- the state every run must leave --------------------------------------------------------------
    def assert_restored(self, base, namespaces):
        """spec.hard byte-for-byte equal to base; no ledger ConfigMap of their quotas and no lock in force on them
        in the operator namespace, no 0.1.0 ledger annotation and no kvquota Lease in them; no migration
        unfinished."""
        for ns in namespaces:
            assert self.hard(ns) == base[ns], "quota of %s not back to its base" % ns
        left = state.leftovers(self.rest, namespaces)
        assert not left, "left behind: %s" % "; ".join(left)
        unfinished = [m["metadata"]["name"] for m in self.vmims() if (m.get("status") or {}).get("phase") not in FINAL]
        assert not unfinished, "migrations not finished: %s" % unfinished

    def assert_vms_running_off(self, node, namespaces):
        for ns in namespaces:
            for vmi in self.vmis(ns):
                status = vmi.get("status") or {}
                assert status.get("phase") == "Running", "%s/%s is %s" % (ns, vmi["metadata"]["name"],
                                                                          status.get("phase"))
                assert status.get("nodeName") and status["nodeName"] != node, \
                    "%s/%s still on %s" % (ns, vmi["metadata"]["name"], node)


def start_lab(tmp_path_factory, scenario, **kwargs):
    """A RoleLab for a module fixture, or a skip (a failure with KVQ_LAB_REQUIRED=1) without the lab build."""
    require_lab_build()
    run_dir = tmp_path_factory.mktemp("kvq-roles-%s" % scenario)
    return RoleLab(run_dir, scenario, **kwargs)


def lab_fixture(scenario, **kwargs):
    """A module-scoped `lab` fixture: a RoleLab with scenario applied, stopped after the module.
    Use it as `lab = lab_fixture("a")` in a test module."""
    @pytest.fixture(scope="module")
    def lab(tmp_path_factory):
        started = start_lab(tmp_path_factory, scenario, **kwargs)
        try:
            yield started
        finally:
            started.stop()
    return lab


def base_fixture(*namespaces):
    """A module-scoped `base` fixture: {namespace: spec.hard of its quotas} before the module's first test,
    what assert_restored compares against. Use it as `base = base_fixture("a-tenant")`."""
    @pytest.fixture(scope="module")
    def base(lab):
        return dict((ns, lab.hard(ns)) for ns in namespaces)
    return base


class Run(object):
    """The outcome of one ansible-playbook run."""

    def __init__(self, proc, stdout, stats):
        self.rc = proc.returncode
        self.stdout = stdout
        self.stats = stats

    def __repr__(self):
        return "<Run rc=%s>\n%s" % (self.rc, self.stdout[-6000:])

    def msgs(self):
        """The msg of every debug line (progress lines, summaries)."""
        out = []
        for line in self.stdout.splitlines():
            line = line.strip()
            if line.startswith('"msg": "'):
                out.append(json.loads(line[len('"msg": '):].rstrip(',')))
        return out

    def changed(self):
        for line in self.stdout.splitlines():
            if line.startswith("localhost") and "changed=" in line:
                return int(line.split("changed=")[1].split()[0])
        return None


# The first tasks of an upgrade hook (rolling_upgrade_tasks) in the tests: write how many VMIs are on the node being
# upgraded to the file `dest` (a Jinja expression), so a test can tell the node was empty when it was upgraded.
def hook_recording_vmis_on_node(dest, name="Pretend to upgrade it"):
    return ("- name: Count the VMIs on the node being upgraded\n"
            "  kubernetes.core.k8s_info:\n"
            "    api_version: kubevirt.io/v1\n"
            "    kind: VirtualMachineInstance\n"
            "    label_selectors: ['kubevirt.io/nodeName={{ node_maintenance_node }}']\n"
            "  register: on_node\n"
            "- name: %s\n"
            "  ansible.builtin.copy:\n"
            "    content: \"{{ on_node.resources | length }}\"\n"
            "    dest: \"%s\"\n"
            "    mode: '0644'\n" % (name, dest))


def playbook(lab, name, extra_vars=None, admin=False, timeout=900, background=False, env=None, check=False):
    """Run playbooks/<name>.yml of the collection against the lab (check: with --check); a Run, or the Popen
    when background."""
    kubeconfig = lab.lab.admin_kubeconfig if admin else lab.lab.user_kubeconfig
    handle, vars_file = tempfile.mkstemp(prefix="kvq-vars-", suffix=".json")
    with os.fdopen(handle, "w") as fh:
        json.dump(extra_vars or {}, fh)
    stats = vars_file + ".stats"
    full_env = dict(os.environ)
    full_env.update({
        "ANSIBLE_COLLECTIONS_PATH": collections_path(),
        "K8S_AUTH_KUBECONFIG": str(kubeconfig),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_SHOW_CUSTOM_STATS": "1",
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "PYTHONUNBUFFERED": "1",
    })
    full_env.update(env or {})
    cmd = ["ansible-playbook", str(REPO / "playbooks" / ("%s.yml" % name)), "-e", "@" + vars_file]
    if check:
        cmd.append("--check")
    if background:
        out = open(vars_file + ".out", "w")
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=full_env, cwd=str(lab.run_dir))
        proc.output_file = vars_file + ".out"
        return proc
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=full_env, cwd=str(lab.run_dir), check=False,
                          timeout=timeout, universal_newlines=True)
    return Run(proc, proc.stdout, stats)


def module(lab, name, args, admin=True):
    """Run one kvquota module against the lab (set-up and clean-up of role tests and campaigns, not under test);
    its registered result. Through modlab.run_module: the ansible-playbook beside this Python and its callbacks,
    whatever ansible-core KVQ_ANSIBLE_VENV_PLAYBOOKS puts first on PATH for the roles (ansible-core alone has no
    'json' stdout callback; ansible.posix, which has one, is not in that venv)."""
    return dict(run_module(name, args, lab.lab.admin_kubeconfig if admin else lab.lab.user_kubeconfig))


def finish(proc, timeout=900):
    """Wait for a background playbook; its Run."""
    proc.wait(timeout=timeout)
    with open(proc.output_file) as fh:
        return Run(proc, fh.read(), None)
