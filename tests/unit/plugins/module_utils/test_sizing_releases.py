# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Sizing vectors at the patch releases where KubeVirt's rules start, stop or are reverted.

The ground truth for sizing: the lab's emulator sizes with the same core, so only these
vectors can catch a sizing error. Every vector names its source (release tag, KubeVirt file
and test or function) and is checked on both sides of its boundary. Expected values are
worked out by hand from that source, never by running the code under test; the arithmetic
is in the comments (Mi = 1,048,576; M = 1,000,000). docs/docsite/rst/sizing.rst section 6 lists the
boundaries with the commits that moved them.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.config import (
    ClusterConfig,
    config_from_cluster,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.launcher import launcher_pod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.rules import (
    RULES,
    audited_version,
    rule,
)

Mi = 1024 ** 2
PARITY = "alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity"


def vmi(cpu=None, requests=None, limits=None, annotations=None, domain_extra=None, volumes=None, kind="VirtualMachineInstance"):
    """A VMI (or, with kind VirtualMachine, a VM) with a pod network and the given CPU and resources."""
    domain = {
        "cpu": dict(cpu or {"sockets": 1, "cores": 1, "threads": 1}),
        "resources": {"requests": dict(requests or {}), "limits": dict(limits or {})},
        "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}],
                    "interfaces": [{"name": "default", "masquerade": {}}]},
    }
    domain.update(domain_extra or {})
    spec = {"domain": domain, "networks": [{"name": "default", "pod": {}}],
            "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": "root"}}] + list(volumes or [])}
    metadata = {"name": "vm", "namespace": "ns", "annotations": dict(annotations or {})}
    if kind == "VirtualMachine":
        return {"apiVersion": "kubevirt.io/v1", "kind": kind, "metadata": {"name": "vm", "namespace": "ns"},
                "spec": {"template": {"metadata": metadata, "spec": spec}}}
    return {"apiVersion": "kubevirt.io/v1", "kind": kind, "metadata": metadata, "spec": spec}


def compute(version, obj, **config):
    """The compute container (name, requests, limits as apiserver strings) at version."""
    pod_options = config.pop("_pod", {})
    pod = launcher_pod(obj, ClusterConfig(kubevirt_version=version, **config), **pod_options)
    return pod.containers[0].formatted()


def hotplug_requests(version, obj):
    """The hp-volume attachment pod container's requests at version."""
    pod = launcher_pod(obj, ClusterConfig(kubevirt_version=version))
    (extra,) = pod.extra_pods
    return extra.containers[0].formatted()["requests"]


HOTPLUGGED = [{"name": "hp", "persistentVolumeClaim": {"claimName": "hp", "hotpluggable": True}}]


# ---------------------------------------------------------------- the rule table itself

def test_rule_table_bounds_are_ordered_and_do_not_overlap():
    for name, ranges in RULES.items():
        previous_last = None
        for first, last, _value in ranges:
            assert last is None or first <= last, name
            assert previous_last is None or first > previous_last, name
            previous_last = last


@pytest.mark.parametrize("version, expected", [
    ((1, 6, 6), (1, 6, 6)),   # newest audited 1.6 patch
    ((1, 6, 9), (1, 6, 6)),   # a later 1.6 patch is sized with v1.6.6's rules
    ((1, 1, 2), (1, 1, 1)),
    ((1, 12, 0), (1, 9, 0)),  # newer minors: the newest audited release
])
def test_unaudited_patch_releases_use_the_newest_audited_patch_of_their_minor(version, expected):
    assert audited_version(version) == expected


def test_an_unaudited_patch_release_says_so():
    pod = launcher_pod(vmi(requests={"memory": "1Gi"}), ClusterConfig(kubevirt_version="1.6.9"))
    assert any("v1.6.6's rules" in note for note in pod.notes)


# ---------------------------------------------------------------- hotplug attachment pod

# v0.58.1 pkg/virt-controller/services/template.go hotplugContainerResourceRequirementsForVMI
# (commit 8838dd412d "Take QoS into account in hotplug pod resource requirements") and its
# template_test.go "should compute the correct resource req according to desired QoS when rendering
# hotplug pods": a VMI with requests = limits (1G, 1 CPU) gets requests = limits = 100m/80M.
GUARANTEED = dict(requests={"memory": "1G", "cpu": "1"}, limits={"memory": "1G", "cpu": "1"}, volumes=HOTPLUGGED)
BURSTABLE = dict(requests={"memory": "1G"}, volumes=HOTPLUGGED)


@pytest.mark.parametrize("version, guaranteed, burstable", [
    ("0.58.0", "10m/2M", "10m/2M"),     # v0.58.0 template.go: literal 10m/2M requests
    ("0.58.1", "100m/80M", "10m/2M"),   # QoS taken into account
    ("0.58.2", "100m/80M", "100m/80M"),  # #9312 backport: requests = limits for every VMI
    ("0.59.0", "100m/80M", "10m/2M"),   # v0.59.0 has the QoS rule but not the backport
    ("0.59.1", "100m/80M", "100m/80M"),  # #9312 in 0.59
    ("0.59.2", "100m/80M", "100m/80M"),
    ("1.0.0", "100m/80M", "100m/80M"),  # hotplugContainerRequests: 100m/80M defaults
    ("1.1.1", "100m/80M", "100m/80M"),
    ("1.2.0", "10m/2M", "10m/2M"),      # hotplugContainerRequests: 10m/2M defaults
])
def test_hotplug_pod_requests(version, guaranteed, burstable):
    for spec, expected in ((GUARANTEED, guaranteed), (BURSTABLE, burstable)):
        cpu, memory = expected.split("/")
        assert hotplug_requests(version, vmi(**spec)) == {"cpu": cpu, "memory": memory}, (version, expected)


