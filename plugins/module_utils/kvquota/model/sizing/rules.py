# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""KubeVirt's version-dependent sizing rules (RULES, rule, audited_version), the versions, and the names of the
devices, gates, annotations and support container types the sizing reads.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import math
import re

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.quantities import go_parse_float


OLDEST_VERSION = (0, 54, 0)
NEWEST_KNOWN_VERSION = (1, 9, 99)

# The newest patch release of each minor whose code was audited. A patch release newer than
# these (say v1.6.7) is sized with the rules of the newest audited one of its minor, and says so.
NEWEST_AUDITED_PATCH = {
    (0, 54): 0, (0, 55): 2, (0, 56): 1, (0, 57): 1, (0, 58): 2, (0, 59): 2,
    (1, 0): 1, (1, 1): 1, (1, 2): 2, (1, 3): 1, (1, 4): 1, (1, 5): 3, (1, 6): 6,
    (1, 7): 4, (1, 8): 4, (1, 9): 0,
}

# Every version-dependent rule: name -> ((first release, last release, value), ...).
# Both bounds are release tags and inclusive; last None means "still in the newest release".
# A version outside every range gets None (the rule does not apply). docs/docsite/rst/sizing.rst has the
# same table with the KubeVirt file or commit that shows each bound (section 6).
RULES = {
    # memory overhead (GetMemoryOverhead): the fixed part in Mi
    "fixed_overhead_mi": (((0, 54, 0), (0, 54, 0), 180), ((0, 55, 0), (0, 56, 1), 205),
                          ((0, 57, 0), (0, 58, 0), 208), ((0, 58, 1), (1, 4, 0), 210),
                          ((1, 4, 1), (1, 4, 1), 215), ((1, 5, 0), None, 220)),
    "video_overhead_mi": (((0, 54, 0), (1, 5, 3), 16), ((1, 6, 0), None, 32)),
    "overhead_ratio": (((0, 58, 2), (0, 58, 2), True), ((0, 59, 1), None, True)),
    "arch_from_vmi_spec": (((1, 2, 0), None, True),),
    "passt_800mi": (((0, 59, 0), (1, 2, 2), True),),
    "dedicated_100mi_after_ratio": (((1, 1, 0), (1, 5, 2), True),),
    "dedicated_100mi_before_ratio": (((1, 5, 3), None, True),),
    # tpm.HasDevice (53Mi, and the persistent-TPM PVC) honours tpm.enabled: false; v1.5.0 lacks it
    "tpm_enabled_false_honoured": (((1, 4, 1), (1, 4, 1), True), ((1, 5, 1), None, True)),
    "snp_counted_as_sev": (((1, 7, 0), None, True),),  # IsSEVVMI: launchSecurity.sev, from v1.7.0 also .snp
    "added_overhead_field": (((1, 8, 0), None, True),),
    "network_binding_memory": (((1, 3, 0), None, True),),
    "core_passt_250mi": (((1, 8, 0), None, True),),
    # where the memory request comes from
    "webhook_writes_memory_request": (((0, 54, 0), (1, 6, 3), True),),
    "webhook_guest_request_ignores_overcommit": (((1, 6, 2), (1, 6, 2), True),),
    "overcommit_applied_to_every_request": (((1, 6, 2), (1, 6, 2), True),),
    # the compute container
    "renderer": (((0, 56, 0), None, True),),  # renderresources.go; template.go inline before
    "emulator_thread_in_calculated_limits": (((0, 56, 0), (0, 58, 1), True),),
    "emulator_thread_parity_annotation": (((1, 1, 1), None, True),),
    "parity_counts_supplemental_io_threads": (((1, 5, 0), None, True),),
    "io_threads_added_to_cpu_limit": (((1, 5, 0), (1, 5, 1), True),),
    "io_threads_counted_in_cpu": (((1, 5, 2), None, True),),
    "dedicated_cpus_in_vmi_resources": (((1, 5, 2), None, True),),
    "auto_cpu_limit_selector": (((1, 0, 0), None, True),),
    "auto_memory_limits": (((1, 0, 1), None, True),),
    "auto_cpu_limits": (((1, 1, 0), None, True),),
    "auto_limits_need_gate": (((1, 0, 1), (1, 4, 1), True),),
    "vsock_device": (((0, 59, 0), None, True),),
    "pr_helper_device": (((1, 0, 0), None, True),),
    "dra_claims_skip_device_plugin": (((1, 6, 0), None, True),),
    "hypervisor_device": (((1, 8, 0), None, True),),
    "tdx_device": (((1, 9, 0), None, True),),
    "iommufd_device": (((1, 9, 0), None, True),),
    # other containers and objects
    "support_container_overrides": (((1, 0, 0), None, True),),
    "guest_console_log": (((1, 1, 0), None, True),),
    "guest_console_log_native_sidecar": (((1, 6, 0), None, True),),
    "network_binding_sidecars": (((1, 1, 0), None, True),),
    "slirp_binding_sidecar": (((1, 1, 0), (1, 2, 2), True),),  # a slirp interface brings the slirp plugin's sidecar
    "container_disk_v1_resources": (((1, 0, 0), None, True),),
    "image_volume_gate": (((1, 6, 0), None, True),),  # ImageVolume gate: container disks are image volumes
    "beta_gates_on_by_default": (((1, 9, 0), None, True),),  # featuregate.IsEnabled: Beta on unless disabled
    "virtiofs_container": (((0, 58, 0), None, True),),  # before, virtiofsd ran inside compute
    "virtiofs_v1_resources": (((1, 0, 0), None, True),),  # 80M memory limit, supportContainerResources
    "virtiofs_dedicated_resources": (((1, 1, 0), None, True),),  # dedicated/Guaranteed raise the requests
    "virtiofs_skips_container_path": (((1, 8, 0), None, True),),
    "hotplug_requests_equal_limits_when_dedicated": (((0, 58, 1), (0, 58, 1), True), ((0, 59, 0), (0, 59, 0), True)),
    "hotplug_requests_equal_limits": (((0, 58, 2), (0, 58, 2), True), ((0, 59, 1), (0, 59, 2), True)),
    "hotplug_requests_100m_80m": (((1, 0, 0), (1, 1, 1), True),),
    "backend_storage_pvc": (((1, 4, 0), None, True),),
    "cbt_needs_backend_storage": (((1, 7, 0), None, True),),  # status.changedBlockTracking Initializing/Enabled
    "cr_annotation_copied_to_vmi": (((1, 1, 1), None, True),),
}


