# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The support containers and pods a launcher pod brings (console log, container disks, binary init, virtiofs,
hook sidecars, the hotplug attachment pod), with supportContainerResources overrides.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import DECIMAL_SI
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.quantities import (
    ContainerResources,
    qty,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.rules import (
    CONTAINER_DISK,
    GUEST_CONSOLE_LOG,
    HOTPLUG_ATTACHMENT,
    rule,
    SIDECAR,
    VIRTIOFS,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.vmi import get_path, truthy


def _support_quantity(config, container_type, kind, resource):
    """supportContainerResources override for (type, requests|limits, cpu|memory); zero values are ignored."""
    for entry in config.support_container_resources:
        if not isinstance(entry, dict) or entry.get("type") != container_type:
            continue
        value = get_path(entry, "resources", kind, resource)
        if value is None:
            continue
        q = qty(value, "supportContainerResources[%s].resources.%s.%s" % (container_type, kind, resource))
        if q.value != 0:
            return q
    return None


def _support(config, container_type, kind, resource, default):
    """The support-container quantity: the override if one is set (v1.0+), else the default."""
    if rule("support_container_overrides", config.version):
        override = _support_quantity(config, container_type, kind, resource)
        if override is not None:
            return override
    return qty(default)


# ---------------------------------------------------------------- the other containers

def container_of(name, requests, limits, restartable=False):
    """A ContainerResources from Qty dicts, after Kubernetes' defaulting (missing requests copy limits)."""
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


def console_log_container(v, config):
    """guest-console-log (v1.1+): 5m/35M requests, 15m/60M limits; requests = limits when dedicated or Guaranteed."""
    if not rule("guest_console_log", config.version):
        return None
    if v.devices.get("autoattachSerialConsole") is not None and not truthy(v.devices["autoattachSerialConsole"]):
        return None
    if v.devices.get("logSerialConsole") is not None:
        if not truthy(v.devices["logSerialConsole"]):
            return None
    elif config.disable_serial_console_log:
        return None
    requests = {"memory": _support(config, GUEST_CONSOLE_LOG, "requests", "memory", "35M"),
                "cpu": _support(config, GUEST_CONSOLE_LOG, "requests", "cpu", "5m")}
    limits = {"memory": _support(config, GUEST_CONSOLE_LOG, "limits", "memory", "60M"),
              "cpu": _support(config, GUEST_CONSOLE_LOG, "limits", "cpu", "15m")}
    if v.dedicated or v.guaranteed:
        requests = dict(limits)
    return container_of("guest-console-log", requests, limits, restartable=bool(rule("guest_console_log_native_sidecar", config.version)))


def container_disk_resources(v, config):
    """Requests/limits of a container-disk container (and its -init twin)."""
    ded = v.dedicated or v.guaranteed
    if not rule("container_disk_v1_resources", config.version):
        requests = {"cpu": qty("10m"), "memory": qty("40M" if ded else "1M"), "ephemeral-storage": qty("50M")}
        limits = {"memory": qty("40M"), "cpu": qty("10m" if ded else "100m")}
        return requests, limits
    requests = {"cpu": _support(config, CONTAINER_DISK, "requests", "cpu", "1m"),
                "memory": _support(config, CONTAINER_DISK, "requests", "memory", "1M"),
                "ephemeral-storage": qty("50M")}
    limits = {"cpu": _support(config, CONTAINER_DISK, "limits", "cpu", "10m"),
              "memory": _support(config, CONTAINER_DISK, "limits", "memory", "40M")}
    if ded:
        requests["cpu"] = limits["cpu"]
        requests["memory"] = limits["memory"]
    return requests, limits


def binary_init_resources(v, config):
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


def virtiofs_resources(v, config):
    """A virtiofs container: 10m/1M requests, 100m/80M limits (v1.0+), raised to the limits for dedicated/Guaranteed (v1.1+).

    v0.58.0-v0.59.2: 10m/1M requests, 100m/40M limits; v0.58.0-v1.0.1 pass (false, false) for
    dedicated/Guaranteed, so the requests stay low whatever the VMI.
    """
    version = config.version
    if not rule("virtiofs_v1_resources", version):
        return {"cpu": qty("10m"), "memory": qty("1M")}, {"memory": qty("40M"), "cpu": qty("100m")}
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


def sidecar_resources(v, config):
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
            limits[resource] = q if q is not None else qty(default)
            requests[resource] = limits[resource]
    elif overrides:
        for resource in ("cpu", "memory"):
            q = _support_quantity(config, SIDECAR, "limits", resource)
            if q is not None:
                limits[resource] = q
    return requests, limits


def hotplug_pod_resources(v, config):
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
