# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


class ModuleDocFragment(object):
    # How a reservation is made, the same (and with the same defaults) wherever one is made: kvquota_reserve
    # and kvquota_migrate's executor.
    DOCUMENTATION = r'''
options:
  owner:
    description:
      - Who holds the reservations, recorded in the ledger and in the Events. Defaults to the AWX job or
        user@host.
    type: str
  ttl:
    description:
      - How long a reservation lives before M(kvquota.maintenance.kvquota_release) with
        O(kvquota.maintenance.kvquota_release#module:expired=true) (the reaper) may give it back. Whole seconds or a
        duration such as V(90m), V(2h), V(1d). Zero is an error.
    type: str
    default: 2h
  safety_margin:
    description:
      - Added to each computed reservation. A percentage such as V(5%), or a resource list (for example
        C(limits.memory) to C(256Mi)) added to the names the reservation has. KubeVirt calls its overhead "the best
        estimation"; a small margin saves a top-up round.
    type: raw
  top_up_cap:
    description:
      - The most one top-up may add to a quota, per resource. A percentage of the refused target pods' computed
        charge of that quota (V(25%), the default), or a mapping of resource names to quantities or percentages
        (a resource it does not name may not be topped up). A larger shortfall fails with the numbers and adds
        nothing.
      - Also the size of a top-up when the pods are larger than computed (the exact excess is stated only by
        the apiserver's refusal, which reaches kvquota only through tenant-writable Events).
    type: raw
    default: 25%
  lock_timeout:
    description:
      - Seconds to wait for another job's Lease on the same namespaces; then the module fails naming the holder.
      - The Lease is held only while a reservation is written and lasts 90 seconds, so the Lease of a job killed
        while writing frees within this default; a run that waited warns, naming the holder.
    type: int
    default: 120
'''
