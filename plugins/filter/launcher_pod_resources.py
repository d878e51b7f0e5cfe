# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The launcher_pod_resources filter: how big the virt-launcher (migration target) pod of a VMI will be.

Documentation lives in launcher_pod_resources.yml next to this file.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import dataclasses

from ansible.errors import AnsibleFilterError

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import KvquotaError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import format_quantity, BINARY_SI
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.config import (
    ClusterConfig,
    config_from_cluster,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.launcher import launcher_pod

_CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(ClusterConfig))
_TUPLE_FIELDS = ("support_container_resources", "feature_gates", "network_bindings", "pod_overhead",
                 "kubevirt_annotations", "disabled_feature_gates")
_BOOL_FIELDS = ("disable_serial_console_log", "auto_resource_limits", "allow_emulation", "backend_storage_rwx")
_EXTRA_OPTIONS = ("namespace_labels", "quota_tracks", "network_resources", "kubevirt", "harvester_settings")


def _bool(name, value):
    """A boolean option given as bool or a YAML-ish string."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "1", "false", "no", "off", "0"):
        return value.strip().lower() in ("true", "yes", "on", "1")
    if isinstance(value, int):
        return bool(value)
    raise AnsibleFilterError("launcher_pod_resources: option %s must be a boolean, got %r. Fix: use true or false"
                             % (name, value))


def _config_value(name, value):
    """Normalise one ClusterConfig option from Jinja types."""
    if name == "auto_resource_limits" and value is None:
        return None  # follow the feature gates
    if name in _BOOL_FIELDS:
        return _bool(name, value)
    if name == "overhead_ratio":
        return None if value is None else str(value)
    if name == "kubevirt_version":
        return str(value)
    if name in _TUPLE_FIELDS:
        if isinstance(value, dict):
            return tuple(sorted(value.items()))
        return tuple(value or ())
    return value


def _quota_tracks(value):
    """Resource names tracked by the namespace's quotas: a list of names, or ResourceQuota objects."""
    names = set()
    for item in value or ():
        if isinstance(item, dict):
            names.update(((item.get("spec") or {}).get("hard") or {}).keys())
        else:
            names.add(str(item))
    return frozenset(names)


def _extra_pod(extra):
    """A pod created with the target (hp-volume attachment pod): its containers and its own quota charge."""
    return {
        "name": extra.name,
        "containers": [c.formatted() for c in extra.containers],
        "charge": extra.formatted_charge(),
    }


def launcher_pod_resources(vmi, **options):
    """Size the launcher pod of a VMI (or VM): {"pod": charge, "containers": [...], ...} as quantity strings."""
    unknown = sorted(set(options) - set(_CONFIG_FIELDS) - set(_EXTRA_OPTIONS))
    if unknown:
        raise AnsibleFilterError("launcher_pod_resources: unknown option(s) %s. Fix: use only %s"
                                 % (", ".join(unknown), ", ".join(_CONFIG_FIELDS + _EXTRA_OPTIONS)))
    try:
        overrides = dict((k, _config_value(k, v)) for k, v in options.items() if k in _CONFIG_FIELDS)
        if options.get("kubevirt") is not None or options.get("harvester_settings") is not None:
            config = config_from_cluster(options.get("kubevirt"), options.get("harvester_settings"),
                                         overrides.pop("kubevirt_version", None))
            config = dataclasses.replace(config, **overrides)
        else:
            config = ClusterConfig(**overrides)
        pod = launcher_pod(
            vmi,
            config,
            namespace_labels=options.get("namespace_labels") or {},
            quota_tracks=_quota_tracks(options.get("quota_tracks")),
            network_resources=options.get("network_resources") or {},
        )
    except KvquotaError as err:
        raise AnsibleFilterError("launcher_pod_resources: %s" % err)
    except (TypeError, ValueError) as err:
        raise AnsibleFilterError("launcher_pod_resources: %s. Fix: check the filter's options" % err)
    return {
        "pod": pod.formatted_charge(),
        "containers": [c.formatted() for c in pod.containers],
        "init_containers": [c.formatted() for c in pod.init_containers],
        "extra": pod.formatted_charge("extra_charge"),
        "extra_pods": [_extra_pod(extra) for extra in pod.extra_pods],
        "pvcs": pod.formatted_charge("pvc_charge"),
        "migration": pod.formatted_total(),
        "memory_overhead": format_quantity(pod.memory_overhead, BINARY_SI),
        "kubevirt_version": config.kubevirt_version,
        "notes": list(pod.notes),
    }


class FilterModule(object):
    """kvquota.maintenance filters."""

    def filters(self):
        return {"launcher_pod_resources": launcher_pod_resources}
