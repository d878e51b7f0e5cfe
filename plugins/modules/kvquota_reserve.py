#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
module: kvquota_reserve
short_description: Expand tenant ResourceQuotas for the live migrations about to start
version_added: 1.0.0
author:
  - kvquota maintainers (@kvquota)
description:
  - Expands every ResourceQuota that will charge the migration target pods by exactly the headroom they need,
    recorded as reservation O(reservation_id) in the quota's ledger (base + active deltas), a ConfigMap in
    O(operator_namespace) that only the operator can write, with an expiry. M(kvquota.maintenance.kvquota_release) later restores the quota from that ledger.
  - The headroom is computed just before the batch from O(vms) (the whole target pod of each VM as the running
    KubeVirt renders it, minus the room the quota already has), given as O(headroom), or, with O(migrations),
    topped up by exactly what quota admission refused for those migrations.
  - Writes go through the quota's owner. Plain quotas get C(spec.hard). Rancher-managed quotas get the
    namespace annotation C(field.cattle.io/resourceQuota), so Rancher does not revert the change, after checking
    the project limit. Harvester's own migration scaling is switched off on the quota for the duration and put
    back as it was. ApplicationAwareResourceQuotas (AAQ) need no expansion and are left alone.
  - Idempotent. The same id and headroom again changes nothing. A different headroom for an existing id is an
    error unless it is a top-up. Every write is conditional on C(resourceVersion) and retried on conflict, and a
    Lease per namespace keeps two jobs from planning against the same quotas at once.
  - Every expansion is announced by a Kubernetes Event on the quota that the tenant can read.
  - Returns only once quota admission enforces the reservation. Admission checks a quota's C(status.hard), which
    kube-controller-manager copies from C(spec.hard) and which can lag after an API server restart, so a
    migration started at once could still be refused at the old limit. The module waits, re-reading only the
    quotas it changed, up to O(api_outage_budget) + 60 s (client-go informers, the controller's included, retry
    a lost API server at intervals that grow to 30-60 s), and fails naming C(spec.hard) and C(status.hard) if
    C(status.hard) never shows what it wrote; the reservation then stays held (re-run, or release it).
extends_documentation_fragment:
  - kvquota.maintenance.connection_options
  - kvquota.maintenance.api_outage_budget
  - kvquota.maintenance.operator_namespace
  - kvquota.maintenance.reservation_options
  - kvquota.maintenance.sizing_options
