# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Rancher owner: Rancher rebuilds spec.hard of a quota it manages from the namespace annotation
field.cattle.io/resourceQuota (merged with the project's namespace default). kvquota writes that annotation (only
keys the project defines), then waits until Rancher's agent applied it to spec.hard, adopting a Rancher project
member's rewrite on the way (wait_applied). kvquota never writes spec.hard of a Rancher-owned quota: that bypasses
the project limit, and Rancher 2.14+ refuses it. A resource without a fixed Rancher key goes into the limit's
`extended` map (Rancher 2.14+, model/rancher_keys.py)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
import json
import re

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError, KvquotaError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import (
    annotations as _annotations,
    labels as _labels,
    meta as _meta,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import (
    format_quantity,
    parse_quantity,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import (
    default_format,
    parse_resource_list,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.rancher_keys import (
    EXTENDED,
    limit_key,
    limit_names,
    rancher_key,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.ledger import (
    LEDGER_ANNOTATION,
    desired_strings,
    is_idle,
    remember,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners.plain import PlainOwner
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners.protocol import (
    hard_of,
    with_annotations,
)

RANCHER = "rancher"
RANCHER_QUOTA_LABEL = "resourcequota.management.cattle.io/default-resource-quota"
RANCHER_CREATOR_LABEL = "cattle.io/creator"
RANCHER_QUOTA_ANNOTATION = "field.cattle.io/resourceQuota"
RANCHER_PROJECT_ANNOTATION = "field.cattle.io/projectId"
RANCHER_STATUS_ANNOTATION = "cattle.io/status"
# a ResourceQuota resource name (a qualified name: optional DNS-subdomain prefix and "/"), as an extended key must be
_RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
# the ResourceQuota names without a prefix Kubernetes accepts (IsStandardQuotaResourceName; hugepages-<size> and
# requests.hugepages-<size> beside them): an unprefixed extended key outside these would be refused in spec.hard
STANDARD_QUOTA_NAMES = frozenset((
    "pods", "services", "replicationcontrollers", "resourcequotas", "secrets", "configmaps", "persistentvolumeclaims",
    "services.nodeports", "services.loadbalancers", "cpu", "memory", "ephemeral-storage", "requests.cpu",
    "requests.memory", "requests.storage", "requests.ephemeral-storage", "limits.cpu", "limits.memory",
    "limits.ephemeral-storage"))
# rewrites of the Rancher annotation by someone else adopted during one wait before giving up (see wait_applied)
DEFAULT_RANCHER_ADOPTIONS = 3


def is_rancher_managed(quota):
    """Whether Rancher manages this ResourceQuota (default-resource-quota label, or created by norman)."""
    labels = _labels(quota)
    return labels.get(RANCHER_QUOTA_LABEL) == "true" or labels.get(RANCHER_CREATOR_LABEL) == "norman"


def rancher_annotation(namespace):
    """(present, raw text, parsed dict) of the namespace's field.cattle.io/resourceQuota."""
    raw = _annotations(namespace).get(RANCHER_QUOTA_ANNOTATION)
    if raw is None:
        return False, None, {}
    fix = "fix the namespace's resource quota in Rancher (Projects/Namespaces, Edit Config)"
    try:
        parsed = json.loads(raw) if str(raw).strip() else {}
    except (ValueError, TypeError, RecursionError):
        # RecursionError: valid JSON nested deeper than Python's decoder goes (a project member may write it)
        raise InputError("the %s annotation of namespace %s is not valid JSON (or nested too deeply to read)"
                         % (RANCHER_QUOTA_ANNOTATION, _meta(namespace).get("name")), fix)
    # the shape Rancher reads: {"limit": {key: "quantity", ..., "extended": {name: "quantity"}}, ...}; anything
    # else is refused by name, never guessed at (a project member may write it)
    limit = parsed.get("limit") if isinstance(parsed, dict) else None
    if not isinstance(parsed, dict) or not _is_limit(limit):
        raise InputError("the %s annotation of namespace %s is not a JSON object whose \"limit\" maps resource "
                         "names to quantities (and \"%s\" to a map of resource names to quantities)"
                         % (RANCHER_QUOTA_ANNOTATION, _meta(namespace).get("name"), EXTENDED), fix)
    return True, raw, parsed


def _is_limit(limit):
    """Whether limit is absent or has the shape of Rancher's ResourceQuotaLimit."""
    if limit is None:
        return True
    if not isinstance(limit, dict):
        return False
    extended = limit.get(EXTENDED, {})
    fixed = [value for key, value in limit.items() if key != EXTENDED]
    if not isinstance(extended, dict) or not all(_is_quantity_text(v) for v in fixed):
        return False
    # Rancher's own rule for extended: keys parse as resource names, values as quantities; and what Kubernetes
    # takes into spec.hard (ValidateResourceQuotaResourceName: an unprefixed name is a standard one; no negative
    # amount), or Rancher's agent could not write the quota and it would stay as it is, raised or not
    return all(_RESOURCE_NAME.match(name) and _is_quota_name(name) and _is_quantity_text(value)
               and _parses(value, name) for name, value in extended.items())


def _is_quota_name(name):
    return ("/" in name or name in STANDARD_QUOTA_NAMES or name.startswith("hugepages-")
            or name.startswith("requests.hugepages-"))


def _is_quantity_text(value):
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _parses(value, name):
    """Whether value is a quantity of name, not below zero."""
    try:
        return parse_quantity(str(value), name) >= 0
    except InputError:
        return False


def rancher_limit(namespace):
    """The namespace's Rancher limit as quota names -> strings, fixed keys and extended entries, a fixed key
    winning as in Rancher (rancher_keys.limit_names; keys without a quota name are dropped)."""
    _present, _raw, parsed = rancher_annotation(namespace)
    return dict((name, str(value)) for name, value in limit_names(parsed.get("limit") or {}).items())


def project_ref(namespace):
    """(cluster id, project id) from field.cattle.io/projectId 'c-xxxxx:p-yyyyy', or None."""
    value = _annotations(namespace).get(RANCHER_PROJECT_ANNOTATION)
    if not value or ":" not in value:
        return None
    cluster, project = value.split(":", 1)
    return cluster, project


def project_fit(project, namespaces, namespace_name, new_limit):
    """Check that the namespaces of a Rancher project still fit its limit when namespace_name gets new_limit.

    project: the management.cattle.io/v3 Project (dict); namespaces: every Namespace of the cluster (only
    those of the project count); new_limit: quota names -> strings for namespace_name.
    Returns (ok, [messages]) where a message names the key, the project limit and the sum needed.
    """
    spec = (project or {}).get("spec") or {}
    raw_limit = ((spec.get("resourceQuota") or {}).get("limit")) or {}
    limit = limit_names(raw_limit)
    default = limit_names(((spec.get("namespaceDefaultResourceQuota") or {}).get("limit")) or {})
    meta = _meta(project)
    project_id = "%s:%s" % (meta.get("namespace"), meta.get("name"))
    problems = []
    for name, text in sorted(new_limit.items()):
        if name not in limit:
            continue
        # the key the project caps name under (a fixed key wins over an extended entry, as in Rancher)
        fixed = rancher_key(name)
        key = fixed if fixed and raw_limit.get(fixed) not in (None, "") else "%s.%s" % (EXTENDED, name)
        total = parse_quantity(text, name)
        parts = ["%s %s" % (namespace_name, text)]
        for other in namespaces or []:
            other_name = _meta(other).get("name")
            if other_name == namespace_name:
                continue
            if _annotations(other).get(RANCHER_PROJECT_ANNOTATION) != project_id:
                continue
            value = rancher_limit(other).get(name)
            if value is None:
                value = default.get(name)
            if value is None:
                continue
            total += parse_quantity(value, name)
            parts.append("%s %s" % (other_name, value))
        if total > parse_quantity(limit[name], name):
            problems.append("Rancher project %s (%s) limits %s to %s, but its namespaces would need %s (%s)"
                            % (project_id, (spec.get("displayName") or meta.get("name")), key, limit[name],
                               _fmt_amount(total, name), ", ".join(parts)))
    return not problems, problems


def _fmt_amount(value, name):
    return format_quantity(value, default_format(name))


def project_keys(project):
    """The quota names a Rancher project defines a limit for (set), or None when the project is unknown."""
    if not project:
        return None
    limit = ((((project.get("spec") or {}).get("resourceQuota")) or {}).get("limit")) or {}
    return set(limit_names(limit))


class RancherOwner(PlainOwner):
    """Rancher owns spec.hard: the durable value is the namespace annotation field.cattle.io/resourceQuota."""

    name = RANCHER
    written_on = "namespace"
    applies_later = True   # Rancher's agent copies the annotation to spec.hard

    def __init__(self, notes=None, project=None):
        super(RancherOwner, self).__init__(notes)
        self.project = project

    @classmethod
    def claims(cls, quota, facts):
        return is_rancher_managed(quota)

    def operator_key(self, name):
        return limit_key(name)

    @classmethod
    def for_quota(cls, quota, facts, notes):
        """The owner of quota, bounded by its project (facts["project"], read by the caller) when known."""
        project = facts.get("project")
        if project is None:
            if facts.get("rancher_projects"):
                notes.append("the Rancher project of this namespace could not be read: project limit not checked")
            else:
                notes.append("the Rancher Project API is not served by this cluster (downstream cluster): the "
                             "project limit is checked by Rancher itself, not by kvquota")
        return cls(notes, project)

    def durable_hard(self, quota, namespace):
        """Per name kvquota may set through Rancher (see writable_names): the annotation's value, or (key
        absent, so the project default applies) spec.hard's value."""
        hard = hard_of(quota)
        limit = rancher_limit(namespace)
        return dict((name, limit.get(name, hard[name])) for name in self.writable_names(quota))

    def writable_names(self, quota):
        """Quota names kvquota may set through the annotation: present in spec.hard and, when the project is known,
        defined by the project. Every name is mappable since Rancher 2.14 (a fixed key, else an extended entry), and
        a name of a Rancher-built spec.hard without a fixed key can only have come from an extended map."""
        names = set(hard_of(quota))
        keys = project_keys(self.project)
        if keys is not None:
            names &= keys
        return names

    def prepare(self, quota, namespace, ledger):
        present, raw, parsed = rancher_annotation(namespace)
        # Rancher replaces the project default's whole extended map by the namespace's (completeQuota): a map
        # kvquota starts must carry the other extended names at the values Rancher applied, or they would change.
        # That includes a name with a fixed key the namespace's limit does not set: the default may cap it through
        # its extended map alone, and the new map would drop that cap (where the default sets the fixed key, it wins
        # over the copied entry, which then changes nothing)
        seed = {}
        limit = parsed.get("limit") or {}
        if EXTENDED not in limit:
            hard = hard_of(quota)
            seed = dict((name, hard[name]) for name in self.writable_names(quota)
                        if not rancher_key(name) or rancher_key(name) not in limit)
        return remember(ledger, "rancherAnnotation", {"present": present, "value": raw, "seed": seed,
                                                      "start": self.durable_hard(quota, namespace)})

    def render(self, quota, namespace, ledger):
        """{"namespace": new namespace} with the annotation (see rancher_document); a 0.1.0 ledger annotation,
        adopted by then, is dropped in the same write. Rancher owns spec.hard: kvquota never writes it."""
        value = rancher_document(namespace, ledger)
        result = with_annotations(namespace, {RANCHER_QUOTA_ANNOTATION: value, LEDGER_ANNOTATION: None})
        return {"namespace": result}

    def wait_applied(self, io, state, ledger, adoptions=DEFAULT_RANCHER_ADOPTIONS):
        """Rancher owns spec.hard: wait until it applied the namespace annotation. Each poll compares spec.hard with
        the ledger as it is NOW in the store (another job may have changed it since this one wrote), never with a
        remembered one. kvquota never writes spec.hard of a Rancher-owned quota (that bypasses the project limit
        and Rancher 2.14+ refuses it): if Rancher neither applies nor refuses in time, fail with the numbers.

        A Rancher project member may rewrite the annotation while we wait (Rancher lets it, within the project
        limit), and Rancher then applies the member's value, which no ledger value will ever match. Such a rewrite
        is adopted like an administrator's change (ledger.observe): under the namespace's lock, which every caller
        holds, against the stored ledger, the member's value becomes the base, the reservations stay on top, the
        annotation is written again and the wait starts over - at most `adoptions` times. Once no reservation is
        left (the ledger is gone, or idle until Harvester's opt-out is put back) the member's value is simply what
        Rancher must apply."""
        deadline = io.clock() + io.sync_timeout
        expected = ledger
        rewrites = []
        while True:
            quota = io.cluster.get_quota(*state.target)
            stored = io.stored_ledger(quota)
            expected = stored if stored is not None else (ledger if is_idle(ledger) else expected)
            ok, wrong = self.followed(quota, expected)
            if ok:
                return None
            namespace = io.cluster.get_namespace(state.target[0])
            refused = _rancher_refusal(namespace)
            if refused:
                raise KvquotaError("Rancher refused the new quota of namespace %s: %s" % (state.target[0], refused),
                                   "raise the Rancher project's limit or reserve less (smaller batches), then re-run")
            if is_idle(expected):
                # no reservation left (the ledger is gone, or idle until Harvester's opt-out is put back): a
                # member's value is simply what Rancher must apply, nothing to adopt under it
                expected = _kept_after_release(io, state, expected, namespace)
                ok, wrong = self.followed(quota, expected)
                if ok:
                    return None
            elif stored is not None and _annotation_rewritten(self, quota, namespace, stored):
                rewrites.append(_annotation_text(namespace))
                if len(rewrites) > adoptions:
                    raise _rewritten_error(state.target, rewrites, stored)
                io.adopt(state.target)
                deadline = io.clock() + io.sync_timeout
                continue
            if io.clock() >= deadline:
                break
            io.sleep(1.0)
        hard = hard_of(quota)
        want = desired_strings(expected)
        lagging = ", ".join("%s is %s on %s/%s, should be %s"
                            % (name, hard.get(name, "(none)"), state.target[0], state.target[1], want.get(name))
                            for name in wrong)
        raise KvquotaError(
            "Rancher did not apply the quota of namespace %s within %ss: %s (annotation %s is written; kvquota never "
            "writes spec.hard of a Rancher-owned quota)"
            % (state.target[0], io.sync_timeout, lagging, RANCHER_QUOTA_ANNOTATION),
            "check that Rancher's cluster agent (cattle-cluster-agent) runs and syncs namespace %s, then re-run: the "
            "ledger holds the reservation, so the re-run converges" % state.target[0])


def rancher_document(namespace, ledger):
    """The field.cattle.io/resourceQuota text to write (None: remove the annotation).

    Keys kvquota does not manage are kept as they are now. While reservations are active, every managed key
    holds its desired value. Once idle, a managed key holds its base, except that a key which was absent
    before kvquota's first change (the project default applied) is removed again unless an administrator
    changed it since; and when the result equals the original annotation, the original text is returned
    byte for byte (or None when there was none).
    """
    present, _raw, parsed = rancher_annotation(namespace)
    document = copy.deepcopy(parsed) if present else {}
    limit = dict(document.get("limit") or {})
    idle = is_idle(ledger)
    original = ledger.state.get("rancherAnnotation") or {}
    before = _parse_json(original.get("value")) if original.get("present") else None
    before_limit = (before or {}).get("limit") or {}
    start = original.get("start") or {}
    desired = desired_strings(ledger)
    for name, text in desired.items():
        key = rancher_key(name)
        if not key:
            continue
        if idle and original and key not in before_limit and start.get(name) == ledger.base.get(name):
            limit.pop(key, None)
        else:
            limit[key] = text
    _set_extended(limit, dict((n, t) for n, t in desired.items() if not rancher_key(n)), ledger, before_limit)
    document["limit"] = limit
    if idle and original:
        if original.get("present") and before is not None and document == before:
            return original.get("value")
        if not original.get("present") and not limit and len(document) == 1:
            return None
    return json.dumps(document, separators=(",", ":"))


def _set_extended(limit, desired, ledger, before_limit):
    """Put the desired extended names into limit["extended"] (in place), like the fixed keys in rancher_document;
    once idle, a map kvquota started (seeded with what Rancher applied) goes away again when it holds nothing else."""
    if not desired:
        return
    original = ledger.state.get("rancherAnnotation") or {}
    seed = original.get("seed") or {}
    idle = is_idle(ledger)
    start = original.get("start") or {}
    before = before_limit.get(EXTENDED) if isinstance(before_limit.get(EXTENDED), dict) else {}
    current = limit.get(EXTENDED)
    extended = dict(current) if isinstance(current, dict) else dict(seed)
    for name, text in desired.items():
        if idle and original and name not in before and start.get(name) == ledger.base.get(name):
            extended.pop(name, None)
        else:
            extended[name] = text
    if idle and original and EXTENDED not in before_limit:
        if all(seed.get(n) == v for n, v in extended.items()):
            # the map is kvquota's and holds nothing but the copies it seeded (the values Rancher applied before):
            # it goes, and the project default's map applies again
            limit.pop(EXTENDED, None)
            return
        # someone's entry keeps the map (a project member's, or a copy changed since): the copies stay beside it,
        # a name kvquota manages at its base. Rancher replaces the default's whole map by the namespace's
        # (completeQuota), so a map without them drops those names from spec.hard: the namespace would lose caps
        # its base had, and Rancher would never apply a managed name's base, which the release waits for (found by
        # the tenant campaign's rancher-extended attack: the drain failed after 60 s, "... is (none)")
        for name, text in desired.items():
            if name in seed:
                extended[name] = text
    limit[EXTENDED] = extended


def _parse_json(text):
    try:
        value = json.loads(text or "{}")
    except (ValueError, TypeError, RecursionError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("limit") or {}, dict):
        return None
    return value


def _annotation_text(namespace):
    return ((namespace.get("metadata") or {}).get("annotations") or {}).get(RANCHER_QUOTA_ANNOTATION)


def _annotation_rewritten(owner, quota, namespace, ledger):
    """Whether the namespace's Rancher annotation no longer holds what the ledger says kvquota wrote: what
    writing the ledger now would put there (unmanaged keys are kept as they are) differs from what is there."""
    rendered = owner.render(quota, namespace, ledger).get("namespace")
    if rendered is None:
        return False
    return _parsed_annotation(_annotation_text(rendered)) != _parsed_annotation(_annotation_text(namespace))


def _parsed_annotation(text):
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, TypeError, RecursionError):
        # RecursionError: valid JSON nested too deeply for Python's decoder; compared as text then
        return text


def _kept_after_release(io, state, final, namespace):
    """The final release restored the base and deleted the ledger; a value the annotation holds now for a managed
    name (a project member's, written since) is what Rancher must apply: with no reservation left it is the
    namespace's own quota, kvquota has nothing on top of it to keep. Warns and records Events once per value."""
    limit = rancher_limit(namespace)
    result = final.copy()
    for name in sorted(final.written):
        found = limit.get(name)
        base = final.base.get(name)
        if found is None or base is None or _same_amount(found, base, name):
            continue
        result.base[name] = found
        result.written[name] = found
        message = ("%s on %s/%s was changed to %s by someone else in the %s annotation while kvquota restored its "
                   "base %s; no reservation is left, so %s stays" % (name, state.target[0], state.target[1], found,
                                                                     RANCHER_QUOTA_ANNOTATION, base, found))
        io.report(state, "QuotaBaseChanged", message)
    return result


def _same_amount(a, b, name):
    try:
        return parse_resource_list({name: a}, name) == parse_resource_list({name: b}, name)
    except InputError:
        return a == b


def _rewritten_error(target, rewrites, ledger):
    want = ", ".join("%s=%s" % (name, value) for name, value in sorted(desired_strings(ledger).items()))
    return KvquotaError(
        "the %s annotation of namespace %s was rewritten %d times by someone else while kvquota waited for Rancher "
        "to apply it (found %s; kvquota adopted each value as the new base and wrote base + reservations, last %s); "
        "gave up"
        % (RANCHER_QUOTA_ANNOTATION, target[0], len(rewrites), " then ".join(str(t) for t in rewrites), want),
        "ask the Rancher project members of namespace %s to leave its resource quota alone during the maintenance "
        "window (change it after the window), then re-run: the ledger holds the reservation, so the re-run "
        "converges" % target[0])


def _rancher_refusal(namespace):
    text = ((namespace.get("metadata") or {}).get("annotations") or {}).get(RANCHER_STATUS_ANNOTATION)
    if not text:
        return None
    try:
        status = json.loads(text)
    except (ValueError, TypeError, RecursionError):
        return None
    # a namespace's annotations are writable by Rancher project members: only the shape Rancher writes counts
    # ({"Conditions": [{"Type": ..., "Status": ..., "Message": ...}]}); anything else says nothing
    if not isinstance(status, dict):
        return None
    conditions = status.get("Conditions") or status.get("conditions") or []
    for condition in conditions if isinstance(conditions, list) else []:
        if not isinstance(condition, dict):
            continue
        if condition.get("Type", condition.get("type")) == "ResourceQuotaValidated" and \
                str(condition.get("Status", condition.get("status"))) == "False":
            message = condition.get("Message", condition.get("message"))
            return message if isinstance(message, str) and message else "ResourceQuotaValidated is False"
    return None
