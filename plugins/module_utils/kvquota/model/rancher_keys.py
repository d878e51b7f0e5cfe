# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rancher's names for quota resources: the keys of a project's and a namespace's resourceQuota limits
(field.cattle.io/resourceQuota) and the ResourceQuota resource names they stand for. Pure data and functions; the
Rancher owner (owners.rancher.RancherOwner) and the quota planning (quotas.py, findings.py) read it.

Since Rancher 2.14.0 a limit also holds `extended`, a map from any ResourceQuota resource name to a quantity
(rancher/rancher 52544, 56498). Rancher converts a limit to a ResourceList extended entries first, then the fixed
keys, so a fixed key wins over an extended entry of the same resource name (pkg/resourcequota/quota_validate.go,
ConvertLimitToResourceList)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


# Rancher's ResourceQuotaLimit keys <-> ResourceQuota resource names (keys absent here are spelled alike,
# e.g. pods, services, secrets).
RANCHER_KEYS = {
    "limitsCpu": "limits.cpu",
    "limitsMemory": "limits.memory",
    "requestsCpu": "requests.cpu",
    "requestsMemory": "requests.memory",
    "requestsStorage": "requests.storage",
    "pods": "pods",
    "services": "services",
    "secrets": "secrets",
    "configMaps": "configmaps",
    "persistentVolumeClaims": "persistentvolumeclaims",
    "replicationControllers": "replicationcontrollers",
    "servicesNodePorts": "services.nodeports",
    "servicesLoadBalancers": "services.loadbalancers",
}
QUOTA_TO_RANCHER = dict((name, key) for key, name in RANCHER_KEYS.items())
EXTENDED = "extended"


def rancher_key(name):
    """The Rancher limit key for a quota resource name, or None when Rancher has none."""
    return QUOTA_TO_RANCHER.get(name)


def quota_name_for(key):
    """The quota resource name for a Rancher limit key, or None."""
    return RANCHER_KEYS.get(key)


def limit_key(name):
    """How an operator finds name in a Rancher limit: its fixed key, else extended.<name>."""
    return rancher_key(name) or "%s.%s" % (EXTENDED, name)


def limit_names(limit):
    """A Rancher limit as quota names -> values, the way Rancher reads it: extended entries first, then the fixed
    keys over them (an empty fixed key is left out, as Go's omitempty does). Unknown keys are dropped."""
    result = {}
    extended = (limit or {}).get(EXTENDED)
    for name, value in (extended.items() if isinstance(extended, dict) else ()):
        if value not in (None, ""):
            result[name] = value
    for key, value in (limit or {}).items():
        name = quota_name_for(key)
        if name and value not in (None, ""):
            result[name] = value
    return result


def with_names(limit, values):
    """A copy of a Rancher limit with values (quota names -> text) set: a name with a fixed key under that key,
    any other in the extended map."""
    result = dict(limit or {})
    extended = result.get(EXTENDED)
    extended = dict(extended) if isinstance(extended, dict) else {}
    for name, text in values.items():
        if rancher_key(name):
            result[rancher_key(name)] = text
        else:
            extended[name] = text
    if extended:
        result[EXTENDED] = extended
    return result
