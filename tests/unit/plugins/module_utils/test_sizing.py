# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Launcher-pod sizing.

Two kinds of expectations, none taken from running the code under test:
- REFERENCE: figures measured on a real cluster (design/sizing.md section 4, seed 002),
  KubeVirt 1.1.1 / Harvester v1.3.2;
- WORKED: derived by hand from KubeVirt's formula at the given tag; the arithmetic is
  in the comment next to each case (Mi = 1,048,576; M = 1,000,000).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
from fractions import Fraction

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.config import (
    ClusterConfig,
    config_from_cluster,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.launcher import (
    launcher_pod,
    migration_charge,
    pod_charge,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.overhead import memory_overhead
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.quantities import (
    ContainerResources,
    go_format_g,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.rules import (
    parse_overhead_ratio,
    parse_version,
)

Mi = 1024 ** 2
Gi = 1024 ** 3


def harvester_vmi(limit_memory, request_memory):
    """The VMI of seed 002 (Harvester v1.3.2): 1 vCPU, limits cpu 1, requests cpu 62m."""
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "vmname", "namespace": "tenant"},
        "spec": {
            "architecture": "amd64",
            "domain": {
                "cpu": {"cores": 1, "sockets": 1, "threads": 1},
                "memory": {"guest": "16284Mi" if limit_memory == "16Gi" else "8092Mi"},
                "resources": {
                    "limits": {"cpu": "1", "memory": limit_memory},
                    "requests": {"cpu": "62m", "memory": request_memory},
                },
                "devices": {
                    "disks": [{"name": "disk-0", "disk": {"bus": "virtio"}, "bootOrder": 1}],
                    "interfaces": [{"name": "default", "model": "virtio", "bridge": {}}],
                },
            },
            "networks": [{"name": "default", "multus": {"networkName": "default/vlan1"}}],
            "volumes": [{"name": "disk-0", "persistentVolumeClaim": {"claimName": "vmname-disk-0"}}],
        },
    }


def plain_vmi(request_memory="2Gi", sockets=1, cores=1, **domain_extra):
    """A plain-KubeVirt VMI: pod network, masquerade, one PVC, requests.memory only."""
    vmi = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm", "namespace": "ns"},
        "spec": {
            "domain": {
                "cpu": {"sockets": sockets, "cores": cores, "threads": 1},
                "resources": {"requests": {"memory": request_memory}},
                "devices": {
                    "disks": [{"name": "root", "disk": {"bus": "virtio"}}],
                    "interfaces": [{"name": "default", "masquerade": {}}],
                },
            },
            "networks": [{"name": "default", "pod": {}}],
            "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": "root"}}],
        },
    }
    for key, value in domain_extra.items():
        vmi["spec"]["domain"][key] = value
    return vmi


def compute(pod):
    """The compute container as strings."""
    assert pod.containers[0].name == "compute"
    return pod.containers[0].formatted()


def charge(pod):
    return pod.formatted_charge()


# ---------------------------------------------------------------- REFERENCE figures (sizing.md section 4)

REFERENCE = [
    # VM limits.memory, VM requests.memory, ratio, pod limits.memory, pod requests.memory
    ("16Gi", "3276Mi", "1", "17031576Ki", "3608984Ki"),
    ("16Gi", "3276Mi", "1.5", "17570565824", "3825831616"),
    ("16Gi", "3276Mi", "2.0", "17700798824", "3956064616"),
    ("8Gi", "1638Mi", "1", "8847044609", "1974677505"),
    ("8Gi", "1638Mi", "1.5", "8975599609", "2103232505"),
    ("8Gi", "1638Mi", "2.0", "9104155609", "2231788505"),
]


@pytest.mark.parametrize("limit, vm_request, ratio, pod_limit, pod_request", REFERENCE)
def test_reference_figures_kubevirt_1_1_1(limit, vm_request, ratio, pod_limit, pod_request):
    pod = launcher_pod(harvester_vmi(limit, vm_request), ClusterConfig(kubevirt_version="1.1.1", overhead_ratio=ratio))
    c = compute(pod)
    assert c["limits"]["memory"] == pod_limit
    assert c["requests"]["memory"] == pod_request


def test_reference_compute_container_exactly_as_measured():
    # seed 002, test 2.3: the whole compute container of the 8Gi VM at ratio 2.0
    pod = launcher_pod(harvester_vmi("8Gi", "1638Mi"), ClusterConfig(kubevirt_version="1.1.1", overhead_ratio="2.0"))
    assert compute(pod) == {
        "name": "compute",
        "limits": {
            "cpu": "1",
            "devices.kubevirt.io/kvm": "1",
            "devices.kubevirt.io/tun": "1",
            "devices.kubevirt.io/vhost-net": "1",
            "memory": "9104155609",
        },
        "requests": {
            "cpu": "62m",
            "devices.kubevirt.io/kvm": "1",
            "devices.kubevirt.io/tun": "1",
            "devices.kubevirt.io/vhost-net": "1",
            "ephemeral-storage": "50M",
            "memory": "2231788505",
        },
    }


