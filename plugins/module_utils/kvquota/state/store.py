# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where ledgers live: the operator's namespace, one ConfigMap per quota, keyed by the quota's UID.

Tenants can write Events, Leases, ConfigMaps and labels in their own namespaces, and under Rancher the
annotations of their Namespace. Nothing there may decide what kvquota reserves or restores, so the
ledger of a quota is a ConfigMap `kvq-ledger-<quota uid>` in the operator namespace (default
kvquota-system, created with the RBAC by playbooks/install.yml), which only the operator can write.
Its labels and annotations are for people (kubectl -l kvquota.maintenance/ledger); the JSON in
data.ledger is the record, validated on every read (ledger.load).

Because the ledger and the quota are now two objects, every change is written in this order:
the ledger first (ledger.intend: the new value as `written`, the old one as `previous`), then the
quota, then the ledger again without `previous` (or the ledger is deleted once no reservation is left).
A run interrupted anywhere leaves a ledger that the next read resolves (ledger.observe).

Ledgers written by collection 0.1.0 (an annotation on the quota or its Namespace) are adopted once:
verified against the quota, copied here, and the annotation removed (adopt_legacy).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import hashlib
import re

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import ledger as ledger_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client.cluster import (
    api_path,
    conditional_update,
    list_items,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    InputError,
    NotFoundError,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import (
    add,
    equals,
    parse_resource_list,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import meta as _meta

DEFAULT_OPERATOR_NAMESPACE = "kvquota-system"
LEDGER_PREFIX = "kvq-ledger-"
LEDGER_KEY = "ledger"
LEDGER_LABEL = "kvquota.maintenance/ledger"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "kvquota.maintenance"
# display only: the JSON names namespace, quota and UID too, and the UID in the name is what is matched
QUOTA_ANNOTATION = "kvquota.maintenance/quota"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def check_namespace_name(name, what="namespace",
                         fix="give a DNS label (lower-case letters, digits and '-', at most 63 characters)"):
    """name, if it is a namespace name (a DNS label); one clear error naming `what` otherwise."""
    if not isinstance(name, str) or len(name) > 63 or not _DNS_LABEL.match(name or ""):
        raise InputError("%s %r is not a namespace name" % (what, name), fix)
    return name


def check_operator_namespace(name):
    """The operator namespace name, validated (one clear error otherwise)."""
    return check_namespace_name(name, "operator_namespace",
                                "give the namespace that holds kvquota's ledgers and locks (default %s), created by "
                                "playbooks/install.yml" % DEFAULT_OPERATOR_NAMESPACE)


def quota_uid(quota):
    meta = _meta(quota)
    if not meta.get("uid"):
        raise InputError("ResourceQuota %s/%s has no metadata.uid" % (meta.get("namespace"), meta.get("name")),
                         "read the quota from the API server (not from a file)")
    uid = meta["uid"]
    return uid


def ledger_name(uid):
    return LEDGER_PREFIX + uid


def configmap_path(operator_namespace, name=None):
    return api_path("v1", "configmaps", operator_namespace, name)


_NAME_PART = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def record_name(prefix, key):
    """prefix + key as the name of a record ConfigMap: a key that is no part of such a name (a window's default
    reservation prefix joins its namespaces with '+') keeps its characters that may be, the others as '-', and gets
    a hash of it; shortened with a hash of key when too long for a ConfigMap name (253)."""
    key = str(key)
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:10]
    part = key
    if not _NAME_PART.match(key):
        cleaned = re.sub(r"[^a-z0-9.-]+", "-", key.lower()).strip("-.")
        part = (cleaned + "-" if cleaned else "") + digest
    name = prefix + part
    if len(name) <= 253:
        return name
    return name[:242].rstrip("-.") + "-" + digest


def record_configmap(cluster, operator_namespace, name):
    """The record ConfigMap `name` of the operator namespace, or None."""
    return cluster.exists(configmap_path(operator_namespace, name),
                          "get configmap %s in namespace %s" % (name, operator_namespace))


def save_record(cluster, operator_namespace, name, read, updated, annotations, what):
    """Create, or conditionally update, the record ConfigMap `name` of the operator namespace (the stopped VMs of
    vmpower.py, a window's cordoned nodes of window_record.py): read() -> (its ConfigMap or None, its content);
    updated(content) -> its new data, or None when nothing changes. A concurrent writer (409, on create as on
    update) makes it read and compute again (cluster.conditional_update)."""
    def compute(current):
        configmap, content = current
        data = updated(content)
        if data is None:
            return None
        if configmap is None:
            return {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": operator_namespace, "labels": {MANAGED_BY_LABEL: MANAGED_BY},
                                 "annotations": dict(annotations)},
                    "data": data}
        return dict(configmap, data=data)

    def write(body):
        where = "configmap %s in namespace %s" % (name, operator_namespace)
        if body["metadata"].get("resourceVersion"):
            return cluster.replace(body, "update " + where)
        return cluster.create(configmap_path(operator_namespace), body, "create " + where)

    return conditional_update(read, compute, write, what=what)


