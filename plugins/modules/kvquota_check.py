#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
module: kvquota_check
short_description: Say before anything moves which namespaces will block live migrations on quota
version_added: 1.0.0
author:
  - kvquota maintainers (@kvquota)
description:
  - Read-only. For a scope (nodes, namespaces, or the whole cluster) computes, per namespace and per
    ResourceQuota that matches a virt-launcher pod, the target-pod size of every VM that would migrate
    (sized as the running KubeVirt version renders it, with the cluster's current overhead ratio), the
    headroom needed per migration batch and in total, and current used and hard.
  - Reports blockers, each with the change that fixes it. Usage already above hard (for example after an
    overhead-ratio increase), VMs that cannot live-migrate, migrations already Pending with
    C(migrationRejectedByResourceQuota), expired or orphaned reservations, Rancher project limits too small
    for the expansion. Notes Harvester's quota scaling and AAQ when present.
  - With AAQ (application-aware-quota) installed, says per namespace which of its quotas cover it and whether they
    need expansion for a migration, from the VMI calculator mode of the AAQ CR (RV(aaq)). kvquota reads AAQ's
    objects and never writes them; the native ResourceQuotas of the namespace are planned and expanded as before.
  - Plans the migration batches (respecting C(parallelMigrationsPerCluster),
    C(parallelOutboundMigrationsPerNode) and an optional per-namespace cap) that the roles then follow.
  - With O(node_capacity), every batch's target pods must also fit the free capacity (allocatable C(cpu),
    C(memory) and C(pods) minus the requests of the non-terminal pods) of the schedulable (not cordoned)
    nodes other than each VM's own node (the drained node), counting the target pods of the earlier
    batches where they landed; a batch's source pods free their node only for the batches after it. A VM
    with no room waits for a later batch; when the VMs cannot all fit, a blocker (kind
    C(insufficient_capacity)) names the free capacity and what the VMs need. Node affinity, nodeSelector,
    taints, topology spread and extended resources are not modelled.
  - Never changes anything.
extends_documentation_fragment:
  - kvquota.maintenance.connection_options
  - kvquota.maintenance.api_outage_budget
  - kvquota.maintenance.operator_namespace
  - kvquota.maintenance.sizing_options
