#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
module: kvquota_vm_power
short_description: Stop VMs a node's maintenance cannot move, and start them again
version_added: 1.0.0
author:
  - kvquota maintainers (@kvquota)
description:
  - The policies C(shutdown) of the node_maintenance role (for VMs that cannot live-migrate, and for those kept
    back on the node). With O(state=stopped) it checks that each given VMI's controller ownerReference names the
    VirtualMachine of C(kubevirt.io) of the same name that exists with that uid, or refuses the whole list before
    anything changes (an ownerReference is the tenant's to write); a VMI gone meanwhile is left out. It records
    those VirtualMachines in the ConfigMap C(kvq-stopped-<node>) of the operator namespace, then stops each
    through KubeVirt's subresource API (C(PUT .../virtualmachines/<name>/stop), what C(virtctl stop) does). The
    VM spec is never patched.
  - With O(state=started) it starts every VM recorded for the node (C(.../start)) whose VirtualMachine still
    has the recorded uid, and deletes the record. A later run after an interruption starts exactly the VMs
    that an earlier run stopped; nothing a tenant writes can add a VM to the record or hide one from it.
  - With O(uncordon) and O(state=started) it first makes O(node) schedulable again (as C(kubectl uncordon)), so that
    node_maintenance gives the node back with one module run after its maintenance.
  - KubeVirt's semantics apply, C(spec.running) goes false and back to true, C(runStrategy) goes to
    C(Halted) and, on start, to C(Always).
  - Needs the ClusterRole C(kvquota-shutdown) and the Role C(kvquota-state) of the operator namespace
    (C(roles/install/files/), bound by C(playbooks/install.yml) with C(kvquota_bind_shutdown=true)).
extends_documentation_fragment:
  - kvquota.maintenance.connection_options
  - kvquota.maintenance.api_outage_budget
options:
  node:
    description: The node under maintenance; names the record.
    type: str
    required: true
  state:
    description: C(stopped) records and stops the VMs of O(vms); C(started) starts the recorded VMs.
    type: str
    choices: [stopped, started]
    required: true
  vms:
    description: The VMIs to stop (O(state=stopped)), each C({namespace, name}).
    type: list
    elements: dict
    default: []
  uncordon:
    description:
      - O(state=started) only. Before starting the VMs, clear the node's C(spec.unschedulable) (a merge patch
        conditional on its resourceVersion, re-read on a conflict; RBAC C(patch) on nodes, as the cordon of
        M(kvquota.maintenance.kvquota_migrate)). A node already schedulable is not written. RV(uncordon) says which.
    type: bool
    default: false
  operator_namespace:
    description: The namespace only the operator writes, where the record lives.
    type: str
    default: kvquota-system
attributes:
  check_mode:
    support: full
    description: Reads the VMIs and the record, writes and stops/starts nothing.
  diff_mode:
    support: none
    description: Reports the VMs it stopped or started in its result, not as a diff.
'''

EXAMPLES = r'''
- name: Stop the VMs that cannot live-migrate
  kvquota.maintenance.kvquota_vm_power:
    node: worker-3
    state: stopped
    vms:
      - {namespace: tenant-a, name: db-1}

- name: Make the node schedulable and start them again after the maintenance
  kvquota.maintenance.kvquota_vm_power:
    node: worker-3
    state: started
    uncordon: true
'''

RETURN = r'''
vms:
  description: The VirtualMachines concerned (recorded, or to start), each C({namespace, name, uid}).
  returned: always
  type: list
  elements: dict
stopped:
  description: The VMs a stop was sent to (a VM already stopped is left out).
  returned: state=stopped
  type: list
  elements: dict
started:
  description: The VMs a start was sent to (a VM already running is left out).
  returned: state=started
  type: list
  elements: dict
gone:
  description: Recorded VMs that no longer exist with the recorded uid (deleted, or re-created); not started.
  returned: state=started
  type: list
  elements: dict
uncordon:
  description:
    - With O(uncordon), V(uncordoned) (this run cleared C(spec.unschedulable); in check mode, would) or
      V(was_schedulable); also in a failed result once the node was uncordoned.
  returned: O(uncordon=true)
  type: str
'''

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import drain, vmpower
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    InputError,
    KvquotaError,
    NotFoundError,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota_module import (
    auth_params,
    connect,
    new_module,
    run,
)


def _vmi_refs(vms):
    refs = []
    for vm in vms:
        if not isinstance(vm.get('namespace'), str) or not isinstance(vm.get('name'), str):
            raise InputError('each entry of vms needs namespace and name, got %r' % (vm,),
                             'give vms: [{namespace: tenant-a, name: db-1}]')
        refs.append((vm['namespace'], vm['name']))
    return refs


def power(module):
    params = module.params
    if params['uncordon'] and params['state'] != 'started':
        raise InputError('uncordon is for state=started (after the maintenance)', 'leave uncordon out')
    cluster = connect(auth_params(params), outage_budget=params['api_outage_budget'])
    if params['state'] == 'stopped':
        vmis = []
        for namespace, name in _vmi_refs(params['vms']):
            try:
                vmis.append(cluster.get_custom(*vmpower.KUBEVIRT, 'virtualmachineinstances', name, namespace=namespace))
            except NotFoundError:
                pass   # stopped or deleted by its namespace since it was listed: nothing to stop
        return vmpower.stop(cluster, params['node'], vmis, operator_namespace=params['operator_namespace'],
                            check_mode=module.check_mode)
    if params['vms']:
        raise InputError('vms is for state=stopped; state=started starts the VMs recorded for the node',
                         'leave vms out')
    if not params['uncordon']:
        return vmpower.start(cluster, params['node'], operator_namespace=params['operator_namespace'],
                             check_mode=module.check_mode)
    uncordoned = drain.uncordon(cluster, params['node'], check_mode=module.check_mode)
    try:
        result = vmpower.start(cluster, params['node'], operator_namespace=params['operator_namespace'],
                               check_mode=module.check_mode)
    except KvquotaError as err:
        # the caller's state line says the node was given back
        details = dict(getattr(err, 'details', None) or {})
        err.details = dict(details, result=dict(details.get('result') or {}, uncordon=uncordoned))
        raise
    return dict(result, uncordon=uncordoned, changed=result['changed'] or uncordoned == 'uncordoned')


def main():
    module = new_module(
        dict(
            node=dict(type='str', required=True),
            state=dict(type='str', required=True, choices=['stopped', 'started']),
            vms=dict(type='list', elements='dict', default=[]),
            uncordon=dict(type='bool', default=False),
            operator_namespace=dict(type='str', default='kvquota-system'),
        ),
        supports_check_mode=True,
    )
    run(module, power)


if __name__ == '__main__':
    main()