def test_reference_worked_example_16gi_ratio_1_5():
    # sizing.md: page tables 6,709,248 + 210Mi + 8Mi + 8Mi + 16Mi = B 260,464,640;
    # ceil(B/1000) = 260,465; x0.5 = 130,232.5 -> 130,232 -> +130,232,000; O = 390,696,640
    vmi = harvester_vmi("16Gi", "3276Mi")
    assert memory_overhead(vmi, ClusterConfig(kubevirt_version="1.1.1", overhead_ratio="1.5")) == 390696640
    assert memory_overhead(vmi, ClusterConfig(kubevirt_version="1.1.1")) == 260464640


def test_reference_pod_with_console_log_charges_1015m():
    # KubeVirt 1.1.1 adds guest-console-log (5m/35M requests, 15m/60M limits):
    # limits.cpu 1 + 15m = 1015m; requests.cpu 62m + 5m = 67m;
    # limits.memory 9,104,155,609 + 60,000,000 = 9,164,155,609; requests 2,231,788,505 + 35,000,000 = 2,266,788,505
    pod = launcher_pod(harvester_vmi("8Gi", "1638Mi"), ClusterConfig(kubevirt_version="1.1.1", overhead_ratio="2.0"))
    assert [c.name for c in pod.containers] == ["compute", "guest-console-log"]
    assert charge(pod) == {
        "pods": "1", "count/pods": "1",
        "cpu": "67m", "requests.cpu": "67m", "limits.cpu": "1015m",
        "memory": "2266788505", "requests.memory": "2266788505", "limits.memory": "9164155609",
        "ephemeral-storage": "50M", "requests.ephemeral-storage": "50M",
        "requests.devices.kubevirt.io/kvm": "1",
        "requests.devices.kubevirt.io/tun": "1",
        "requests.devices.kubevirt.io/vhost-net": "1",
    }


# ---------------------------------------------------------------- WORKED examples per version

def test_v0_54_fixed_180mi_no_ratio_no_console_log():
    # 2Gi = 2,147,483,648: ceil(/1000) = 2,147,484 -> x1000 /512 = 4,194,304 (4Mi)
    # O = 4Mi + 180Mi (25+75+17+33+30) + 8Mi vCPU + 8Mi IOThread + 16Mi video = 216Mi
    # request = 2048Mi + 216Mi = 2264Mi; cpu 1 vCPU / 10 = 0.1 -> "100m"; the ratio does not exist yet
    pod = launcher_pod(plain_vmi("2Gi"), ClusterConfig(kubevirt_version="0.54.0", overhead_ratio="2"))
    assert pod.memory_overhead == 216 * Mi
    assert compute(pod)["requests"]["memory"] == "2264Mi"
    assert compute(pod)["requests"]["cpu"] == "100m"
    assert "memory" not in compute(pod)["limits"]
    assert [c.name for c in pod.containers] == ["compute"]
    assert charge(pod)["requests.cpu"] == "100m"
    assert "limits.cpu" not in charge(pod) and "limits.memory" not in charge(pod)


@pytest.mark.parametrize("version, fixed_mi", [
    ("0.55.0", 205), ("0.56.1", 205),   # 25+100+17+33+30
    ("0.57.0", 208), ("0.58.0", 208),   # 25+100+18+35+30
    ("0.58.1", 210), ("0.59.0", 210), ("1.0.0", 210), ("1.4.0", 210),  # 25+100+20+35+30
    ("1.4.1", 215),                     # 25+100+20+40+30 (virtqemud 40Mi)
    ("1.5.0", 220), ("1.6.3", 220),     # 25+100+25+40+30
])
def test_fixed_overhead_per_version(version, fixed_mi):
    # 2Gi, 1 vCPU, no ratio: O = 4Mi + fixed + 8Mi + 8Mi + video (16Mi, 32Mi from v1.6)
    video = 32 if parse_version(version) >= (1, 6, 0) else 16
    pod = launcher_pod(plain_vmi("2Gi"), ClusterConfig(kubevirt_version=version))
    assert pod.memory_overhead == (4 + fixed_mi + 8 + 8 + video) * Mi


def test_v0_58_ratio_appears_in_0_58_2():
    # B = 4Mi + 210Mi + 8 + 8 + 16 = 246Mi = 257,949,696; ceil(/1000) = 257,950; x(2-1) -> +257,950,000
    # O = 515,899,696; request = 2,147,483,648 + 515,899,696 = 2,663,383,344 (not a whole Ki: bare digits)
    vmi = plain_vmi("2Gi")
    pod = launcher_pod(vmi, ClusterConfig(kubevirt_version="0.58.2", overhead_ratio="2"))
    assert compute(pod)["requests"]["memory"] == "2663383344"
    # v0.58.0 ignores it: O = 4 + 208 + 8 + 8 + 16 = 244Mi -> 2292Mi
    assert compute(launcher_pod(vmi, ClusterConfig(kubevirt_version="0.58.0", overhead_ratio="2")))["requests"]["memory"] == "2292Mi"
    # v0.59.0 has no ratio either (it came back in v0.59.1): 246Mi -> 2294Mi
    assert compute(launcher_pod(vmi, ClusterConfig(kubevirt_version="0.59.0", overhead_ratio="2")))["requests"]["memory"] == "2294Mi"


