#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
module: kvquota_steer
short_description: Set, and always remove, the taint that steers migrations away from nodes still to be upgraded
version_added: 1.0.0
author:
  - kvquota maintainers (@kvquota)
description:
  - During a rolling upgrade the nodes still to be upgraded softly repel migration targets, so that the VMs moved
    off a node land on nodes upgraded already rather than on one that is next. This module sets and removes that
    taint, C(kvquota.io/upgrade-pending) with the effect C(PreferNoSchedule) (the scheduler only prefers other
    nodes; a VM still finds room on a tainted node when there is no other). Its value is O(record) when that is a
    valid label value, else empty.
  - With O(state=present) every node of O(nodes) is first recorded, with its Node UID, in the ConfigMap
    C(kvq-steering-<record>) of O(operator_namespace), then tainted where it lacks the taint. A run interrupted
    anywhere leaves a record listing every node it may have tainted, so the next run with O(state=absent) finds and
    removes them. An unknown node fails the task, naming it, before anything is written.
  - With O(state=absent) the taint is removed from O(nodes), or from every node of the record when O(nodes) is not
    given, and those nodes are dropped from the record, which is deleted once it lists no node. A node that no
    longer exists, or that the record does not list, is fine.
  - Only this taint is ever written (the key C(kvquota.io/upgrade-pending) with the effect C(PreferNoSchedule),
    whatever its value); every other taint of a node is kept as it is. A node's taints are written as one list,
    conditional on the node's C(resourceVersion); a concurrent change (the node controller's own taints) makes the
    node be read again and the list computed again.
  - Needs the ClusterRoles C(kvquota-read) (get nodes) and C(kvquota-write) (patch nodes) of
    C(roles/install/files/clusterrole.yml) and the Role C(kvquota-state) of the operator namespace
    (C(roles/install/files/operator-namespace.yml)).
extends_documentation_fragment:
  - kvquota.maintenance.connection_options
  - kvquota.maintenance.api_outage_budget
  - kvquota.maintenance.operator_namespace
options:
  record:
    description:
      - Names the run's record, the ConfigMap C(kvq-steering-<record>) of O(operator_namespace), and the taint's
        value. Give the same name to the calls that set and those that remove the taint, for example the role's
        name C(rolling-upgrade).
    type: str
    required: true
  nodes:
    description:
      - The nodes to taint (O(state=present), required) or to untaint (O(state=absent)).
      - With O(state=absent) and no O(nodes), every node of the record (an empty list names no node).
    type: list
    elements: str
  state:
    description:
      - V(present) records and taints O(nodes); V(absent) removes the taint and forgets the nodes.
    type: str
    choices: [present, absent]
    default: present
attributes:
  check_mode:
    support: full
    description: Reads the nodes and the record, writes nothing; RV(tainted) or RV(untainted) list what would change.
  diff_mode:
    support: full
    description: Shows the taints of every node changed, before and after.
seealso:
  - module: kvquota.maintenance.kvquota_migrate
  - module: kubernetes.core.k8s_taint
'''

EXAMPLES = r'''
- name: Steer migrations away from the nodes still to be upgraded
  kvquota.maintenance.kvquota_steer:
    record: rolling-upgrade
    nodes: [worker-2, worker-3]

- name: The node is upgraded, it takes VMs again
  kvquota.maintenance.kvquota_steer:
    record: rolling-upgrade
    nodes: [worker-2]
    state: absent

- name: Remove the taint from every node the run (or an interrupted one) tainted
  kvquota.maintenance.kvquota_steer:
    record: rolling-upgrade
    state: absent
'''

RETURN = r'''
tainted:
  description: The nodes this task tainted (in check mode, would taint); a node that carried the taint already is left
    out.
  returned: O(state=present)
  type: list
  elements: str
  sample: [worker-2, worker-3]
untainted:
  description: The nodes whose taint this task removed (in check mode, would remove); a node without the taint, or
    gone, is left out.
  returned: O(state=absent)
  type: list
  elements: str
  sample: [worker-2]
record:
  description: The name of the record ConfigMap in O(operator_namespace).
  returned: always
  type: str
  sample: kvq-steering-rolling-upgrade
'''

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import steering
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota_module import (
    auth_params,
    connect,
    new_module,
    run,
)


def steer(module):
    params = module.params
    cluster = connect(auth_params(params), outage_budget=params['api_outage_budget'])
    if params['state'] == 'present':
        return steering.taint(cluster, params['operator_namespace'], params['record'], params['nodes'],
                              check_mode=module.check_mode)
    return steering.untaint(cluster, params['operator_namespace'], params['record'], params['nodes'],
                            check_mode=module.check_mode)


def main():
    module = new_module(
        dict(
            record=dict(type='str', required=True),
            nodes=dict(type='list', elements='str'),
            state=dict(type='str', choices=['present', 'absent'], default='present'),
        ),
        required_if=[('state', 'present', ('nodes',))],
        supports_check_mode=True,
    )
    run(module, steer)


if __name__ == '__main__':
    main()