KVM_DEVICE = "devices.kubevirt.io/kvm"
TUN_DEVICE = "devices.kubevirt.io/tun"
VHOST_NET_DEVICE = "devices.kubevirt.io/vhost-net"
VHOST_VSOCK_DEVICE = "devices.kubevirt.io/vhost-vsock"
SEV_DEVICE = "devices.kubevirt.io/sev"
PR_DEVICE = "devices.kubevirt.io/pr-helper"
TDX_DEVICE = "devices.kubevirt.io/tdx"
IOMMUFD_DEVICE = "devices.kubevirt.io/iommufd"

# spec.configuration.hypervisors[].name (v1.8+, with the ConfigurableHypervisor feature gate) ->
# the device-plugin resource the compute container asks for. Memory overhead is the same for both.
HYPERVISOR_DEVICES = {"kvm": KVM_DEVICE, "hyperv-direct": "devices.kubevirt.io/mshv"}

# Beta feature gates (featuregate/active.go) that change a launcher pod's size. From v1.9.0 KubeVirt
# enables every Beta gate unless developerConfiguration.disabledFeatureGates lists it.
BETA_SIZING_GATES = frozenset(["ImageVolume"])
IMAGE_VOLUME_GATE = "ImageVolume"
SLIRP_BINDING = "slirp"
CBT_STATES_NEEDING_STORAGE = ("Initializing", "Enabled")

AUTO_MEMORY_LIMITS_RATIO_LABEL = "alpha.kubevirt.io/auto-memory-limits-ratio"
EMULATOR_THREAD_EVEN_PARITY_ANNOTATION = "alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity"
HOOK_SIDECARS_ANNOTATION = "hooks.kubevirt.io/hookSidecars"
HARVESTER_RATIO_SETTING = "additional-guest-memory-overhead-ratio"
DEFAULT_AUTO_MEMORY_LIMITS_RATIO = 2.0
DEFAULT_CPU_ALLOCATION_RATIO = 10

# supportContainerResources types (KubeVirt CR spec.configuration.supportContainerResources[].type)
GUEST_CONSOLE_LOG = "GuestConsoleLog"
CONTAINER_DISK = "ContainerDisk"
HOTPLUG_ATTACHMENT = "HotplugAttachment"
VIRTIOFS = "VirtioFS"
SIDECAR = "SideCar"


# ---------------------------------------------------------------- versions and options

def audited_version(version):
    """The audited release whose rules size version: itself, or the newest audited patch of its minor."""
    newest = NEWEST_AUDITED_PATCH.get(version[:2])
    if newest is None:
        if version[:2] > max(NEWEST_AUDITED_PATCH):
            minor = max(NEWEST_AUDITED_PATCH)
            return minor + (NEWEST_AUDITED_PATCH[minor],)
        return version
    return version if version[2] <= newest else version[:2] + (newest,)


def rule(name, version):
    """The value of a version-dependent rule at version (see RULES), or None where it does not apply."""
    version = audited_version(version)
    for first, last, value in RULES[name]:
        if first <= version and (last is None or version <= last):
            return value
    return None


def parse_version(text):
    """(major, minor, patch) of a KubeVirt version such as 'v1.6.3', '1.6' or 'v1.1.1-rc.0'."""
    match = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+][0-9A-Za-z.+-]*)?\s*$", str(text or ""))
    if not match:
        raise InputError("malformed KubeVirt version %r" % (text,), "give a version such as 1.6.3 or v1.1.1")
    version = (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))
    if version < OLDEST_VERSION:
        raise InputError("KubeVirt %s is older than the oldest supported version 0.54" % text,
                         "upgrade KubeVirt to 0.54 or newer before using kvquota")
    return version


def parse_overhead_ratio(text):
    """The additionalGuestMemoryOverheadRatio as a float, or None when unset/disabled ("", "0")."""
    if text is None:
        return None
    text = str(text).strip()
    if text in ("", "0"):
        return None
    ratio = go_parse_float(text)
    if ratio is None or math.isnan(ratio) or ratio < 1.0 or math.isinf(ratio):
        raise InputError("invalid overhead ratio %r" % (text,),
                         "use a decimal number of at least 1.0 such as 1.5, or \"0\"/empty to disable it")
    return ratio
