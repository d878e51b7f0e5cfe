# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the cluster's configuration says: the sizing ClusterConfig (KubeVirt CR, Harvester settings, the
caller's overrides), KubeVirt's migration limits, the facts owners.registry.owner_of wants, the default
PriorityClass. Read from an inventory snapshot (inventory.read_inventory); nothing here calls the API.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import dataclasses

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.config import config_from_cluster
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import meta
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan.scheduling import (
    DEFAULT_PARALLEL_OUTBOUND_PER_NODE,
    DEFAULT_PARALLEL_PER_CLUSTER,
    positive_int,
)


def kubevirt_migrations(kubevirt_cr):
    """spec.configuration.migrations of the KubeVirt CR ({} when unset or no CR)."""
    return (((kubevirt_cr or {}).get("spec") or {}).get("configuration") or {}).get("migrations") or {}


def migration_limits(kubevirt_cr, options):
    """(parallel per cluster, parallel outbound per node) from options, else the KubeVirt CR, else defaults."""
    migrations = kubevirt_migrations(kubevirt_cr)
    # an override given (even 0, which is then refused) wins over the CR
    per_cluster = options.get("parallel_migrations_per_cluster")
    if per_cluster is None:
        per_cluster = migrations.get("parallelMigrationsPerCluster") or DEFAULT_PARALLEL_PER_CLUSTER
    per_node = options.get("parallel_outbound_migrations_per_node")
    if per_node is None:
        per_node = migrations.get("parallelOutboundMigrationsPerNode") or DEFAULT_PARALLEL_OUTBOUND_PER_NODE
    return (positive_int(per_cluster, "parallel_migrations_per_cluster"),
            positive_int(per_node, "parallel_outbound_migrations_per_node"))


def cluster_config(snapshot, options):
    """The sizing ClusterConfig: KubeVirt CR + Harvester settings, with the caller's overrides."""
    config = config_from_cluster(snapshot.kubevirt, snapshot.harvester_settings,
                                 kubevirt_version=options.get("kubevirt_version"))
    ratio = options.get("overhead_ratio")
    if ratio is None:
        return config
    return dataclasses.replace(config, overhead_ratio=str(ratio))


def cluster_facts(snapshot):
    """What owners.registry.owner_of wants to know about the cluster (harvester, harvester_version, rancher_projects,
    aaq), as the connection discovered it (Snapshot.cluster_facts: client.cluster.Cluster.facts, the one place they
    are told, which the reservations service asks too, so that the check and the reservations choose the same owner
    for a quota); all false for a snapshot read without discovery."""
    found = snapshot.cluster_facts or {}
    return {
        "harvester": bool(found.get("harvester")),
        "harvester_version": found.get("harvester_version"),
        "rancher_projects": bool(found.get("rancher_projects")),
        "aaq": bool(found.get("aaq")),
    }


def default_priority_class(snapshot):
    """The name of the globalDefault PriorityClass, if any."""
    for pc in snapshot.priority_classes or ():
        if pc.get("globalDefault"):
            return meta(pc).get("name")
    return None