def test_v1_0_ratio_two_vcpus_and_hotplug_pod():
    # 4Gi = 4,294,967,296: ceil(/1000) = 4,294,968 -> x1000 /512 = 8,388,609
    # B = 8,388,609 + 210Mi 220,200,960 + 2x8Mi 16,777,216 + 8Mi 8,388,608 + 16Mi 16,777,216 = 270,532,609
    # ceil(B/1000) = 270,533; x0.5 = 135,266.5 -> 135,266 -> +135,266,000; O = 405,798,609
    # request = 4,294,967,296 + 405,798,609 = 4,700,765,905; cpu 2/10 = 0.2 -> "200m"
    vmi = plain_vmi("4Gi", sockets=2)
    vmi["spec"]["volumes"].append({"name": "hp", "persistentVolumeClaim": {"claimName": "hp", "hotpluggable": True}})
    pod = launcher_pod(vmi, ClusterConfig(kubevirt_version="1.0.0", overhead_ratio="1.5"))
    assert pod.memory_overhead == 405798609
    assert compute(pod)["requests"]["memory"] == "4700765905"
    assert compute(pod)["requests"]["cpu"] == "200m"
    # v1.0-v1.1 attachment pod: requests 100m/80M, limits 100m/80M; counts as a pod
    assert pod.formatted_charge("extra_charge") == {
        "pods": "1", "count/pods": "1",
        "cpu": "100m", "requests.cpu": "100m", "limits.cpu": "100m",
        "memory": "80M", "requests.memory": "80M", "limits.memory": "80M",
    }
    total = migration_charge(vmi, ClusterConfig(kubevirt_version="1.0.0", overhead_ratio="1.5"))
    assert total["pods"] == 2 and total["requests.cpu"] == Fraction(300, 1000)


def test_hotplug_pod_requests_10m_2m_from_v1_2():
    vmi = plain_vmi("1Gi")
    vmi["spec"]["volumes"].append({"name": "hp", "dataVolume": {"name": "hp", "hotpluggable": True}})
    extra = launcher_pod(vmi, ClusterConfig(kubevirt_version="1.2.0")).formatted_charge("extra_charge")
    assert extra["requests.cpu"] == "10m" and extra["requests.memory"] == "2M"
    assert extra["limits.cpu"] == "100m" and extra["limits.memory"] == "80M"


def test_harvester_two_cpu_vm_shows_2015m_kubevirt_1_3_1():
    # Harvester v1.4 (KubeVirt 1.3.1), 2 CPUs / 4Gi typed: VMI limits cpu 2 memory 4Gi, requests 125m / 2730Mi
    # 2730Mi = 2,862,612,480: ceil(/1000) = 2,862,613 -> x1000 /512 = 5,591,041
    # B = 5,591,041 + 220,200,960 + 16,777,216 + 8,388,608 + 16,777,216 = 267,735,041
    # ceil(B/1000) = 267,736; x0.5 = 133,868 -> +133,868,000; O = 401,603,041
    # compute: requests 2,862,612,480 + O = 3,264,215,521; limits 4,294,967,296 + O = 4,696,570,337
    # pod: + console 35M / 60M -> 3,299,215,521 / 4,756,570,337; cpu 125m + 5m = 130m, 2 + 15m = 2015m
    vmi = plain_vmi("2730Mi", sockets=1, cores=2)
    vmi["spec"]["domain"]["resources"] = {"limits": {"cpu": "2", "memory": "4Gi"},
                                          "requests": {"cpu": "125m", "memory": "2730Mi"}}
    pod = launcher_pod(vmi, ClusterConfig(kubevirt_version="1.3.1", overhead_ratio="1.5"))
    c = charge(pod)
    assert compute(pod)["requests"]["memory"] == "3264215521"
    assert compute(pod)["limits"]["memory"] == "4696570337"
    assert c["limits.cpu"] == "2015m"
    assert c["requests.cpu"] == "130m"
    assert c["requests.memory"] == "3299215521"
    assert c["limits.memory"] == "4756570337"


def test_v1_5_auto_limits_when_quota_tracks_limits():
    # 1Gi: ceil(1,073,741,824/1000) = 1,073,742 -> x1000 /512 = 2,097,152 (2Mi)
    # O = 2 + 220 + 8 + 8 + 16 = 254Mi; request = 1024Mi + 254Mi = 1278Mi = 1,340,080,128
    # auto memory limit = int(1,340,080,128 x 2.0) = 2,680,160,256 = 2556Mi; label 1.5 -> 2,010,120,192 = 1917Mi
    # auto cpu limit = vCPUs = "1"; pod limits.cpu = 1 + 15m = 1015m
    # pod limits.memory = 2,680,160,256 + 60,000,000 = 2,740,160,256
    tracks = frozenset(["limits.cpu", "limits.memory", "requests.cpu"])
    pod = launcher_pod(plain_vmi("1Gi"), ClusterConfig(kubevirt_version="1.5.0"), quota_tracks=tracks)
    assert compute(pod)["requests"]["memory"] == "1278Mi"
    assert compute(pod)["limits"]["memory"] == "2556Mi"
    assert compute(pod)["limits"]["cpu"] == "1"
    assert charge(pod)["limits.cpu"] == "1015m"
    assert charge(pod)["limits.memory"] == "2740160256"
    labelled = launcher_pod(plain_vmi("1Gi"), ClusterConfig(kubevirt_version="1.5.0"),
                            namespace_labels={"alpha.kubevirt.io/auto-memory-limits-ratio": "1.5"},
                            quota_tracks=tracks)
    assert compute(labelled)["limits"]["memory"] == "1917Mi"
    # an invalid or < 1 label falls back to 2.0
    bad = launcher_pod(plain_vmi("1Gi"), ClusterConfig(kubevirt_version="1.5.0"),
                       namespace_labels={"alpha.kubevirt.io/auto-memory-limits-ratio": "0.5"}, quota_tracks=tracks)
    assert compute(bad)["limits"]["memory"] == "2556Mi"


