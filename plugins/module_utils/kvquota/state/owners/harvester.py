# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Harvester (>= v1.4.2) scales Rancher-managed quotas itself during migrations. This owner wraps the one that
really holds spec.hard (Rancher's or the plain one) and opts the quota out of Harvester's scaling
(harvesterhci.io/skipResourceQuotaAutoScaling: "true") for as long as a reservation is active, putting the
previous value (or its absence) back exactly on the final release: in the same write as spec.hard on a plain
quota (render), or as a write of the quota of its own before the owner's value (guard) and once the owner has
applied the base again (unguard).

Under Rancher's quota lock-down (Rancher 2.14.6 / 2.15.2, rancher/webhook 1797/1798) the opt-out cannot be
written: the webhook refuses every write of a Rancher-labelled quota by anyone but Rancher. It refuses Harvester's
own scaling just as well (Harvester writes that quota directly as its service account, with its per-migration
deltas and v1.9's compensation as annotations in the same write), so there is nothing to opt out of: the
reservation goes on through the namespace's Rancher limit alone (guard), and the two cannot stack. Harvester
annotations found on such a quota are left-overs nobody can remove but an administrator (and Harvester's namespace
webhook refuses the namespace's limit to change while they are there): the quota is blocked, named (blockers)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    ConflictError,
    ForbiddenError,
    KvquotaError,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import annotations as _annotations
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client.cluster import conditional_update
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.ledger import is_idle, remember
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners.protocol import (
    QuotaOwner,
    ref as _ref,
    with_annotations as _with_annotations,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners.rancher import is_rancher_managed

HARVESTER = "harvester"
HARVESTER_SKIP_ANNOTATION = "harvesterhci.io/skipResourceQuotaAutoScaling"
# per-migration deltas (migratingUID-<VMI UID>; migrating-<VM> before v1.5) and v1.9's memory compensation after a
# refusal (PR 10197); not harvesterhci.io/migratingScalingResyncNeeded, a flag v1.9 leaves on the quota as "false"
HARVESTER_MIGRATING_PREFIXES = ("harvesterhci.io/migratingUID-", "harvesterhci.io/migrating-",
                                "harvesterhci.io/migratingCompensation")
# what Rancher's webhook says when it refuses a write of a quota it manages ("... are forbidden from changing
# resources managed by Rancher"; the lab's emulation says "... are managed by Rancher")
RANCHER_LOCKDOWN_TEXT = "managed by Rancher"
HARVESTER_MIN_VERSION = (1, 4, 2)


def parse_harvester_version(text):
    """(major, minor, patch) of a Harvester version such as 'v1.4.2', '1.5.0-rc1', ...; None when unreadable."""
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", str(text or "").strip())
    if not match:
        return None
    return tuple(int(part or 0) for part in match.groups())


def harvester_scales(quota, cluster_facts):
    """Whether Harvester's quota controller scales this quota during migrations: Harvester present (the
    settings.harvesterhci.io API, or its annotations on the quota), version unknown or >= v1.4.2, and the
    quota is Rancher-managed (the only ones its controller touches) or already carries its annotations."""
    facts = cluster_facts or {}
    annotations = _annotations(quota)
    marked = bool(harvester_migrating(quota)) or HARVESTER_SKIP_ANNOTATION in annotations
    if not (facts.get("harvester") or marked):
        return False
    version = parse_harvester_version(facts.get("harvester_version"))
    if version is not None and version < HARVESTER_MIN_VERSION and not marked:
        return False
    return is_rancher_managed(quota) or marked


def harvester_migrating(obj):
    """Harvester's own per-migration delta annotations on obj (sorted keys)."""
    return sorted(key for key in _annotations(obj) if key.startswith(HARVESTER_MIGRATING_PREFIXES))


class HarvesterOwner(QuotaOwner):
    """Harvester >= v1.4.2 scales Rancher-managed quotas during migrations on its own. kvquota opts the quota
    out (skipResourceQuotaAutoScaling: "true") while a reservation is active, so Harvester's deltas never stack
    on ours, and puts the previous value (or its absence) back on the final release."""

    name = HARVESTER
    writable = True

    def __init__(self, inner, notes=None, version=None):
        super(HarvesterOwner, self).__init__(notes)
        self.inner = inner
        self.version = version
        self.locked_down = False   # the opt-out was refused by Rancher's quota lock-down (guard)

    @property
    def written_on(self):
        return self.inner.written_on

    @property
    def refuses_below_usage(self):
        """Harvester's namespace webhook refuses a field.cattle.io/resourceQuota below the quota's status.used: a
        release writes no less than usage there and keeps the rest as a remainder (reservations._release_ledger)."""
        return self.inner.written_on == "namespace"

    @property
    def guards_the_quota(self):
        """The opt-out is a write of the quota of its own when the quota is not what carries spec.hard (Rancher's
        namespace annotation does); on a plain quota it goes in the same write as spec.hard (render)."""
        return self.inner.written_on == "namespace"

    @property
    def project(self):
        return self.inner.project

    @property
    def applies_later(self):
        return self.inner.applies_later

    def describe(self):
        data = self.inner.describe()
        # under the lock-down the opt-out note is not true: guard's warning says what happened instead
        own = [] if self.locked_down else list(self.notes)
        data.update(backend=self.name, owner=self.inner.name, notes=list(self.inner.notes) + own,
                    harvester_version=self.version, rancher_lockdown=self.locked_down)
        return data

    def durable_hard(self, quota, namespace):
        return self.inner.durable_hard(quota, namespace)

    def effective_hard(self, quota):
        return self.inner.effective_hard(quota)

    def writable_names(self, quota):
        return self.inner.writable_names(quota)

    def operator_key(self, name):
        return self.inner.operator_key(name)

    def followed(self, quota, ledger):
        return self.inner.followed(quota, ledger)

    def blockers(self, quota, namespace, ledger):
        problems = list(self.inner.blockers(quota, namespace, ledger))
        opted_out = _annotations(quota).get(HARVESTER_SKIP_ANNOTATION) == "true"
        migrating = harvester_migrating(quota)
        if migrating and not opted_out:
            problems.append(
                "Harvester is already scaling %s for migrations in progress (%s); opting out now would leave its "
                "deltas behind (under Rancher's quota lock-down Harvester cannot remove them itself, and its "
                "namespace webhook refuses any change of the namespace's limit while they are there: an "
                "administrator removes them)" % (_ref(quota), ", ".join(migrating)))
        return problems

    def prepare(self, quota, namespace, ledger):
        annotations = _annotations(quota)
        ledger = self.inner.prepare(quota, namespace, ledger)
        return remember(ledger, "harvesterSkip", {"present": HARVESTER_SKIP_ANNOTATION in annotations,
                                                  "value": annotations.get(HARVESTER_SKIP_ANNOTATION)})

    def render(self, quota, namespace, ledger):
        writes = self.inner.render(quota, namespace, ledger)
        if "quota" in writes:
            # plain owner: the opt-out travels in the same write as spec.hard and the ledger
            if is_idle(ledger):
                writes["quota"] = _restore_skip(writes["quota"], ledger)
            else:
                writes["quota"] = _with_annotations(writes["quota"], {HARVESTER_SKIP_ANNOTATION: "true"})
        return writes

    def before_expand(self, quota, ledger):
        """The quota with the opt-out set, when the owner is not the quota itself and it is not set yet."""
        if self.inner.written_on == "quota" or is_idle(ledger):
            return None
        if _annotations(quota).get(HARVESTER_SKIP_ANNOTATION) == "true":
            return None
        return _with_annotations(quota, {HARVESTER_SKIP_ANNOTATION: "true"})

    def after_release(self, quota, ledger):
        """The quota with the opt-out put back as it was, once the ledger is idle (owner not the quota)."""
        if self.inner.written_on == "quota" or not is_idle(ledger):
            return None
        restored = _restore_skip(quota, ledger)
        if _annotations(restored).get(HARVESTER_SKIP_ANNOTATION) == _annotations(quota).get(HARVESTER_SKIP_ANNOTATION):
            return None
        return restored

    @classmethod
    def wraps(cls, quota, facts):
        """Whether Harvester's quota controller scales quota during migrations (see harvester_scales)."""
        return harvester_scales(quota, facts)

    @classmethod
    def around(cls, inner, facts):
        return cls(inner, [
            "Harvester scales this quota during migrations: kvquota opts it out (%s) while reserved and puts the "
            "previous value back on release" % HARVESTER_SKIP_ANNOTATION], facts.get("harvester_version"))

    def guard(self, io, target, ledger):
        """Set the opt-out on the quota after the ledger recorded its previous value (owner not the quota).

        Refused by Rancher's quota lock-down (the refusal says the quota is managed by Rancher): Harvester's own
        scaling of the quota is refused the same way, so the reservation goes on through the namespace's Rancher
        limit alone, with a warning, and nothing is to be put back on release. Any other refusal fails the
        reservation before the owner's value is written, naming why."""
        if not self.guards_the_quota:
            return
        try:
            conditional_update(lambda: io.cluster.get_quota(*target), lambda quota: self.before_expand(quota, ledger),
                               lambda body: io.cluster.replace(body, "update resourcequota %s in namespace %s "
                                                               "(Harvester opt-out)" % (target[1], target[0])),
                               attempts=io.attempts, what="set the Harvester opt-out on %s/%s" % target,
                               sleep=io.sleep)
        except (ConflictError, ForbiddenError):
            raise
        except KvquotaError as err:
            if rancher_lockdown(err):
                self.locked_down = True
                io.warn("quota %s/%s: Rancher's quota lock-down refuses Harvester's opt-out %s, and Harvester's own "
                        "scaling of the quota just as well; the reservation is made through the namespace's Rancher "
                        "limit alone (%s)" % (target[0], target[1], HARVESTER_SKIP_ANNOTATION, err.message))
                return
            raise KvquotaError(
                "cannot set Harvester's opt-out %s on quota %s/%s: %s. Without it Harvester adds its own "
                "migration deltas on top of the reservation; nothing was changed"
                % (HARVESTER_SKIP_ANNOTATION, target[0], target[1], err.message),
                "let the collection's identity update this quota (an admission policy of the platform must exempt "
                "it), or set %s: \"true\" on the quota yourself for the maintenance and re-run"
                % HARVESTER_SKIP_ANNOTATION)

    def unguard(self, io, target, idle_ledger):
        """Put the opt-out back as it was, once the owner applied the final restore (owner not the quota): while the
        quota still holds the reservation, Harvester must not add its deltas on top of it."""
        if not self.guards_the_quota:
            return
        conditional_update(lambda: io.cluster.get_quota(*target),
                           lambda quota: self.after_release(quota, idle_ledger),
                           lambda body: io.cluster.replace(body, "update resourcequota %s in namespace %s (Harvester "
                                                           "opt-out restore)" % (target[1], target[0])),
                           attempts=io.attempts, what="restore the Harvester opt-out on %s/%s" % target,
                           sleep=io.sleep)

    def wait_applied(self, io, state, ledger):
        return self.inner.wait_applied(io, state, ledger)


def rancher_lockdown(err):
    """Whether err is Rancher's quota lock-down refusing a write (an admission webhook's or policy's refusal that
    says the quota is managed by Rancher), not RBAC, a conflict or another policy."""
    message = getattr(err, "message", None) or str(err)
    return message.startswith(("an admission webhook refused", "an admission policy refused")) and \
        RANCHER_LOCKDOWN_TEXT in message


def _restore_skip(quota, ledger):
    previous = ledger.state.get("harvesterSkip")
    if previous is None:
        return quota
    return _with_annotations(quota, {HARVESTER_SKIP_ANNOTATION: previous.get("value") if previous.get("present")
                                     else None})