def delete_record(cluster, operator_namespace, configmap):
    """Delete a record ConfigMap as read (its resourceVersion: a concurrent change is a 409); False when it is gone
    already."""
    meta = _meta(configmap)
    try:
        cluster.delete(configmap_path(operator_namespace, meta.get("name")),
                       "delete configmap %s in namespace %s" % (meta.get("name"), operator_namespace),
                       resource_version=meta.get("resourceVersion"))
    except NotFoundError:
        return False
    return True


def ledger_configmap(operator_namespace, quota, ledger, existing=None):
    """The ConfigMap body holding ledger for quota (existing: the ConfigMap read, kept for its resourceVersion)."""
    meta = _meta(quota)
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": ledger_name(quota_uid(quota)),
            "namespace": operator_namespace,
            "labels": {LEDGER_LABEL: "true", MANAGED_BY_LABEL: MANAGED_BY},
            "annotations": {QUOTA_ANNOTATION: "%s/%s" % (meta.get("namespace"), meta.get("name"))},
        },
        "data": {LEDGER_KEY: ledger_mod.dump(ledger)},
    }
    if existing is not None:
        body["metadata"]["resourceVersion"] = _meta(existing).get("resourceVersion")
    return body


def ledger_of(configmap):
    """The validated Ledger in a ledger ConfigMap; InputError naming the quota (or the ConfigMap) otherwise."""
    meta = _meta(configmap)
    name = meta.get("name") or ""
    shown = (meta.get("annotations") or {}).get(QUOTA_ANNOTATION) or "configmap %s" % name
    data = configmap.get("data") or {}
    found = ledger_mod.load(data.get(LEDGER_KEY), *(shown.split("/", 1) if "/" in shown else (None, shown)))
    if found is None:
        raise InputError("the kvquota ledger of %s is corrupt: configmap %s/%s has no %s key"
                         % (shown, meta.get("namespace"), name, LEDGER_KEY),
                         "delete that configmap and restore the quota by hand from its Events")
    if not found.uid or ledger_name(found.uid) != name:
        raise InputError("the kvquota ledger of %s is corrupt: configmap %s names quota UID %r"
                         % (shown, name, found.uid),
                         "delete configmap %s/%s and restore the quota by hand from its base" % (meta.get("namespace"),
                                                                                                 name))
    return found


class Store(object):
    """The ledgers in one operator namespace, through a cluster.Cluster."""

    def __init__(self, cluster, namespace=DEFAULT_OPERATOR_NAMESPACE):
        self.cluster = cluster
        self.namespace = check_operator_namespace(namespace)

    def _missing_namespace(self):
        return NotFoundError("the operator namespace %s does not exist" % self.namespace,
                             "create it and the RBAC once with playbooks/install.yml (or give operator_namespace)")

    def read(self, quota):
        """(Ledger or None, its ConfigMap or None) of quota; a corrupt ledger raises InputError."""
        name = ledger_name(quota_uid(quota))
        configmap = self.cluster.exists(configmap_path(self.namespace, name),
                                        "get configmap %s in namespace %s" % (name, self.namespace))
        if configmap is None:
            return None, None
        return ledger_of(configmap), configmap

    def save(self, quota, ledger, existing):
        """Create (existing None) or conditionally replace the ledger ConfigMap; returns what the API wrote.
        A concurrent writer raises ConflictError (409), on create as on update."""
        body = ledger_configmap(self.namespace, quota, ledger, existing)
        if existing is None:
            try:
                return self.cluster.create(configmap_path(self.namespace), body,
                                           "create configmap %s in namespace %s" % (body["metadata"]["name"],
                                                                                    self.namespace))
            except NotFoundError:
                raise self._missing_namespace()
        return self.cluster.replace(body, "update configmap %s in namespace %s" % (body["metadata"]["name"],
                                                                                   self.namespace))

    def delete(self, configmap):
        """Delete a ledger ConfigMap, only if nobody changed it since it was read (409 otherwise)."""
        meta = _meta(configmap)
        try:
            self.cluster.delete(configmap_path(self.namespace, meta.get("name")),
                                "delete configmap %s in namespace %s" % (meta.get("name"), self.namespace),
                                resource_version=meta.get("resourceVersion"))
        except NotFoundError:
            return

    def list(self, warnings=None):
        """{quota uid: (Ledger, ConfigMap)} of every ledger (one list, in pages of 500). A corrupt ledger is named
        in warnings and left out; it never stops the others from being read."""
        try:
            listed = list_items(self.cluster, configmap_path(self.namespace), {"labelSelector": "%s=true" % LEDGER_LABEL},
                                "list configmaps in namespace %s" % self.namespace)
        except NotFoundError:
            if warnings is not None:
                warnings.append("the operator namespace %s does not exist: no ledger to read (create it with "
                                "playbooks/install.yml)" % self.namespace)
            return {}
        found = {}
        for configmap in listed:
            try:
                entry = ledger_of(configmap)
            except InputError as err:
                if warnings is not None:
                    warnings.append("%s; skipped" % err)
                continue
            found[entry.uid] = (entry, configmap)
        return found


