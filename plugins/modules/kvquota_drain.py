#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
module: kvquota_drain
short_description: Evict the pods on a node that pose as VM pods, what kubernetes.core.k8s_drain's label selector leaves
version_added: 1.0.0
author:
  - kvquota maintainers (@kvquota)
description:
  - Goes with M(kubernetes.core.k8s_drain) and C(pod_selectors=[kubevirt.io!=virt-launcher]). That selector
    leaves the VM pods to the live migrations, but it trusts a label, which any tenant with C(edit) in its namespace can
    label a pod of its own C(kubevirt.io=virt-launcher) and bind it to the node.
  - This module lists the pods on O(node) labelled C(kubevirt.io=virt-launcher) and keeps only the VM pods by
    ownership and by what KubeVirt writes, each with a controller ownerReference to a VirtualMachineInstance's
    UID, the VMI's active launcher (its C(status.activePods)), the target pod of a migration of that VMI still
    under way (the VMI's C(status.migrationState) or a running VirtualMachineInstanceMigration's status), the
    source pod of its completed migration (KubeVirt ends it), or a finished pod of that VMI. Every other one (labels only, an ownerReference to
    no VMI, or to a real VMI that does not count the pod as its own) is evicted.
  - Evictions go through the Eviction API (C(POST .../pods/<name>/eviction), policy/v1, conditional on the pod's
    uid), as k8s_drain makes them; a 429 (a PodDisruptionBudget) is retried until O(wait_timeout), then the module
    fails naming the pod. It then waits until each evicted pod is gone or terminating.
  - The pods are chosen as k8s_drain would have chosen them without the label (O(force), O(ignore_daemonsets),
    O(delete_emptydir_data); mirror pods are left). When k8s_drain would refuse one, the module fails before
    evicting anything, naming the pods and the option.
  - The same list of the node's pods gives RV(others), the pods without that label a drain with these options
    acts on; where there is none, k8s_drain has nothing to do (node_maintenance then skips it).
  - Needs the ClusterRoles C(kvquota-read) (list pods, VMIs and their migrations) and C(kvquota-write)
    (C(create pods/eviction)) of C(roles/install/files/clusterrole.yml); never deletes a pod.
extends_documentation_fragment:
  - kvquota.maintenance.connection_options
  - kvquota.maintenance.api_outage_budget
options:
  node:
    description: The node being drained.
    type: str
    required: true
  force:
    description: Evict pods no controller manages (no ownerReferences), as k8s_drain's C(delete_options.force).
    type: bool
    default: false
  ignore_daemonsets:
    description: Leave DaemonSet pods alone instead of failing, as k8s_drain's C(delete_options.ignore_daemonsets).
    type: bool
    default: false
  delete_emptydir_data:
    description: Evict pods with emptyDir volumes, as k8s_drain's C(delete_options.delete_emptydir_data).
    type: bool
    default: false
  wait_timeout:
    description:
      - Seconds to retry refused evictions (429) and to wait for the evicted pods to be gone or terminating.
      - Give the same value as k8s_drain's C(delete_options.wait_timeout).
    type: int
    default: 600
  wait_sleep:
    description: Seconds between two retries or checks.
    type: int
    default: 5
  operator_namespace:
    description:
      - The namespace only the operator writes. This module keeps no state there; the option is accepted so that
        one C(module_defaults) entry for the group C(kvquota.maintenance.kvquota) serves every module.
    type: str
    default: kvquota-system
attributes:
  check_mode:
    support: full
    description: Reads and judges the pods; evicts nothing (RV(evicted) lists what would be evicted).
  diff_mode:
    support: none
    description: Reports the pods in its result, not as a diff.
'''

EXAMPLES = r'''
- name: Evict the pods that only pose as VM pods
  kvquota.maintenance.kvquota_drain:
    node: worker-3
    ignore_daemonsets: true
    wait_timeout: 600
  register: impostors

- name: Drain the pods left on the node (VM pods are left to the migrations)
  kubernetes.core.k8s_drain:
    name: worker-3
    state: drain
    pod_selectors:
      - kubevirt.io!=virt-launcher
    delete_options:
      ignore_daemonsets: true
      wait_timeout: 600
  when: impostors.others | length > 0
'''

RETURN = r'''
impostors:
  description: The pods on the node labelled as virt-launcher pods that are no VM pods, each C({namespace, name, uid,
    reason}); the reason says why (no ownerReference to a VMI, a VMI that does not exist, or not counted by its VMI).
  returned: always
  type: list
  elements: dict
evicted:
  description: The impostors evicted (in check mode, those that would be), each C({namespace, name, uid}).
  returned: always
  type: list
  elements: dict
left:
  description: The impostors left alone as k8s_drain leaves them (mirror pods; DaemonSet pods with
    O(ignore_daemonsets)), each C({namespace, name, uid, reason}).
  returned: always
  type: list
  elements: dict
vm_pods:
  description: The labelled pods kept as VM pods, each C({namespace, name, uid, reason}).
  returned: always
  type: list
  elements: dict
others:
  description:
    - The pods on the node without the label C(kubevirt.io=virt-launcher) that a drain with these options acts on
      (evicts, refuses without O(force) or O(delete_emptydir_data), or waits for while they terminate), each
      C({namespace, name, uid, category}), C(category) one of C(managed), C(unmanaged), C(local_storage),
      C(terminating), C(daemonset) (only a DaemonSet owns it) or C(daemonset_mixed) (also another owner, or an
      emptyDir volume, which kubernetes.core versions treat differently); not mirror pods, finished pods, nor
      C(daemonset) pods under O(ignore_daemonsets). This module never evicts them.
  returned: always
  type: list
  elements: dict
'''

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import drain
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota_module import (
    auth_params,
    connect,
    new_module,
    run,
)


def evict_impostors(module):
    params = module.params
    cluster = connect(auth_params(params), outage_budget=params['api_outage_budget'])
    return drain.drain_impostors(cluster, params['node'], force=params['force'],
                                 ignore_daemonsets=params['ignore_daemonsets'],
                                 delete_emptydir_data=params['delete_emptydir_data'],
                                 wait_timeout=params['wait_timeout'], wait_sleep=params['wait_sleep'],
                                 check_mode=module.check_mode)


def main():
    module = new_module(
        dict(
            node=dict(type='str', required=True),
            force=dict(type='bool', default=False),
            ignore_daemonsets=dict(type='bool', default=False),
            delete_emptydir_data=dict(type='bool', default=False),
            wait_timeout=dict(type='int', default=600),
            wait_sleep=dict(type='int', default=5),
            operator_namespace=dict(type='str', default='kvquota-system'),
        ),
        supports_check_mode=True,
    )
    run(module, evict_impostors)


if __name__ == '__main__':
    main()
