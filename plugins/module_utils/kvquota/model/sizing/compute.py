# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The compute container's requests and limits (renderresources' compute container: CPU, memory, devices,
auto limits, dedicated CPUs, hugepages).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import math
from fractions import Fraction

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import requirement_matches
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import BINARY_SI, DECIMAL_SI
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.quantities import (
    ceil_qty,
    go_format_g,
    go_parse_float_any,
    INT64_LIMIT,
    Qty,
    qty,
    qty_add,
    qty_sub,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.rules import (
    AUTO_MEMORY_LIMITS_RATIO_LABEL,
    DEFAULT_AUTO_MEMORY_LIMITS_RATIO,
    EMULATOR_THREAD_EVEN_PARITY_ANNOTATION,
    IOMMUFD_DEVICE,
    PR_DEVICE,
    rule,
    SEV_DEVICE,
    TDX_DEVICE,
    TUN_DEVICE,
    VHOST_NET_DEVICE,
    VHOST_VSOCK_DEVICE,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.vmi import (
    get_path,
    truthy,
    VmInputError,
)


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


# ---------------------------------------------------------------- the compute container

def _cpu_request_quantity(total_cpus, ratio):
    """WithoutDedicatedCPU: MustParse(fmt.Sprintf("%g", vcpus/ratio)), in milli when below 1."""
    val = float(total_cpus) / float(ratio)
    text = go_format_g(val)
    if val < 1:
        val *= 1000
        text = go_format_g(val) + "m"
    try:
        return qty(text)
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
        one = Qty(Fraction(1), DECIMAL_SI)
        limits[name] = qty_add(limits.get(name), one)
        requests[name] = qty_add(requests.get(name), one)
        self.calc_limits.update(limits)
        self.calc_requests.update(requests)


def compute_container(v, config, overhead, namespace_labels, quota_tracks, network_resources):
    """The compute container's requests and limits (before Kubernetes defaulting)."""
    version = config.version
    r = _Renderer(v)

    # WithEphemeralStorageRequest
    fifty = qty("50M")
    r.vm_requests["ephemeral-storage"] = qty_add(r.vm_requests.get("ephemeral-storage", Qty(Fraction(0), "")), fifty)
    if "ephemeral-storage" in r.vm_limits:
        r.vm_limits["ephemeral-storage"] = qty_add(r.vm_limits["ephemeral-storage"], fifty)

    # WithVirtualizationResources (into the VMI limits; Kubernetes copies them to requests)
    one = qty("1")
    if v.needs_tun():
        r.vm_limits[TUN_DEVICE] = one
    if v.wants_virtio_net() and not config.allow_emulation:
        r.vm_limits[VHOST_NET_DEVICE] = one
    if not config.allow_emulation:
        r.vm_limits[config.hypervisor_device] = one
    if rule("vsock_device", version) and v.devices.get("autoattachVSOCK") is not None and truthy(v.devices["autoattachVSOCK"]):
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
                r.calc_limits["cpu"] = qty(str(total))

    if v.has_hugepages():
        _hugepages(r, v, overhead)
    else:
        memory_request = r.vm_requests.get("memory", Qty(Fraction(0), ""))
        if not v.overcommit_guest_overhead:
            memory_request = qty_add(memory_request, overhead)
        r.vm_requests["memory"] = memory_request
        if "memory" in r.vm_limits:
            r.vm_limits["memory"] = qty_add(r.vm_limits["memory"], overhead)

    if not rule("renderer", version) and v.dedicated:
        r.vm_limits["memory"] = r.vm_requests["memory"]  # template.go copied the request after the overhead

    if _wants_auto_limits(v, config, "memory", quota_tracks):
        ratio = _auto_memory_ratio(namespace_labels)
        request = r.vm_requests.get("memory", Qty(Fraction(0), DECIMAL_SI))
        r.calc_limits["memory"] = Qty(Fraction(_auto_memory_limit(ceil_qty(request.value), ratio, namespace_labels)),
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
    if rule("tdx_device", version) and get_path(v.domain, "launchSecurity", "tdx") is not None:
        r.request_resource(TDX_DEVICE)
    if rule("pr_helper_device", version) and v.has_persistent_reservation():
        r.request_resource(PR_DEVICE)
    if rule("iommufd_device", version) and "IOMMUFD" in config.feature_gates:
        r.request_resource(IOMMUFD_DEVICE)
    if rule("io_threads_added_to_cpu_limit", version) and additional > 0:
        r.vm_limits["cpu"] = qty_add(r.vm_limits.get("cpu"), Qty(Fraction(additional), BINARY_SI))
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
    if math.isnan(product) or math.isinf(product) or product >= INT64_LIMIT:
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
            total = Qty(Fraction(vcpus + iothreads), BINARY_SI)
            r.vm_limits["cpu"] = total
            r.vm_requests["cpu"] = total
        else:
            extra = Qty(Fraction(iothreads), BINARY_SI)
            if "cpu" in r.vm_limits:
                r.vm_limits["cpu"] = qty_add(r.vm_limits["cpu"], extra)
            if "cpu" in r.vm_requests:
                r.vm_requests["cpu"] = qty_add(r.vm_requests["cpu"], extra)
    elif vcpus != 0:
        target = r.calc_limits if renderer else r.vm_limits
        target["cpu"] = Qty(Fraction(vcpus), BINARY_SI)
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
            limits = r.vm_limits.get("cpu", Qty(Fraction(0), ""))
        else:
            limits = r.calc_limits.get("cpu", Qty(Fraction(0), ""))
        emulator = 1
        if rule("emulator_thread_parity_annotation", version) and EMULATOR_THREAD_EVEN_PARITY_ANNOTATION in v.annotations:
            extra = additional if rule("parity_counts_supplemental_io_threads", version) else 0
            if (ceil_qty(limits.value) + extra) % 2 == 0:
                emulator = 2
        limits = qty_add(limits, Qty(Fraction(emulator), BINARY_SI))
        if rule("emulator_thread_in_calculated_limits", version):
            r.calc_limits["cpu"] = limits
        else:
            r.vm_limits["cpu"] = limits
        if "cpu" in r.vm_requests:
            r.vm_requests["cpu"] = qty_add(r.vm_requests["cpu"], Qty(Fraction(emulator), BINARY_SI))
    if in_vmi_resources:
        if "memory" in r.vm_requests:
            r.vm_limits["memory"] = r.vm_requests["memory"]
    elif renderer:
        r.vm_limits["memory"] = r.vm_requests.get("memory", Qty(Fraction(0), DECIMAL_SI))


def _hugepages(r, v, overhead):
    """WithHugePages: hugepages-<size> = request (or guest if smaller); memory = O + what exceeds the guest."""
    page_size = str(v.memory["hugepages"].get("pageSize", ""))
    name = "hugepages-" + page_size
    request = r.vm_requests.get("memory", Qty(Fraction(0), ""))
    hp = request
    if v.guest is not None and ceil_qty(request.value) > ceil_qty(v.guest.value):
        hp = v.guest
    r.calc_requests[name] = hp
    r.calc_limits[name] = hp
    req_diff = Qty(Fraction(0), DECIMAL_SI)
    lim_diff = Qty(Fraction(0), DECIMAL_SI)
    if v.guest is not None:
        guest = ceil_qty(v.guest.value)
        if ceil_qty(request.value) > guest:
            req_diff = qty_sub(qty_add(req_diff, request), v.guest)
        limit = r.vm_limits.get("memory")
        if limit is not None and ceil_qty(limit.value) > guest:
            lim_diff = qty_sub(qty_add(lim_diff, limit), v.guest)
    r.vm_requests["memory"] = qty_add(req_diff, overhead)
    if "memory" in r.vm_limits:
        r.vm_limits["memory"] = qty_add(lim_diff, overhead)