def test_auto_limits_need_the_gate_in_v1_1_to_v1_4_and_a_tracked_quota():
    tracks = frozenset(["limits.memory"])
    off = ClusterConfig(kubevirt_version="1.3.0", auto_resource_limits=False)
    assert "memory" not in compute(launcher_pod(plain_vmi("1Gi"), off, quota_tracks=tracks))["limits"]
    on = ClusterConfig(kubevirt_version="1.3.0", auto_resource_limits=False, feature_gates=("AutoResourceLimitsGate",))
    # v1.3: O = 2 + 210 + 8 + 8 + 16 = 244Mi -> 1268Mi; x2.0 = 2536Mi
    assert compute(launcher_pod(plain_vmi("1Gi"), on, quota_tracks=tracks))["limits"]["memory"] == "2536Mi"
    untracked = launcher_pod(plain_vmi("1Gi"), ClusterConfig(kubevirt_version="1.6.0"), quota_tracks=["requests.memory"])
    assert "memory" not in compute(untracked)["limits"]
    # v1.0 has no auto memory limits at all
    assert "memory" not in compute(launcher_pod(plain_vmi("1Gi"), ClusterConfig(kubevirt_version="1.0.0"),
                                                quota_tracks=tracks))["limits"]


def test_v1_6_video_32mi_and_console_log_as_native_sidecar():
    # B = 8,388,609 + 220Mi 230,686,720 + 16,777,216 + 8,388,608 + 32Mi 33,554,432 = 297,795,585
    # ceil(B/1000) = 297,796; x0.5 = 148,898 -> +148,898,000; O = 446,693,585
    # compute request = 4,294,967,296 + 446,693,585 = 4,741,660,881; cpu 0.2 -> 200m
    # guest-console-log is a restartable init container: still summed -> requests.cpu 205m,
    # requests.memory 4,776,660,881; limits only from the sidecar: 15m / 60M
    pod = launcher_pod(plain_vmi("4Gi", sockets=2), ClusterConfig(kubevirt_version="1.6.3", overhead_ratio="1.5"))
    assert pod.memory_overhead == 446693585
    assert [c.name for c in pod.containers] == ["compute"]
    assert [c.name for c in pod.init_containers] == ["guest-console-log"]
    assert pod.init_containers[0].restartable
    c = charge(pod)
    assert c["requests.cpu"] == "205m"
    assert c["requests.memory"] == "4776660881"
    assert c["limits.cpu"] == "15m"
    assert c["limits.memory"] == "60M"
    # with limits tracked: cpu 2 + 15m = 2015m; memory int(4,741,660,881 x 2.0) = 9,483,321,762 + 60M = 9,543,321,762
    tracked = charge(launcher_pod(plain_vmi("4Gi", sockets=2), ClusterConfig(kubevirt_version="1.6.3", overhead_ratio="1.5"),
                                  quota_tracks={"limits.cpu", "limits.memory"}))
    assert tracked["limits.cpu"] == "2015m"
    assert tracked["limits.memory"] == "9543321762"


def test_arm64_arch_from_vmi_only_from_v1_2():
    # 1Gi, 1 vCPU: O = 2 + 210 + 8 + 8 + 16 = 244Mi; arm64 adds 128Mi -> 372Mi
    vmi = plain_vmi("1Gi")
    vmi["spec"]["architecture"] = "arm64"
    assert launcher_pod(vmi, ClusterConfig(kubevirt_version="1.2.0")).memory_overhead == 372 * Mi
    assert launcher_pod(vmi, ClusterConfig(kubevirt_version="1.1.1")).memory_overhead == 244 * Mi  # cluster arch
    assert launcher_pod(plain_vmi("1Gi"), ClusterConfig(kubevirt_version="1.1.1", arch="arm64")).memory_overhead == 372 * Mi


def test_vfio_gpu_adds_1gi_and_the_device_resource():
    # 8Gi: ceil(8,589,934,592/1000) = 8,589,935 -> x1000 /512 = 16,777,216 (16Mi)
    # O = 16 + 210 + 4x8 + 8 + 16 + 1024 (VFIO) = 1306Mi; request = 8192Mi + 1306Mi = 9498Mi
    vmi = plain_vmi("8Gi", sockets=4)
    vmi["spec"]["domain"]["devices"]["gpus"] = [{"name": "gpu1", "deviceName": "nvidia.com/GA102GL_A10"}]
    pod = launcher_pod(vmi, ClusterConfig(kubevirt_version="1.4.0"))
    assert compute(pod)["requests"]["memory"] == "9498Mi"
    assert compute(pod)["limits"]["nvidia.com/GA102GL_A10"] == "1"
    assert charge(pod)["requests.nvidia.com/GA102GL_A10"] == "1"
    assert compute(pod)["requests"]["cpu"] == "400m"  # 4/10
    assert charge(pod)["requests.cpu"] == "405m"  # + guest-console-log 5m