# ---------------------------------------------------------------- the emulator thread's CPU

# v0.58.2 pkg/virt-controller/services/renderresources_test.go "requires an additional 1000m CPU, and
# an additional CPU is added to the limits", Entry "request and limits set by the user": 5 cores,
# isolateEmulatorThread, requests = limits = 200m -> limits 6, requests 200m + 1000m (commit
# 798d85807e "fix cpu limits handling when isolatedEmulatorThread is requested"). Before the fix
# (v0.56.0-v0.58.1) the 6 went into the calculated limits, which the VMI's own 200m limit overrides.
# v0.55.2 rendered in template.go: Limits[cpu] = vCPUs (over the VMI's limit) + 1.
EMULATOR_VMI = vmi(cpu={"cores": 5, "dedicatedCpuPlacement": True, "isolateEmulatorThread": True},
                   requests={"cpu": "200m", "memory": "2Gi"}, limits={"cpu": "200m"})


@pytest.mark.parametrize("version, cpu_limit", [
    ("0.55.2", "6"),
    ("0.56.0", "200m"),
    ("0.58.1", "200m"),
    ("0.58.2", "6"),
    ("0.59.0", "6"),
])
def test_emulator_thread_against_the_vmi_cpu_limit(version, cpu_limit):
    container = compute(version, EMULATOR_VMI)
    assert container["limits"]["cpu"] == cpu_limit
    assert container["requests"]["cpu"] == "1200m"  # 200m + 1 in every version


# ---------------------------------------------------------------- even parity

# v1.1.1 renderresources_test.go "requires additional EmulatorThread CPUs overhead, and additional CPUs
# added to the limits": with the annotation, 6 cores get 2000m for the emulator, 5 cores 1000m.
# v1.1.0 WithCPUPinning(cpu) has no annotations parameter: always 1.
@pytest.mark.parametrize("version, cores, cpu_limit", [
    ("1.1.0", 6, "7"),
    ("1.1.1", 6, "8"),
    ("1.1.1", 5, "6"),
    ("1.6.0", 6, "8"),
])
def test_even_parity_annotation(version, cores, cpu_limit):
    obj = vmi(cpu={"cores": cores, "dedicatedCpuPlacement": True, "isolateEmulatorThread": True},
              requests={"memory": "2Gi"}, annotations={PARITY: ""})
    container = compute(version, obj)
    assert container["limits"]["cpu"] == cpu_limit
    assert container["requests"]["cpu"] == cpu_limit  # no cpu request: Kubernetes copies the limit


# v1.1.1 pkg/virt-api/webhooks/mutating-webhook/mutators/vmi-mutator.go (commit db4c1a9c66): a new
# VMI with isolateEmulatorThread gets the annotation when the KubeVirt CR has it and AlignCPUs is on.
def test_even_parity_annotation_copied_from_the_kubevirt_cr_to_a_new_vmi():
    cpu = {"cores": 6, "dedicatedCpuPlacement": True, "isolateEmulatorThread": True}
    vm = vmi(cpu=cpu, requests={"memory": "2Gi"}, kind="VirtualMachine")
    cr = {"metadata": {"annotations": {PARITY: ""}},
          "spec": {"configuration": {"developerConfiguration": {"featureGates": ["AlignCPUs"]}}}}
    config = config_from_cluster(cr, kubevirt_version="1.1.1")
    assert launcher_pod(vm, config).containers[0].formatted()["limits"]["cpu"] == "8"
    without_gate = config_from_cluster({"metadata": cr["metadata"]}, kubevirt_version="1.1.1")
    assert launcher_pod(vm, without_gate).containers[0].formatted()["limits"]["cpu"] == "7"
    assert launcher_pod(vm, config_from_cluster(cr, kubevirt_version="1.1.0")).containers[0].formatted()["limits"]["cpu"] == "7"
    # a running VMI carries what was copied when it was created; the CR does not reach it now
    running = vmi(cpu=cpu, requests={"memory": "2Gi"})
    assert launcher_pod(running, config).containers[0].formatted()["limits"]["cpu"] == "7"


# ---------------------------------------------------------------- IO threads in CPU

# v1.5.2 renderresources.go WithoutDedicatedCPU (commit 155f7145c6 "renderresources: fix cpu
# calculation"): totalCPUs = vCPUs + supplementalPoolThreadCount, requested as total / ratio.
# v1.5.0-v1.5.1 WithIOThreads: addToCPU(vmLimits, count) when the policy is supplementalPool, which
# sets the pod's cpu limit to the thread count alone when the VMI has no cpu limit.
IOTHREADS = {"ioThreadsPolicy": "supplementalPool", "ioThreads": {"supplementalPoolThreadCount": 2}}


