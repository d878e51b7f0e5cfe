# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rancher's names for quota resources: the keys of a project's and a namespace's resourceQuota limits
(field.cattle.io/resourceQuota) and the ResourceQuota resource names they stand for. Pure data; the Rancher
owner (owners.rancher.RancherOwner) and the quota planning (quotas.py) both read it."""

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


def rancher_key(name):
    """The Rancher limit key for a quota resource name, or None when Rancher has none."""
    return QUOTA_TO_RANCHER.get(name)


def quota_name_for(key):
    """The quota resource name for a Rancher limit key, or None."""
    return RANCHER_KEYS.get(key)