def test_sriov_network_resource_counts_once_per_network():
    # VFIO via SR-IOV: +1Gi; 1Gi request: O = 2 + 210 + 8 + 8 + 16 + 1024 = 1268Mi
    vmi = plain_vmi("1Gi")
    vmi["spec"]["domain"]["devices"]["interfaces"].append({"name": "s1", "sriov": {}})
    vmi["spec"]["domain"]["devices"]["interfaces"].append({"name": "s2", "sriov": {}})
    vmi["spec"]["networks"] += [{"name": "s1", "multus": {"networkName": "sriov-a"}},
                                {"name": "s2", "multus": {"networkName": "sriov-a"}}]
    pod = launcher_pod(vmi, ClusterConfig(kubevirt_version="1.2.0"), network_resources={"sriov-a": "intel.com/sriov"})
    assert pod.memory_overhead == 1268 * Mi
    assert charge(pod)["requests.intel.com/sriov"] == "2"


def test_dedicated_cpus_v1_6_emulator_thread_and_100mi_before_ratio():
    # 2Gi, 2 dedicated cores + isolated emulator thread, v1.6.0, no ratio:
    # O = 4 + 220 + 2x8 + 8 + 32 + 100 (dedicated) = 380Mi; memory request = limit = 2048 + 380 = 2428Mi
    # cpu request = limit = 2 + 1 = 3; console log requests = limits (15m/60M)
    # pod: cpu 3 + 15m = 3015m both; memory 2428Mi 2,545,942,528 + 60,000,000 = 2,605,942,528 both
    vmi = plain_vmi("2Gi", cores=2)
    vmi["spec"]["domain"]["cpu"].update(dedicatedCpuPlacement=True, isolateEmulatorThread=True)
    pod = launcher_pod(vmi, ClusterConfig(kubevirt_version="1.6.0"))
    assert compute(pod)["requests"]["memory"] == "2428Mi"
    assert compute(pod)["limits"]["memory"] == "2428Mi"
    assert compute(pod)["requests"]["cpu"] == "3"
    assert compute(pod)["limits"]["cpu"] == "3"
    assert pod.init_containers[0].formatted()["requests"] == {"cpu": "15m", "memory": "60M"}
    c = charge(pod)
    assert c["requests.cpu"] == c["limits.cpu"] == "3015m"
    assert c["requests.memory"] == c["limits.memory"] == "2605942528"


def test_dedicated_100mi_after_ratio_until_v1_5_2_before_from_v1_5_3():
    # 2Gi, 2 dedicated cores, ratio 2.0:
    # v1.5.2: B = 4 + 220 + 16 + 8 + 16 = 264Mi = 276,824,064; ceil(/1000) = 276,825 -> +276,825,000;
    #         then +100Mi 104,857,600 -> O = 658,506,664; request 2,147,483,648 + O = 2,805,990,312
    # v1.5.3: B = 364Mi = 381,681,664; ceil(/1000) = 381,682 -> +381,682,000 -> O = 763,363,664;
    #         request = 2,910,847,312
    vmi = plain_vmi("2Gi", cores=2)
    vmi["spec"]["domain"]["cpu"]["dedicatedCpuPlacement"] = True
    old = launcher_pod(vmi, ClusterConfig(kubevirt_version="1.5.2", overhead_ratio="2.0"))
    new = launcher_pod(vmi, ClusterConfig(kubevirt_version="1.5.3", overhead_ratio="2.0"))
    assert compute(old)["requests"]["memory"] == "2805990312"
    assert compute(new)["requests"]["memory"] == "2910847312"
    assert compute(old)["limits"]["cpu"] == "2" and compute(old)["requests"]["cpu"] == "2"