@pytest.mark.parametrize("version, cpu_request, cpu_limit", [
    ("1.4.1", "500m", None),   # 5 / 10; no IO thread rule
    ("1.5.0", "500m", "2"),
    ("1.5.1", "500m", "2"),
    ("1.5.2", "700m", None),   # (5 + 2) / 10
    ("1.6.0", "700m", None),
])
def test_io_threads_without_dedicated_cpus(version, cpu_request, cpu_limit):
    container = compute(version, vmi(cpu={"sockets": 5, "cores": 1, "threads": 1}, requests={"memory": "2Gi"},
                                     domain_extra=IOTHREADS))
    assert container["requests"]["cpu"] == cpu_request
    assert container["limits"].get("cpu") == cpu_limit


# v1.5.2 renderresources_test.go "sets limits and requests to vCPUs + iothreads + emulatorThreadCPUs when
# vCPUs != 0", Entry "vCPUs specified, IO threads present": 5 vCPUs + 2 threads + 1 = 8 for limits AND
# requests, also when the VMI asks for less. v1.5.1: limits 5 + 1 + 2 = 8 but the request stays the
# VMI's 200m + 1 (WithCPUPinning adds the emulator CPU to an existing request only).
@pytest.mark.parametrize("version, cpu_request", [("1.5.1", "1200m"), ("1.5.2", "8")])
def test_io_threads_with_dedicated_cpus(version, cpu_request):
    obj = vmi(cpu={"cores": 5, "dedicatedCpuPlacement": True, "isolateEmulatorThread": True},
              requests={"memory": "2Gi", "cpu": "200m"}, domain_extra=IOTHREADS)
    container = compute(version, obj)
    assert container["limits"]["cpu"] == "8"
    assert container["requests"]["cpu"] == cpu_request


# ---------------------------------------------------------------- automatic memory limits

# v1.0.1 renderresources_test.go Context "WithAutoMemoryLimits option" / template_test.go Context "with
# auto Memory limits" (commit b3a60b5699 "Set memory limits if there is a resource quota with limits"):
# behind the AutoResourceLimitsGate, memory only; CPU limits from v1.1.0; no gate from v1.5.0.
# 1Gi request, 1 vCPU, v1.0.1: O = 2Mi page tables (1,073,742,000 // 512 = 2,097,152) + 210Mi + 8Mi
# + 8Mi + 16Mi = 244Mi; request 1268Mi; limit int(1268Mi x 2.0) = 2536Mi. v1.5.0: fixed 220Mi -> 254Mi,
# request 1278Mi, limit 2556Mi.
TRACKS = {"_pod": {"quota_tracks": frozenset(["limits.memory", "limits.cpu"])}}


@pytest.mark.parametrize("version, gates, memory_limit, cpu_limit", [
    ("1.0.0", ("AutoResourceLimitsGate",), None, None),
    ("1.0.1", ("AutoResourceLimitsGate",), "2536Mi", None),
    ("1.0.1", (), None, None),           # KubeVirt's default: gate off
    ("1.1.0", ("AutoResourceLimitsGate",), "2536Mi", "1"),
    ("1.4.1", (), None, None),
    ("1.5.0", (), "2556Mi", "1"),         # GA: no gate
])
def test_auto_limits_follow_version_and_gate(version, gates, memory_limit, cpu_limit):
    container = compute(version, vmi(requests={"memory": "1Gi"}), feature_gates=gates, **dict(TRACKS))
    assert container["limits"].get("memory") == memory_limit
    assert container["limits"].get("cpu") == cpu_limit


def test_auto_resource_limits_explicit_true_turns_the_gate_on():
    container = compute("1.3.0", vmi(requests={"memory": "1Gi"}), auto_resource_limits=True, **dict(TRACKS))
    assert container["limits"]["memory"] == "2536Mi"


def test_auto_resource_limits_must_be_boolean_or_unset():
    with pytest.raises(InputError, match="auto_resource_limits"):
        ClusterConfig(auto_resource_limits="yes")


# ---------------------------------------------------------------- memory request, overcommit, page tables

# A VMI with only a memory limit of 2Gi. Up to v1.6.3 the webhook (pkg/defaults/defaults.go
# setDefaultResourceRequests) copies it into the VMI's request, so the page tables see it:
# ceil(2Gi / 1000) x 1000 // 512 = 4Mi; O = 4 + 220 + 8 + 8 + 32 = 272Mi; request 2320Mi.
# v1.6.4 (commits b0330235ee, cd3ace2991): renderresources.go WithMemoryRequests sets it on the pod only,
# page tables 0, O = 268Mi, request 2316Mi.
@pytest.mark.parametrize("version, memory_request", [
    ("1.6.3", "2320Mi"),
    ("1.6.4", "2316Mi"),
    ("1.7.0", "2316Mi"),
])
def test_memory_request_written_by_the_webhook_until_v1_6_3(version, memory_request):
    assert compute(version, vmi(limits={"memory": "2Gi"}))["requests"]["memory"] == memory_request


# v1.6.2 only (commit edd64b138f, reverted by 097f4bf8c3 in v1.6.3): template.go runs
# WithMemoryOvercommit first, dividing ANY memory request by memoryOvercommit / 100; its
# template_test.go "should honor memoryOvercommit when set in the CR" checks mem100 x 100 / 110.
# Explicit 2Gi, overcommit 150: 2,147,483,648 x 100 // 150 = 1,431,655,765; the page tables still see
# the VMI's 2Gi, so O = 272Mi = 285,212,672 -> 1,716,868,437. Other versions: 2Gi + 272Mi = 2320Mi.
@pytest.mark.parametrize("version, memory_request", [
    ("1.6.1", "2320Mi"),
    ("1.6.2", "1716868437"),
    ("1.6.3", "2320Mi"),
])
def test_overcommit_applied_to_explicit_requests_only_in_v1_6_2(version, memory_request):
    assert compute(version, vmi(requests={"memory": "2Gi"}), memory_overcommit=150)["requests"]["memory"] == memory_request


