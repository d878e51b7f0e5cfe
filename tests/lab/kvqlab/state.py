"""What kvquota.maintenance keeps in the operator namespace, read from a lab: for tests, chaos campaigns
and benchmarks.

The collection keeps one ledger per ResourceQuota as a ConfigMap `kvq-ledger-<quota uid>` (JSON in
data.ledger) and one lock per tenant namespace as a Lease `kvq-lock-<namespace>`, both in the operator
namespace (default kvquota-system); nothing on the tenant's objects except spec.hard (plain quotas) or the
Rancher annotation. Collection 0.1.0 kept ledgers in the annotation kvquota.maintenance/ledger on the quota
or its Namespace and locks as Leases in the tenant namespaces: legacy_annotations() and tenant_leases()
find what would be left of that.

The names below are the documented contract (docs/docsite/rst/reservations.rst,
roles/install/files/operator-namespace.yml), written out here rather than imported from the collection, so that a test
reading state through this module checks the collection instead of repeating it.

Every function takes a target: a kvqlab Rest (anything with .get(path, **query)), a Lab, or a kubeconfig
path. The lab's admin identity reads everything; the least-privilege user may read the operator namespace
(its Role) and every quota, but not Leases of other namespaces.

    ledgers(target) -> {(namespace, quota): ledger dict}
    locks(target) -> {tenant namespace: {"name", "holder", "expires_at", "expired"}} (unexpired only by default)
"""

import calendar
import json
import time

from kubernetes.client.exceptions import ApiException

from .emulator import _rest_for

OPERATOR_NAMESPACE = "kvquota-system"
LEDGER_PREFIX = "kvq-ledger-"
WINDOW_PREFIX = "kvq-window-"
RUNNING_PREFIX = "kvq-running-"
LEDGER_KEY = "ledger"
LOCK_PREFIX = "kvq-lock-"
QUOTA_ANNOTATION = "kvquota.maintenance/quota"
LEGACY_ANNOTATION = "kvquota.maintenance/ledger"
MANAGED_BY = ("app.kubernetes.io/managed-by", "kvquota.maintenance")
LEASES = "/apis/coordination.k8s.io/v1/leases"


def _rest(target):
    return target if hasattr(target, "get") and hasattr(target, "request") else _rest_for(target)


def _parse(text):
    try:
        data = json.loads(text)
    except (TypeError, ValueError):
        return {"unparsable": text}
    return data if isinstance(data, dict) else {"unparsable": text}


# ---------------------------------------------------------------------------
# ledgers

def _operator_configmaps(target, operator_namespace, prefixes):
    """The ConfigMaps of the operator namespace whose name starts with one of prefixes (one list request)."""
    try:
        items = _rest(target).get("/api/v1/namespaces/%s/configmaps" % operator_namespace)["items"]
    except ApiException as exc:
        if exc.status == 404:
            return []
        raise
    return [cm for cm in items if cm["metadata"]["name"].startswith(tuple(prefixes))]


def ledger_configmaps(target, operator_namespace=OPERATOR_NAMESPACE):
    """Every ConfigMap named kvq-ledger-* in the operator namespace (labelled or not: an unlabelled one is
    still a ledger left behind); [] when the namespace does not exist."""
    return _operator_configmaps(target, operator_namespace, [LEDGER_PREFIX])


def window_records(target, operator_namespace=OPERATOR_NAMESPACE):
    """Every ConfigMap named kvq-window-* or kvq-running-* in the operator namespace: the nodes a maintenance window
    saw cordoned, and that it runs (window_record.py), kept while the window runs (the first also for its re-run),
    deleted when it ends."""
    return _operator_configmaps(target, operator_namespace, [WINDOW_PREFIX, RUNNING_PREFIX])


def ledger_data(configmap):
    """The ledger dict of a ledger ConfigMap ({"unparsable": text} when it is not a JSON object)."""
    return _parse((configmap.get("data") or {}).get(LEDGER_KEY))