def test_guaranteed_qos_also_gets_100mi_from_v1_1():
    # requests == limits (1 cpu, 1Gi): v1.0.0 has no extra; v1.1.0 adds 100Mi
    # v1.0.0: O = 2 + 210 + 8 + 8 + 16 = 244Mi; v1.1.0: 344Mi
    vmi = plain_vmi("1Gi")
    vmi["spec"]["domain"]["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
    assert launcher_pod(vmi, ClusterConfig(kubevirt_version="1.0.0")).memory_overhead == 244 * Mi
    assert launcher_pod(vmi, ClusterConfig(kubevirt_version="1.1.0")).memory_overhead == 344 * Mi


def test_hugepages_charge_the_page_resource_and_only_the_overhead_as_memory():
    # v1.1.1, 4Gi with 2Mi pages, 1 vCPU: O = 8,388,609 + 220,200,960 + 8,388,608 + 8,388,608 + 16,777,216 = 262,144,001
    # memory request = O (DecimalSI: the diff starts as a decimal zero) ; hugepages-2Mi = 4Gi
    vmi = plain_vmi("4Gi", memory={"hugepages": {"pageSize": "2Mi"}})
    pod = launcher_pod(vmi, ClusterConfig(kubevirt_version="1.1.1", disable_serial_console_log=True))
    assert compute(pod)["requests"]["memory"] == "262144001"
    assert compute(pod)["requests"]["hugepages-2Mi"] == "4Gi"
    assert compute(pod)["limits"]["hugepages-2Mi"] == "4Gi"
    assert charge(pod)["hugepages-2Mi"] == "4Gi"
    assert charge(pod)["requests.hugepages-2Mi"] == "4Gi"


def test_tpm_probes_and_persistent_tpm_pvc():
    # v1.6.0, 1Gi, 1 vCPU, persistent TPM: O = 2 + 220 + 8 + 8 + 32 + 53 = 323Mi -> 1347Mi
    vmi = plain_vmi("1Gi")
    vmi["spec"]["domain"]["devices"]["tpm"] = {"persistent": True}
    pod = launcher_pod(vmi, ClusterConfig(kubevirt_version="1.6.0"))
    assert compute(pod)["requests"]["memory"] == "1347Mi"
    assert pod.formatted_charge("extra_charge") == {
        "requests.storage": "10Mi", "persistentvolumeclaims": "1", "count/persistentvolumeclaims": "1"}
    assert launcher_pod(vmi, ClusterConfig(kubevirt_version="1.6.0", backend_storage_rwx=True)).extra_charge == {}
    # two exec probes: +10Mi each +100Mi once = 120Mi; v1.6 no TPM: 2+220+8+8+32+120 = 390Mi
    probed = plain_vmi("1Gi")
    probed["spec"]["livenessProbe"] = {"exec": {"command": ["true"]}}
    probed["spec"]["readinessProbe"] = {"exec": {"command": ["true"]}}
    assert launcher_pod(probed, ClusterConfig(kubevirt_version="1.6.0")).memory_overhead == 390 * Mi
    # a disabled TPM counts where GetMemoryOverhead tests TPM != nil (v1.5.0) and not where it calls
    # tpm.HasDevice (v1.5.1, commit c53b1640be); test_sizing_releases.py has the v1.4.x side
    off = plain_vmi("1Gi")
    off["spec"]["domain"]["devices"]["tpm"] = {"enabled": False}
    assert launcher_pod(off, ClusterConfig(kubevirt_version="1.5.0")).memory_overhead == (2 + 220 + 8 + 8 + 16 + 53) * Mi
    assert launcher_pod(off, ClusterConfig(kubevirt_version="1.5.1")).memory_overhead == (2 + 220 + 8 + 8 + 16) * Mi


def test_passt_800mi_only_v0_59_to_v1_2():
    vmi = plain_vmi("1Gi")
    vmi["spec"]["domain"]["devices"]["interfaces"] = [{"name": "default", "passt": {}}]
    # 1Gi: 2 + 210 + 8 + 8 + 16 = 244Mi; + 800Mi = 1044Mi in v1.2.2, not in v1.3.0
    assert launcher_pod(vmi, ClusterConfig(kubevirt_version="1.2.2")).memory_overhead == 1044 * Mi
    assert launcher_pod(vmi, ClusterConfig(kubevirt_version="1.3.0")).memory_overhead == 244 * Mi


def test_container_disk_init_container_dominates_cpu_limit_v1_1_1():
    # containers: compute (no limits), volume container (1m/1M/50M; 10m/40M), console (5m/35M; 15m/60M)
    # init: container-disk-binary (10m/1M; 100m/40M), volume init (1m/1M/50M; 10m/40M)
    # limits.cpu = max(10m + 15m, 100m) = 100m; limits.memory = max(40M + 60M, 40M) = 100M
    # requests.ephemeral-storage = max(50M + 50M, 50M) = 100M; requests.cpu = 100m + 1m + 5m = 106m
    vmi = plain_vmi("1Gi")
    vmi["spec"]["volumes"].append({"name": "cd", "containerDisk": {"image": "quay.io/containerdisks/fedora:40"}})
    pod = launcher_pod(vmi, ClusterConfig(kubevirt_version="1.1.1"))
    assert [c.name for c in pod.containers] == ["compute", "volumecd", "guest-console-log"]
    assert [c.name for c in pod.init_containers] == ["container-disk-binary", "volumecd-init"]
    c = charge(pod)
    assert c["limits.cpu"] == "100m"
    assert c["limits.memory"] == "100M"
    assert c["requests.ephemeral-storage"] == "100M"
    assert c["requests.cpu"] == "106m"


def test_container_disk_with_native_sidecar_v1_6():
    # the console sidecar precedes container-disk-binary, so that init step needs 100m + 15m = 115m CPU limit;
    # the regular sum is 10m + 15m = 25m -> limits.cpu 115m; limits.memory max(40M + 60M, 40M + 60M) = 100M
    vmi = plain_vmi("1Gi")
    vmi["spec"]["volumes"].append({"name": "cd", "containerDisk": {"image": "quay.io/containerdisks/fedora:40"}})
    c = charge(launcher_pod(vmi, ClusterConfig(kubevirt_version="1.6.0")))
    assert c["limits.cpu"] == "115m"
    assert c["limits.memory"] == "100M"


@pytest.mark.parametrize("vcpus, ratio, expected", [
    (4, 10, "400m"),     # 0.4 -> x1000 = 400
    (4, 1, "4"),         # %g of 4.0 is "4"
    (12, 10, "1200m"),   # "1.2" parsed as 1.2 -> canonical 1200m
    (1, 3, "333333334n"),  # 1/3 -> 333.3333333333333 (float64 x1000) -> "333.3333333333333m" -> rounded up to 1n
    (1, 16, "62500u"),   # 0.0625 x 1000 = 62.5 -> "62.5m" -> 62500u
])
def test_cpu_request_from_allocation_ratio(vcpus, ratio, expected):
    pod = launcher_pod(plain_vmi("1Gi", sockets=vcpus), ClusterConfig(kubevirt_version="1.6.0", cpu_allocation_ratio=ratio))
    assert compute(pod)["requests"]["cpu"] == expected


def test_support_container_resources_and_serial_console_switches():
    vmi = harvester_vmi("8Gi", "1638Mi")
    override = ({"type": "GuestConsoleLog", "resources": {"limits": {"cpu": "50m"}}},)
    pod = launcher_pod(vmi, ClusterConfig(kubevirt_version="1.1.1", support_container_resources=override))
    assert charge(pod)["limits.cpu"] == "1050m"  # 1 + 50m
    off = launcher_pod(vmi, ClusterConfig(kubevirt_version="1.1.1", disable_serial_console_log=True))
    assert [c.name for c in off.containers] == ["compute"]
    vmi_on = copy.deepcopy(vmi)
    vmi_on["spec"]["domain"]["devices"]["logSerialConsole"] = True  # per-VM switch beats the cluster setting
    on = launcher_pod(vmi_on, ClusterConfig(kubevirt_version="1.1.1", disable_serial_console_log=True))
    assert [c.name for c in on.containers] == ["compute", "guest-console-log"]
    vmi_no = copy.deepcopy(vmi)
    vmi_no["spec"]["domain"]["devices"]["autoattachSerialConsole"] = False
    assert [c.name for c in launcher_pod(vmi_no, ClusterConfig(kubevirt_version="1.1.1")).containers] == ["compute"]
    assert [c.name for c in launcher_pod(vmi, ClusterConfig(kubevirt_version="1.0.1")).containers] == ["compute"]


def test_network_binding_plugin_memory_once_per_plugin_v1_3():
    # v1.4.0, 1Gi: 2 + 210 + 8 + 8 + 16 = 244Mi, + 500Mi plugin overhead (two interfaces, one plugin) = 744Mi;
    # v1.3.0 template.go VMIResourcePredicates adds netbinding.CalculateMemoryOverhead (commit d0201086db),
    # v1.2.2 has no such term
    vmi = plain_vmi("1Gi")
    vmi["spec"]["domain"]["devices"]["interfaces"] = [
        {"name": "a", "binding": {"name": "slirp"}}, {"name": "b", "binding": {"name": "slirp"}}]
    bindings = {"slirp": {"computeResourceOverhead": {"requests": {"memory": "500Mi"}}}}
    assert launcher_pod(vmi, ClusterConfig(kubevirt_version="1.4.0", network_bindings=bindings)).memory_overhead == 744 * Mi
    assert launcher_pod(vmi, ClusterConfig(kubevirt_version="1.3.0", network_bindings=bindings)).memory_overhead == 744 * Mi
    assert launcher_pod(vmi, ClusterConfig(kubevirt_version="1.2.2", network_bindings=bindings)).memory_overhead == 244 * Mi


def test_vm_input_uses_the_template_and_mutator_defaults():
    # A VM with only memory.guest 2Gi: the mutator sets requests.memory = guest (overcommit 100)
    # -> same as plain 2Gi at v0.54: 2264Mi. With memoryOvercommit 150: 2Gi x 100 / 150 = 1,431,655,765
    # (truncated); ceil(/1000) = 1,431,656 -> x1000 /512 = 2,796,203
    vm = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "vm", "namespace": "ns"},
          "spec": {"running": True, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {
              "domain": {"memory": {"guest": "2Gi"}, "devices": {"interfaces": [{"name": "default", "masquerade": {}}]}},
              "networks": [{"name": "default", "pod": {}}]}}}}
    pod = launcher_pod(vm, ClusterConfig(kubevirt_version="0.54.0"))
    assert compute(pod)["requests"]["memory"] == "2264Mi"
    over = launcher_pod(vm, ClusterConfig(kubevirt_version="0.54.0", memory_overcommit=150))
    # 2,796,203 + 188,743,680 (180Mi) + 8,388,608 + 8,388,608 + 16,777,216 = 225,094,315
    assert over.memory_overhead == 225094315
    # request = 1,431,655,765 + 225,094,315 = 1,656,750,080 = 1580 x 1,048,576 -> "1580Mi" (BinarySI from the guest)
    assert compute(over)["requests"]["memory"] == "1580Mi"