# memory.guest 3Gi, no request, overcommit 150. v1.6.1 webhook: request = 3Gi x 100 // 150 = 2Gi
# (page tables 4Mi, O 272Mi, pod 2320Mi). v1.6.2: the webhook writes 3Gi unscaled (page tables
# 3,221,226 x 1000 // 512 = 6,291,457, O = 6,291,457 + 268Mi = 287,309,825) and the renderer scales
# the request to 2Gi: pod 2,147,483,648 + 287,309,825 = 2,434,793,473. v1.6.4: pod only, page tables 0:
# 2Gi + 268Mi = 2316Mi.
@pytest.mark.parametrize("version, memory_request", [
    ("1.6.1", "2320Mi"),
    ("1.6.2", "2434793473"),
    ("1.6.4", "2316Mi"),
])
def test_guest_memory_with_overcommit(version, memory_request):
    obj = vmi(domain_extra={"memory": {"guest": "3Gi"}})
    assert compute(version, obj, memory_overcommit=150)["requests"]["memory"] == memory_request


# ---------------------------------------------------------------- v1.8 hypervisor, v1.9 devices

# v1.8.0 pkg/hypervisor/launcherhypervisorresources.go NewLauncherHypervisorResources and
# mshv/hypervisorbackend.go (mshvHypervisorDevice = "mshv"); template.go ConstructHypervisorResourceName.
# The memory overhead of the mshv backend is the same function as kvm's.
def test_hyperv_direct_asks_for_the_mshv_device_from_v1_8():
    obj = vmi(requests={"memory": "1Gi"})
    new = launcher_pod(obj, ClusterConfig(kubevirt_version="1.8.0", hypervisor="hyperv-direct"))
    assert new.containers[0].limits.get("devices.kubevirt.io/mshv") == 1
    assert "devices.kubevirt.io/kvm" not in new.containers[0].limits
    assert new.memory_overhead == launcher_pod(obj, ClusterConfig(kubevirt_version="1.8.0")).memory_overhead
    old = launcher_pod(obj, ClusterConfig(kubevirt_version="1.7.4", hypervisor="hyperv-direct"))
    assert old.containers[0].limits.get("devices.kubevirt.io/kvm") == 1


def test_hypervisor_from_the_kubevirt_cr_needs_the_feature_gate():
    hypervisors = [{"name": "hyperv-direct"}]
    gated = {"spec": {"configuration": {"hypervisors": hypervisors,
                                        "developerConfiguration": {"featureGates": ["ConfigurableHypervisor"]}}}}
    assert config_from_cluster(gated, kubevirt_version="1.8.0").hypervisor_device == "devices.kubevirt.io/mshv"
    ungated = {"spec": {"configuration": {"hypervisors": hypervisors}}}
    assert config_from_cluster(ungated, kubevirt_version="1.8.0").hypervisor_device == "devices.kubevirt.io/kvm"


def test_unknown_hypervisor_is_one_clear_error():
    with pytest.raises(InputError, match="hypervisor"):
        ClusterConfig(hypervisor="xen")


# v1.9.0 renderresources.go WithTDX (util.IsTDXVMI) and WithIOMMUFD (IOMMUFD feature gate).
@pytest.mark.parametrize("version, present", [("1.8.4", False), ("1.9.0", True)])
def test_tdx_and_iommufd_devices_from_v1_9(version, present):
    tdx = vmi(requests={"memory": "1Gi"}, domain_extra={"launchSecurity": {"tdx": {}}})
    limits = launcher_pod(tdx, ClusterConfig(kubevirt_version=version, feature_gates=("IOMMUFD",))).containers[0].limits
    assert ("devices.kubevirt.io/tdx" in limits) is present
    assert ("devices.kubevirt.io/iommufd" in limits) is present


def test_rule_lookup_outside_every_range_is_none():
    assert rule("passt_800mi", (1, 3, 0)) is None
    assert rule("passt_800mi", (1, 2, 2)) is True


# ================================================================ second audit: the remaining rules
# Each rule below was read at every release tag v0.54.0 .. v1.9.0 (git show <tag>:<file>); the vectors
# sit on both sides of every bound. 1Gi of memory request gives 2Mi of page tables
# (ceil(1,073,741,824 / 1000) x 1000 // 512 = 2,097,152); 1 vCPU gives 8Mi, the IO thread 8Mi.

def with_devices(obj, **devices):
    """obj with spec.domain.devices entries replaced (a VMI from vmi())."""
    obj["spec"]["domain"]["devices"].update(devices)
    return obj


def overhead_mi(version, obj, **config):
    """KubeVirt's memory overhead O at version, in Mi (a Fraction, so an inexact figure fails the test)."""
    return launcher_pod(obj, ClusterConfig(kubevirt_version=version, **config)).memory_overhead / Mi


def names(containers):
    return [c.name for c in containers]


# ---------------------------------------------------------------- the fixed overhead terms

