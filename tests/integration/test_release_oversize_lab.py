# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Release when the migrated VMs use more than the base for good (target pods larger than planned).

The emulator renders the target pod 256Mi larger than the sizing core plans; a safety margin lets the
migration through. Afterwards the namespace uses more than its base, and nothing left (no migration under
way, no lingering source pod) can lower it. Release must:
- keep waiting while the source pod still lingers (that usage does drop),
- then stop well before its timeout with the numbers and the fix (raise the base to the value that fits),
  writing nothing: the reservation stays, so the namespace is never left over its quota silently,
- and, once an administrator has raised spec.hard as told (kvquota keeps it as the new base), release to
  exactly that value with no ledger left.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re
import secrets
import time

import pytest

import modlab as M

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.quantity import parse_quantity  # noqa: E402

pytestmark = pytest.mark.lab   # make lab-tests (conftest.py: every lab test has one such marker)

LINGER_SECONDS = 25
RELEASE_TIMEOUT = 240


@pytest.fixture
def tenant(lab, emu, r):
    ns = "oversize-%s" % secrets.token_hex(3)
    M.make_tenant(lab, ns, vms=1)
    # a base just above what the VM uses: the 256Mi larger target pod cannot fit under it afterwards
    used = M.quota(r, ns, "compute")["status"]["used"]
    hard = dict(M.quota(r, ns, "compute")["spec"]["hard"])
    hard["limits.memory"] = str(parse_quantity(used["limits.memory"]) + 64 * 1024 ** 2)
    r.patch("/api/v1/namespaces/%s/resourcequotas/compute" % ns, {"spec": {"hard": hard}})
    M.wait(lambda: M.settled(r, ns, 1), 30, "tenant %s settled with its tight base" % ns)
    yield ns
    M.emulator.set_knobs(lab, oversize_bytes=None, source_pod_delay_seconds=None)
    M.delete_namespace(r, ns)


def test_release_stops_early_with_the_fix_when_usage_stays_above_the_base(lab, emu, r, user, tenant):
    ns, rid = tenant, "oversize-%s" % secrets.token_hex(2)
    base = M.quota(r, ns, "compute")["spec"]["hard"]
    M.emulator.set_knobs(lab, oversize_bytes="256Mi", source_pod_delay_seconds=str(LINGER_SECONDS))
    M.assert_ok(M.run_module("kvquota_reserve", {
        "reservation_id": rid, "ttl": "1h", "vms": [{"namespace": ns, "name": "vm-1"}],
        "safety_margin": {"limits.memory": "512Mi"}}, user))
    migration = M.create_vmim(r, ns, "vm-1")
    M.wait(lambda: M.phase(M.vmim(r, ns, migration)) == "Succeeded", 60, "migration %s Succeeded" % migration)
    succeeded_at = time.monotonic()

    res = M.run_module("kvquota_release", {"reservation_id": rid, "wait": True, "wait_timeout": RELEASE_TIMEOUT},
                       user, timeout=RELEASE_TIMEOUT + 120)
    waited = time.monotonic() - succeeded_at
    msg = M.assert_one_line_error(res, "reservation '%s' not released" % rid, "usage stays above the base",
                                  "limits.memory used", "exceeds the base %s" % base["limits.memory"],
                                  "Fix: the pods are larger than the base allows", "raise limits.memory of %s/compute to" % ns)
    # it waited out the lingering source pod, then stopped long before its timeout
    assert waited >= LINGER_SECONDS, "gave up after %.0fs while the source pod still lingered: %s" % (waited, msg)
    assert res.seconds < RELEASE_TIMEOUT / 2, "took %.0fs of a %ss timeout: %s" % (res.seconds, RELEASE_TIMEOUT, msg)
    # nothing written: the reservation stays, the quota stays expanded under it
    held = M.quota(r, ns, "compute")
    assert rid in M.ledger(r, held)["reservations"]
    used = parse_quantity(held["status"]["used"]["limits.memory"])
    assert used > parse_quantity(base["limits.memory"])

    # the value it names is exactly the usage (no other reservation): raise the base to it, as told
    fits = re.search(r"limits\.memory of %s/compute to ([0-9][0-9A-Za-z.]*)" % re.escape(ns), msg).group(1)
    assert parse_quantity(fits) == used, (fits, used)
    raised = dict(held["spec"]["hard"], **{"limits.memory": fits})
    r.patch("/api/v1/namespaces/%s/resourcequotas/compute" % ns, {"spec": {"hard": raised}})
    M.assert_ok(M.run_module("kvquota_release", {"reservation_id": rid, "wait": True, "wait_timeout": 60}, user))
    after = M.quota(r, ns, "compute")
    assert M.ledger(r, after) is None
    assert after["spec"]["hard"] == dict(base, **{"limits.memory": fits})