def test_inputs_are_not_mutated():
    vmi = harvester_vmi("8Gi", "1638Mi")
    before = copy.deepcopy(vmi)
    launcher_pod(vmi, ClusterConfig(kubevirt_version="1.6.0", overhead_ratio="1.5"), quota_tracks={"limits.cpu"})
    assert vmi == before


# ---------------------------------------------------------------- configuration and errors

def test_config_from_cluster_reads_the_kubevirt_cr_first():
    cr = {"spec": {"configuration": {
        "additionalGuestMemoryOverheadRatio": "2.0",
        "developerConfiguration": {"cpuAllocationRatio": 16, "featureGates": ["AutoResourceLimitsGate"]},
        "virtualMachineOptions": {"disableSerialConsoleLog": {}},
        "supportContainerResources": [{"type": "GuestConsoleLog", "resources": {"limits": {"cpu": "30m"}}}],
    }}, "status": {"observedKubeVirtVersion": "v1.3.1"}}
    harvester = [{"metadata": {"name": "additional-guest-memory-overhead-ratio"}, "value": "1.5", "default": "1.5"}]
    config = config_from_cluster(cr, harvester)
    assert config.kubevirt_version == "v1.3.1" and config.version == (1, 3, 1)
    assert config.overhead_ratio == "2.0"
    assert config.cpu_allocation_ratio == 16
    assert config.disable_serial_console_log
    assert config.auto_resource_limits_enabled and config.auto_resource_limits is None
    assert config.support_container_resources[0]["type"] == "GuestConsoleLog"