# GetMemoryOverhead (template.go to v0.55, renderresources.go v0.56-v1.7, pkg/hypervisor/kvm from v1.8):
# VirtLauncherMonitorOverhead + VirtLauncherOverhead + VirtlogdOverhead + LibvirtdOverhead/VirtqemudOverhead
# + QemuOverhead = 25+75+17+33+30 = 180 (v0.54.0), 25+100+17+33+30 = 205 (v0.55.0), 25+100+18+35+30 = 208
# (v0.57.0), 25+100+20+35+30 = 210 (v0.58.1, d57708a842), 25+100+20+40+30 = 215 (v1.4.1), 25+100+25+40+30
# = 220 (v1.5.0; kvm/hypervisorbackend.go keeps them in v1.8.0 and v1.9.0). Video 16Mi, 32Mi from v1.6.0.
@pytest.mark.parametrize("version, expected", [
    ("0.54.0", 2 + 180 + 8 + 8 + 16),
    ("0.55.0", 2 + 205 + 8 + 8 + 16),
    ("0.56.1", 2 + 205 + 8 + 8 + 16),
    ("0.57.0", 2 + 208 + 8 + 8 + 16),
    ("0.58.0", 2 + 208 + 8 + 8 + 16),
    ("0.58.1", 2 + 210 + 8 + 8 + 16),
    ("1.4.0", 2 + 210 + 8 + 8 + 16),
    ("1.4.1", 2 + 215 + 8 + 8 + 16),
    ("1.5.0", 2 + 220 + 8 + 8 + 16),
    ("1.5.3", 2 + 220 + 8 + 8 + 16),
    ("1.6.0", 2 + 220 + 8 + 8 + 32),
    ("1.9.0", 2 + 220 + 8 + 8 + 32),
])
def test_fixed_overhead_terms(version, expected):
    assert overhead_mi(version, vmi(requests={"memory": "1Gi"})) == expected


# Per vCPU 8Mi ("coresMemory"), the same at every tag: 4 sockets -> 32Mi. VFIO (a host device) +1Gi at
# every tag (util.IsVFIOVMI; vmitrait.HasVFIO in v1.9.0).
@pytest.mark.parametrize("version, fixed, video", [("0.54.0", 180, 16), ("1.9.0", 220, 32)])
def test_per_vcpu_and_vfio_terms(version, fixed, video):
    four = vmi(cpu={"sockets": 4, "cores": 1, "threads": 1}, requests={"memory": "1Gi"})
    assert overhead_mi(version, four) == 2 + fixed + 4 * 8 + 8 + video
    hostdev = with_devices(vmi(requests={"memory": "1Gi"}), hostDevices=[{"name": "d", "deviceName": "vendor.com/dev"}])
    assert overhead_mi(version, hostdev) == 2 + fixed + 8 + 8 + video + 1024


# arm64 +128Mi: v1.1.1 template.go passes t.clusterConfig.GetClusterCPUArch(); v1.2.0 VMIResourcePredicates
# takes vmi.Spec.Architecture first. An arm64 VMI on an amd64 cluster: 244Mi at v1.1.1, 372Mi at v1.2.0.
@pytest.mark.parametrize("version, expected", [("1.1.1", 244), ("1.2.0", 244 + 128)])
def test_arm64_term_from_the_vmi_architecture(version, expected):
    obj = vmi(requests={"memory": "1Gi"})
    obj["spec"]["architecture"] = "arm64"
    assert overhead_mi(version, obj) == expected


# ---------------------------------------------------------------- TPM enabled: false

# GetMemoryOverhead tests `TPM != nil` in v1.4.0 and v1.5.0 and calls tpm.HasDevice (TPM != nil and enabled
# unset or true) in v1.4.1 (commit c1f5ce7553) and from v1.5.1 (commit c53b1640be). The same switch in
# backend-storage.go IsBackendStorageNeededForVMI (HasPersistentTPMDevice -> tpm.HasPersistentDevice) decides
# the migration target's PVC. 1Gi: v1.4.0 2+210+8+8+16 (+53) ; v1.4.1 215 fixed; v1.5.x 220 fixed.
@pytest.mark.parametrize("version, expected, pvc", [
    ("1.4.0", 2 + 210 + 8 + 8 + 16 + 53, True),
    ("1.4.1", 2 + 215 + 8 + 8 + 16, False),
    ("1.5.0", 2 + 220 + 8 + 8 + 16 + 53, True),
    ("1.5.1", 2 + 220 + 8 + 8 + 16, False),
    ("1.9.0", 2 + 220 + 8 + 8 + 32, False),
])
def test_disabled_tpm(version, expected, pvc):
    obj = with_devices(vmi(requests={"memory": "1Gi"}), tpm={"enabled": False, "persistent": True})
    pod = launcher_pod(obj, ClusterConfig(kubevirt_version=version))
    assert pod.memory_overhead / Mi == expected
    assert pod.formatted_charge("pvc_charge") == ({"requests.storage": "10Mi", "persistentvolumeclaims": "1",
                                                   "count/persistentvolumeclaims": "1"} if pvc else {})


# ---------------------------------------------------------------- SEV, SEV-ES, SNP

