#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
module: kvquota_release
short_description: Give a migration quota reservation back exactly
version_added: 0.1.0
author:
  - kvquota maintainers (@kvquota)
description:
  - Releases a reservation made by M(kvquota.maintenance.kvquota_reserve) on every ResourceQuota that holds it.
  - Each quota is written back to its recorded base plus the other active reservations, from the in-cluster
    ledger, never by subtracting from whatever C(spec.hard) happens to be. When the last reservation goes,
    the quota is exactly its base, byte for byte, and the ledger annotation is removed.
  - A quota is released only when the reservation's migrations are final, their source pods are terminal or
    gone, and C(status.used) fits under the value to write. With O(wait=true) the module waits for that up
    to O(wait_timeout) seconds and then fails naming the pods that still count.
  - When usage stays above the value to write for good (every migration in the namespace final, no pod
    terminating or left by its VM, C(status.used) exactly what the running pods charge; for example target
    pods larger than planned), it fails early instead, with the numbers and the value to raise the base to.
    The reservation stays, so the namespace is never left over its quota silently; once an administrator
    raises C(spec.hard), that value is kept as the new base and a re-run releases to it.
  - Releasing an unknown or already released id changes nothing and says so.
  - With O(expired=true) it releases every reservation whose TTL has passed (the reaper); ones whose pods
    still count are reported as deferred, not failed.
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
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
      - Wait until the source pods of the reservation's migrations are gone and usage fits.
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
  description: With O(expired=true), expired reservations not released yet because pods still count.
  returned: when O(expired=true)
  type: list
  elements: dict
pending:
  description: Quotas not restored yet and why (pods still counting, migrations not final).
  returned: when O(reservation_id) is given
  type: list
  elements: dict
lasting_overuse:
  description:
    - When the release stopped because usage stays above the value to write for good, per quota and resource the
      usage, the value it would restore, the base, and the base that would fit (what the message says to raise).
  returned: on that failure
  type: list
  elements: dict
  sample: [{namespace: tenant-a, quota: compute, resources: {limits.memory: {used: "5113225521",
            restore: "5067874616", base: "5067874616", base_that_fits: "5113225521"}}}]
captured:
  description:
    - Per quota, the pods created after the reservation that are no migration of its VMs (by the VMI UID of their
      controller ownerReference) and hold its headroom, each with its owner and creation time. Only possible while
      the headroom fence is not installed.
  returned: when such pods hold a quota above the value to restore
  type: list
  elements: dict
  sample: [{namespace: tenant-a, quota: compute, pods: ["grab-1a2b3c (owner none, created 2026-11-24T03:00:05Z,
            after the reservation of 2026-11-24T03:00:00Z)"]}]
message:
  description: Why nothing changed, for example that the id is unknown or already released.
  returned: sometimes
  type: str
warnings:
  description: External changes found on the way (a Rancher revert re-applied, an administrator's new base kept).
  returned: always
  type: list
  elements: str
'''

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import reservations
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.errors import InputError
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
    if params['expired']:
        result = reservations.release_expired(cluster, check_mode=module.check_mode, wait_for_pods=params['wait'],
                                              timeout=params['wait_timeout'] if params['wait'] else 0,
                                              force=params['force'],
                                              operator_namespace=params['operator_namespace'])
    else:
        result = reservations.release(cluster, params['reservation_id'], wait_for_pods=params['wait'],
                                      timeout=params['wait_timeout'], check_mode=module.check_mode,
                                      force=params['force'], operator_namespace=params['operator_namespace'])
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