@pytest.mark.parametrize("value, default, expected", [
    ("1.5", "1.5", "1.5"), ("", "1.5", "1.5"), ("0", "1.5", None), ("", "", None), ("3", "1.5", "3")])
def test_config_from_harvester_setting(value, default, expected):
    settings = [{"metadata": {"name": "additional-guest-memory-overhead-ratio"}, "value": value, "default": default}]
    assert config_from_cluster({"spec": {"configuration": {}}}, settings, "1.3.1").overhead_ratio == expected


@pytest.mark.parametrize("text, expected", [("v1.6.3", (1, 6, 3)), ("1.6", (1, 6, 0)), ("v1.1.1-rc.0", (1, 1, 1))])
def test_parse_version(text, expected):
    assert parse_version(text) == expected


@pytest.mark.parametrize("text", ["", "1", "latest", "0.53.0", None])
def test_parse_version_rejects(text):
    with pytest.raises(InputError):
        parse_version(text)


@pytest.mark.parametrize("ratio", ["0.5", "abc", "1,5", "-1", "inf"])
def test_invalid_ratio_is_one_clear_error(ratio):
    with pytest.raises(InputError) as info:
        ClusterConfig(overhead_ratio=ratio)
    assert "Fix:" in str(info.value) and "\n" not in str(info.value)


def test_ratio_parsing():
    assert parse_overhead_ratio(None) is None
    assert parse_overhead_ratio("") is None
    assert parse_overhead_ratio("0") is None
    assert parse_overhead_ratio("1.5") == 1.5


@pytest.mark.parametrize("bad", [None, [], "vmi", {"kind": "VirtualMachineInstance"}, {"spec": {"domain": "x"}},
                                 {"kind": "VirtualMachine", "spec": {"instancetype": {"name": "u1.large"}, "template": {}}}])
def test_bad_objects_raise_input_error(bad):
    with pytest.raises(InputError):
        launcher_pod(bad, ClusterConfig())


def test_malformed_quantity_in_vmi_names_the_field():
    vmi = plain_vmi("2GB")
    with pytest.raises(InputError) as info:
        launcher_pod(vmi, ClusterConfig())
    assert "spec.domain.resources.requests.memory" in str(info.value)


def test_go_format_g():
    assert go_format_g(0.1) == "0.1"
    assert go_format_g(400.0) == "400"
    assert go_format_g(1e6) == "1e+06"
    assert go_format_g(123456.0) == "123456"
    assert go_format_g(0.00001) == "1e-05"


def test_v1_7_sets_the_memory_request_on_the_pod_only():
    # memory.guest 2Gi, no request. Up to v1.6 the webhook writes requests.memory = 2Gi into the VMI,
    # so page tables count: v1.6.0 O = 4 + 220 + 8 + 8 + 32 = 272Mi -> 2320Mi.
    # From v1.7 the renderer defaults it on the pod only; the VMI has no request, page tables are 0:
    # O = 0 + 220 + 8 + 8 + 32 = 268Mi -> 2048Mi + 268Mi = 2316Mi.
    vmi = plain_vmi("2Gi")
    vmi["spec"]["domain"]["resources"] = {}
    vmi["spec"]["domain"]["memory"] = {"guest": "2Gi"}
    assert compute(launcher_pod(vmi, ClusterConfig(kubevirt_version="1.6.0")))["requests"]["memory"] == "2320Mi"
    assert compute(launcher_pod(vmi, ClusterConfig(kubevirt_version="1.7.0")))["requests"]["memory"] == "2316Mi"


def test_newer_than_known_version_is_sized_and_noted():
    pod = launcher_pod(plain_vmi("1Gi"), ClusterConfig(kubevirt_version="1.99.0"))
    assert pod.notes and "newer" in pod.notes[0]


def test_an_init_container_step_keeps_its_own_format_before_the_sidecars_as_quantity_add_does():
    """PodRequests sums a plain init container's own requests first, then the sidecars started before it
    (component-helpers resource.PodRequests), and Quantity.Add keeps the first addend's format: a 1G init container
    after a 100Mi sidecar is charged in DecimalSI, the init container's format."""
    sidecar = ContainerResources("log", {"memory": Fraction(100 * 2 ** 20)}, {}, restartable=True,
                                 formats={"requests.memory": "BinarySI"})
    init = ContainerResources("setup", {"memory": Fraction(10 ** 9)}, {}, formats={"requests.memory": "DecimalSI"})
    app = ContainerResources("compute", {"memory": Fraction(2 ** 20)}, {}, formats={"requests.memory": "BinarySI"})
    charge, formats = pod_charge([app], [sidecar, init])
    assert charge["requests.memory"] == 10 ** 9 + 100 * 2 ** 20
    assert formats["requests.memory"] == "DecimalSI"
