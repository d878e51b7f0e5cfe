# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


class ModuleDocFragment(object):
    # Where kvquota keeps what decides its writes: never in a tenant's namespace.
    DOCUMENTATION = r'''
options:
  operator_namespace:
    description:
      - The namespace that holds kvquota's reservation ledgers (one ConfigMap per quota, keyed by the quota's UID)
        and its locks (one Lease per tenant namespace).
      - Only the operator may write there; nothing in a tenant's namespace (Events, Leases, annotations, labels)
        decides what kvquota reserves, restores or waits for.
      - Create it once, with the RBAC, using the C(kvquota.maintenance.install) playbook
        (C(playbooks/install.yml)).
    type: str
    default: kvquota-system
'''