def quota_uids(target):
    """{quota uid: (namespace, name)} of every ResourceQuota in the cluster."""
    return dict((q["metadata"]["uid"], (q["metadata"]["namespace"], q["metadata"]["name"]))
                for q in _rest(target).get("/api/v1/resourcequotas")["items"])


def quota_of(configmap, uids):
    """(namespace, quota) a ledger ConfigMap belongs to: the quota whose UID its name carries; for a quota
    that no longer exists, what the ledger (or else its display annotation) says."""
    uid = configmap["metadata"]["name"][len(LEDGER_PREFIX):]
    if uid in uids:
        return uids[uid]
    data = ledger_data(configmap)
    if data.get("namespace") and data.get("quota"):
        return (data["namespace"], data["quota"])
    shown = (configmap["metadata"].get("annotations") or {}).get(QUOTA_ANNOTATION) or ""
    if "/" in shown:
        return tuple(shown.split("/", 1))
    return (None, configmap["metadata"]["name"])


def ledgers(target, operator_namespace=OPERATOR_NAMESPACE):
    """{(namespace, quota): ledger dict} of every ledger in the operator namespace."""
    rest = _rest(target)
    uids = quota_uids(rest)
    return dict((quota_of(cm, uids), ledger_data(cm)) for cm in ledger_configmaps(rest, operator_namespace))


def reservation_ids(ledger_dicts):
    """The reservation ids held in some ledger dicts (e.g. ledgers(...).values()), sorted."""
    ids = set()
    for data in ledger_dicts:
        held = data.get("reservations")
        ids.update(held if isinstance(held, dict) else ())
    return sorted(ids)


def legacy_annotations(target, namespaces=None):
    """[(kind, namespace, name)] of every 0.1.0 ledger annotation left on a quota or Namespace (of the given
    namespaces, or all)."""
    rest = _rest(target)
    out = []
    for q in rest.get("/api/v1/resourcequotas")["items"]:
        meta = q["metadata"]
        if LEGACY_ANNOTATION in (meta.get("annotations") or {}) and (not namespaces or meta["namespace"] in namespaces):
            out.append(("quota", meta["namespace"], meta["name"]))
    for n in rest.get("/api/v1/namespaces")["items"]:
        meta = n["metadata"]
        if LEGACY_ANNOTATION in (meta.get("annotations") or {}) and (not namespaces or meta["name"] in namespaces):
            out.append(("namespace", meta["name"], meta["name"]))
    return out


# ---------------------------------------------------------------------------
# locks

def _seconds(text):
    """Unix seconds of a Lease MicroTime (2025-01-31T12:00:00.000000Z) or RFC 3339 time; None if absent."""
    if not text:
        return None
    whole, _dot, rest = text.rstrip("Z").partition(".")
    fraction = float("0." + rest) if rest.isdigit() else 0.0
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + fraction


