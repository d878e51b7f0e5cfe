# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


class ModuleDocFragment(object):
    # Maintenance is when the control plane restarts (rolling upgrades, etcd leader elections, API Priority and
    # Fairness under load): every API request rides through such a blip instead of failing the run.
    DOCUMENTATION = r'''
options:
  api_outage_budget:
    description:
      - Seconds each API request keeps retrying transient failures (connection refused or reset, timeouts,
        HTTP 429 honouring Retry-After, 500, 502, 503, 504), counted from its first failure, with jittered
        exponential backoff (about 0.5 s doubling up to 8 s between attempts).
      - Answers are never retried (400, 401, 403, 404, 409, 422, TLS verification failures, an unknown host),
        except a 401, 403 or 404 right after a transient failure while the API server's C(/readyz) says it is
        not ready yet (a restarted API server denies or misses objects until its caches are filled).
      - Writes stay conditional on resourceVersion, so a repeated write never applies twice; see
        C(docs/reliability.md) for what a repeated create or delete can and cannot prove.
      - When the budget runs out the task fails with the outage's duration and the last failure; C(0) turns
        retries off.
    type: int
    default: 60
'''
