# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Sizing vectors at the patch releases where KubeVirt's rules start, stop or are reverted.

The ground truth for sizing: the lab's emulator sizes with the same core, so only these
vectors can catch a sizing error. Every vector names its source (release tag, KubeVirt file
and test or function) and is checked on both sides of its boundary. Expected values are
worked out by hand from that source, never by running the code under test; the arithmetic
is in the comments (Mi = 1,048,576; M = 1,000,000). docs/sizing.md section 6 lists the
boundaries with the commits that moved them.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.sizing import (
    RULES,
    ClusterConfig,
    audited_version,
    config_from_cluster,
    launcher_pod,
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
