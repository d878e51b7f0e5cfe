# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""KubeVirt v1.9's report of each launcher pod's memory overhead, as a check of kvquota's sizing.

The emulator plays a v1.9.0 virt-controller: the overhead it sized a launcher pod with goes on the pod
(kubevirt.io/memory-overhead-bytes) and into the VMI's status.memory.memoryOverhead (a BinarySI quantity); the knob
overhead_report_offsets makes it report another value for one VM, the pod unchanged. kvquota_check (as the
least-privilege user) then names exactly that VM under overhead_differences, with both numbers, and plans exactly as
before: the report is a tenant-writable status field and never changes an amount.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re
import secrets
import urllib.request

import pytest

import modlab as M
from kvqlab import scenarios

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import parse_quantity  # noqa: E402

pytestmark = pytest.mark.lab   # make lab-tests (conftest.py: every lab test has one such marker)

Mi = 1024 ** 2
KUBEVIRT_1_9 = dict(M.KUBEVIRT_A, version="1.9.0")


def _reported(r, ns, name):
    vmi = r.get("/apis/kubevirt.io/v1/namespaces/%s/virtualmachineinstances/%s" % (ns, name))
    return ((vmi.get("status") or {}).get("memory") or {}).get("memoryOverhead")


@pytest.fixture
def tenant(lab, emu, r):
    ns = "overhead-%s" % secrets.token_hex(3)
    scenarios.apply(lab, scenarios.from_dict(M.tenant_scenario(ns, vms=3, kubevirt=KUBEVIRT_1_9)), timeout=120)
    M.wait(lambda: M.settled(r, ns, 3), 60, "tenant %s settled" % ns)
    yield ns
    M.emulator.set_knobs(lab, overhead_report_offsets=None)
    M.delete_namespace(r, ns)


def _check(user, ns):
    return M.assert_ok(M.run_module("kvquota_check", {"namespaces": [ns]}, user), "kvquota_check")


def test_check_names_exactly_the_vm_whose_reported_overhead_differs(lab, emu, r, user, tenant):
    ns = tenant
    names = ["vm-1", "vm-2", "vm-3"]
    # every VMI carries the overhead virt-controller sized its pod with (the same for these three VMs)
    M.wait(lambda: all(_reported(r, ns, name) for name in names), 30, "memoryOverhead reported for every VMI")
    sized = set(parse_quantity(_reported(r, ns, name)) for name in names)
    assert len(sized) == 1
    (computed,) = sized
    pods = M.launcher_pods(r, ns)
    assert sorted(int(p["metadata"]["annotations"]["kubevirt.io/memory-overhead-bytes"]) for p in pods) == \
        [int(computed)] * 3

    before = _check(user, ns)
    assert before["overhead_differences"] == [] and before["summary"]["overhead_differences"] == 0

    M.emulator.set_knobs(lab, overhead_report_offsets="%s/vm-2=64Mi" % ns)
    M.wait(lambda: parse_quantity(_reported(r, ns, "vm-2")) == computed + 64 * Mi, 30, "vm-2 reports 64Mi more")
    assert [parse_quantity(_reported(r, ns, name)) for name in ("vm-1", "vm-3")] == [computed, computed]

    after = _check(user, ns)
    (difference,) = after["overhead_differences"]
    assert (difference["namespace"], difference["vm"], difference["field"]) == (
        ns, "vm-2", "status.memory.memoryOverhead")
    assert (difference["reported"], difference["computed"], difference["difference"]) == (
        int(computed) + 64 * Mi, int(computed), 64 * Mi)
    assert difference["why"].startswith("a sizing rule kvquota lacks")
    assert after["summary"]["overhead_differences"] == 1
    # reported only: the same plan and verdict as before the report changed
    assert after["batches"] == before["batches"] and after["verdict"] == before["verdict"]
    assert after["namespaces"][ns]["needed"] == before["namespaces"][ns]["needed"]


def _scraped(emu):
    """{(namespace, name): value} of kubevirt_vmi_launcher_memory_overhead_bytes as the emulated virt-controller
    serves it."""
    with urllib.request.urlopen(emu.metrics_url(), timeout=10) as response:
        text = response.read().decode()
    found = {}
    for line in text.splitlines():
        match = re.match(r'^kubevirt_vmi_launcher_memory_overhead_bytes\{name="([^"]*)",namespace="([^"]*)"\} (\S+)$',
                         line)
        if match:
            found[(match.group(2), match.group(1))] = int(float(match.group(3)))
    return found


def test_the_overhead_metric_is_a_copy_of_the_tenant_writable_status_field(lab, emu, r, tenant):
    """KubeVirt v1.9 exports kubevirt_vmi_launcher_memory_overhead_bytes from the VMI's status.memory.memoryOverhead
    (its VMI stats collector reads the field): what the status says, the metric says. On KubeVirt a VMI has no
    status subresource and kubevirt.io:edit may update it (the lab's CRD has one; the tenant campaign's
    hostile-memory-overhead writes the field as the administrator for that reason), so the metric is no source of
    an amount a tenant cannot write either, and kvquota reads neither for one."""
    ns = tenant
    names = ["vm-1", "vm-2", "vm-3"]
    M.wait(lambda: all(_reported(r, ns, name) for name in names), 30, "memoryOverhead reported for every VMI")
    M.wait(lambda: all(_scraped(emu).get((ns, name)) == parse_quantity(_reported(r, ns, name)) for name in names),
           30, "the metric equals status.memory.memoryOverhead for every VMI")
    computed = parse_quantity(_reported(r, ns, "vm-1"))
    assert computed > 0

    M.emulator.set_knobs(lab, overhead_report_offsets="%s/vm-2=64Mi" % ns)
    M.wait(lambda: _scraped(emu).get((ns, "vm-2")) == computed + 64 * Mi, 30, "the metric follows vm-2's status")
    scraped = _scraped(emu)
    assert (scraped[(ns, "vm-1")], scraped[(ns, "vm-3")]) == (computed, computed)
