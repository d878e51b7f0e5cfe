#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
module: kvquota_release
short_description: Give a migration quota reservation back exactly
version_added: 1.0.0
author:
  - kvquota maintainers (@kvquota)
description:
  - Releases a reservation made by M(kvquota.maintenance.kvquota_reserve) on every ResourceQuota that holds it.
  - Each quota is written back to its recorded base plus the other active reservations, from the in-cluster
    ledger, never by subtracting from whatever C(spec.hard) happens to be. When the last reservation goes,
    the quota is exactly its base, byte for byte, and the ledger annotation is removed.
  - A quota is released once the reservation's migrations are final and their source pods are terminal or
    gone. Usage above the value to write that is about to drop by itself (C(status.used) not caught up with
    the pods that ended, a launcher pod a finished migration left) is waited for. With O(wait=true) the module
    waits up to O(wait_timeout) seconds and then fails naming the migrations still running and the source pods
    still counted (a source pod ends by itself once its migration completed; a migration can be cancelled by
    name).
  - Usage above the base that lasts (a VM that came back bigger, a pod or PVC created during the reservation, a
    migration the run did not create) never keeps the reservation. The quota goes back to its base all the same
    (Kubernetes keeps a quota below its usage; the namespace's new pods are refused until usage is within it),
    the module succeeds, and the over-use is reported in RV(overuse), as a warning and as a Warning Event
    C(QuotaOverUse), naming the objects that make it.
  - Harvester refuses a quota below usage (its namespace webhook). There the quota is written at its usage and
    what is still to give back stays in the ledger as the reservation C(<id>.held) (outcome
    C(held-at-usage)); O(expired=true) (the reaper) restores the base once usage dropped.
  - Quota admission checks C(status.hard), which kube-controller-manager's quota controller lowers after
    C(spec.hard) is restored; until it does, a pod created in the namespace is still admitted at the old limit.
    So the module returns (and lifts the headroom fence) only once C(status.hard) of every quota it restored is
    back down, re-reading only those quotas, up to O(api_outage_budget) + 60 s; past that it succeeds with a
    warning naming the quotas, C(spec.hard) against C(status.hard) (the release stands).
  - Releasing an unknown or already released id changes nothing and says so.
  - With O(expired=true) it releases every reservation whose TTL has passed (the reaper); ones whose migrations
    or source pods are not over yet are reported as deferred, not failed.
extends_documentation_fragment:
  - kvquota.maintenance.connection_options
  - kvquota.maintenance.api_outage_budget
  - kvquota.maintenance.operator_namespace
options:
  reservation_id:
    description:
      - The reservation to release. Mutually exclusive with O(expired).
    type: str
  expired:
    description:
      - Release every reservation whose expiry has passed, whatever its id.
    type: bool
    default: false
  wait:
    description:
      - Wait until the reservation's migrations are final, their source pods gone, and C(status.used) has caught up
        with what the pods there charge (a tenant's lasting usage above the base is never waited for).
      - With V(false) the module checks once and fails if the quota cannot be restored yet.
    type: bool
    default: true
  wait_timeout:
    description:
      - Seconds to wait with O(wait=true).
    type: int
    default: 600
  force:
    description:
      - Restore even if pods still count against the quota. The next migration in that namespace may then be
        rejected until those pods are gone; meant for cleaning up after an abandoned maintenance.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Reports what would be restored without writing anything.
  diff_mode:
    support: full
    description: Shows C(spec.hard) of every quota before and after.
seealso:
  - module: kvquota.maintenance.kvquota_reserve
  - module: kvquota.maintenance.kvquota_check
'''

EXAMPLES = r'''
- name: Release the reservation of the first batch once its source pods are gone
  kvquota.maintenance.kvquota_release:
    reservation_id: node-1-b0
    wait_timeout: 900

- name: Reaper, e.g. a scheduled AWX job
  kvquota.maintenance.kvquota_release:
    expired: true
'''

RETURN = r'''
reservation_id:
  description: The reservation released.
  returned: when O(reservation_id) is given
  type: str
  sample: node-1-b0
quotas:
  description: One entry per quota the reservation was found on.
  returned: always
  type: list
  elements: dict
  sample:
    - namespace: tenant-a
      quota: compute
      before: {limits.memory: 9096Mi}
      after: {limits.memory: 5000Mi}
      outcome: released
      changed: true
released:
  description: With O(expired=true), the expired reservations released, as id, namespace and quota.
  returned: when O(expired=true)
  type: list
  elements: dict
deferred:
  description: With O(expired=true), expired reservations not released yet because their migrations or source pods
    are not over.
  returned: when O(expired=true)
  type: list
  elements: dict
status_hard_wait_seconds:
  description: How long the module waited for C(status.hard) to come back down to what it restored (quota
    admission no longer granting the released headroom).
  returned: when O(reservation_id) is given
  type: float
  sample: 0.4
pending:
  description: Quotas not restored yet and why (migrations not final, source pods still counting, status.used not
    caught up yet).
  returned: when O(reservation_id) is given
  type: list
  elements: dict
overuse:
  description:
    - The quotas restored to their base (plus the other reservations) although the namespace uses more, because
      that usage lasts. Per quota and resource the usage (C(status.used)), what the pods and PVCs there charge
      (C(charged), where counted), the base and the value restored; and the objects that make it, each with kind,
      namespace, name, controller owner, creation time, the clients that wrote it (C(managers), from its
      managedFields), what it charges, and why (C(why) is C(grew) for a VM whose new launcher pod charges more
      than its source pod did, with C(grew); C(created-during-reservation) for a pod or PVC that took the room;
      C(migration-not-of-this-run) for a migration the run did not create, with its target C(pod);
      C(claims-to-be-a-launcher) for a pod whose controller ownerReference names a reserved VM but that KubeVirt
      does not name for the reservation, with C(vm); C(left-by-its-migration) for a source or target pod a final
      migration of the reservation left that nothing removes, with C(vm) and C(named)).
    - On Harvester also C(held) (what stays in the ledger, at usage) and C(held_as) (the remainder's id). Where the
      headroom fence is installed, that namespace stays fenced (nothing new admitted) until the reaper restored
      its base.
  returned: always (empty when nothing is over-used); with O(expired=true) each item also has C(id)
  type: list
  elements: dict
  sample: [{namespace: tenant-a, quota: compute, resources: {limits.memory: {used: "5113225521", charged:
            "5113225521", base: "5067874616", restored: "5067874616"}}, objects: [{kind: Pod, namespace: tenant-a,
            name: virt-launcher-vm-1-x7k2p, owner: VirtualMachineInstance/vm-1, created: "2026-11-24T03:00:12Z",
            managers: [virt-controller], why: grew, vm: tenant-a/vm-1, grew: {limits.memory: "2836783056 ->
            2882133961"}, charges: {limits.memory: "2882133961"}}]}]
held_at_usage:
  description:
    - With O(expired=true), the Harvester quotas written at their usage rather than their base (Harvester refuses
      a quota below usage), with what stays in the ledger (C(held)) under which id (C(held_as)); a later run
      restores the base once usage dropped. Never a failure.
  returned: when O(expired=true)
  type: list
  elements: dict
captured:
  description:
    - Per quota, the objects created after the reservation that are no migration of its VMs (by the VMI UID of their
      controller ownerReference) and hold its headroom - pods, PVCs, the target pods of migrations the run did not
      create - each as text with its kind, namespace/name, owner, creation time and the clients that wrote it. Only
      possible where the headroom fence does not cover them.
  returned: when such objects hold a quota above the value to restore
  type: list
  elements: dict
  sample: [{namespace: tenant-a, quota: compute, pods: ["Pod tenant-a/grab-1a2b3c (owner none, created
            2026-11-24T03:00:05Z by kubectl-run, after the reservation of 2026-11-24T03:00:00Z) charges limits.memory
            64Mi"]}]
message:
  description: Why nothing changed, for example that the id is unknown or already released.
  returned: sometimes
  type: str
warnings:
  description: External changes found on the way (a Rancher revert re-applied, an administrator's new base kept),
    and every over-use (see RV(overuse)).
  returned: always
  type: list
  elements: str
'''

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import reservations
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota_module import (
    auth_params,
    connect,
    new_module,
    run,
)


def release(module):
    params = module.params
    if params['expired'] == bool(params['reservation_id']):
        raise InputError('give exactly one of reservation_id or expired=true',
                         'name the reservation to release, or set expired: true to reap expired ones')
    cluster = connect(auth_params(params), outage_budget=params['api_outage_budget'])
    service = reservations.Reservations(cluster, params['operator_namespace'], check_mode=module.check_mode)
    if params['expired']:
        result = service.release_expired(wait_for_pods=params['wait'],
                                         timeout=params['wait_timeout'] if params['wait'] else 0, force=params['force'])
    else:
        result = service.release(reservations.ReleaseRequest(params['reservation_id'], wait_for_pods=params['wait'],
                                                             timeout=params['wait_timeout'], force=params['force']))
    return result


def main():
    module = new_module(
        dict(
            reservation_id=dict(type='str'),
            expired=dict(type='bool', default=False),
            wait=dict(type='bool', default=True),
            wait_timeout=dict(type='int', default=600),
            force=dict(type='bool', default=False),
        ),
        supports_check_mode=True,
    )
    run(module, release)


if __name__ == '__main__':
    main()
