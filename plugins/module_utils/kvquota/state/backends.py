# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who really owns spec.hard, and how a reservation is written durably.

- PlainBackend: kvquota writes spec.hard of the ResourceQuota; the ledger is an annotation of the quota;
  both change in one conditional write.
- RancherBackend: Rancher rebuilds spec.hard from the namespace annotation field.cattle.io/resourceQuota
  (merged with the project's namespace default). kvquota writes that annotation (only keys the project
  defines) and keeps the ledger on the Namespace, in the same conditional write, then checks that
  spec.hard followed.
- HarvesterBackend (Harvester >= v1.4.2, which scales Rancher-managed quotas itself during migrations):
  wraps the Rancher (or plain) backend and opts the quota out of Harvester's auto-scaling
  (harvesterhci.io/skipResourceQuotaAutoScaling: "true") for as long as a reservation is active, putting the
  previous value back exactly on the final release.
- AAQBackend: ApplicationAwareResourceQuota (aaq.kubevirt.io) charges a migration only for its growth; it is
  recognised, reported and never written.

Everything here is pure: functions take objects as dicts (as read from the API) and return new dicts.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
import json
import re

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import annotations as _annotations, labels as _labels, meta as _meta
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.ledger import (
    LEDGER_ANNOTATION,
    desired_strings,
    is_idle,
    remember,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import (
    format_quantity,
    parse_quantity,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.rancher_keys import quota_name_for, rancher_key
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import default_format

PLAIN = "plain"
RANCHER = "rancher"
HARVESTER = "harvester"
AAQ = "aaq"

RANCHER_QUOTA_LABEL = "resourcequota.management.cattle.io/default-resource-quota"
RANCHER_CREATOR_LABEL = "cattle.io/creator"
RANCHER_QUOTA_ANNOTATION = "field.cattle.io/resourceQuota"
RANCHER_PROJECT_ANNOTATION = "field.cattle.io/projectId"

HARVESTER_SKIP_ANNOTATION = "harvesterhci.io/skipResourceQuotaAutoScaling"
HARVESTER_MIGRATING_PREFIXES = ("harvesterhci.io/migratingUID-", "harvesterhci.io/migrating-")
HARVESTER_MIN_VERSION = (1, 4, 2)

AAQ_GROUP = "aaq.kubevirt.io"
AAQ_KIND = "ApplicationAwareResourceQuota"


def _ref(obj):
    meta = _meta(obj)
    return "%s/%s" % (meta.get("namespace") or "-", meta.get("name"))


def _with_annotations(obj, changes):
    """A deep copy of obj with annotation changes applied (None removes a key)."""
    result = copy.deepcopy(obj)
    meta = result.setdefault("metadata", {})
    annotations = dict(meta.get("annotations") or {})
    for key, value in changes.items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    meta["annotations"] = annotations
    return result


def hard_of(quota):
    """spec.hard of a ResourceQuota (name -> string)."""
    return dict(((quota or {}).get("spec") or {}).get("hard") or {})


def used_of(quota):
    """status.used of a ResourceQuota (name -> string)."""
    return dict(((quota or {}).get("status") or {}).get("used") or {})


def parse_harvester_version(text):
    """(major, minor, patch) of a Harvester version such as 'v1.4.2', '1.5.0-rc1', ...; None when unreadable."""
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", str(text or "").strip())
    if not match:
        return None
    return tuple(int(part or 0) for part in match.groups())


# ---------------------------------------------------------------------------
# the owner protocol

class QuotaOwner(object):
    """What every owner of a quota's spec.hard answers (what an Evaluator is to Kubernetes' quota controller). The
    reservations service asks an owner only this, never its name: a new owner (a Capsule tenant, AAQ's objects)
    is a subclass here and a line in select_backend, not a branch in the callers."""

    name = None
    writable = False          # whether kvquota may change spec.hard through this owner at all
    written_on = None         # the object whose write changes spec.hard: "quota", "namespace" (None: none)
    refuses_below_usage = False   # the owner refuses a value below status.used (then: reservations' remainder)
    guards_the_quota = False  # before_expand/after_release write the quota itself (an opt-out), owner elsewhere
    applies_later = False     # a controller of the owner copies the written value to spec.hard (waited for)
    project = None            # the Rancher project whose limit bounds an expansion, if any

    # render()'s writes are applied in this order: the quota, then the object the owner reads it from
    WRITE_ORDER = ("quota", "namespace")

    def __init__(self, notes=None):
        self.notes = list(notes or [])

    def describe(self):
        return {"backend": self.name, "written_on": self.written_on, "notes": list(self.notes)}

    def writable_names(self, quota):
        """The resource names a reservation may change on quota; None: every name it tracks."""
        return None

    def before_expand(self, quota, ledger):
        """The quota as it must be before the first expansion (guards_the_quota), or None: nothing to write."""
        return None

    def after_release(self, quota, ledger):
        """The quota as it must be after the final release (guards_the_quota), or None: nothing to write."""
        return None


# ---------------------------------------------------------------------------
# plain

class PlainBackend(QuotaOwner):
    """spec.hard belongs to whoever writes it: kvquota writes it, with the ledger on the quota."""

    name = PLAIN
    writable = True
    written_on = "quota"   # the object whose write changes spec.hard

    def durable_hard(self, quota, namespace):
        """The values that decide spec.hard (here: spec.hard itself)."""
        return hard_of(quota)

    def effective_hard(self, quota):
        return hard_of(quota)

    def blockers(self, quota, namespace, ledger):
        """Reasons this quota cannot be expanded now (list of strings)."""
        return []

    def prepare(self, quota, namespace, ledger):
        """The ledger with any backend state recorded before the first change."""
        return ledger

    def render(self, quota, namespace, ledger):
        """{"quota": new quota} carrying the desired spec.hard (the ledger itself lives in the operator namespace;
        a 0.1.0 ledger annotation, adopted by then, is dropped in the same write)."""
        result = _with_annotations(quota, {LEDGER_ANNOTATION: None})
        spec = result.setdefault("spec", {})
        hard = dict(spec.get("hard") or {})
        hard.update(desired_strings(ledger))
        spec["hard"] = hard
        return {"quota": result}

    def followed(self, quota, ledger):
        """(whether spec.hard shows the desired values, [names that do not])."""
        hard = hard_of(quota)
        wrong = [name for name, text in sorted(desired_strings(ledger).items())
                 if name not in hard or parse_quantity(hard[name], name) != parse_quantity(text, name)]
        return not wrong, wrong


# ---------------------------------------------------------------------------
# Rancher

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
    # the shape Rancher reads: {"limit": {key: "quantity"}, ...}; anything else is refused by name, never guessed at
    limit = parsed.get("limit") if isinstance(parsed, dict) else None
    if not isinstance(parsed, dict) or (limit is not None and not isinstance(limit, dict)) or any(
            not isinstance(value, (str, int, float)) or isinstance(value, bool) for value in (limit or {}).values()):
        raise InputError("the %s annotation of namespace %s is not a JSON object whose \"limit\" maps resource "
                         "names to quantities" % (RANCHER_QUOTA_ANNOTATION, _meta(namespace).get("name")), fix)
    return True, raw, parsed


def rancher_limit(namespace):
    """The namespace's Rancher limit as quota names -> strings (keys without a quota name are dropped)."""
    _present, _raw, parsed = rancher_annotation(namespace)
    limit = parsed.get("limit") or {}
    result = {}
    for key, value in limit.items():
        name = quota_name_for(key)
        if name and value not in (None, ""):
            result[name] = str(value)
    return result


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
    limit = ((spec.get("resourceQuota") or {}).get("limit")) or {}
    default = ((spec.get("namespaceDefaultResourceQuota") or {}).get("limit")) or {}
    meta = _meta(project)
    project_id = "%s:%s" % (meta.get("namespace"), meta.get("name"))
    problems = []
    for name, text in sorted(new_limit.items()):
        key = rancher_key(name)
        if key is None or key not in limit:
            continue
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
                value = default.get(key)
            if value is None:
                continue
            total += parse_quantity(value, name)
            parts.append("%s %s" % (other_name, value))
        if total > parse_quantity(limit[key], key):
            problems.append("Rancher project %s (%s) limits %s to %s, but its namespaces would need %s (%s)"
                            % (project_id, (spec.get("displayName") or meta.get("name")), key, limit[key],
                               _fmt_amount(total, name), ", ".join(parts)))
    return not problems, problems


def _fmt_amount(value, name):
    return format_quantity(value, default_format(name))


def project_keys(project):
    """The quota names a Rancher project defines a limit for (set), or None when the project is unknown."""
    if not project:
        return None
    limit = ((((project.get("spec") or {}).get("resourceQuota")) or {}).get("limit")) or {}
    return set(quota_name_for(key) for key in limit if quota_name_for(key))


class RancherBackend(PlainBackend):
    """Rancher owns spec.hard: the durable value is the namespace annotation field.cattle.io/resourceQuota."""

    name = RANCHER
    written_on = "namespace"
    applies_later = True   # Rancher's agent copies the annotation to spec.hard

    def __init__(self, notes=None, project=None):
        super(RancherBackend, self).__init__(notes)
        self.project = project

    def durable_hard(self, quota, namespace):
        """Per name kvquota may set through Rancher (see writable_names): the annotation's value, or (key
        absent, so the project default applies) spec.hard's value."""
        hard = hard_of(quota)
        limit = rancher_limit(namespace)
        return dict((name, limit.get(name, hard[name])) for name in self.writable_names(quota))

    def writable_names(self, quota):
        """Quota names kvquota may set through the annotation: mappable, present in spec.hard and, when the
        project is known, defined by the project."""
        names = set(name for name in hard_of(quota) if rancher_key(name))
        keys = project_keys(self.project)
        if keys is not None:
            names &= keys
        return names

    def prepare(self, quota, namespace, ledger):
        present, raw, _parsed = rancher_annotation(namespace)
        return remember(ledger, "rancherAnnotation", {"present": present, "value": raw,
                                                      "start": self.durable_hard(quota, namespace)})

    def render(self, quota, namespace, ledger):
        """{"namespace": new namespace} with the annotation (see rancher_document); a 0.1.0 ledger annotation,
        adopted by then, is dropped in the same write. Rancher owns spec.hard: kvquota never writes it."""
        value = rancher_document(namespace, ledger)
        result = _with_annotations(namespace, {RANCHER_QUOTA_ANNOTATION: value, LEDGER_ANNOTATION: None})
        return {"namespace": result}


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
    for name, text in desired_strings(ledger).items():
        key = rancher_key(name)
        if not key:
            continue
        if idle and original and key not in before_limit and start.get(name) == ledger.base.get(name):
            limit.pop(key, None)
        else:
            limit[key] = text
    document["limit"] = limit
    if idle and original:
        if original.get("present") and before is not None and document == before:
            return original.get("value")
        if not original.get("present") and not limit and len(document) == 1:
            return None
    return json.dumps(document, separators=(",", ":"))


def _parse_json(text):
    try:
        value = json.loads(text or "{}")
    except (ValueError, TypeError, RecursionError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("limit") or {}, dict):
        return None
    return value


# ---------------------------------------------------------------------------
# Harvester

def harvester_migrating(obj):
    """Harvester's own per-migration delta annotations on obj (sorted keys)."""
    return sorted(key for key in _annotations(obj) if key.startswith(HARVESTER_MIGRATING_PREFIXES))


class HarvesterBackend(QuotaOwner):
    """Harvester >= v1.4.2 scales Rancher-managed quotas during migrations on its own. kvquota opts the quota
    out (skipResourceQuotaAutoScaling: "true") while a reservation is active, so Harvester's deltas never stack
    on ours, and puts the previous value (or its absence) back on the final release."""

    name = HARVESTER
    writable = True

    def __init__(self, inner, notes=None, version=None):
        super(HarvesterBackend, self).__init__(notes)
        self.inner = inner
        self.version = version

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
        data.update(backend=self.name, owner=self.inner.name, notes=list(self.inner.notes) + list(self.notes),
                    harvester_version=self.version)
        return data

    def durable_hard(self, quota, namespace):
        return self.inner.durable_hard(quota, namespace)

    def effective_hard(self, quota):
        return self.inner.effective_hard(quota)

    def writable_names(self, quota):
        return self.inner.writable_names(quota)

    def followed(self, quota, ledger):
        return self.inner.followed(quota, ledger)

    def blockers(self, quota, namespace, ledger):
        problems = list(self.inner.blockers(quota, namespace, ledger))
        opted_out = _annotations(quota).get(HARVESTER_SKIP_ANNOTATION) == "true"
        migrating = harvester_migrating(quota)
        if migrating and not opted_out:
            problems.append(
                "Harvester is already scaling %s for migrations in progress (%s); opting out now would leave its "
                "deltas behind" % (_ref(quota), ", ".join(migrating)))
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


def _restore_skip(quota, ledger):
    previous = ledger.state.get("harvesterSkip")
    if previous is None:
        return quota
    return _with_annotations(quota, {HARVESTER_SKIP_ANNOTATION: previous.get("value") if previous.get("present")
                                     else None})


# ---------------------------------------------------------------------------
# AAQ

class AAQBackend(QuotaOwner):
    """ApplicationAwareResourceQuota: AAQ charges a migration only for target-minus-source growth, so no
    expansion is needed; kvquota reports it and never writes it."""

    name = AAQ


# ---------------------------------------------------------------------------
# selection

def is_rancher_managed(quota):
    """Whether Rancher manages this ResourceQuota (default-resource-quota label, or created by norman)."""
    labels = _labels(quota)
    return labels.get(RANCHER_QUOTA_LABEL) == "true" or labels.get(RANCHER_CREATOR_LABEL) == "norman"


def quota_owner(quota):
    """'rancher' for a quota Rancher rebuilds from the namespace annotation, else 'plain'."""
    return "rancher" if is_rancher_managed(quota) else "plain"


def is_aaq(quota):
    api_version = str((quota or {}).get("apiVersion") or "")
    return (quota or {}).get("kind") == AAQ_KIND or api_version.startswith(AAQ_GROUP + "/")


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


def select_backend(quota, namespace, cluster_facts=None):
    """The backend that owns spec.hard of quota (dict) in namespace (dict).

    cluster_facts keys (all optional): harvester (bool), harvester_version ('v1.4.2'), rancher_projects (bool,
    the management.cattle.io Project API exists), project (the quota's Project dict when read), aaq (bool).
    """
    facts = cluster_facts or {}
    notes = []
    if facts.get("aaq"):
        notes.append("AAQ is installed: ApplicationAwareResourceQuotas are not touched (AAQ charges a migration "
                     "only for its growth); native ResourceQuotas still count both pods")
    if is_aaq(quota):
        return AAQBackend(notes)
    if is_rancher_managed(quota):
        project = facts.get("project")
        if project is None:
            if facts.get("rancher_projects"):
                notes.append("the Rancher project of this namespace could not be read: project limit not checked")
            else:
                notes.append("the Rancher Project API is not served by this cluster (downstream cluster): the "
                             "project limit is checked by Rancher itself, not by kvquota")
        inner = RancherBackend(notes, project)
    else:
        inner = PlainBackend(notes)
    if harvester_scales(quota, facts):
        return HarvesterBackend(inner, [
            "Harvester scales this quota during migrations: kvquota opts it out (%s) while reserved and puts the "
            "previous value back on release" % HARVESTER_SKIP_ANNOTATION], facts.get("harvester_version"))
    return inner


__all__ = [
    "AAQBackend", "HarvesterBackend", "PlainBackend", "RancherBackend", "select_backend", "project_fit",
    "rancher_limit", "rancher_annotation", "project_ref", "hard_of", "used_of",
    "harvester_migrating", "is_rancher_managed", "is_aaq", "harvester_scales",
]
