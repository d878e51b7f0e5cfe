# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Least privilege by construction: every request the collection makes is allowed by the shipped roles, and
every rule of the shipped roles is used.

One lab (scenario c: a Rancher-managed namespace; plus a plain tenant and a VM that cannot live-migrate)
records, in the kube-apiserver audit log, every request of the least-privilege user while a representative
set of runs happens: preflight, kvquota_reserve/kvquota_release, node_maintenance on a plain and on a
Rancher-managed namespace, node_maintenance with policy shutdown, a refused top-up whose migration is
cancelled, and the reaper on an expired reservation. kvqlab.rbacusage then matches each request against
the rules read from rbac/*.yml: none may be refused or fall outside the shipped rules, and every rule
must have been used (the optional roles because their features ran here). The figures are printed.

The analysis is kvqlab.rbacusage (reusable over any run: `python3 -m kvqlab.rbacusage --run-dir ...`).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import time

import pytest

import modlab as M
from test_roles_lab import KV, playbook, start_lab

from kvqlab import rbacusage

PLAIN = "u-plain"
RWO = "u-rwo"
RANCHER = "c-tenant"
AAQ_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "applicationawareresourcequotas.aaq.kubevirt.io"},
    "spec": {"group": "aaq.kubevirt.io", "scope": "Namespaced",
             "names": {"plural": "applicationawareresourcequotas", "singular": "applicationawareresourcequota",
                       "kind": "ApplicationAwareResourceQuota"},
             "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]}}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    started = start_lab(tmp_path_factory, "c")
    try:
        yield started
    finally:
        started.stop()


def _vm_node(lab, ns, name):
    return lab.get(KV + "/namespaces/%s/virtualmachineinstances/%s" % (ns, name))["status"]["nodeName"]


def _rwo_vm(lab, node):
    """A VM with a ReadWriteOnce volume (cannot live-migrate) on node, in namespace u-rwo."""
    lab.rest.create("/api/v1/namespaces", {"metadata": {"name": RWO}})
    lab.rest.create("/api/v1/namespaces/%s/persistentvolumeclaims" % RWO, {
        "metadata": {"name": "rwo-disk"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                 "storageClassName": "none"}})
    vm = lab.scenarios.vm_object({"name": "rwo-vm", "namespace": RWO, "cpu": 1, "memory": "256Mi",
                                  "node": node, "volumes": [{"name": "data", "pvc": "rwo-disk"}]})
    lab.rest.create(KV + "/namespaces/%s/virtualmachines" % RWO, vm)
    lab.wait(lambda: [v for v in lab.vmis(RWO) if (v.get("status") or {}).get("phase") == "Running"], 60,
             "rwo-vm running")


def test_every_request_allowed_and_every_rule_used(lab, tmp_path):
    user = lab.lab.user_kubeconfig
    # AAQ is recognised (listed) when its API is served: serve it, as on a cluster with AAQ installed
    lab.rest.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", AAQ_CRD)
    M.make_tenant(lab.lab, PLAIN, vms=2)
    offset = lab.lab.audit_offset()
    started = time.monotonic()

    # preflight over every node: the whole inventory, Rancher projects, Harvester settings, AAQ
    run = playbook(lab, "preflight", {"preflight_report_dir": str(tmp_path)})
    assert (tmp_path / "preflight.json").exists(), run

    # reserve and release by hand (the modules), then an expired reservation for the reaper
    reserved = M.run_module("kvquota_reserve", {"reservation_id": "rbac-1", "vms": [
        {"namespace": PLAIN, "name": "vm-1"}]}, str(user))
    M.assert_ok(reserved, "kvquota_reserve")
    M.assert_ok(M.run_module("kvquota_release", {"reservation_id": "rbac-1"}, str(user)), "kvquota_release")
    M.assert_ok(M.run_module("kvquota_reserve", {"reservation_id": "rbac-reap", "ttl": "1s", "vms": [
        {"namespace": PLAIN, "name": "vm-1"}]}, str(user)), "kvquota_reserve (ttl 1s)")
    time.sleep(2)
    run = playbook(lab, "reaper")
    assert run.rc == 0, run
    assert "rbac-reap" in run.stdout, run

    # node_maintenance: the Rancher-managed namespace's node (Namespace annotation), then the plain tenant's
    node = _vm_node(lab, RANCHER, "c-vm-1")
    run = playbook(lab, "node_maintenance", {"node_maintenance_node": node})
    assert run.rc == 0, run
    node = _vm_node(lab, PLAIN, "vm-1")
    run = playbook(lab, "node_maintenance", {"node_maintenance_node": node})
    assert run.rc == 0, run

    # a top-up beyond its cap: the refused migration is cancelled (VMIM delete)
    node = _vm_node(lab, PLAIN, "vm-1")
    lab.set_knobs(oversize_percent=3)
    try:
        run = playbook(lab, "node_maintenance", {"node_maintenance_node": node,
                                                 "node_maintenance_top_up_cap": {"limits.memory": "1Mi"},
                                                 "node_maintenance_rescue_release_timeout": 20})
        assert run.rc != 0 and "top_up_cap" in run.stdout, run
    finally:
        lab.set_knobs(oversize_percent=None)
        lab.force_clean()

    # policy shutdown: a VM that cannot live-migrate is stopped and started again (kvquota-shutdown)
    node = _vm_node(lab, PLAIN, "vm-1")
    _rwo_vm(lab, node)
    run = playbook(lab, "node_maintenance", {"node_maintenance_node": node,
                                             "node_maintenance_non_migratable": "shutdown"})
    assert run.rc == 0, run

    requests = rbacusage.read_audit(lab.lab.audit_log, lab.lab.user_name, offset)
    usage = rbacusage.analyse(requests, rbacusage.load_roles(), features={"rancher", "shutdown"})
    print(usage.summary())
    print("runs took %.0f s" % (time.monotonic() - started))
    assert usage.resource_requests, "the audit log recorded no request of %s" % lab.lab.user_name
    assert usage.problems() == []