# v1.6.6 GetMemoryOverhead: util.IsSEVVMI = launchSecurity.sev != nil (SEV-ES is sev with
# policy.encryptedState, so it is counted); v1.7.0 (commit 31bd088d0d) IsSEVVMI also takes launchSecurity.snp,
# for the 256Mi and for WithSEV (devices.kubevirt.io/sev). 1Gi: 270Mi, +256Mi = 526Mi.
@pytest.mark.parametrize("version, security, expected, device", [
    ("1.6.6", {"snp": {}}, 270, False),
    ("1.7.0", {"snp": {}}, 526, True),
    ("1.6.6", {"sev": {"policy": {"encryptedState": True}}}, 526, True),
    ("0.54.0", {"sev": {}}, 2 + 180 + 8 + 8 + 16 + 256, True),
])
def test_sev_snp_overhead_and_device(version, security, expected, device):
    obj = vmi(requests={"memory": "1Gi"}, domain_extra={"launchSecurity": security})
    pod = launcher_pod(obj, ClusterConfig(kubevirt_version=version))
    assert pod.memory_overhead / Mi == expected
    assert ("devices.kubevirt.io/sev" in pod.containers[0].limits) is device


# ---------------------------------------------------------------- network binding plugins

# v1.3.0 template.go VMIResourcePredicates: memoryOverhead.Add(netbinding.CalculateMemoryOverhead(...)) (commit
# d0201086db; pkg/network/netbinding/memory.go 823efd94d7), after the ratio; v1.2.2 has no such term.
# v1.8.0 pkg/network/resources/memory.go adds 250Mi for a core passtBinding interface (commit 4dc650d9d6).
# 1Gi: v1.2.2 244Mi, v1.3.0 244 + 200 = 444Mi; v1.7.4 270Mi; v1.8.0 270 + 250 = 520Mi.
@pytest.mark.parametrize("version, expected", [("1.2.2", 244), ("1.3.0", 444), ("1.9.0", 470)])
def test_network_binding_plugin_memory(version, expected):
    obj = with_devices(vmi(requests={"memory": "1Gi"}), interfaces=[{"name": "default", "binding": {"name": "mybind"}}])
    bindings = {"mybind": {"computeResourceOverhead": {"requests": {"memory": "200Mi"}}}}
    assert overhead_mi(version, obj, network_bindings=bindings) == expected


@pytest.mark.parametrize("version, expected", [("1.7.4", 270), ("1.8.0", 520)])
def test_core_passt_binding_memory(version, expected):
    obj = with_devices(vmi(requests={"memory": "1Gi"}), interfaces=[{"name": "default", "passtBinding": {}}])
    assert overhead_mi(version, obj) == expected


# v1.1.0 pkg/network/netbinding/netbinding.go NetBindingPluginSidecarList: slirpNetBindingPluginSidecar adds a
# sidecar for any slirp interface (the registered "slirp" plugin's image, else DefaultSlirpPluginImage), wired
# by watch/application.go WithSidecarCreator; removed in v1.3.0 (commit 00f1008a67 "network: Remove SLIRP core
# binding"). Without dedicated CPUs the sidecar has no resources: it shows as a container, not in the charge.
@pytest.mark.parametrize("version, expected", [
    ("1.0.1", ["compute"]),
    ("1.1.0", ["compute", "guest-console-log", "hook-sidecar-0"]),
    ("1.2.2", ["compute", "guest-console-log", "hook-sidecar-0"]),
    ("1.3.0", ["compute", "guest-console-log"]),
])
def test_slirp_interface_sidecar(version, expected):
    obj = with_devices(vmi(requests={"memory": "1Gi"}), interfaces=[{"name": "default", "slirp": {}}])
    assert names(launcher_pod(obj, ClusterConfig(kubevirt_version=version)).containers) == expected


# ---------------------------------------------------------------- support containers

# guest-console-log: serialconsolelog.go appears at v1.1.0 (none at v1.0.1), 5m/35M requests, 15m/60M limits
# unchanged to v1.9.0; template.go appends it to containers up to v1.5.3 and to initContainers with
# RestartPolicy Always from v1.6.0.
@pytest.mark.parametrize("version, in_containers, native", [
    ("1.0.1", False, False), ("1.1.0", True, False), ("1.5.3", True, False), ("1.6.0", False, True), ("1.9.0", False, True),
])
def test_console_log_container_placement(version, in_containers, native):
    pod = launcher_pod(vmi(requests={"memory": "1Gi"}), ClusterConfig(kubevirt_version=version))
    assert ("guest-console-log" in names(pod.containers)) is in_containers
    assert ("guest-console-log" in names(pod.init_containers)) is native
    if in_containers or native:
        console = [c for c in pod.containers + pod.init_containers if c.name == "guest-console-log"][0]
        assert console.formatted()["requests"] == {"cpu": "5m", "memory": "35M"}
        assert console.formatted()["limits"] == {"cpu": "15m", "memory": "60M"}
        assert console.restartable is native


# pkg/container-disk/container-disk.go generateContainerFromVolume: v0.59.2 requests 10m/1M/50M, limits
# 100m/40M; v1.0.0 (commits 3bfdb37d17, ef75adf3c2 "lower dedicated cpu values from 100m to 10m") 1m/1M/50M,
# 10m/40M, supportContainerResources honoured; unchanged to v1.9.0 (getMinimalInitContainerDiskResources).
CONTAINER_DISK = [{"name": "cd", "containerDisk": {"image": "example.com/disk:1"}}]


