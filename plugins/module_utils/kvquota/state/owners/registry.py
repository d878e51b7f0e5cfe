# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which owner holds a quota's spec.hard: the only place that knows the owners by name.

OWNERS are asked in order and the first that claims a quota owns it (as cluster-autoscaler's drainability
rules.Default()); the last one, the plain owner, claims every ResourceQuota. WRAPPERS then wrap the owner found
when they apply (Harvester scales Rancher-managed quotas itself). A new owner is a module in this package and a
line below.

cluster facts (all optional): harvester (bool), harvester_version ('v1.4.2'), rancher_projects (bool, the
management.cattle.io Project API exists), project (the quota's Project dict when read), aaq (bool).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners.aaq import AAQOwner
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners.harvester import HarvesterOwner
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners.plain import PlainOwner
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners.rancher import RancherOwner

OWNERS = (AAQOwner, RancherOwner, PlainOwner)
WRAPPERS = (HarvesterOwner,)
NAMES = tuple(owner.name for owner in OWNERS + WRAPPERS)


def _cluster_notes(facts):
    if facts.get("aaq"):
        return ["AAQ is installed: ApplicationAwareResourceQuotas are not touched (AAQ charges a migration only for "
                "its growth); native ResourceQuotas still count both pods"]
    return []


def owner_of(quota, namespace, facts=None):
    """The QuotaOwner of quota (dict) in namespace (dict), given the cluster facts."""
    facts = facts or {}
    notes = _cluster_notes(facts)
    owner_class = next(owner for owner in OWNERS if owner.claims(quota, facts))
    owner = owner_class.for_quota(quota, facts, notes)
    if owner.writable:
        for wrapper in WRAPPERS:
            if wrapper.wraps(quota, facts):
                owner = wrapper.around(owner, facts)
    return owner


def spec_owner(quota):
    """The name of the owner that writes quota's spec.hard, whatever the cluster: what a report shows beside the
    quota (the plain owner for a quota no other claims)."""
    return next(owner for owner in OWNERS if owner.claims(quota, {})).name