# ---------------------------------------------------------------------------
# ledgers written by 0.1.0

def legacy_text(quota, namespace, backend):
    """The 0.1.0 ledger annotation on the object kvquota writes for quota (the quota itself, or the Namespace of
    a Rancher-managed quota), or None."""
    obj = namespace if backend.written_on == "namespace" else quota
    return ((_meta(obj or {}).get("annotations") or {}).get(ledger_mod.LEDGER_ANNOTATION)) or None


def legacy_ledger(quota, namespace, backend):
    """(Ledger to adopt or None, a complaint or None) for the 0.1.0 ledger of quota. One that does not verify
    against the quota (verify_legacy) - forged on a tenant-writable Namespace, or broken - is never trusted:
    the complaint says so, and kvquota's next write to that object drops the annotation."""
    text = legacy_text(quota, namespace, backend)
    if text is None:
        return None, None
    meta = _meta(quota)
    where = "%s/%s" % (meta.get("namespace"), meta.get("name"))
    try:
        legacy = ledger_mod.load(text, meta.get("namespace"), None, ledger_mod.LEGACY_FORMAT_VERSION)
    except InputError as err:
        return None, "ignored the kvquota 0.1.0 ledger annotation for %s: %s" % (where, err.message)
    if legacy.quota not in (None, meta.get("name")):
        return None, None   # a Namespace ledger of another quota of this namespace
    reasons = verify_legacy(legacy, backend.durable_hard(quota, namespace))
    if reasons:
        return None, ("ignored the kvquota 0.1.0 ledger annotation for %s: it does not match the quota (%s); it is "
                      "not trusted, and kvquota's next write removes it" % (where, "; ".join(reasons)))
    legacy.namespace, legacy.quota, legacy.uid = meta.get("namespace"), meta.get("name"), quota_uid(quota)
    return legacy, None


def verify_legacy(legacy, durable):
    """Reasons a 0.1.0 ledger cannot be trusted ([] = adopt it). Such a ledger sat on an object a tenant may
    write (a Rancher namespace), so it is adopted only if it can never make kvquota give more than the quota
    holds now: its last written values equal the quota's durable values, and base + its deltas is exactly
    that (so every base is at or below what the quota holds)."""
    reasons = []
    delta = {}
    for entry in legacy.reservations.values():
        delta = add(delta, entry.delta_values())
    for name in ledger_mod.managed_names(legacy):
        written = legacy.written.get(name)
        found = (durable or {}).get(name)
        if written is None or found is None:
            reasons.append("%s: nothing recorded as written or not on the quota" % name)
            continue
        if not equals(parse_resource_list({name: written}), parse_resource_list({name: found})):
            reasons.append("%s: the ledger says %s was written, the quota holds %s" % (name, written, found))
            continue
        expected = add(parse_resource_list({name: legacy.base[name]}), {name: delta.get(name, 0)})
        if not equals(expected, parse_resource_list({name: found})):
            reasons.append("%s: base %s + reservations does not make the %s the quota holds"
                           % (name, legacy.base[name], found))
    extra = sorted(set(delta) - set(ledger_mod.managed_names(legacy)))
    if extra:
        reasons.append("reservations add %s, which the ledger does not manage" % ", ".join(extra))
    return reasons


__all__ = ["Store", "DEFAULT_OPERATOR_NAMESPACE", "check_operator_namespace", "ledger_name", "ledger_of",
           "ledger_configmap", "legacy_text", "legacy_ledger", "verify_legacy"]