@pytest.mark.parametrize("version, requests, limits", [
    ("0.59.2", {"cpu": "10m", "memory": "1M", "ephemeral-storage": "50M"}, {"cpu": "100m", "memory": "40M"}),
    ("1.0.0", {"cpu": "1m", "memory": "1M", "ephemeral-storage": "50M"}, {"cpu": "10m", "memory": "40M"}),
    ("1.9.0", {"cpu": "1m", "memory": "1M", "ephemeral-storage": "50M"}, {"cpu": "10m", "memory": "40M"}),
])
def test_container_disk_container_resources(version, requests, limits):
    config = ClusterConfig(kubevirt_version=version, disabled_feature_gates=("ImageVolume",))
    pod = launcher_pod(vmi(requests={"memory": "1Gi"}, volumes=CONTAINER_DISK), config)
    (disk,) = [c for c in pod.containers if c.name == "volumecd"]
    assert disk.formatted()["requests"] == requests
    assert disk.formatted()["limits"] == limits


# ImageVolume gate: v1.6.0 template.go (commit b020b9e114) renders no container-disk containers and no
# container-disk-binary / -init containers when ImageVolumeEnabled(); v1.7.0+ adds an init container only for a
# disk whose digest is unknown, and a migration target reads the digest from the source pod
# (ExtractImageIDsFromSourcePod). The gate is Alpha in v1.6, Beta from v1.7.0, and v1.9.0
# (featuregate.IsEnabled, commit 6a8dfaf64c "Enable beta feature gates by default") turns Beta gates on unless
# developerConfiguration.disabledFeatureGates lists them; v1.8.4 still needs them listed.
@pytest.mark.parametrize("version, gates, disabled, disks", [
    ("1.5.3", ("ImageVolume",), (), True),   # no such gate
    ("1.6.0", ("ImageVolume",), (), False),
    ("1.6.0", (), (), True),
    ("1.8.4", (), (), True),                 # Beta, but not on by default yet
    ("1.9.0", (), (), False),                # Beta on by default
    ("1.9.0", (), ("ImageVolume",), True),
])
def test_image_volume_gate(version, gates, disabled, disks):
    config = ClusterConfig(kubevirt_version=version, feature_gates=gates, disabled_feature_gates=disabled)
    pod = launcher_pod(vmi(requests={"memory": "1Gi"}, volumes=CONTAINER_DISK), config)
    assert ("volumecd" in names(pod.containers)) is disks
    assert ("container-disk-binary" in names(pod.init_containers)) is disks
    assert ("volumecd-init" in names(pod.init_containers)) is disks


def test_disabled_feature_gates_read_from_the_kubevirt_cr():
    cr = {"spec": {"configuration": {"developerConfiguration": {"disabledFeatureGates": ["ImageVolume"]}}}}
    assert not config_from_cluster(cr, kubevirt_version="1.9.0").gate_enabled("ImageVolume")
    assert config_from_cluster({}, kubevirt_version="1.9.0").gate_enabled("ImageVolume")
    assert not config_from_cluster({}, kubevirt_version="1.8.4").gate_enabled("ImageVolume")


# Hook sidecars: renderresources.go sidecarResources, v0.56.0 (template.go inline before): no resources unless
# dedicated or Guaranteed (200m/64M limits); v1.0.0 (commit 3bfdb37d17) reads supportContainerResources
# type SideCar, here a 50m cpu request, which v0.59.2 ignores.
HOOK = {"hooks.kubevirt.io/hookSidecars": '[{"image": "example.com/hook:1"}]'}
SIDECAR_OVERRIDE = ({"type": "SideCar", "resources": {"requests": {"cpu": "50m"}}},)


@pytest.mark.parametrize("version, requests", [("0.59.2", {}), ("1.0.0", {"cpu": "50m"}), ("1.9.0", {"cpu": "50m"})])
def test_hook_sidecar_support_container_override(version, requests):
    config = ClusterConfig(kubevirt_version=version, support_container_resources=SIDECAR_OVERRIDE)
    pod = launcher_pod(vmi(requests={"memory": "1Gi"}, annotations=HOOK), config)
    (sidecar,) = [c for c in pod.containers if c.name.startswith("hook-sidecar")]
    assert sidecar.formatted()["requests"] == requests


@pytest.mark.parametrize("version", ["0.55.2", "0.56.0", "1.9.0"])
def test_hook_sidecar_dedicated_limits(version):
    obj = vmi(cpu={"cores": 2, "dedicatedCpuPlacement": True}, requests={"memory": "1Gi"}, annotations=HOOK)
    (sidecar,) = [c for c in launcher_pod(obj, ClusterConfig(kubevirt_version=version)).containers
                  if c.name.startswith("hook-sidecar")]
    assert sidecar.formatted()["limits"] == {"cpu": "200m", "memory": "64M"}
    assert sidecar.formatted()["requests"] == {"cpu": "200m", "memory": "64M"}


# ---------------------------------------------------------------- virtiofs

# v0.57.1: virtiofsd runs in the compute container (no virtiofs.go). v0.58.0 services/virtiofs.go (commit
# d4e702668c "Virtiofs: Switch to container approach"): resourcesForVirtioFSContainer(false, false) = 10m/1M
# requests, 100m/40M limits. v1.0.0 (14f39687e9 "Bump virtiofs container limit", 3bfdb37d17): 80M limit,
# supportContainerResources, still (false, false). v1.1.0 (2947376cba "fix guaranteed qos of virt-launcher pod
# broken when use virtiofs"): (IsCPUDedicated, IsCPUDedicated || WantsToHaveQOSGuaranteed) raise the requests
# to the limits. v1.8.0 (33821b1c6b) skips containerPath volumes; pkg/virtiofs/resources.go keeps the values.
SHARE = [{"name": "share", "persistentVolumeClaim": {"claimName": "share"}}]
FILESYSTEMS = [{"name": "share", "virtiofs": {}}]


