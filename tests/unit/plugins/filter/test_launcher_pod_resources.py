# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The launcher_pod_resources filter: strings out, one-line AnsibleFilterError on bad input."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.kvquota.maintenance.plugins.filter.launcher_pod_resources import (
    FilterModule,
    launcher_pod_resources,
)


def vmi(limit="16Gi", request="3276Mi"):
    """Seed 002's VMI (Harvester v1.3.2)."""
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "vmname", "namespace": "tenant"},
        "spec": {
            "domain": {
                "cpu": {"cores": 1, "sockets": 1, "threads": 1},
                "resources": {"limits": {"cpu": "1", "memory": limit},
                              "requests": {"cpu": "62m", "memory": request}},
                "devices": {"interfaces": [{"name": "default", "model": "virtio", "bridge": {}}]},
            },
            "networks": [{"name": "default", "multus": {"networkName": "default/vlan1"}}],
        },
    }


def test_registered():
    assert FilterModule().filters()["launcher_pod_resources"] is launcher_pod_resources


def test_reference_pod_as_strings():
    # sizing.md section 4: 16Gi / 3276Mi at ratio 1.5 -> 17570565824 / 3825831616 (compute container)
    result = launcher_pod_resources(vmi(), kubevirt_version="1.1.1", overhead_ratio="1.5")
    compute = result["containers"][0]
    assert compute["name"] == "compute"
    assert compute["limits"]["memory"] == "17570565824"
    assert compute["requests"]["memory"] == "3825831616"
    assert compute["requests"]["cpu"] == "62m"
    assert compute["requests"]["ephemeral-storage"] == "50M"
    # + guest-console-log: limits.cpu 1 + 15m; requests.memory + 35M
    assert result["pod"]["limits.cpu"] == "1015m"
    assert result["pod"]["requests.memory"] == "3860831616"
    assert result["pod"]["pods"] == "1"
    assert result["extra"] == {}
    assert result["migration"] == result["pod"]
    assert result["kubevirt_version"] == "1.1.1"


def test_ratio_as_float_and_vm_input():
    vm = {"kind": "VirtualMachine", "metadata": {"name": "vm", "namespace": "tenant"},
          "spec": {"template": {"spec": vmi()["spec"]}}}
    result = launcher_pod_resources(vm, kubevirt_version="1.1.1", overhead_ratio=1.5)
    assert result["containers"][0]["limits"]["memory"] == "17570565824"


def test_quota_objects_and_labels_drive_auto_limits():
    plain = vmi()
    plain["spec"]["domain"]["resources"] = {"requests": {"memory": "1Gi"}}
    quota = {"kind": "ResourceQuota", "spec": {"hard": {"limits.memory": "10Gi", "limits.cpu": "4"}}}
    # v1.5.0, 1Gi: O = 2 + 220 + 8 + 8 + 16 = 254Mi -> 1278Mi; label 1.5 -> 1917Mi; cpu limit 1
    result = launcher_pod_resources(plain, kubevirt_version="1.5.0", quota_tracks=[quota],
                                    namespace_labels={"alpha.kubevirt.io/auto-memory-limits-ratio": "1.5"})
    assert result["containers"][0]["limits"]["memory"] == "1917Mi"
    assert result["containers"][0]["limits"]["cpu"] == "1"


def test_kubevirt_cr_with_overrides():
    cr = {"spec": {"configuration": {"additionalGuestMemoryOverheadRatio": "2.0"}},
          "status": {"observedKubeVirtVersion": "v1.1.1"}}
    result = launcher_pod_resources(vmi("8Gi", "1638Mi"), kubevirt=cr)
    assert result["containers"][0]["limits"]["memory"] == "9104155609"
    result = launcher_pod_resources(vmi("8Gi", "1638Mi"), kubevirt=cr, overhead_ratio="1")
    assert result["containers"][0]["limits"]["memory"] == "8847044609"


@pytest.mark.parametrize("value, options, fragment", [
    ("not a vmi", {}, "expected a VirtualMachineInstance"),
    (vmi(), {"overhead_ratio": "0.5"}, "invalid overhead ratio"),
    (vmi(), {"kubevirt_version": "banana"}, "malformed KubeVirt version"),
    (vmi(limit="16GB"), {}, "malformed quantity '16GB'"),
    (vmi(), {"overhead": "1.5"}, "unknown option(s) overhead"),
    (vmi(), {"allow_emulation": "maybe"}, "must be a boolean"),
])
def test_bad_input_is_one_line_filter_error(value, options, fragment):
    with pytest.raises(AnsibleFilterError) as info:
        launcher_pod_resources(value, **options)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message
    assert "Fix:" in message


def test_sidecar_documentation_is_valid_yaml():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "plugins", "filter", "launcher_pod_resources.yml")
    with open(path) as handle:
        doc = yaml.safe_load(handle)
    assert doc["DOCUMENTATION"]["name"] == "launcher_pod_resources"
    assert "_input" in doc["DOCUMENTATION"]["options"]
    assert "_value" in doc["RETURN"]
    documented = set(doc["DOCUMENTATION"]["options"]) - {"_input"}
    from ansible_collections.kvquota.maintenance.plugins.filter.launcher_pod_resources import _CONFIG_FIELDS, _EXTRA_OPTIONS
    assert documented == set(_CONFIG_FIELDS) | set(_EXTRA_OPTIONS)