options:
  reservation_id:
    description:
      - Id of the reservation, for example C(node-1-b0) or the AWX job id and batch.
    type: str
    required: true
  vms:
    description:
      - The VMs (VirtualMachineInstances) whose migrations start together; headroom is computed for all of them
        at once.
      - Where the headroom fence (C(roles/install/files/fence.yml)) is installed, their namespaces are fenced until the release,
        and it admits target pods only for migrations a reservation lists, which this module does not (it creates
        none), so the target pods of migrations you create yourself are refused until the release. Let
        M(kvquota.maintenance.kvquota_migrate) create and list them.
      - Exactly one of O(vms), O(headroom) and O(migrations) is required.
    type: list
    elements: dict
    suboptions:
      namespace:
        description: Namespace of the VM.
        type: str
        required: true
      name:
        description: Name of the VM.
        type: str
        required: true
  plan:
    description:
      - With O(vms), the versioned plan of M(kvquota.maintenance.kvquota_check) (C(plan=true), RV(kvquota.maintenance.kvquota_check#module:plan)).
        A VM of O(vms) whose inputs did not change since the plan (its VMI's UID and resourceVersion, its
        namespace's labels and tracked resource names, the KubeVirt CR, the sizing overrides) keeps its planned
        charge and only the VMs' VMIs, namespaces and quotas, the ledgers and the KubeVirt CR are read; otherwise
        the VMs are sized again from a full read of their namespaces.
    type: dict
    version_added: 1.0.0
  headroom:
    description:
      - Explicit headroom per quota, for example taken from a batch of M(kvquota.maintenance.kvquota_check).
    type: list
    elements: dict
    suboptions:
      namespace:
        description: Namespace of the quota.
        type: str
        required: true
      quota:
        description: Name of the ResourceQuota.
        type: str
        required: true
      resources:
        description:
          - Resource list to add, resource name to quantity, for example C(limits.memory) to C(4Gi).
        type: dict
        required: true
  migrations:
    description:
      - VirtualMachineInstanceMigrations that report C(migrationRejectedByResourceQuota). The reservation is
        topped up from what only the control plane and KubeVirt write (never from Events, which tenants can
        post), by what each quota's status (used, hard) lacks for the migrations' target pods of the computed
        size, or, when that is nothing (the pods are larger than computed), by O(top_up_cap)'s share of their
        computed charge. A FailedCreate Event verified to be about the migration (its UID, reported by
        virt-controller) may only name which quota refused. A top-up never exceeds the refused pods' computed
        charge. The same refusal is never added twice.
    type: list
    elements: dict
    suboptions:
      namespace:
        description: Namespace of the migration.
        type: str
        required: true
      name:
        description: Name of the migration.
        type: str
        required: true
  reason:
    description:
      - Why, recorded in the ledger and in the Events the tenant sees.
    type: str
    default: live migration during node maintenance
attributes:
  check_mode:
    support: full
    description: Computes and checks everything, writes nothing, returns the plan.
  diff_mode:
    support: full
    description: Shows C(spec.hard) of every quota it would touch, before and after.
seealso:
  - module: kvquota.maintenance.kvquota_check
  - module: kvquota.maintenance.kvquota_release
'''

EXAMPLES = r'''
- name: Reserve for the VMs of the first batch
  kvquota.maintenance.kvquota_reserve:
    reservation_id: node-1-b0
    vms:
      - {namespace: tenant-a, name: db-1}
      - {namespace: tenant-b, name: web-2}
    safety_margin: 2%
    ttl: 2h

- name: Top up by exactly what admission refused
  kvquota.maintenance.kvquota_reserve:
    reservation_id: node-1-b0
    migrations:
      - {namespace: tenant-a, name: kvq-db-1}
    top_up_cap: {limits.memory: 1Gi, limits.cpu: 500m}

- name: Explicit headroom
  kvquota.maintenance.kvquota_reserve:
    reservation_id: change-4711
    headroom:
      - namespace: tenant-a
        quota: compute
        resources: {limits.memory: 4Gi}
'''

RETURN = r'''
reservation_id:
  description: The reservation.
  returned: always
  type: str
  sample: node-1-b0
quotas:
  description: Per quota reserved on, C(spec.hard) before and after, the delta, the outcome and the expiry.
  returned: always
  type: list
  elements: dict
  sample:
    - namespace: tenant-a
      quota: compute
      before: {limits.memory: 5000Mi}
      after: {limits.memory: 9096Mi}
      delta: {limits.memory: 4Gi}
      outcome: reserved
      expires: "2026-11-22T10:00:00Z"
      changed: true
skipped:
  description: Quotas left alone and why (AAQ, or the quota tracks none of the resources).
  returned: always
  type: list
  elements: dict
headroom:
  description: The headroom asked for per quota, as C(namespace/quota) to resource list, before the margin.
  returned: always
  type: dict
refs:
  description: The VMs and source pods recorded with the reservation (release waits for those pods).
  returned: with O(vms)
  type: dict
status_hard_wait_seconds:
  description: How long the module waited for C(status.hard) to show what it wrote (quota admission enforcing it).
  returned: always
  type: float
  sample: 0.0
warnings:
  description: External changes found (a Rancher revert re-applied, an administrator's new base kept).
  returned: always
  type: list
  elements: str
'''

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import headroom as headroom_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import versioned
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import reservations
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.durations import parse_duration
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import format_resource_list, parse_resource_list
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota_module import (
    RESERVATION_ARG_SPEC,
    SIZING_ARG_SPEC,
    auth_params,
    connect,
    new_module,
    reservation_owner,
    run,
    run_lock,
)

SIZING_OPTIONS = ('kubevirt_version', 'overhead_ratio')


def reserve(module):
    params = module.params
    given = [name for name in ('vms', 'headroom', 'migrations') if params[name]]
    if len(given) != 1:
        raise InputError('give exactly one of vms, headroom or migrations (got %s)' % (', '.join(given) or 'none'),
                         'vms for a batch about to migrate, headroom for explicit amounts, migrations to top up')
    ttl = parse_duration(params['ttl'], 'ttl')
    if params['plan'] is not None and not params['vms']:
        raise InputError('plan is given without vms', 'name the VMs of the batch to reserve for in vms')
    planned = versioned.load(params['plan']) if params['plan'] is not None else None
    cluster = connect(auth_params(params), outage_budget=params['api_outage_budget'])
    refs, top_up = None, False
    if params['vms']:
        options = dict((name, params[name]) for name in SIZING_OPTIONS if params[name] is not None)
        options['operator_namespace'] = params['operator_namespace']
        headroom, refs, _sized = headroom_mod.batch_headroom(cluster, params['vms'], options, planned)
    elif params['headroom']:
        headroom = {}
        for entry in params['headroom']:
            headroom[(entry['namespace'], entry['quota'])] = entry['resources']
    else:
        headroom_mod.parse_top_up_cap(params['top_up_cap'])
        options = dict((name, params[name]) for name in SIZING_OPTIONS if params[name] is not None)
        options['operator_namespace'] = params['operator_namespace']
        headroom, top_up = headroom_mod.refused_headroom(cluster, params['migrations'], params['top_up_cap'], options)
        if not headroom:
            return {'changed': False, 'reservation_id': params['reservation_id'], 'quotas': [], 'skipped': [],
                    'headroom': {}, 'status_hard_wait_seconds': 0.0,
                    'message': 'none of the migrations reports a quota rejection: nothing to add'}
    service = reservations.Reservations(cluster, params['operator_namespace'], run_lock(params),
                                        check_mode=module.check_mode)
    result = service.reserve(reservations.ReserveRequest(params['reservation_id'], headroom, reservation_owner(params),
                                                         params['reason'], ttl, margin=params['safety_margin'],
                                                         top_up=top_up, refs=refs))
    # computed headroom is exact (Fractions): shown as the apiserver would print it
    result['headroom'] = dict(('%s/%s' % key, format_resource_list(parse_resource_list(value, 'headroom')))
                              for key, value in sorted(headroom.items()))
    if refs is not None:
        result['refs'] = refs
    return result


def main():
    vm_spec = dict(namespace=dict(type='str', required=True), name=dict(type='str', required=True))
    module = new_module(
        dict(
            reservation_id=dict(type='str', required=True),
            vms=dict(type='list', elements='dict', options=vm_spec),
            plan=dict(type='dict'),
            headroom=dict(type='list', elements='dict', options=dict(
                namespace=dict(type='str', required=True),
                quota=dict(type='str', required=True),
                resources=dict(type='dict', required=True),
            )),
            migrations=dict(type='list', elements='dict', options=vm_spec),
            reason=dict(type='str', default='live migration during node maintenance'),
            **dict(RESERVATION_ARG_SPEC, **SIZING_ARG_SPEC)
        ),
        supports_check_mode=True,
    )
    run(module, reserve)


if __name__ == '__main__':
    main()