def virtiofs_containers(version, dedicated=False):
    cpu = {"cores": 2, "dedicatedCpuPlacement": True} if dedicated else None
    obj = with_devices(vmi(cpu=cpu, requests={"memory": "1Gi"}, volumes=SHARE), filesystems=FILESYSTEMS)
    pod = launcher_pod(obj, ClusterConfig(kubevirt_version=version))
    return [c.formatted() for c in pod.containers if c.name.startswith("virtiofs")]


@pytest.mark.parametrize("version, dedicated, requests, limits", [
    ("0.58.0", False, {"cpu": "10m", "memory": "1M"}, {"cpu": "100m", "memory": "40M"}),
    ("0.59.2", True, {"cpu": "10m", "memory": "1M"}, {"cpu": "100m", "memory": "40M"}),
    ("1.0.0", False, {"cpu": "10m", "memory": "1M"}, {"cpu": "100m", "memory": "80M"}),
    ("1.0.1", True, {"cpu": "10m", "memory": "1M"}, {"cpu": "100m", "memory": "80M"}),
    ("1.1.0", True, {"cpu": "100m", "memory": "80M"}, {"cpu": "100m", "memory": "80M"}),
    ("1.9.0", True, {"cpu": "100m", "memory": "80M"}, {"cpu": "100m", "memory": "80M"}),
    ("1.9.0", False, {"cpu": "10m", "memory": "1M"}, {"cpu": "100m", "memory": "80M"}),
])
def test_virtiofs_container_resources(version, dedicated, requests, limits):
    (container,) = virtiofs_containers(version, dedicated)
    assert container["requests"] == requests
    assert container["limits"] == limits


def test_no_virtiofs_container_before_v0_58():
    assert virtiofs_containers("0.57.1") == []


def test_container_path_volumes_get_no_virtiofs_container_from_v1_8():
    volumes = SHARE + [{"name": "cp", "containerPath": {"path": "/var/run/x"}}]
    obj = with_devices(vmi(requests={"memory": "1Gi"}, volumes=volumes),
                       filesystems=FILESYSTEMS + [{"name": "cp", "virtiofs": {}}])
    containers = launcher_pod(obj, ClusterConfig(kubevirt_version="1.8.0")).containers
    assert [c.name for c in containers if c.name.startswith("virtiofs")] == ["virtiofs-share"]


# ---------------------------------------------------------------- backend storage

# pkg/storage/backend-storage/backend-storage.go: CreatePVCForMigrationTarget (a new 10Mi PVC unless the
# source's is RWX) from v1.4.0, for a persistent TPM or EFI; v1.7.0 IsBackendStorageNeeded (commit f643ffc25f)
# also for cbt.HasCBTStateEnabled(vmi.Status.ChangedBlockTracking) (state Initializing or Enabled).
@pytest.mark.parametrize("version, state, pvc", [
    ("1.6.6", "Enabled", False),
    ("1.7.0", "Enabled", True),
    ("1.7.0", "Initializing", True),
    ("1.7.0", "Disabled", False),
    ("1.9.0", "Enabled", True),
])
def test_changed_block_tracking_needs_a_backend_storage_pvc(version, state, pvc):
    obj = vmi(requests={"memory": "1Gi"})
    obj["status"] = {"changedBlockTracking": {"state": state}}
    charge = launcher_pod(obj, ClusterConfig(kubevirt_version=version)).formatted_charge("pvc_charge")
    assert charge == ({"requests.storage": "10Mi", "persistentvolumeclaims": "1",
                       "count/persistentvolumeclaims": "1"} if pvc else {})


@pytest.mark.parametrize("version, pvc", [("1.3.1", False), ("1.4.0", True)])
def test_persistent_efi_pvc_from_v1_4(version, pvc):
    obj = vmi(requests={"memory": "1Gi"}, domain_extra={"firmware": {"bootloader": {"efi": {"persistent": True}}}})
    assert bool(launcher_pod(obj, ClusterConfig(kubevirt_version=version)).pvc_charge) is pvc


# ---------------------------------------------------------------- DRA claims

# v1.6.0 renderresources.go WithGPUsDevicePlugins / WithHostDevicesDevicePlugins request the device-plugin
# resource only for entries without claimRequest (DRA ones become pod resourceClaims, not quota resources);
# v1.5.3 WithGPUs requests every GPU's deviceName. The 1Gi VFIO term counts every GPU in both.
@pytest.mark.parametrize("version, charged", [("1.5.3", True), ("1.6.0", False), ("1.9.0", False)])
def test_dra_gpu_skips_the_device_plugin_resource(version, charged):
    gpu = {"name": "g", "deviceName": "nvidia.com/GPU", "claimRequest": {"claimName": "c", "requestName": "r"}}
    pod = launcher_pod(with_devices(vmi(requests={"memory": "1Gi"}), gpus=[gpu]), ClusterConfig(kubevirt_version=version))
    assert ("nvidia.com/GPU" in pod.containers[0].limits) is charged
