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


def test_extra_pods_per_container_apart_from_pvcs():
    # v1.6.3: hp-volume pod requests 10m/2M, limits 100m/80M (hotplugContainerRequests/Limits);
    # persistent TPM: a 10Mi backend-storage PVC (docs/docsite/rst/sizing.rst section 4), charged apart
    obj = vmi()
    obj["spec"]["volumes"] = [{"name": "hp", "persistentVolumeClaim": {"claimName": "hp", "hotpluggable": True}}]
    obj["spec"]["domain"]["devices"]["tpm"] = {"persistent": True}
    result = launcher_pod_resources(obj, kubevirt_version="1.6.3")
    (pod,) = result["extra_pods"]
    assert pod["name"] == "hp-volume"
    assert pod["containers"] == [{"name": "hotplug-disk", "requests": {"cpu": "10m", "memory": "2M"},
                                  "limits": {"cpu": "100m", "memory": "80M"}}]
    assert pod["charge"]["requests.cpu"] == "10m" and pod["charge"]["pods"] == "1"
    assert result["pvcs"] == {"count/persistentvolumeclaims": "1", "persistentvolumeclaims": "1",
                              "requests.storage": "10Mi"}
    assert result["extra"]["requests.storage"] == "10Mi" and result["extra"]["requests.cpu"] == "10m"


def test_auto_resource_limits_unset_follows_the_feature_gates():
    # v1.3.1, gate off by default: no automatic memory limit even though limits.memory is tracked
    plain = vmi()
    del plain["spec"]["domain"]["resources"]["limits"]
    result = launcher_pod_resources(plain, kubevirt_version="1.3.1", quota_tracks=["limits.memory"],
                                    auto_resource_limits=None)
    assert "memory" not in result["containers"][0]["limits"]
    gated = launcher_pod_resources(plain, kubevirt_version="1.3.1", quota_tracks=["limits.memory"],
                                   feature_gates=["AutoResourceLimitsGate"])
    assert "memory" in gated["containers"][0]["limits"]


def test_hypervisor_option():
    result = launcher_pod_resources(vmi(), kubevirt_version="1.8.0", hypervisor="hyperv-direct")
    assert result["containers"][0]["limits"]["devices.kubevirt.io/mshv"] == "1"
    with pytest.raises(AnsibleFilterError, match="hypervisor"):
        launcher_pod_resources(vmi(), kubevirt_version="1.8.0", hypervisor="xen")


def test_disabled_feature_gates_option_keeps_container_disks_in_v1_9():
    # v1.9.0 featuregate.IsEnabled turns the Beta ImageVolume gate on unless disabledFeatureGates lists it
    disk = vmi()
    disk["spec"]["volumes"] = [{"name": "cd", "containerDisk": {"image": "example.com/disk:1"}}]
    default = launcher_pod_resources(disk, kubevirt_version="1.9.0")
    assert "volumecd" not in [c["name"] for c in default["containers"]]
    kept = launcher_pod_resources(disk, kubevirt_version="1.9.0", disabled_feature_gates=["ImageVolume"])
    assert "volumecd" in [c["name"] for c in kept["containers"]]
