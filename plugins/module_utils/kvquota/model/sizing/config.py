# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster settings that change a launcher pod's size (ClusterConfig), read from the KubeVirt CR and
Harvester's settings (config_from_cluster).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from dataclasses import dataclass
from typing import Optional

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.rules import (
    BETA_SIZING_GATES,
    DEFAULT_CPU_ALLOCATION_RATIO,
    HARVESTER_RATIO_SETTING,
    HYPERVISOR_DEVICES,
    KVM_DEVICE,
    parse_overhead_ratio,
    parse_version,
    rule,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.vmi import get_path, truthy


# ---------------------------------------------------------------- value types

@dataclass(frozen=True)
class ClusterConfig:
    """The cluster settings that change a launcher pod's size (see config_from_cluster)."""

    kubevirt_version: str = "1.6.0"
    overhead_ratio: Optional[str] = None  # additionalGuestMemoryOverheadRatio / Harvester setting
    cpu_allocation_ratio: int = DEFAULT_CPU_ALLOCATION_RATIO
    arch: str = "amd64"
    disable_serial_console_log: bool = False
    support_container_resources: tuple = ()  # KubeVirt CR supportContainerResources entries
    # v1.0.1-v1.4.1: AutoResourceLimitsGate enabled. None: as feature_gates say (KubeVirt's
    # default is off); from v1.5.0 KubeVirt always adds the limits and this is not read.
    auto_resource_limits: Optional[bool] = None
    feature_gates: tuple = ()
    disabled_feature_gates: tuple = ()  # developerConfiguration.disabledFeatureGates (read from v1.9.0)
    # Further KubeVirt CR settings, all with KubeVirt's defaults:
    cpu_request: Optional[str] = None  # spec.configuration.cpuRequest (VMI mutator default)
    memory_overcommit: int = 100  # developerConfiguration.memoryOvercommit (VMI mutator)
    allow_emulation: bool = False  # developerConfiguration.useEmulation
    auto_cpu_limit_namespace_label_selector: Optional[dict] = None  # autoCPULimitNamespaceLabelSelector
    network_bindings: tuple = ()  # (name, plugin) pairs from spec.configuration.network.binding
    backend_storage_rwx: bool = False  # the persistent TPM/EFI PVC is RWX (reused, not recreated)
    vm_state_storage_class: Optional[str] = None  # spec.configuration.vmStateStorageClass
    pod_overhead: tuple = ()  # (name, quantity) pairs: RuntimeClass overhead.podFixed
    hypervisor: Optional[str] = None  # v1.8+: "kvm" (default) or "hyperv-direct"
    kubevirt_annotations: tuple = ()  # (name, value) pairs: KubeVirt CR metadata.annotations

    def __post_init__(self):
        for name in ("support_container_resources", "feature_gates", "network_bindings", "pod_overhead",
                     "kubevirt_annotations", "disabled_feature_gates"):
            value = getattr(self, name)
            if isinstance(value, dict):
                value = tuple(sorted(value.items()))
            elif isinstance(value, list):
                value = tuple(value)
            elif value is None:
                value = ()
            object.__setattr__(self, name, value)
        parse_version(self.kubevirt_version)
        parse_overhead_ratio(self.overhead_ratio)
        try:
            ratio = int(self.cpu_allocation_ratio)
        except (TypeError, ValueError):
            raise InputError("cpu_allocation_ratio must be a whole number, got %r" % (self.cpu_allocation_ratio,),
                             "use KubeVirt's developerConfiguration.cpuAllocationRatio, default 10")
        object.__setattr__(self, "cpu_allocation_ratio", ratio if ratio > 0 else DEFAULT_CPU_ALLOCATION_RATIO)
        if self.auto_resource_limits is not None and not isinstance(self.auto_resource_limits, bool):
            raise InputError("auto_resource_limits must be true, false or unset, got %r" % (self.auto_resource_limits,),
                             "leave it unset to follow the KubeVirt CR's feature gates")
        if self.hypervisor is not None and self.hypervisor not in HYPERVISOR_DEVICES:
            raise InputError("unknown hypervisor %r" % (self.hypervisor,),
                             "use one of %s, or leave it unset for kvm" % ", ".join(sorted(HYPERVISOR_DEVICES)))

    @property
    def auto_resource_limits_enabled(self):
        """The AutoResourceLimitsGate as the caller says, else as the feature gates say."""
        return bool(self.auto_resource_limits) or "AutoResourceLimitsGate" in self.feature_gates

    def gate_enabled(self, gate):
        """isFeatureGateEnabled: listed in featureGates, or (v1.9.0+) a Beta gate not listed as disabled."""
        if gate in self.feature_gates:
            return True
        return bool(rule("beta_gates_on_by_default", self.version)) and gate in BETA_SIZING_GATES \
            and gate not in self.disabled_feature_gates

    @property
    def hypervisor_device(self):
        """The device-plugin resource of the hypervisor (devices.kubevirt.io/kvm unless v1.8+ says otherwise)."""
        if self.hypervisor and rule("hypervisor_device", self.version):
            return HYPERVISOR_DEVICES[self.hypervisor]
        return KVM_DEVICE

    @property
    def version(self):
        """The KubeVirt version as a (major, minor, patch) tuple."""
        return parse_version(self.kubevirt_version)


def harvester_setting_value(setting):
    """The effective value of a settings.harvesterhci.io object: value, else default."""
    if not isinstance(setting, dict):
        return setting
    value = setting.get("value")
    if value in (None, ""):
        value = setting.get("default")
    return value


def _harvester_ratio(harvester_settings):
    """The additional-guest-memory-overhead-ratio from Harvester settings (list, dict by name, or the object)."""
    if not harvester_settings:
        return None
    setting = None
    if isinstance(harvester_settings, dict) and get_path(harvester_settings, "metadata", "name") == HARVESTER_RATIO_SETTING:
        setting = harvester_settings
    elif isinstance(harvester_settings, dict):
        setting = harvester_settings.get(HARVESTER_RATIO_SETTING)
        if setting is None and isinstance(harvester_settings.get("items"), list):
            harvester_settings = harvester_settings["items"]
    if setting is None and isinstance(harvester_settings, list):
        for item in harvester_settings:
            if get_path(item, "metadata", "name") == HARVESTER_RATIO_SETTING:
                setting = item
    value = harvester_setting_value(setting)
    if value is None:
        return None
    value = str(value).strip()
    return None if value in ("", "0") else value


def config_from_cluster(kubevirt_cr, harvester_settings=None, kubevirt_version=None, arch=None):
    """A ClusterConfig from the KubeVirt CR (authoritative) and, failing that, Harvester's settings."""
    cr = kubevirt_cr or {}
    configuration = get_path(cr, "spec", "configuration") or {}
    developer = configuration.get("developerConfiguration") or {}
    version = (kubevirt_version or get_path(cr, "status", "observedKubeVirtVersion")
               or get_path(cr, "status", "targetKubeVirtVersion") or ClusterConfig.kubevirt_version)
    if "additionalGuestMemoryOverheadRatio" in configuration:
        ratio = configuration.get("additionalGuestMemoryOverheadRatio")
        ratio = None if ratio in (None, "", "0") else str(ratio)
    else:
        ratio = _harvester_ratio(harvester_settings)
    bindings = get_path(configuration, "network", "binding") or {}
    gates = tuple(developer.get("featureGates") or ())
    vm_options = configuration.get("virtualMachineOptions") or {}
    default_arch = get_path(configuration, "architectureConfiguration", "defaultArchitecture")
    hypervisors = configuration.get("hypervisors") or []
    hypervisor = None  # GetHypervisorFromKvConfig: the first entry, only with the feature gate
    if "ConfigurableHypervisor" in gates and hypervisors and isinstance(hypervisors[0], dict):
        hypervisor = hypervisors[0].get("name") or None
    annotations = get_path(cr, "metadata", "annotations") or {}
    return ClusterConfig(
        kubevirt_version=str(version),
        overhead_ratio=ratio,
        cpu_allocation_ratio=int(developer.get("cpuAllocationRatio") or DEFAULT_CPU_ALLOCATION_RATIO),
        arch=arch or default_arch or "amd64",
        disable_serial_console_log=vm_options.get("disableSerialConsoleLog") is not None,
        support_container_resources=tuple(configuration.get("supportContainerResources") or ()),
        feature_gates=gates,
        disabled_feature_gates=tuple(developer.get("disabledFeatureGates") or ()),
        cpu_request=configuration.get("cpuRequest"),
        memory_overcommit=int(developer.get("memoryOvercommit") or 100),
        allow_emulation=truthy(developer.get("useEmulation")),
        auto_cpu_limit_namespace_label_selector=configuration.get("autoCPULimitNamespaceLabelSelector"),
        network_bindings=tuple(sorted(bindings.items())) if isinstance(bindings, dict) else (),
        vm_state_storage_class=configuration.get("vmStateStorageClass"),
        hypervisor=hypervisor,
        kubevirt_annotations=tuple(sorted(annotations.items())) if isinstance(annotations, dict) else (),
    )
