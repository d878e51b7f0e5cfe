# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Size a virt-launcher pod (and so a live-migration target pod) the way KubeVirt does.

The rules follow KubeVirt's pkg/virt-controller/services (template.go up to v0.55,
renderresources.go from v0.56, pkg/hypervisor from v1.8) at every release tag to v1.9.0, and
Kubernetes' own pod accounting for ResourceQuota (component-helpers PodRequests/PodLimits
and the quota pod evaluator). docs/sizing.md lists every version-dependent rule and what
was checked.

Quantities are exact Fractions; their Kubernetes formats are tracked alongside so the
strings printed are the ones the apiserver would show on the pod.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import decimal
import json
import math
import re
from collections import namedtuple
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Optional

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import requirement_matches
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import (
    BINARY_SI,
    DECIMAL_EXPONENT,
    DECIMAL_SI,
    format_quantity,
    parse_quantity_format,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.quotas import pod_resources, usage_from_requests_limits
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import default_format

Mi = 1024 ** 2

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
# A version outside every range gets None (the rule does not apply). docs/sizing.md has the
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

_DECIMAL_FLOAT = re.compile(r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$")
# strconv.ParseFloat's other spellings: hexadecimal mantissa with a binary exponent (which Go requires), and the
# special values (any case, optional sign)
_HEX_FLOAT = re.compile(r"^[+-]?0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+$")
_SPECIAL_FLOAT = re.compile(r"^[+-]?(inf|infinity|nan)$", re.IGNORECASE)
_INT64_LIMIT = 2 ** 63


class VmInputError(InputError):
    """An error in input the VM's owner (a tenant) writes: the VM's or VMI's spec, annotations and labels, or, for
    scope "namespace", its namespace's labels (under Rancher a project member may edit them). It concerns that VM
    (or that namespace's VMs) only: callers sizing many VMs block that one VM, named with its namespace and the
    field, and go on with the others. field: where the bad value is (e.g. metadata.annotations[...])."""

    def __init__(self, message, fix=None, field=None, scope="vm", details=None):
        super(VmInputError, self).__init__(message, fix, details)
        self.field = field
        self.scope = scope


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


@dataclass(frozen=True)
class ContainerResources:
    """One container's requests and limits (ResourceLists of Fractions) as they appear on the pod."""

    name: str
    requests: dict
    limits: dict
    restartable: bool = False  # a native sidecar (init container with restartPolicy Always)
    formats: dict = field(default_factory=dict, compare=False)  # "requests.<name>"/"limits.<name>" -> format

    def _formats(self, which):
        """name -> format for requests or limits."""
        prefix = which + "."
        return dict((k[len(prefix):], f) for k, f in self.formats.items() if k.startswith(prefix))

    def formatted(self):
        """{"name", "requests", "limits"} with apiserver-canonical quantity strings."""
        return {
            "name": self.name,
            "requests": _format_list(self.requests, self._formats("requests")),
            "limits": _format_list(self.limits, self._formats("limits")),
        }


@dataclass(frozen=True)
class LauncherPod:
    """A launcher pod (or a pod created with it) and what ResourceQuota charges for it."""

    containers: tuple  # ContainerResources, in pod order (compute first)
    init_containers: tuple
    charge: dict  # quota names -> Fraction: requests.cpu, limits.memory, pods, count/pods, ...
    extra_pods: tuple = ()  # LauncherPods created with the target (the hp-volume attachment pod), per container
    extra_charge: dict = field(default_factory=dict)  # extra pods plus PVCs (requests.storage, ...)
    pvc_charge: dict = field(default_factory=dict)  # the PVCs alone (backend storage), also in extra_charge
    formats: dict = field(default_factory=dict, compare=False)  # quota name -> quantity format
    extra_formats: dict = field(default_factory=dict, compare=False)  # the same for extra_charge
    memory_overhead: Fraction = Fraction(0)  # KubeVirt's overhead O for the compute container
    notes: tuple = ()  # what the numbers rest on that the caller may want to know
    name: str = "virt-launcher"

    def formatted_charge(self, which="charge"):
        """The charge (or extra_charge, pvc_charge) as quota names -> canonical quantity strings."""
        formats = self.extra_formats if which in ("extra_charge", "pvc_charge") else self.formats
        return _format_list(getattr(self, which), formats)

    def formatted_total(self):
        """total_charge() as canonical strings (the launcher pod's formats first)."""
        return _format_list(self.total_charge(), dict(self.extra_formats, **self.formats))

    def total_charge(self):
        """Everything a migration adds to the namespace: this pod plus extra pods and PVCs."""
        return _add_lists(self.charge, self.extra_charge)


# ---------------------------------------------------------------- Kubernetes quantity arithmetic

_Q = namedtuple("_Q", "value fmt")


def _q(text, name=None):
    """A _Q from a quantity string (or number)."""
    value, fmt = parse_quantity_format(text, name)
    return _Q(value, fmt)


def _qadd(a, b):
    """Quantity.Add: keeps a's format unless a is zero."""
    if a is None:
        return b
    if b is None:
        return a
    return _Q(a.value + b.value, b.fmt if a.value == 0 else a.fmt)


def _qsub(a, b):
    """Quantity.Sub: keeps a's format unless a is zero."""
    return _Q(a.value - b.value, b.fmt if a.value == 0 else a.fmt)


def _ceil(value):
    """Quantity.Value()/ScaledValue(): rounds up to a whole number."""
    return int(math.ceil(value)) if value >= 0 else -int(math.ceil(-value))


def _add_lists(a, b):
    """Sum of two plain ResourceLists."""
    result = dict(a)
    for name, value in b.items():
        result[name] = result.get(name, 0) + value
    return result


def _format_list(rl, formats):
    """Canonical strings for a ResourceList, in name order."""
    return dict((name, format_quantity(rl[name], formats.get(name) or default_format(name))) for name in sorted(rl))


def go_parse_float(text):
    """strconv.ParseFloat for decimal spellings; None when Go would reject it (or it is Inf/NaN)."""
    if text is None:
        return None
    text = str(text)
    if not _DECIMAL_FLOAT.match(text):
        return None
    return float(text)


def go_format_g(value):
    """fmt.Sprintf("%g", value) for a finite float64: shortest digits; %e when the exponent is below -4 or at least 6."""
    if value == 0:
        return "0"
    digits, exponent = _shortest_digits(value)
    sign = "-" if value < 0 else ""
    if exponent < -4 or exponent >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return "%s%se%s%02d" % (sign, mantissa, "-" if exponent < 0 else "+", abs(exponent))
    point = exponent + 1
    if point <= 0:
        return sign + "0." + "0" * (-point) + digits
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return sign + digits[:point] + "." + digits[point:]


def _shortest_digits(value):
    """(significant digits, decimal exponent of the first digit) of the shortest round-trip spelling."""
    sign, digits, exponent = decimal.Decimal(repr(abs(float(value)))).normalize().as_tuple()
    text = "".join(str(d) for d in digits)
    return text, len(text) + exponent - 1


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


def _get(obj, *path):
    """obj[path0][path1]... or None."""
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _truthy(value):
    """A YAML-ish boolean."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1", "on")
    return bool(value)


def _support_quantity(config, container_type, kind, resource):
    """supportContainerResources override for (type, requests|limits, cpu|memory); zero values are ignored."""
    for entry in config.support_container_resources:
        if not isinstance(entry, dict) or entry.get("type") != container_type:
            continue
        value = _get(entry, "resources", kind, resource)
        if value is None:
            continue
        q = _q(value, "supportContainerResources[%s].resources.%s.%s" % (container_type, kind, resource))
        if q.value != 0:
            return q
    return None


def _support(config, container_type, kind, resource, default):
    """The support-container quantity: the override if one is set (v1.0+), else the default."""
    if rule("support_container_overrides", config.version):
        override = _support_quantity(config, container_type, kind, resource)
        if override is not None:
            return override
    return _q(default)


def _selector_matches(selector, labels):
    """metav1.LabelSelector semantics (matchLabels and matchExpressions)."""
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != str(value):
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), [str(v) for v in expr.get("values") or []]
        matches = requirement_matches(op, values, labels.get(key))
        if matches is None:
            raise InputError("unknown label selector operator %r" % (op,), "use In, NotIn, Exists or DoesNotExist")
        if not matches:
            return False
    return True


# ---------------------------------------------------------------- reading the VMI

def _is_vm(obj):
    """obj is a VirtualMachine (sized through its spec.template), not a VMI."""
    spec = obj.get("spec") if isinstance(obj, dict) else None
    return isinstance(spec, dict) and (obj.get("kind") == "VirtualMachine" or ("template" in spec and "domain" not in spec))


def _vmi_parts(obj):
    """(metadata, spec) of a VMI, or of a VM's spec.template (namespace from the VM)."""
    if not isinstance(obj, dict):
        raise InputError("expected a VirtualMachineInstance or VirtualMachine manifest, got %s" % type(obj).__name__,
                         "pass the object as a mapping (e.g. from kubernetes.core.k8s_info)")
    kind = obj.get("kind")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise VmInputError("%s has no spec" % (kind or "object"), "pass a VirtualMachineInstance or VirtualMachine manifest",
                           field="spec")
    metadata = obj.get("metadata") or {}
    if _is_vm(obj):
        if spec.get("instancetype") or spec.get("preference"):
            raise VmInputError("VirtualMachine %s uses an instancetype or preference that kvquota cannot expand"
                               % metadata.get("name", "?"),
                               "size its running VirtualMachineInstance instead", field="spec.instancetype")
        template = spec.get("template") or {}
        tmeta = dict(template.get("metadata") or {})
        tmeta.setdefault("namespace", metadata.get("namespace"))
        tmeta.setdefault("name", metadata.get("name"))
        spec = template.get("spec")
        metadata = tmeta
        if not isinstance(spec, dict):
            raise VmInputError("VirtualMachine %s has no spec.template.spec" % metadata.get("name", "?"),
                               "pass a complete VirtualMachine or its VirtualMachineInstance", field="spec.template.spec")
    if not isinstance(spec.get("domain"), dict):
        raise VmInputError("%s %s has no spec.domain" % (kind or "VMI", metadata.get("name", "?")),
                           "pass a VirtualMachineInstance or VirtualMachine manifest", field="spec.domain")
    return metadata, spec


def _vmi_q(value, where):
    """_q of a value the VM's owner wrote (VmInputError naming the field when it is not a quantity)."""
    try:
        return _q(value, where)
    except VmInputError:
        raise
    except InputError as err:
        raise VmInputError(err.message, err.fix or "correct %s of the VM" % where, field=where)


def _resource_list(mapping, where):
    """name -> _Q for a VMI resource mapping."""
    if mapping is not None and not isinstance(mapping, dict):
        raise VmInputError("%s is not a mapping of resource names to quantities" % where,
                           "correct %s of the VM" % where, field=where)
    result = {}
    for name, value in (mapping or {}).items():
        result[str(name)] = _vmi_q(value, "%s.%s" % (where, name))
    return result


class _Vmi(object):
    """The facts about a VMI that sizing needs, after KubeVirt's mutating-webhook defaults."""

    def __init__(self, obj, config):
        metadata, spec = _vmi_parts(obj)
        self.metadata = metadata
        self.spec = spec
        self.status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
        self.annotations = dict(metadata.get("annotations") or {})
        domain = spec["domain"]
        self.domain = domain
        self.devices = domain.get("devices") or {}
        resources = domain.get("resources") or {}
        self.requests = _resource_list(resources.get("requests"), "spec.domain.resources.requests")
        self.limits = _resource_list(resources.get("limits"), "spec.domain.resources.limits")
        self.overcommit_guest_overhead = _truthy(resources.get("overcommitGuestOverhead"))
        self.memory = domain.get("memory") or {}
        self.guest = _vmi_q(self.memory["guest"], "spec.domain.memory.guest") if self.memory.get("guest") is not None else None
        self.cpu = dict(domain.get("cpu")) if isinstance(domain.get("cpu"), dict) else None
        self._apply_defaults(config)
        if _is_vm(obj):
            self._copy_cr_annotations(config)

    def _copy_cr_annotations(self, config):
        """The VMI mutator (v1.1.1+) copies the even-parity annotation of the KubeVirt CR onto a new VMI.

        Only for a VM: its next VMI is created now; a running VMI already carries what was copied
        when it was created, and a later change of the CR does not reach it.
        """
        cr_annotations = dict(config.kubevirt_annotations)
        if (rule("cr_annotation_copied_to_vmi", config.version) and self.cpu and self.cpu.get("isolateEmulatorThread")
                and EMULATOR_THREAD_EVEN_PARITY_ANNOTATION in cr_annotations and "AlignCPUs" in config.feature_gates):
            self.annotations[EMULATOR_THREAD_EVEN_PARITY_ANNOTATION] = ""

    def _apply_defaults(self, config):
        """setDefaultResourceRequests and SetDefaultGuestCPUTopology (idempotent on mutated VMIs).

        Up to v1.6.3 the mutating webhook writes the memory request into the VMI spec, so the
        overhead's page tables and the Guaranteed-QoS test see it; from v1.6.4 the renderer sets
        it on the pod only (WithMemoryRequests), and the VMI spec keeps what the user wrote.
        v1.6.2 alone wrote memory.guest unscaled and applied memoryOvercommit to whatever
        memory request the pod got, an explicit one too (reverted in v1.6.3).
        self.requests is what the renderer starts from; self.spec_requests is the VMI spec.
        """
        version = config.version
        cpu_limit, cpu_req = self.limits.get("cpu"), self.requests.get("cpu")
        if cpu_limit is not None and cpu_limit.value != 0 and (cpu_req is None or cpu_req.value == 0):
            self.requests["cpu"] = cpu_limit
        if rule("webhook_writes_memory_request", version):
            self._default_memory_request(config, scale=not rule("webhook_guest_request_ignores_overcommit", version))
            self.spec_requests = dict(self.requests)
        else:
            self.spec_requests = dict(self.requests)
            self._default_memory_request(config)
        overcommit = int(config.memory_overcommit or 100)
        if rule("overcommit_applied_to_every_request", version) and overcommit != 100 and "memory" in self.requests:
            memory = self.requests["memory"]
            self.requests["memory"] = _Q(Fraction(_ceil(memory.value) * 100 // overcommit), memory.fmt)
        self._default_cpu(config)

    def _default_memory_request(self, config, scale=True):
        """Memory request from the limit, else from memory.guest (or the hugepage size), scaled by memoryOvercommit."""
        mem_limit, mem_req = self.limits.get("memory"), self.requests.get("memory")
        if mem_limit is not None and mem_limit.value != 0 and (mem_req is None or mem_req.value == 0):
            self.requests["memory"] = mem_limit
        if "memory" not in self.requests:
            memory = self.guest
            if memory is None and isinstance(self.memory.get("hugepages"), dict):
                try:
                    memory = _q(self.memory["hugepages"].get("pageSize"))
                except InputError:
                    memory = None
            if memory is not None and _ceil(memory.value) > 0:
                overcommit = int(config.memory_overcommit or 100) if scale else 100
                if overcommit == 100:
                    self.requests["memory"] = memory
                else:
                    self.requests["memory"] = _Q(Fraction(_ceil(memory.value) * 100 // overcommit), memory.fmt)

    def _default_cpu(self, config):
        """The cluster's cpuRequest default and the guest CPU topology (sockets from limits/requests.cpu)."""
        if config.cpu_request and "cpu" not in self.requests and not self.dedicated:
            default = _q(config.cpu_request, "cpu_request")
            if default.value != Fraction(1, 10):
                self.requests["cpu"] = default
        if self.cpu is None or not any(self.cpu.get(k) for k in ("cores", "sockets", "threads")):
            self.cpu = dict(self.cpu or {})
            sockets = 1
            if "cpu" in self.limits:
                sockets = _ceil(self.limits["cpu"].value)
            elif "cpu" in self.requests:
                sockets = _ceil(self.requests["cpu"].value)
            self.cpu.update(sockets=sockets, cores=1, threads=1)

    # predicates, named after KubeVirt's
    @property
    def dedicated(self):
        return bool(self.cpu and self.cpu.get("dedicatedCpuPlacement"))

    @property
    def guaranteed(self):
        """WantsToHaveQOSGuaranteed: memory and cpu requests non-zero and equal to the limits."""
        def same(name):
            req, lim = self.spec_requests.get(name), self.limits.get(name)
            return req is not None and req.value != 0 and req.value == (lim.value if lim is not None else 0)
        return same("memory") and same("cpu")

    @property
    def vcpus(self):
        """GetNumberOfVCPUs: product of the non-zero topology fields."""
        result = 0
        for key in ("cores", "sockets", "threads"):
            n = int(self.cpu.get(key) or 0) if self.cpu else 0
            if n:
                result = n if result == 0 else result * n
        return result

    @property
    def interfaces(self):
        return self.devices.get("interfaces") or []

    @property
    def volumes(self):
        return self.spec.get("volumes") or []

    def has_hugepages(self):
        return isinstance(self.memory.get("hugepages"), dict)

    def gpus(self):
        return self.devices.get("gpus") or []

    def host_devices(self):
        return self.devices.get("hostDevices") or []

    def is_sriov(self):
        return any(isinstance(i, dict) and i.get("sriov") is not None for i in self.interfaces)

    def is_vfio(self):
        return bool(self.gpus() or self.host_devices() or self.is_sriov())

    def is_sev(self, version):
        """util.IsSEVVMI (SEV-ES is launchSecurity.sev with policy.encryptedState, so always counted)."""
        security = self.domain.get("launchSecurity") or {}
        if not isinstance(security, dict):
            return False
        if rule("snp_counted_as_sev", version) and security.get("snp") is not None:
            return True
        return security.get("sev") is not None

    def has_tpm(self, version):
        tpm = self.devices.get("tpm")
        if tpm is None:
            return False
        if rule("tpm_enabled_false_honoured", version) and isinstance(tpm, dict) and tpm.get("enabled") is False:
            return False
        return True

    def needs_backend_storage(self, version):
        """IsBackendStorageNeeded: a persistent TPM or EFI, from v1.7.0 also changed block tracking in the status."""
        tpm = self.devices.get("tpm")
        persistent_tpm = isinstance(tpm, dict) and self.has_tpm(version) and _truthy(tpm.get("persistent"))
        efi = _get(self.domain, "firmware", "bootloader", "efi")
        persistent_efi = isinstance(efi, dict) and _truthy(efi.get("persistent"))
        cbt = rule("cbt_needs_backend_storage", version) and \
            _get(self.status, "changedBlockTracking", "state") in CBT_STATES_NEEDING_STORAGE
        return bool(persistent_tpm or persistent_efi or cbt)

    def autoattach(self, key):
        """devices.<key> is unset or true."""
        value = self.devices.get(key)
        return value is None or _truthy(value)

    def needs_tun(self):
        return bool(self.interfaces) or self.autoattach("autoattachPodInterface")

    def wants_virtio_net(self):
        return any(isinstance(i, dict) and i.get("model", "") in ("", "virtio") for i in self.interfaces)

    def exec_probes(self):
        return sum(1 for key in ("livenessProbe", "readinessProbe")
                   if isinstance(self.spec.get(key), dict) and self.spec[key].get("exec") is not None)

    def has_downward_metrics_volume(self):
        return any(isinstance(v, dict) and v.get("downwardMetrics") is not None for v in self.volumes)

    def has_persistent_reservation(self):
        for disk in self.devices.get("disks") or []:
            if isinstance(disk, dict) and _truthy(_get(disk, "lun", "reservation")):
                return True
        return False

    def container_disk_volumes(self):
        return [v for v in self.volumes if isinstance(v, dict) and v.get("containerDisk") is not None
                and v.get("name") != "kernel-boot-volume"]

    def has_kernel_boot_container(self):
        return bool(_get(self.domain, "firmware", "kernelBoot", "container", "image"))

    def virtiofs_volumes(self, version):
        """Volumes shared through virtiofs that get their own virtiofsd container (containerPath ones not, v1.8+)."""
        if not rule("virtiofs_container", version):
            return []
        names = set(fs.get("name") for fs in self.devices.get("filesystems") or [] if isinstance(fs, dict))
        skip_container_path = rule("virtiofs_skips_container_path", version)
        return [v for v in self.volumes if isinstance(v, dict) and v.get("name") in names
                and not (skip_container_path and v.get("containerPath") is not None)]

    def has_slirp_interface(self):
        return any(isinstance(i, dict) and i.get("slirp") is not None for i in self.interfaces)

    def hotplug_volumes(self):
        result = []
        for volume in self.volumes:
            if not isinstance(volume, dict):
                continue
            pvc = volume.get("persistentVolumeClaim") or {}
            dv = volume.get("dataVolume") or {}
            if _truthy(pvc.get("hotpluggable")) or _truthy(dv.get("hotpluggable")) or volume.get("memoryDump"):
                result.append(volume.get("name"))
        return result

    def supplemental_iothreads(self):
        return int(_get(self.domain, "ioThreads", "supplementalPoolThreadCount") or 0)

    def io_threads_policy_supplemental(self):
        return self.domain.get("ioThreadsPolicy") == "supplementalPool"

    def hook_sidecars(self):
        text = self.annotations.get(HOOK_SIDECARS_ANNOTATION)
        if not text:
            return 0
        field = "metadata.annotations[%s]" % HOOK_SIDECARS_ANNOTATION
        try:
            sidecars = json.loads(text)
        except (ValueError, RecursionError):
            # RecursionError: valid JSON nested deeper than Python's decoder goes ("[" * 5000 + "]" * 5000)
            raise VmInputError("annotation %s is not valid JSON (or nested too deeply to read)" % HOOK_SIDECARS_ANNOTATION,
                               "fix the VM's hook sidecar annotation (KubeVirt cannot start its target pod either)",
                               field=field)
        # KubeVirt reads it as a list of sidecar objects ([{"image": ...}, ...]); anything else starts no pod
        if not isinstance(sidecars, list) or not all(isinstance(item, dict) for item in sidecars):
            raise VmInputError("annotation %s is not a JSON list of hook sidecar objects (got %s)"
                               % (HOOK_SIDECARS_ANNOTATION, _json_shape(sidecars)),
                               "fix the VM's hook sidecar annotation to a list such as [{\"image\": \"...\"}] "
                               "(KubeVirt cannot start its target pod either)", field=field)
        return len(sidecars)


def _json_shape(value):
    """What a decoded JSON value is, for a message (never the value: it is tenant input of any size)."""
    if isinstance(value, list):
        kinds = sorted(set(_json_shape(item) for item in value if not isinstance(item, (list, dict))) |
                       set("a list" if isinstance(item, list) else "an object" for item in value
                           if isinstance(item, (list, dict))))
        return "a list of %s" % " and ".join(kinds) if kinds else "an empty list"
    return {dict: "an object", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


# ---------------------------------------------------------------- KubeVirt's memory overhead

def _fixed_overhead_mi(version):
    """virt-launcher-monitor + virt-launcher + virtlogd + libvirtd/virtqemud + qemu, in Mi."""
    return rule("fixed_overhead_mi", version)


def _ratio_supported(version):
    """additionalGuestMemoryOverheadRatio exists in v0.58.2, v0.59.1+ and v1.0.0+."""
    return bool(rule("overhead_ratio", version))


def _multiply_memory(overhead, ratio):
    """multiplyMemory: + int64(float64(ceil(O/1000)) x (ratio - 1)) x 1000, in float64 like Go."""
    kilo = _ceil(overhead.value / 1000)
    addition = int(float(kilo) * (ratio - 1.0))
    return _qadd(overhead, _Q(Fraction(addition * 1000), DECIMAL_SI))


def memory_overhead(vmi, config, _parsed=None):
    """KubeVirt's memory overhead O (a Fraction) added to the compute container for this VMI."""
    return _memory_overhead(_parsed or _Vmi(vmi, config), config).value


def _memory_overhead(v, config):
    """GetMemoryOverhead (+ network binding overhead from v1.4) as a _Q."""
    version = config.version
    overhead = _Q(Fraction(0), DECIMAL_SI)
    request = v.spec_requests.get("memory")
    kilo = _ceil(request.value / 1000) if request is not None else 0
    overhead = _qadd(overhead, _Q(Fraction(kilo * 1000 // 512), DECIMAL_SI))
    overhead = _qadd(overhead, _Q(Fraction(_fixed_overhead_mi(version) * Mi), BINARY_SI))
    vcpus = v.vcpus  # the mutator always sets a topology (from limits.cpu, else requests.cpu, else 1)
    overhead = _qadd(overhead, _Q(Fraction(8 * Mi * max(vcpus, 1)), BINARY_SI))
    overhead = _qadd(overhead, _Q(Fraction(8 * Mi), BINARY_SI))  # IOThread
    if v.autoattach("autoattachGraphicsDevice"):
        overhead = _qadd(overhead, _Q(Fraction(rule("video_overhead_mi", version) * Mi), BINARY_SI))
    arch = config.arch
    if rule("arch_from_vmi_spec", version) and v.spec.get("architecture"):
        arch = v.spec["architecture"]
    if arch == "arm64":
        overhead = _qadd(overhead, _Q(Fraction(128 * Mi), BINARY_SI))
    if v.is_vfio():
        overhead = _qadd(overhead, _Q(Fraction(1024 * Mi), BINARY_SI))
    if v.has_downward_metrics_volume():
        overhead = _qadd(overhead, _Q(Fraction(Mi), BINARY_SI))
    probes = v.exec_probes()
    if probes:
        overhead = _qadd(overhead, _Q(Fraction(10 * Mi * probes + 100 * Mi), BINARY_SI))
    if v.is_sev(version):
        overhead = _qadd(overhead, _Q(Fraction(256 * Mi), BINARY_SI))
    if v.has_tpm(version):
        overhead = _qadd(overhead, _Q(Fraction(53 * Mi), BINARY_SI))
    if rule("passt_800mi", version):
        for iface in v.interfaces:
            if isinstance(iface, dict) and iface.get("passt") is not None and not iface.get("ports"):
                overhead = _qadd(overhead, _Q(Fraction(800 * Mi), BINARY_SI))
    dedicated_extra = v.dedicated or v.guaranteed
    if dedicated_extra and rule("dedicated_100mi_before_ratio", version):
        overhead = _qadd(overhead, _Q(Fraction(100 * Mi), BINARY_SI))
    added = _get(v.memory, "reservedOverhead", "addedOverhead")
    if rule("added_overhead_field", version) and added is not None:
        overhead = _qadd(overhead, _vmi_q(added, "spec.domain.memory.reservedOverhead.addedOverhead"))
    ratio = parse_overhead_ratio(config.overhead_ratio) if _ratio_supported(version) else None
    if ratio is not None:
        overhead = _multiply_memory(overhead, ratio)
    if dedicated_extra and rule("dedicated_100mi_after_ratio", version):
        overhead = _qadd(overhead, _Q(Fraction(100 * Mi), BINARY_SI))
    if rule("network_binding_memory", version):
        overhead = _qadd(overhead, _network_binding_memory(v, config))
    return overhead


def _network_binding_memory(v, config):
    """computeResourceOverhead memory of each network binding plugin used (once per plugin); core passt 250Mi (v1.8+)."""
    total = _Q(Fraction(0), DECIMAL_SI)
    if rule("core_passt_250mi", config.version) and any(
            isinstance(i, dict) and i.get("passtBinding") is not None for i in v.interfaces):
        total = _qadd(total, _Q(Fraction(250 * Mi), BINARY_SI))
    plugins = dict(config.network_bindings)
    seen = set()
    for iface in v.interfaces:
        name = _get(iface, "binding", "name") if isinstance(iface, dict) else None
        if not name or name in seen or name not in plugins:
            continue
        seen.add(name)
        memory = _get(plugins[name], "computeResourceOverhead", "requests", "memory")
        if memory is not None:
            total = _qadd(total, _q(memory, "network.binding.%s.computeResourceOverhead" % name))
    return total


# ---------------------------------------------------------------- the compute container

def _cpu_request_quantity(total_cpus, ratio):
    """WithoutDedicatedCPU: MustParse(fmt.Sprintf("%g", vcpus/ratio)), in milli when below 1."""
    val = float(total_cpus) / float(ratio)
    text = go_format_g(val)
    if val < 1:
        val *= 1000
        text = go_format_g(val) + "m"
    try:
        return _q(text)
    except InputError:
        raise VmInputError("cpuAllocationRatio %d is too large for %d vCPUs (KubeVirt cannot render %s)"
                           % (ratio, total_cpus, text), "use a cpuAllocationRatio below 10000", field="spec.domain.cpu")


class _Renderer(object):
    """KubeVirt's ResourceRenderer: VMI resources plus calculated ones; the VMI's win."""

    def __init__(self, v):
        self.vm_limits = dict(v.limits)
        self.vm_requests = dict(v.requests)
        self.calc_limits = {}
        self.calc_requests = {}

    def limits(self):
        return dict(self.calc_limits, **self.vm_limits)

    def requests(self):
        return dict(self.calc_requests, **self.vm_requests)

    def request_resource(self, name):
        """requestResource: bump a device-plugin resource by one in limits and requests."""
        limits, requests = self.limits(), self.requests()
        one = _Q(Fraction(1), DECIMAL_SI)
        limits[name] = _qadd(limits.get(name), one)
        requests[name] = _qadd(requests.get(name), one)
        self.calc_limits.update(limits)
        self.calc_requests.update(requests)


def _compute_container(v, config, overhead, namespace_labels, quota_tracks, network_resources):
    """The compute container's requests and limits (before Kubernetes defaulting)."""
    version = config.version
    r = _Renderer(v)

    # WithEphemeralStorageRequest
    fifty = _q("50M")
    r.vm_requests["ephemeral-storage"] = _qadd(r.vm_requests.get("ephemeral-storage", _Q(Fraction(0), "")), fifty)
    if "ephemeral-storage" in r.vm_limits:
        r.vm_limits["ephemeral-storage"] = _qadd(r.vm_limits["ephemeral-storage"], fifty)

    # WithVirtualizationResources (into the VMI limits; Kubernetes copies them to requests)
    one = _q("1")
    if v.needs_tun():
        r.vm_limits[TUN_DEVICE] = one
    if v.wants_virtio_net() and not config.allow_emulation:
        r.vm_limits[VHOST_NET_DEVICE] = one
    if not config.allow_emulation:
        r.vm_limits[config.hypervisor_device] = one
    if rule("vsock_device", version) and v.devices.get("autoattachVSOCK") is not None and _truthy(v.devices["autoattachVSOCK"]):
        r.vm_limits[VHOST_VSOCK_DEVICE] = one

    with_cpu_limits = _wants_auto_limits(v, config, "cpu", quota_tracks) or _auto_cpu_selector(v, config, namespace_labels)
    iothreads = v.supplemental_iothreads()
    additional = iothreads if v.io_threads_policy_supplemental() else 0

    if v.dedicated:
        _cpu_pinning(r, v, version, iothreads, additional)
    else:
        vcpus = v.vcpus if v.cpu is not None else 1
        total = vcpus + (iothreads if rule("io_threads_counted_in_cpu", version) else 0)
        if total != 0 and config.cpu_allocation_ratio > 0:
            r.calc_requests["cpu"] = _cpu_request_quantity(total, config.cpu_allocation_ratio)
            if with_cpu_limits and rule("auto_cpu_limit_selector", version):
                r.calc_limits["cpu"] = _q(str(total))

    if v.has_hugepages():
        _hugepages(r, v, overhead)
    else:
        memory_request = r.vm_requests.get("memory", _Q(Fraction(0), ""))
        if not v.overcommit_guest_overhead:
            memory_request = _qadd(memory_request, overhead)
        r.vm_requests["memory"] = memory_request
        if "memory" in r.vm_limits:
            r.vm_limits["memory"] = _qadd(r.vm_limits["memory"], overhead)

    if not rule("renderer", version) and v.dedicated:
        r.vm_limits["memory"] = r.vm_requests["memory"]  # template.go copied the request after the overhead

    if _wants_auto_limits(v, config, "memory", quota_tracks):
        ratio = _auto_memory_ratio(namespace_labels)
        request = r.vm_requests.get("memory", _Q(Fraction(0), DECIMAL_SI))
        r.calc_limits["memory"] = _Q(Fraction(_auto_memory_limit(_ceil(request.value), ratio, namespace_labels)),
                                     request.fmt or DECIMAL_SI)

    for resource_name in network_resources:
        if resource_name:
            r.request_resource(resource_name)
    for gpu in v.gpus():
        if isinstance(gpu, dict) and gpu.get("deviceName") and (not rule("dra_claims_skip_device_plugin", version) or gpu.get("claimRequest") is None):
            r.request_resource(gpu["deviceName"])
    for dev in v.host_devices():
        if isinstance(dev, dict) and dev.get("deviceName") and (not rule("dra_claims_skip_device_plugin", version) or dev.get("claimRequest") is None):
            r.request_resource(dev["deviceName"])
    if v.is_sev(version):
        r.request_resource(SEV_DEVICE)
    if rule("tdx_device", version) and _get(v.domain, "launchSecurity", "tdx") is not None:
        r.request_resource(TDX_DEVICE)
    if rule("pr_helper_device", version) and v.has_persistent_reservation():
        r.request_resource(PR_DEVICE)
    if rule("iommufd_device", version) and "IOMMUFD" in config.feature_gates:
        r.request_resource(IOMMUFD_DEVICE)
    if rule("io_threads_added_to_cpu_limit", version) and additional > 0:
        r.vm_limits["cpu"] = _qadd(r.vm_limits.get("cpu"), _Q(Fraction(additional), BINARY_SI))
    return r.requests(), r.limits()


def _wants_auto_limits(v, config, resource, quota_tracks):
    """doesVMIRequireAuto{Memory,Resource}Limits: a quota tracks limits.<resource> and the VMI sets no such limit.

    Memory from v1.0.1, CPU from v1.1.0; behind the AutoResourceLimitsGate up to v1.4.1, always from v1.5.0.
    """
    version = config.version
    if not rule("auto_%s_limits" % resource, version):
        return False
    if rule("auto_limits_need_gate", version) and not config.auto_resource_limits_enabled:
        return False
    if resource in v.limits:
        return False
    return ("limits." + resource) in set(quota_tracks or ())


def _auto_cpu_selector(v, config, namespace_labels):
    """autoCPULimitNamespaceLabelSelector (v1.0+) matches the namespace and the VMI sets no cpu limit."""
    selector = config.auto_cpu_limit_namespace_label_selector
    if not rule("auto_cpu_limit_selector", config.version) or not selector or "cpu" in v.limits:
        return False
    return _selector_matches(selector, namespace_labels)


def go_parse_float_any(text):
    """strconv.ParseFloat(text, 64) as (value, ok): decimal and hexadecimal spellings (a hexadecimal mantissa needs
    its p exponent), Inf, Infinity and NaN in any case; ok False where Go returns an error (a malformed text, or a
    finite spelling out of float64's range: ErrRange)."""
    if text is None:
        return None, False
    text = str(text)
    if _SPECIAL_FLOAT.match(text):
        value = float(text.lstrip("+-").lower().replace("infinity", "inf"))
        return (-value if text.startswith("-") else value), True
    if _DECIMAL_FLOAT.match(text):
        value = float(text)
    elif _HEX_FLOAT.match(text):
        value = float.fromhex(text)
    else:
        return None, False
    if math.isinf(value):
        return value, False   # ErrRange
    return value, True


def _auto_memory_ratio(namespace_labels):
    """The namespace label alpha.kubevirt.io/auto-memory-limits-ratio as KubeVirt reads it
    (services/rendercontrollers: strconv.ParseFloat, and the default 2.0 when it fails or gives less than 1.0).
    KubeVirt sets no upper bound and lets Inf and NaN through: _auto_memory_limit refuses what it cannot render."""
    value = (namespace_labels or {}).get(AUTO_MEMORY_LIMITS_RATIO_LABEL)
    if value is None:
        return DEFAULT_AUTO_MEMORY_LIMITS_RATIO
    ratio, ok = go_parse_float_any(value)
    if not ok or ratio < 1.0:
        return DEFAULT_AUTO_MEMORY_LIMITS_RATIO
    return ratio


def _auto_memory_limit(request, ratio, namespace_labels):
    """int64(float64(request) * ratio), the memory limit KubeVirt renders; VmInputError (scope namespace: the label
    is the namespace's) when that is not a valid limit: a NaN or infinite ratio, or a product beyond int64 (Go's
    conversion gives no meaningful value and the pod is refused)."""
    product = float(request) * ratio
    if math.isnan(product) or math.isinf(product) or product >= _INT64_LIMIT:
        raise VmInputError(
            "namespace label %s=%s gives no valid memory limit for a target pod (%s x the memory request %d)"
            % (AUTO_MEMORY_LIMITS_RATIO_LABEL, (namespace_labels or {}).get(AUTO_MEMORY_LIMITS_RATIO_LABEL), ratio,
               request),
            "set the label to a decimal number of at least 1.0 such as 2, or remove it (KubeVirt then uses 2.0)",
            field="namespace label %s" % AUTO_MEMORY_LIMITS_RATIO_LABEL, scope="namespace")
    return int(product)


def _cpu_pinning(r, v, version, iothreads, additional):
    """WithCPUPinning (and the template.go variant before v0.56)."""
    vcpus = v.vcpus
    in_vmi_resources = rule("dedicated_cpus_in_vmi_resources", version)  # v1.5.2+
    renderer = rule("renderer", version)
    if in_vmi_resources:
        if vcpus != 0:
            total = _Q(Fraction(vcpus + iothreads), BINARY_SI)
            r.vm_limits["cpu"] = total
            r.vm_requests["cpu"] = total
        else:
            extra = _Q(Fraction(iothreads), BINARY_SI)
            if "cpu" in r.vm_limits:
                r.vm_limits["cpu"] = _qadd(r.vm_limits["cpu"], extra)
            if "cpu" in r.vm_requests:
                r.vm_requests["cpu"] = _qadd(r.vm_requests["cpu"], extra)
    elif vcpus != 0:
        target = r.calc_limits if renderer else r.vm_limits
        target["cpu"] = _Q(Fraction(vcpus), BINARY_SI)
    else:
        if "cpu" in r.vm_limits:
            r.vm_requests["cpu"] = r.vm_limits["cpu"]
        elif "cpu" in r.vm_requests:
            r.vm_limits["cpu"] = r.vm_requests["cpu"]
    if v.cpu and v.cpu.get("isolateEmulatorThread"):
        # The emulator thread's CPU is added to the calculated limit (vCPUs) up to v1.5.1, to the
        # VMI's limit from v1.5.2; up to v0.58.1 the sum went into the calculated limits, which
        # a cpu limit in the VMI spec overrides, so such a VMI got no CPU for it.
        if in_vmi_resources or not renderer:
            limits = r.vm_limits.get("cpu", _Q(Fraction(0), ""))
        else:
            limits = r.calc_limits.get("cpu", _Q(Fraction(0), ""))
        emulator = 1
        if rule("emulator_thread_parity_annotation", version) and EMULATOR_THREAD_EVEN_PARITY_ANNOTATION in v.annotations:
            extra = additional if rule("parity_counts_supplemental_io_threads", version) else 0
            if (_ceil(limits.value) + extra) % 2 == 0:
                emulator = 2
        limits = _qadd(limits, _Q(Fraction(emulator), BINARY_SI))
        if rule("emulator_thread_in_calculated_limits", version):
            r.calc_limits["cpu"] = limits
        else:
            r.vm_limits["cpu"] = limits
        if "cpu" in r.vm_requests:
            r.vm_requests["cpu"] = _qadd(r.vm_requests["cpu"], _Q(Fraction(emulator), BINARY_SI))
    if in_vmi_resources:
        if "memory" in r.vm_requests:
            r.vm_limits["memory"] = r.vm_requests["memory"]
    elif renderer:
        r.vm_limits["memory"] = r.vm_requests.get("memory", _Q(Fraction(0), DECIMAL_SI))


def _hugepages(r, v, overhead):
    """WithHugePages: hugepages-<size> = request (or guest if smaller); memory = O + what exceeds the guest."""
    page_size = str(v.memory["hugepages"].get("pageSize", ""))
    name = "hugepages-" + page_size
    request = r.vm_requests.get("memory", _Q(Fraction(0), ""))
    hp = request
    if v.guest is not None and _ceil(request.value) > _ceil(v.guest.value):
        hp = v.guest
    r.calc_requests[name] = hp
    r.calc_limits[name] = hp
    req_diff = _Q(Fraction(0), DECIMAL_SI)
    lim_diff = _Q(Fraction(0), DECIMAL_SI)
    if v.guest is not None:
        guest = _ceil(v.guest.value)
        if _ceil(request.value) > guest:
            req_diff = _qsub(_qadd(req_diff, request), v.guest)
        limit = r.vm_limits.get("memory")
        if limit is not None and _ceil(limit.value) > guest:
            lim_diff = _qsub(_qadd(lim_diff, limit), v.guest)
    r.vm_requests["memory"] = _qadd(req_diff, overhead)
    if "memory" in r.vm_limits:
        r.vm_limits["memory"] = _qadd(lim_diff, overhead)


# ---------------------------------------------------------------- the other containers

def _container(name, requests, limits, restartable=False):
    """A ContainerResources from _Q dicts, after Kubernetes' defaulting (missing requests copy limits)."""
    requests = dict(requests)
    for key, value in limits.items():
        requests.setdefault(key, value)
    formats = {}
    for which, rl in (("requests", requests), ("limits", limits)):
        for key, q in rl.items():
            formats["%s.%s" % (which, key)] = q.fmt or DECIMAL_SI
    return ContainerResources(
        name=name,
        requests=dict((k, q.value) for k, q in requests.items()),
        limits=dict((k, q.value) for k, q in limits.items()),
        restartable=restartable,
        formats=formats,
    )


def _console_log_container(v, config):
    """guest-console-log (v1.1+): 5m/35M requests, 15m/60M limits; requests = limits when dedicated or Guaranteed."""
    if not rule("guest_console_log", config.version):
        return None
    if v.devices.get("autoattachSerialConsole") is not None and not _truthy(v.devices["autoattachSerialConsole"]):
        return None
    if v.devices.get("logSerialConsole") is not None:
        if not _truthy(v.devices["logSerialConsole"]):
            return None
    elif config.disable_serial_console_log:
        return None
    requests = {"memory": _support(config, GUEST_CONSOLE_LOG, "requests", "memory", "35M"),
                "cpu": _support(config, GUEST_CONSOLE_LOG, "requests", "cpu", "5m")}
    limits = {"memory": _support(config, GUEST_CONSOLE_LOG, "limits", "memory", "60M"),
              "cpu": _support(config, GUEST_CONSOLE_LOG, "limits", "cpu", "15m")}
    if v.dedicated or v.guaranteed:
        requests = dict(limits)
    return _container("guest-console-log", requests, limits, restartable=bool(rule("guest_console_log_native_sidecar", config.version)))


def _container_disk_resources(v, config):
    """Requests/limits of a container-disk container (and its -init twin)."""
    ded = v.dedicated or v.guaranteed
    if not rule("container_disk_v1_resources", config.version):
        requests = {"cpu": _q("10m"), "memory": _q("40M" if ded else "1M"), "ephemeral-storage": _q("50M")}
        limits = {"memory": _q("40M"), "cpu": _q("10m" if ded else "100m")}
        return requests, limits
    requests = {"cpu": _support(config, CONTAINER_DISK, "requests", "cpu", "1m"),
                "memory": _support(config, CONTAINER_DISK, "requests", "memory", "1M"),
                "ephemeral-storage": _q("50M")}
    limits = {"cpu": _support(config, CONTAINER_DISK, "limits", "cpu", "10m"),
              "memory": _support(config, CONTAINER_DISK, "limits", "memory", "40M")}
    if ded:
        requests["cpu"] = limits["cpu"]
        requests["memory"] = limits["memory"]
    return requests, limits


def _binary_init_resources(v, config):
    """The container-disk-binary init container (initContainerResourceRequirementsForVMI)."""
    if v.dedicated or v.guaranteed:
        both = {"cpu": _support(config, CONTAINER_DISK, "limits", "cpu", "10m"),
                "memory": _support(config, CONTAINER_DISK, "limits", "memory", "40M")}
        return both, dict(both)
    limits = {"cpu": _support(config, CONTAINER_DISK, "limits", "cpu", "100m"),
              "memory": _support(config, CONTAINER_DISK, "limits", "memory", "40M")}
    requests = {"cpu": _support(config, CONTAINER_DISK, "requests", "cpu", "10m"),
                "memory": _support(config, CONTAINER_DISK, "requests", "memory", "1M")}
    return requests, limits


def _virtiofs_resources(v, config):
    """A virtiofs container: 10m/1M requests, 100m/80M limits (v1.0+), raised to the limits for dedicated/Guaranteed (v1.1+).

    v0.58.0-v0.59.2: 10m/1M requests, 100m/40M limits; v0.58.0-v1.0.1 pass (false, false) for
    dedicated/Guaranteed, so the requests stay low whatever the VMI.
    """
    version = config.version
    if not rule("virtiofs_v1_resources", version):
        return {"cpu": _q("10m"), "memory": _q("1M")}, {"memory": _q("40M"), "cpu": _q("100m")}
    aware = bool(rule("virtiofs_dedicated_resources", version))
    dedicated = aware and v.dedicated
    guaranteed = aware and (v.dedicated or v.guaranteed)
    requests = {"cpu": _support(config, VIRTIOFS, "requests", "cpu", "10m")}
    limits = {"memory": _support(config, VIRTIOFS, "limits", "memory", "80M"),
              "cpu": _support(config, VIRTIOFS, "limits", "cpu", "100m")}
    if dedicated or guaranteed:
        requests["cpu"] = limits["cpu"]
    if guaranteed:
        requests["memory"] = limits["memory"]
    else:
        requests["memory"] = _support(config, VIRTIOFS, "requests", "memory", "1M")
    return requests, limits


def _sidecar_resources(v, config):
    """A hook or network-binding sidecar: nothing by default; 200m/64M (requests = limits) when dedicated or Guaranteed."""
    requests, limits = {}, {}
    overrides = bool(rule("support_container_overrides", config.version))
    if overrides:
        for resource in ("cpu", "memory"):
            q = _support_quantity(config, SIDECAR, "requests", resource)
            if q is not None:
                requests[resource] = q
    if v.dedicated or v.guaranteed:
        for resource, default in (("cpu", "200m"), ("memory", "64M")):
            q = _support_quantity(config, SIDECAR, "limits", resource) if overrides else None
            limits[resource] = q if q is not None else _q(default)
            requests[resource] = limits[resource]
    elif overrides:
        for resource in ("cpu", "memory"):
            q = _support_quantity(config, SIDECAR, "limits", resource)
            if q is not None:
                limits[resource] = q
    return requests, limits


def _hotplug_pod_resources(v, config):
    """The hp-volume attachment pod's container (one pod for all hotplugged volumes)."""
    version = config.version
    limits = {"cpu": _support(config, HOTPLUG_ATTACHMENT, "limits", "cpu", "100m"),
              "memory": _support(config, HOTPLUG_ATTACHMENT, "limits", "memory", "80M")}
    if rule("hotplug_requests_100m_80m", version):
        default_cpu, default_mem = "100m", "80M"
    else:
        default_cpu, default_mem = "10m", "2M"
    requests = {"cpu": _support(config, HOTPLUG_ATTACHMENT, "requests", "cpu", default_cpu),
                "memory": _support(config, HOTPLUG_ATTACHMENT, "requests", "memory", default_mem)}
    if rule("hotplug_requests_equal_limits", version) or (
            rule("hotplug_requests_equal_limits_when_dedicated", version) and (v.dedicated or v.guaranteed)):
        requests = dict(limits)
    return requests, limits


# ---------------------------------------------------------------- quota accounting

def _sum_into(total, rl):
    """addResourceList: first addend's format wins."""
    for name, q in rl.items():
        total[name] = _qadd(total.get(name), q)


def _max_into(total, rl):
    """maxResourceList: the larger quantity (and its format) wins."""
    for name, q in rl.items():
        if name not in total or q.value > total[name].value:
            total[name] = q


def _as_q(container, which):
    """A container's requests or limits as _Q values."""
    rl = getattr(container, which)
    formats = container.formats or {}
    return dict((k, _Q(val, formats.get("%s.%s" % (which, k), DECIMAL_SI))) for k, val in rl.items())


def _pod_totals(containers, init_containers, which):
    """PodRequests/PodLimits of ContainerResources (quotas.pod_resources), each value with its format."""
    return pod_resources([_as_q(c, which) for c in containers],
                         [(_as_q(c, which), c.restartable) for c in init_containers], _sum_into, _max_into)


def pod_charge(containers, init_containers=(), pod_overhead=None):
    """(charge, formats): what the quota pod evaluator charges for a pod with these containers."""
    requests = _pod_totals(containers, init_containers, "requests")
    limits = _pod_totals(containers, init_containers, "limits")
    for name, value in dict(pod_overhead or {}).items():
        q = value if isinstance(value, _Q) else _q(value, "pod_overhead.%s" % name)
        requests[name] = _qadd(requests.get(name), q)
        if name in limits:
            limits[name] = _qadd(limits[name], q)
    charge = usage_from_requests_limits(requests, limits, one=_Q(Fraction(1), DECIMAL_SI))
    return (dict((k, q.value) for k, q in charge.items()),
            dict((k, q.fmt or DECIMAL_SI) for k, q in charge.items()))


def _pvc_charge(config):
    """The 10Mi backend-storage PVC for persistent TPM/EFI."""
    size = Fraction(10 * Mi)
    charge = {"requests.storage": size, "persistentvolumeclaims": Fraction(1),
              "count/persistentvolumeclaims": Fraction(1)}
    if config.vm_state_storage_class:
        prefix = "%s.storageclass.storage.k8s.io/" % config.vm_state_storage_class
        charge[prefix + "requests.storage"] = size
        charge[prefix + "persistentvolumeclaims"] = Fraction(1)
    return charge


# ---------------------------------------------------------------- public API

def launcher_pod(vmi, config, namespace_labels=None, quota_tracks=frozenset(), network_resources=None):
    """The launcher pod KubeVirt would render now for vmi (a VMI or a VM), with its quota charge.

    namespace_labels: labels of the VMI's namespace (auto memory limits ratio, auto CPU limit selector).
    quota_tracks: resource names in the spec.hard of the namespace's quotas (KubeVirt adds limits only
    when limits.cpu / limits.memory are tracked).
    network_resources: Multus network name -> device-plugin resource of its NetworkAttachmentDefinition
    (annotation k8s.v1.cni.cncf.io/resourceName), for SR-IOV and similar networks.
    """
    if not isinstance(config, ClusterConfig):
        raise InputError("config must be a ClusterConfig, got %s" % type(config).__name__,
                         "build one with ClusterConfig(...) or config_from_cluster(...)")
    v = _Vmi(vmi, config)
    version = config.version
    notes = []
    if version > NEWEST_KNOWN_VERSION:
        notes.append("KubeVirt %s is newer than the newest version kvquota knows (%d.%d); sized with its rules"
                     % ((config.kubevirt_version,) + NEWEST_KNOWN_VERSION[:2]))
    elif audited_version(version) != version:
        notes.append("KubeVirt %s is newer than the newest audited patch release of its minor; sized with v%d.%d.%d's rules"
                     % ((config.kubevirt_version,) + audited_version(version)))
    multus = [n["multus"].get("networkName") for n in v.spec.get("networks") or []
              if isinstance(n, dict) and isinstance(n.get("multus"), dict)]
    network_resources = dict(network_resources or {})
    if v.is_sriov() and any(name not in network_resources for name in multus if name):
        notes.append("SR-IOV networks without a known device-plugin resource are not charged; pass network_resources")
    per_network = [network_resources[name] for name in multus if name in network_resources]

    overhead = _memory_overhead(v, config)
    requests, limits = _compute_container(v, config, overhead, namespace_labels, quota_tracks, per_network)
    containers = [_container("compute", requests, limits)]
    init_containers = []

    disk_req, disk_lim = _container_disk_resources(v, config)
    # With the ImageVolume gate the disks are image volumes: no containers, and no init containers for a
    # migration target, whose image digests are read from the source pod (ExtractImageIDsFromSourcePod).
    image_volumes = bool(rule("image_volume_gate", version)) and config.gate_enabled(IMAGE_VOLUME_GATE)
    disks = [] if image_volumes else v.container_disk_volumes()
    kernel_boot = v.has_kernel_boot_container() and not image_volumes
    if image_volumes and (v.container_disk_volumes() or v.has_kernel_boot_container()):
        notes.append("container disks are image volumes (ImageVolume feature gate): no container-disk containers")
    for volume in disks:
        containers.append(_container("volume" + str(volume.get("name", "")), disk_req, disk_lim))
    if kernel_boot:
        containers.append(_container("kernel-boot", disk_req, disk_lim))
    vfs_req, vfs_lim = _virtiofs_resources(v, config)
    for volume in v.virtiofs_volumes(version):
        containers.append(_container("virtiofs-" + str(volume.get("name", "")), vfs_req, vfs_lim))
    console = _console_log_container(v, config)
    if console is not None and not console.restartable:
        containers.append(console)
    sidecars = v.hook_sidecars()
    if rule("network_binding_sidecars", version):
        plugins = dict(config.network_bindings)
        used = set(_get(i, "binding", "name") for i in v.interfaces if isinstance(i, dict))
        sidecars += sum(1 for name in used if name in plugins and _get(plugins[name], "sidecarImage"))
    if rule("slirp_binding_sidecar", version) and v.has_slirp_interface():
        sidecars += 1  # the registered slirp plugin's image, else KubeVirt's default one
    side_req, side_lim = _sidecar_resources(v, config)
    for i in range(sidecars):
        containers.append(_container("hook-sidecar-%d" % i, side_req, side_lim))

    if console is not None and console.restartable:
        init_containers.append(console)
    if disks or kernel_boot:
        bin_req, bin_lim = _binary_init_resources(v, config)
        init_containers.append(_container("container-disk-binary", bin_req, bin_lim))
        for volume in disks:
            init_containers.append(_container("volume" + str(volume.get("name", "")) + "-init", disk_req, disk_lim))
        if kernel_boot:
            init_containers.append(_container("kernel-boot-init", disk_req, disk_lim))

    overhead_list = dict(config.pod_overhead)
    charge, formats = pod_charge(containers, init_containers, overhead_list)

    extra_pods = []
    extra_charge = {}
    extra_formats = {}
    hotplug = v.hotplug_volumes()
    if hotplug:
        hp_req, hp_lim = _hotplug_pod_resources(v, config)
        hp_container = _container("hotplug-disk", hp_req, hp_lim)
        hp_charge, hp_formats = pod_charge([hp_container])
        extra_pods.append(LauncherPod(containers=(hp_container,), init_containers=(), charge=hp_charge,
                                      formats=hp_formats, name="hp-volume"))
        extra_charge = _add_lists(extra_charge, hp_charge)
        extra_formats.update(hp_formats)
    pvc_charge = {}
    if rule("backend_storage_pvc", version) and v.needs_backend_storage(version) and not config.backend_storage_rwx:
        pvc_charge = _pvc_charge(config)
        extra_charge = _add_lists(extra_charge, pvc_charge)
        notes.append("a 10Mi backend-storage PVC is created for the target (persistent TPM/EFI or CBT, not RWX)")
    return LauncherPod(
        containers=tuple(containers),
        init_containers=tuple(init_containers),
        charge=charge,
        extra_pods=tuple(extra_pods),
        extra_charge=extra_charge,
        pvc_charge=pvc_charge,
        formats=formats,
        extra_formats=extra_formats,
        memory_overhead=overhead.value,
        notes=tuple(notes),
    )


def migration_charge(vmi, config, namespace_labels=None, quota_tracks=frozenset(), network_resources=None):
    """Everything a migration adds to the namespace: target pod + hotplug attachment pod + PVCs."""
    return launcher_pod(vmi, config, namespace_labels, quota_tracks, network_resources).total_charge()


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
    if isinstance(harvester_settings, dict) and _get(harvester_settings, "metadata", "name") == HARVESTER_RATIO_SETTING:
        setting = harvester_settings
    elif isinstance(harvester_settings, dict):
        setting = harvester_settings.get(HARVESTER_RATIO_SETTING)
        if setting is None and isinstance(harvester_settings.get("items"), list):
            harvester_settings = harvester_settings["items"]
    if setting is None and isinstance(harvester_settings, list):
        for item in harvester_settings:
            if _get(item, "metadata", "name") == HARVESTER_RATIO_SETTING:
                setting = item
    value = harvester_setting_value(setting)
    if value is None:
        return None
    value = str(value).strip()
    return None if value in ("", "0") else value


def config_from_cluster(kubevirt_cr, harvester_settings=None, kubevirt_version=None, arch=None):
    """A ClusterConfig from the KubeVirt CR (authoritative) and, failing that, Harvester's settings."""
    cr = kubevirt_cr or {}
    configuration = _get(cr, "spec", "configuration") or {}
    developer = configuration.get("developerConfiguration") or {}
    version = (kubevirt_version or _get(cr, "status", "observedKubeVirtVersion")
               or _get(cr, "status", "targetKubeVirtVersion") or ClusterConfig.kubevirt_version)
    if "additionalGuestMemoryOverheadRatio" in configuration:
        ratio = configuration.get("additionalGuestMemoryOverheadRatio")
        ratio = None if ratio in (None, "", "0") else str(ratio)
    else:
        ratio = _harvester_ratio(harvester_settings)
    bindings = _get(configuration, "network", "binding") or {}
    gates = tuple(developer.get("featureGates") or ())
    vm_options = configuration.get("virtualMachineOptions") or {}
    default_arch = _get(configuration, "architectureConfiguration", "defaultArchitecture")
    hypervisors = configuration.get("hypervisors") or []
    hypervisor = None  # GetHypervisorFromKvConfig: the first entry, only with the feature gate
    if "ConfigurableHypervisor" in gates and hypervisors and isinstance(hypervisors[0], dict):
        hypervisor = hypervisors[0].get("name") or None
    annotations = _get(cr, "metadata", "annotations") or {}
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
        allow_emulation=_truthy(developer.get("useEmulation")),
        auto_cpu_limit_namespace_label_selector=configuration.get("autoCPULimitNamespaceLabelSelector"),
        network_bindings=tuple(sorted(bindings.items())) if isinstance(bindings, dict) else (),
        vm_state_storage_class=configuration.get("vmStateStorageClass"),
        hypervisor=hypervisor,
        kubevirt_annotations=tuple(sorted(annotations.items())) if isinstance(annotations, dict) else (),
    )


__all__ = [
    "ClusterConfig", "ContainerResources", "LauncherPod", "launcher_pod", "migration_charge",
    "memory_overhead", "pod_charge", "config_from_cluster", "parse_version", "parse_overhead_ratio",
    "go_format_g", "go_parse_float", "harvester_setting_value", "DECIMAL_EXPONENT",
]