options:
  nodes:
    description:
      - The VMs running on these nodes are checked (a node drain). Unknown nodes are an error.
      - Without O(nodes) and O(namespaces), the whole cluster is checked.
    type: list
    elements: str
    default: []
  namespaces:
    description:
      - Only these namespaces are checked. Unknown namespaces are an error.
    type: list
    elements: str
    default: []
  parallel_migrations_per_cluster:
    description:
      - Override of the KubeVirt CR's C(parallelMigrationsPerCluster) for batch planning.
    type: int
  parallel_outbound_migrations_per_node:
    description:
      - Override of the KubeVirt CR's C(parallelOutboundMigrationsPerNode) for batch planning.
    type: int
  per_namespace_cap:
    description:
      - Most extra quota one namespace may receive at once, as a resource list (resource name to quantity,
        for example C(limits.memory) to C(8Gi)). Batches are cut so no namespace needs more.
    type: dict
  non_migratable:
    description:
      - What the maintenance will do with VMs that cannot live-migrate; with V(fail) they are blockers.
    type: str
    choices: [fail, shutdown, skip]
    default: fail
  node_capacity:
    description:
      - Plan the batches within the free capacity of the nodes, from the requests of every pod of the cluster
        (read with the pods the check lists anyway, or one more list call when the scope is one node or one
        namespace). V(false) plans by the migration limits and quotas alone.
    type: bool
    default: true
  drain_together:
    description:
      - The nodes of O(nodes) are a wave drained together by one run (kvquota_migrate with O(nodes), rolling_upgrade
        with O(kvquota.maintenance.rolling_upgrade#role:main:rolling_upgrade_max_unavailable) above 1), all cordoned
        before the first batch; with O(node_capacity) no target pod is planned onto any of them. V(false) (one
        node at a time) plans a VM's target pod onto any schedulable node but its own.
    type: bool
    default: false
  max_unavailable:
    description:
      - How many nodes of O(nodes) a rolling upgrade may drain together (a whole number of at least 1, or a
        percentage of the nodes such as C(25%), rounded down and at least 1). Given, the result has RV(waves).
    type: raw
  report:
    description:
      - How much of the report the result carries.
      - V(compact) leaves out what grows with the VMs, so that a check of thousands of VMs returns quickly
        through Ansible. It keeps the verdict, RV(blockers) (each with its fix), RV(findings), RV(fixes),
        RV(batches) (the plan the roles follow), and per namespace its verdict, C(summary) (counts of VMs,
        migrating VMs, VMIs not running and blockers), its quotas (C(name), C(owner), C(hard), C(used),
        C(free), C(needed), C(over_after), C(status_synced), C(fixes)), C(quotas_not_matching) and C(needed).
      - V(full) adds per namespace the VM entries (C(vms), with target-pod sizes), the VMIs not running
        (C(not_running)), its C(blockers), C(warnings) and C(fixes), and per quota its whole plan (C(batches)
        with the needs per batch, C(charge_total), C(needed_all_at_once), C(over_hard), C(used_after),
        C(scopes), C(tracks), C(backend)).
      - O(report_file) writes the full report whatever this option says.
    type: str
    choices: [compact, full]
    default: compact
  plan:
    description:
      - Also return RV(plan), the versioned plan M(kvquota.maintenance.kvquota_migrate) takes as O(kvquota.maintenance.kvquota_migrate#module:plan)
        (the node_maintenance role asks for it). It grows with the migrating VMs (a few hundred bytes each).
    type: bool
    default: false
    version_added: 1.0.0
  report_file:
    description:
      - Also write the full report (as with O(report=full)) as JSON to this path on the host the module runs
        on, with mode C(0600), replacing the file atomically. The directory must exist.
      - Written in check mode too (the report is the module's output; nothing in the cluster changes), and
        the result stays unchanged (C(changed=false)).
    type: path
attributes:
  check_mode:
    support: full
    description: The module never changes anything.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
seealso:
  - module: kvquota.maintenance.kvquota_reserve
  - module: kvquota.maintenance.kvquota_release
'''

EXAMPLES = r'''
- name: Will draining node-1 stall on quota?
  kvquota.maintenance.kvquota_check:
    nodes: [node-1]
  register: plan

- name: Stop if any namespace is blocked
  ansible.builtin.assert:
    that: plan.verdict != 'blocked'
    fail_msg: "{{ plan.blockers | map(attribute='message') | list }}"

- name: What would a ratio of 4.5 do to the whole cluster?
  kvquota.maintenance.kvquota_check:
    overhead_ratio: "4.5"

- name: Whole cluster, with the per-VM report written to a file
  kvquota.maintenance.kvquota_check:
    report_file: /var/tmp/kvquota-check.json

- name: Every VM's target-pod size in the result
  kvquota.maintenance.kvquota_check:
    namespaces: [tenant-a]
    report: full
  register: full_plan
'''

RETURN = r'''
verdict:
  description: V(ok) (fits as is), V(needs_reservation) (fits once quotas are expanded), or V(blocked).
  returned: always
  type: str
  sample: needs_reservation
namespaces:
  description:
    - Per namespace; its verdict, C(summary) (counts C(vms), C(migrating_vms), C(not_running), C(blockers)),
      its matching quotas (C(quotas)) with owner, hard, used, free, needed in total, what exceeds hard after
      the migrations (C(over_after)), C(status_synced) and their fixes, the quotas that match no target pod
      (C(quotas_not_matching)) and the headroom it needs per quota (C(needed)).
    - With O(report=full) also its VMs with target-pod sizes (C(vms)), the VMIs not running (C(not_running)),
      each quota's whole plan (needs per batch in C(batches), C(charge_total), C(needed_all_at_once),
      C(over_hard), C(used_after), C(scopes), C(tracks), C(backend)), and its C(blockers), C(warnings) and
      C(fixes) (the namespace's part of RV(blockers), RV(findings) and RV(fixes)).
  returned: always
  type: dict
  sample:
    tenant-a:
      verdict: needs_reservation
      summary: {vms: 2, migrating_vms: 2, not_running: 0, blockers: 0}
      quotas:
        - name: compute
          owner: plain
          hard: {limits.memory: 5000Mi}
          used: {limits.memory: 4000Mi}
          free: {limits.memory: 1000Mi}
          needed: {limits.memory: 1000Mi}
          over_after: {}
          status_synced: true
          fixes: ["raise limits.memory of quota tenant-a/compute to 6000Mi for the maintenance window ..."]
      quotas_not_matching: []
      needed: {compute: {limits.memory: 1000Mi}}
report:
  description: What the result carries, O(report).
  returned: always
  type: str
  sample: compact
report_file:
  description: The path the full report was written to.
  returned: when O(report_file) is set
  type: str
scope_nodes:
  description: The nodes of O(nodes), each with C(unschedulable) (cordoned) as read before anything moved.
  returned: always
  type: dict
  sample: {node-1: {unschedulable: false}}
  version_added: 1.0.0
plan:
  description:
    - The versioned plan (C(kind) V(kvquota.maintenance/plan), C(version) 1) for O(kvquota.maintenance.kvquota_migrate#module:plan).
    - C(batches) as in RV(batches); per migrating VM (C(vms), key C(namespace/name)) what its reservation is computed
      from, C(charge) (the migration's charge), C(pod_charge) (the target pod alone), C(source) (the live source
      pod's usage) and C(facts) (what quota scopes look at), with the C(uid) and C(resourceVersion) of its VMI; the
      KubeVirt CR's identity (C(kubevirt)), per namespace its C(labels) and the resource names its quotas C(tracks),
      the sizing overrides (C(sizing)) and C(cluster_facts).
    - Amounts are exact integers of nano-units (the value times 10^9), never formatted strings.
  returned: when O(plan=true)
  type: dict
  sample:
    kind: kvquota.maintenance/plan
    version: 1
    created: "2026-11-25T01:30:00Z"
    scope: {nodes: [node-1], namespaces: []}
    sizing: {kubevirt_version: null, overhead_ratio: null}
    kubevirt: {namespace: kubevirt, name: kubevirt, uid: 5b0c..., resourceVersion: "1204"}
    cluster_facts: {harvester: false, harvester_version: null, rancher_projects: false, aaq: false}
    batches: [[tenant-a/vm1]]
    namespaces: {tenant-a: {labels: {kubernetes.io/metadata.name: tenant-a}, tracks: [limits.memory]}}
    vms:
      tenant-a/vm1:
        uid: 8a1f...
        resourceVersion: "5521"
        node: node-1
        charge: {limits.memory: 2415919104000000000}
        pod_charge: {limits.memory: 2415919104000000000}
        source: {limits.memory: 2415919104000000000}
        source_pod: {name: virt-launcher-vm1-abcde, uid: 0c3e...}
        facts: {priority_class_name: null, terminating: false, best_effort: false, cross_namespace_pod_affinity: false}
batches:
  description:
    - The planned migration batches, each with its index, VMs (C(namespace/name)) and source nodes; the
      plan M(kvquota.maintenance.kvquota_migrate) runs. Returned in full with either O(report).
  returned: always
  type: list
  elements: dict
blockers:
  description: Everything that stops the maintenance, each with kind, namespace, message and fix.
  returned: always
  type: list
  elements: dict
findings:
  description:
    - Findings that do not block (Harvester or AAQ present, migrations in progress, ...), each with kind,
      namespace and message (the C(warnings) of the core report; the first ones are also shown as Ansible warnings).
    - The VMs blocked alone (RV(blocked_vms)) are findings too, with C(vm), C(field) and C(blocks) V(vm).
  returned: always
  type: list
  elements: dict
blocked_vms:
  description:
    - The VMs blocked alone, which stay where they are while the other VMs of their node and namespace are planned
      (they are in no batch, and neither in RV(blockers) nor in the verdict). Each with C(namespace), C(vm),
      C(kind), C(field), C(scope) (V(vm), or V(namespace) when the input is the namespace's), C(message) (naming
      the namespace, the VM and the field) and C(fix).
    - C(kind) V(vm_input_invalid), input the VM's owner writes cannot be sized (for example annotation
      C(hooks.kubevirt.io/hookSidecars) that is not valid JSON, a quantity in the VM's spec, or a namespace label
      C(alpha.kubevirt.io/auto-memory-limits-ratio) that gives KubeVirt no valid memory limit (NaN, Inf, or a limit
      beyond int64; a value KubeVirt reads as its default 2.0, below 1.0 or not a number, is sized as 2.0 like KubeVirt
      does), or a Rancher quota annotation C(field.cattle.io/resourceQuota) that is not valid JSON.
    - C(kind) V(shared_resource_claim), its C(spec.resourceClaims) names an existing DRA ResourceClaim
      (C(resourceClaimName)); a migration target would share it, and its allocation ties it to the source's node,
      so the target stays unschedulable. C(kind) V(claim_templates_unreadable), its target gets DRA claims from
      ResourceClaimTemplates that a quota of its namespace charges, and those could not be read (RBAC, or DRA not
      served). C(kind) V(claim_not_owned), a DRA claim of its running pod is no longer owned by the pod (its
      ownerReference was removed), so it would outlive the migration and keep its devices once the reservation is
      given back. A missing ResourceClaimTemplate, or one whose spec cannot be charged, is V(vm_input_invalid).
    - C(kind) V(vm_grows), its owner changed it since it started (a hook sidecar annotation, the namespace's
      memory-limit ratio label, a pending CPU or memory hotplug) so that its target pod would charge more than its
      running pod and a quota of its namespace would end above its hard after the migrations. No fix raises the
      quota for it. Growth kvquota cannot attribute to the VM's owner (a KubeVirt configuration or version change)
      stays the quota's C(usage_above_hard) blocker.
  returned: always
  type: list
  elements: dict
  sample:
    - namespace: tenant-a
      vm: db-1
      kind: vm_input_invalid
      field: metadata.annotations[hooks.kubevirt.io/hookSidecars]
      scope: vm
      message: "VM tenant-a/db-1 cannot be sized, metadata.annotations[hooks.kubevirt.io/hookSidecars]: annotation
        hooks.kubevirt.io/hookSidecars is not valid JSON"
      fix: "fix the VM's hook sidecar annotation ...; the VM stays where it is until then, the other VMs are not held up"
  version_added: 1.0.0
overhead_differences:
  description:
    - The running VMs whose launcher pod memory overhead as KubeVirt reports it differs from the one kvquota computes
      for them with the cluster's configuration now (the same KubeVirt version and overhead ratio the check sizes
      with), or cannot be read. KubeVirt v1.9.0 and later report it (feature gate C(VmiMemoryOverheadReport), Beta,
      on by default) in the VMI's C(status.memory.memoryOverhead) (the running pod's; after a migration, the target
      pod's) and, during a migration, C(status.migrationState.targetMemoryOverhead) (the target pod's, compared only
      while the migration is under way). Older versions, or the gate off, report nothing and the list stays empty.
    - Each with C(namespace), C(vm), C(field) (which of the two), C(reported) and C(computed) (bytes, with
      C(reported_quantity) and C(computed_quantity) as quantity strings), C(difference) (reported minus computed) and
      C(why), the likely reason, checked by recomputing where it can be. The overhead ratio or the KubeVirt version
      changed since the VM started (its pod was rendered with the ratio or version named, and its target pod will be
      sized with the current ones). Otherwise a sizing rule kvquota lacks. A value that is not a quantity of whole,
      non-negative bytes has C(reported) null and C(malformed) saying what is wrong with it.
    - Reported only. A tenant with KubeVirt's edit role can write a VMI's status (the VMI has no status subresource
      and virt-api checks only spec and reserved-label changes), so the value never changes a size, a plan or a
      reservation, and a malformed one blocks nothing. Where KubeVirt reports more than kvquota computes for no
      known reason, give a C(safety_margin) or report the VM to the maintainers.
  returned: always
  type: list
  elements: dict
  sample:
    - namespace: tenant-a
      vm: db-1
      field: status.memory.memoryOverhead
      reported: 287727616
      reported_quantity: 280984Ki
      computed: 431591616
      computed_quantity: "431591616"
      difference: -143864000
      why: "the overhead ratio changed since the VM started: its pod was rendered with ratio unset, the cluster has
        1.5 now (its target pod is sized with the current one)"
  version_added: 1.0.0
fixes:
  description: The changes an operator should make, as text and data, for example raising a quota.
  returned: always
  type: list
  elements: dict
kubevirt:
  description: The KubeVirt configuration the sizing and planning used (version, ratio, parallel limits).
  returned: always
  type: dict
waves:
  description:
    - With O(max_unavailable), the waves of a rolling upgrade over O(nodes) in their order, at most
      O(max_unavailable) nodes each; a node joins a wave only while the other schedulable nodes have room for
      every VM of the wave's nodes (with O(node_capacity)). The upgrade is simulated wave after wave, each wave's
      target pods placed on the nodes already upgraded first (as rolling_upgrade's steering taint makes the
      scheduler do); C(moved_again) names the VMs of a wave an earlier wave moved there (a second move capacity
      forces; the first wave's VMs have no upgraded node to go to). C(vms) counts the VMs on the wave's nodes at
      its turn.
  returned: with O(max_unavailable)
  type: list
  elements: dict
  sample: [{"nodes": ["worker-1", "worker-2"], "vms": 12, "moved_again": []}]
capacity:
  description:
    - The free capacity the plan used (O(node_capacity)). C(checked) (false with O(node_capacity=false)),
      C(nodes) (per node C(schedulable) and C(free) C(requests.cpu), C(requests.memory) and C(pods) before
      anything moves; negative when overcommitted), C(no_room) (the VMs, as C(namespace/name), that fit in no batch, see the
      C(insufficient_capacity) blocker) and C(not_modelled) (what the model leaves out).
  returned: always
  type: dict
  sample:
    checked: true
    no_room: []
    nodes:
      node-2: {schedulable: true, free: {pods: "108", requests.cpu: 63595m, requests.memory: 251Gi}}
    not_modelled: node affinity and nodeSelector, taints and tolerations, ...
aaq:
  description:
    - Null when AAQ (application-aware-quota, API group C(aaq.kubevirt.io)) is not served or its quotas are not
      readable. Read only; kvquota never writes an AAQ object.
    - C(mode), the VMI calculator mode of the AAQ CR (C(aaqs.aaq.kubevirt.io),
      C(spec.configuration.vmiCalculatorConfiguration.configName); AAQ's controller uses V(VmiPodUsage) when it is
      empty), null when no AAQ CR is readable; C(mode_read_from), where it was read.
    - C(migration_charge), what AAQ charges a migration's target pod. V(growth) for V(VmiPodUsage),
      V(VirtualResources), V(DedicatedVirtualResources) and V(GuestEffectiveResources) (only what the target pod adds
      over its source). V(source_and_target) for V(IgnoreVmiCalculator) (both launcher pods count whole). V(unknown)
      when the mode is not known.
    - C(namespaces), per namespace in scope that an AAQ object covers (others are left out). C(quotas) is a list of
      C(kind) (V(ApplicationAwareResourceQuota) in the namespace, or V(ApplicationAwareClusterResourceQuota) whose
      C(spec.selector) selects it), C(namespace) and C(name). C(gated) says whether the AAQ CR's
      C(spec.namespaceSelector) (default label key C(application-aware-quota/enable-gating)) makes AAQ gate its
      pods; null when not known. C(needs_expansion) is false when AAQ charges only the growth or does not gate the
      namespace. It is true when a migration is charged source and target. kvquota does not expand AAQ quotas, so
      AAQ's gate may hold the target pod; a finding C(aaq_migration_charged_twice) says so. It is null when the mode
      is not known. C(reason) says why. C(fix) is the mode to switch to (on the HyperConverged CR when HCO manages
      AAQ), else null.
    - C(native_quotas), the native ResourceQuotas of the namespace a target pod is charged against. AAQ does not
      relieve them, so they are planned and expanded as before (see RV(namespaces)), except
      C(aaq_managed_quotas), those of them AAQ keeps for an ApplicationAwareResourceQuota
      (C(<arq>-non-schedulable-resources-managed-rq-x), with a controller ownerReference to the ARQ). AAQ rewrites
      them from the ARQ, so kvquota never writes them; a blocker C(read_only_quota_lacks_room) names one that lacks
      room for a migration, with the ARQ to raise, else a note C(read_only_quota).
  returned: always
  type: dict
  sample:
    mode: GuestEffectiveResources
    mode_read_from: AAQ aaq-kubevirt-hyperconverged spec.configuration.vmiCalculatorConfiguration.configName
    migration_charge: growth
    namespaces:
      tenant-a:
        quotas:
          - {kind: ApplicationAwareResourceQuota, namespace: tenant-a, name: vm-quota}
          - {kind: ApplicationAwareClusterResourceQuota, namespace: null, name: tenant-wide}
        gated: true
        needs_expansion: false
        reason: "AAQ's mode GuestEffectiveResources (...) charges a migration's target pod only its growth over its
          source: these AAQ quotas need no expansion"
        fix: null
        native_quotas: [compute]
        aaq_managed_quotas: []
  version_added: 1.0.0
summary:
  description: Counts of namespaces per verdict, VMs, migrating VMs, batches, blockers, VMs blocked alone
    (C(blocked_vms)) and VMs whose reported memory overhead differs (C(overhead_differences)).
  returned: always
  type: dict
scope:
  description: The nodes and namespaces checked.
  returned: always
  type: dict
requests:
  description: API requests the check made.
  returned: always
  type: int
'''

import json
import os
import tempfile

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import check as check_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import report as render
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota_module import (
    SIZING_ARG_SPEC,
    auth_params,
    connect,
    new_module,
    run,
)

PLAN_OPTIONS = ('kubevirt_version', 'overhead_ratio', 'parallel_migrations_per_cluster',
                'parallel_outbound_migrations_per_node', 'per_namespace_cap', 'non_migratable', 'node_capacity',
                'drain_together', 'max_unavailable')
MAX_WARNINGS = 10


def write_report(path, report):
    """Write report as JSON to path, mode 0600, atomically (a temporary file beside it, then renamed)."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        handle, temporary = tempfile.mkstemp(prefix='.kvquota-check-', suffix='.json', dir=directory)
    except OSError as err:
        raise InputError('cannot write report_file %s: %s' % (path, err.strerror or err),
                         'give a path in an existing directory the module may write to')
    try:
        with os.fdopen(handle, 'w') as stream:
            json.dump(report, stream, sort_keys=True)
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except OSError as err:
        os.unlink(temporary)
        raise InputError('cannot write report_file %s: %s' % (path, err.strerror or err),
                         'give a path (not a directory) the module may write to')


def check(module):
    params = module.params
    cluster = connect(auth_params(params), outage_budget=params['api_outage_budget'])
    options = dict((name, params[name]) for name in PLAN_OPTIONS if params[name] is not None)
    options['operator_namespace'] = params['operator_namespace']
    options['plan'] = params['plan']
    report = check_mod.check(cluster, {'nodes': params['nodes'], 'namespaces': params['namespaces']}, options)
    # exit_json reserves 'warnings' for strings; the report's warnings are structured findings.
    report['findings'] = report.pop('warnings', [])
    for finding in report['findings'][:MAX_WARNINGS]:
        module.warn(str(finding.get('message') or finding.get('kind')))
    if len(report['findings']) > MAX_WARNINGS:
        module.warn('%d more findings; see findings in the result' % (len(report['findings']) - MAX_WARNINGS))
    if params['report_file']:
        write_report(params['report_file'], report)
    result = report if params['report'] == 'full' else render.compact(report)
    result['report'] = params['report']
    if params['report_file']:
        result['report_file'] = params['report_file']
    result['changed'] = False
    return result


def main():
    module = new_module(
        dict(
            nodes=dict(type='list', elements='str', default=[]),
            namespaces=dict(type='list', elements='str', default=[]),
            parallel_migrations_per_cluster=dict(type='int'),
            parallel_outbound_migrations_per_node=dict(type='int'),
            per_namespace_cap=dict(type='dict'),
            non_migratable=dict(type='str', choices=['fail', 'shutdown', 'skip'], default='fail'),
            node_capacity=dict(type='bool', default=True),
            drain_together=dict(type='bool', default=False),
            max_unavailable=dict(type='raw'),
            report=dict(type='str', choices=['compact', 'full'], default='compact'),
            report_file=dict(type='path'),
            plan=dict(type='bool', default=False),
            **SIZING_ARG_SPEC
        ),
        supports_check_mode=True,
    )
    run(module, check)


if __name__ == '__main__':
    main()