def lock_status(lease, now):
    """{"name", "holder", "expires_at", "expired"} of a Lease at Unix time now (no holder = expired)."""
    spec = lease.get("spec") or {}
    renewed = _seconds(spec.get("renewTime")) or _seconds(spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds")
    expires_at = renewed + int(duration) if renewed is not None and duration is not None else None
    holder = spec.get("holderIdentity") or None
    return {"name": lease["metadata"]["name"], "holder": holder, "expires_at": expires_at,
            "expired": holder is None or expires_at is None or expires_at <= now}


def lock_leases(target, operator_namespace=OPERATOR_NAMESPACE):
    """Every Lease named kvq-lock-* in the operator namespace; [] when the namespace does not exist."""
    try:
        items = _rest(target).get("/apis/coordination.k8s.io/v1/namespaces/%s/leases" % operator_namespace)["items"]
    except ApiException as exc:
        if exc.status == 404:
            return []
        raise
    return [lease for lease in items if lease["metadata"]["name"].startswith(LOCK_PREFIX)]


def locks(target, operator_namespace=OPERATOR_NAMESPACE, now=None, include_expired=False):
    """{tenant namespace: lock_status} of the kvquota locks in the operator namespace: only those still in
    force (a killed run's lock lingers until it expires, then the next run or the reaper removes it) unless
    include_expired."""
    now = time.time() if now is None else now
    out = {}
    for lease in lock_leases(target, operator_namespace):
        status = lock_status(lease, now)
        if include_expired or not status["expired"]:
            out[lease["metadata"]["name"][len(LOCK_PREFIX):]] = status
    return out


def tenant_leases(target, operator_namespace=OPERATOR_NAMESPACE):
    """["namespace/name (holder h)"] of kvquota Leases outside the operator namespace (0.1.0's locks, named
    kvquota-* or labelled as managed by kvquota): the collection must create none."""
    out = []
    for lease in _rest(target).get(LEASES)["items"]:
        meta = lease["metadata"]
        if meta.get("namespace") in (operator_namespace, "kube-node-lease"):
            continue
        labels = meta.get("labels") or {}
        if meta["name"].startswith("kvquota") or labels.get(MANAGED_BY[0]) == MANAGED_BY[1]:
            out.append("%s/%s (holder %s)" % (meta["namespace"], meta["name"],
                                              (lease.get("spec") or {}).get("holderIdentity")))
    return out


# ---------------------------------------------------------------------------
# before/after

def snapshot(target, operator_namespace=OPERATOR_NAMESPACE):
    """{"configmaps": {name: resourceVersion}, "leases": {name: resourceVersion}} of the operator namespace:
    compare two to prove a run wrote nothing there."""
    rest = _rest(target)
    records = _operator_configmaps(rest, operator_namespace, [LEDGER_PREFIX, WINDOW_PREFIX, RUNNING_PREFIX])
    return {"configmaps": dict((cm["metadata"]["name"], cm["metadata"]["resourceVersion"]) for cm in records),
            "leases": dict((lease["metadata"]["name"], lease["metadata"]["resourceVersion"])
                           for lease in lock_leases(rest, operator_namespace))}


def leftovers(target, namespaces=None, operator_namespace=OPERATOR_NAMESPACE, now=None):
    """What a finished run must not leave, as strings (empty = clean): a ledger of a quota of the given
    namespaces (or any), a maintenance window's record (only when no namespaces are given: it belongs to no
    namespace), a lock in force on one of them, a 0.1.0 ledger annotation, a kvquota Lease in a tenant
    namespace."""
    rest = _rest(target)
    out = []
    for (ns, quota), data in sorted(ledgers(rest, operator_namespace).items(), key=lambda kv: str(kv[0])):
        if not namespaces or ns in namespaces:
            out.append("ledger left for %s/%s: reservations %s" % (ns, quota, reservation_ids([data])))
    if not namespaces:
        for cm in window_records(rest, operator_namespace):
            out.append("window record left: %s/%s (%s)" % (
                operator_namespace, cm["metadata"]["name"], "running since %s" % (cm.get("data") or {}).get("since")
                if cm["metadata"]["name"].startswith(RUNNING_PREFIX) else
                "nodes seen cordoned: %s" % (cm.get("data") or {}).get("cordoned")))
    for ns, status in sorted(locks(rest, operator_namespace, now).items()):
        if not namespaces or ns in namespaces:
            out.append("lock left on %s: lease %s/%s held by %s until %s" % (
                ns, operator_namespace, status["name"], status["holder"], status["expires_at"]))
    for kind, ns, name in legacy_annotations(rest, namespaces):
        out.append("0.1.0 ledger annotation %s left on %s %s/%s" % (LEGACY_ANNOTATION, kind, ns, name))
    for text in tenant_leases(rest, operator_namespace):
        if not namespaces or text.split("/", 1)[0] in namespaces:
            out.append("kvquota lease in a tenant namespace: %s" % text)
    return out
