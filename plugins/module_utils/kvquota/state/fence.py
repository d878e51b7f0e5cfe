# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The headroom fence: which namespaces hold a reservation, and which migrations may use its headroom.

roles/install/files/fence.yml (a ValidatingAdmissionPolicy and its binding, installed once by the administrator) refuses in a
fenced namespace every new pod (and pod resize) unless KubeVirt's controller creates it as the target pod of one
of the run's own migrations of a reserved VMI, and every new PersistentVolumeClaim (and PVC expansion) unless
KubeVirt's controller creates it as the backend-storage PVC of such a migration's target. Its parameters are
one ConfigMap in the operator namespace, written only here:

    kvquota.controller       KubeVirt's controller identity (system:serviceaccount:<ns>:kubevirt-controller)
    ns.<namespace>           the namespace is fenced; the value (window, who to ask) is shown in refusals
    vmi.<namespace>.<uid>    a reserved VMI of that namespace; the value is the VMI's name
    mig.<namespace>.<name>   a migration of that namespace the run created or follows; the value is
                             "<VMI uid>/<migration uid>", or "<VMI uid>/" while the migration's UID is not
                             known yet (admitted by name: the name is listed just before the run creates the
                             migration and its UID written the moment the create returns)
    size.<namespace>.<name>  the most that migration's target pod may charge: "<requests.cpu> <requests.memory>
                             <limits.cpu> <limits.memory>" (quantities; the larger of its VM's planned size and
                             the pod it runs in now). A target pod rendered larger (a tenant's annotation or label
                             changed between the migration's create and the pod's render) is refused, so it never
                             runs on the headroom
    kvquota.claim_controller the identity kube-controller-manager's resourceclaim controller creates a pod's DRA
                             ResourceClaims as (DEFAULT_CLAIM_CONTROLLER; set once by the administrator where it
                             runs without --use-service-account-credentials: system:kube-controller-manager)
    pod.<namespace>.<uid>    a target pod (by UID) of a listed migration, whose ResourceClaims (from its
                             resourceClaimTemplateName entries) may be created; the value is the migration's name.
                             The run lists it once it sees the pod KubeVirt created for its migration: until then
                             the claim controller's create is refused and retried
    claims.<namespace>.<name> the most devices each ResourceClaim of that migration's target pod may ask for, per
                             claim (its pod-claim name, annotation resource.kubernetes.io/pod-claim-name) and
                             device class: "<entry>:<class>=<devices>,... ..." ("<entry>:": no device), from the
                             ResourceClaimTemplates as the run planned them. A claim asking for more (a template a
                             tenant re-created larger), for another class, or of an entry not pinned is refused

Namespace names have no dots, so the kinds of keys cannot collide and parse one way: the namespace ends at the
first dot after the prefix, the rest is the VMI uid or the migration name (a DNS subdomain, dots allowed). A
target pod is admitted for a migration only through its VMI's listed uid and name, the migration's listed name
(annotation kubevirt.io/migrationJobName) and UID (label kubevirt.io/migrationJobUID); a PVC through its label
kubevirt.io/migrationName. Only KubeVirt's controller passes, so those labels on what it creates are its own.

A migration's entry goes once the migration is final (end_migrations): nothing more is admitted for it, while the
namespace stays fenced until the release unfences its VMIs (the namespace with its last one). Every write is
conditional on the ConfigMap's resourceVersion and retried on conflict (cluster.conditional_update); check_mode
reads and reports what would change without writing. The pure helpers (fence_data, unfence_data,
end_migrations_data, fenced_vmis, fenced_migrations, ...) work on the ConfigMap's data dict.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
import re
from fractions import Fraction

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client.cluster import api_path, conditional_update
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError, NotFoundError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import format_resource_list, parse_resource_list
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.store import (
    DEFAULT_OPERATOR_NAMESPACE,
    check_namespace_name,
    check_operator_namespace,
)

FENCE_CONFIGMAP = "kvq-fence"
POLICY_NAME = "kvquota-headroom-fence"
CONTROLLER_KEY = "kvquota.controller"
NAMESPACE_PREFIX = "ns."
VMI_PREFIX = "vmi."
MIGRATION_PREFIX = "mig."
SIZE_PREFIX = "size."
CLAIM_CONTROLLER_KEY = "kvquota.claim_controller"
POD_PREFIX = "pod."
CLAIMS_PREFIX = "claims."
# kube-controller-manager's resourceclaim controller, where it runs with --use-service-account-credentials (kubeadm,
# RKE2, OpenShift): the ServiceAccount of its name in kube-system (cmd/kube-controller-manager/app/resource.go)
DEFAULT_CLAIM_CONTROLLER = "system:serviceaccount:kube-system:resource-claim-controller"
# what roles/install/files/fence.yml's refusal of a ResourceClaim asking for more than its migration's pin says
CLAIM_REFUSAL = "asks for more devices than the maintenance run planned"
# the names a size key pins, in its order: what tenant input can make a target pod charge more (hook sidecars add
# containers, the namespace's memory-limits ratio label raises limits.memory); roles/install/files/fence.yml sums them per pod
PINNED_NAMES = ("requests.cpu", "requests.memory", "limits.cpu", "limits.memory")
# what roles/install/files/fence.yml's refusal of a target pod larger than its listed size says (BatchRunner looks for it)
SIZE_REFUSAL = "charges more than the maintenance run planned for its VM"
# a quota name that means the same as a pinned one (ResourceQuota's "cpu" is requests.cpu)
_PINNED_ALIASES = {"requests.cpu": "cpu", "requests.memory": "memory"}
# a ConfigMap key: at most 253 characters of [-._a-zA-Z0-9] (a migration name longer than that leaves cannot be listed)
MAX_KEY_LENGTH = 253
CONTROLLER_SERVICE_ACCOUNT = "kubevirt-controller"
# KubeVirt runs virt-controller as the ServiceAccount kubevirt-controller in the namespace of its KubeVirt CR
PLATFORM_KUBEVIRT_NAMESPACES = {"kubevirt": "kubevirt", "harvester": "harvester-system",
                                "openshift": "openshift-cnv"}
DEFAULT_CONTROLLER = "system:serviceaccount:kubevirt:%s" % CONTROLLER_SERVICE_ACCOUNT
LABELS = {"app.kubernetes.io/managed-by": "kvquota.maintenance", "kvquota.maintenance/fence": "true"}
ADMISSION_API = "admissionregistration.k8s.io/v1"
INSTALL_FIX = ("as an administrator, ansible-playbook kvquota.maintenance.install (it applies the headroom fence; "
               "see docs/docsite/rst/reservations.rst, Headroom fence)")

_UID = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9]{0,127}$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_USERNAME = re.compile(r"^[^\s,]{1,253}$")


# ---------------------------------------------------------------------------
# pure helpers

def controller_identity(kubevirt_namespace):
    """The username KubeVirt's virt-controller acts as, from the namespace of the KubeVirt CR."""
    check_namespace_name(kubevirt_namespace, "kubevirt_namespace")
    return "system:serviceaccount:%s:%s" % (kubevirt_namespace, CONTROLLER_SERVICE_ACCOUNT)


def namespace_key(namespace):
    return NAMESPACE_PREFIX + namespace


def vmi_key(namespace, uid):
    return "%s%s.%s" % (VMI_PREFIX, namespace, uid)


def migration_key(namespace, name):
    return "%s%s.%s" % (MIGRATION_PREFIX, namespace, name)


def size_key(namespace, name):
    return "%s%s.%s" % (SIZE_PREFIX, namespace, name)


def pod_key(namespace, uid):
    return "%s%s.%s" % (POD_PREFIX, namespace, uid)


def claims_key(namespace, name):
    return "%s%s.%s" % (CLAIMS_PREFIX, namespace, name)


def longest_key(namespace, name):
    """The length of the longest ConfigMap key a migration of that name gets (its claims key)."""
    return max(len(migration_key(namespace, name)), len(size_key(namespace, name)), len(claims_key(namespace, name)))


def claims_value(claims):
    """A claims key's value from a migration's claims ({entry: {device class: devices}}: each ResourceClaim its target
    pod gets, by its pod-claim name; headroom pins carry it as "claims"): "<entry>:<class>=<devices>,..." per entry,
    sorted, space-separated ("<entry>:" for a claim asking for no device). None when there is no claim (no claims
    key: a claim's size is then not checked). An InputError names a value that is not that shape."""
    if not claims:
        return None
    if not isinstance(claims, dict):
        raise InputError("a migration's claims must map each claim entry to its devices, got %r" % (claims,),
                         "give {'<entry>': {'<device class>': <devices>}}")
    parts = []
    for entry in sorted(claims):
        devices = claims[entry] or {}
        if not (isinstance(entry, str) and _DNS_LABEL.match(entry) and isinstance(devices, dict) and all(
                isinstance(k, str) and _DNS_SUBDOMAIN.match(k) and isinstance(v, int) and not isinstance(v, bool)
                and v > 0 for k, v in devices.items())):
            raise InputError("a migration's claim %r: %r is not {device class: devices}" % (entry, devices),
                             "give {'<entry>': {'<device class>': <devices>}}")
        parts.append("%s:%s" % (entry, ",".join("%s=%d" % kv for kv in sorted(devices.items()))))
    return " ".join(parts)


def parse_claims_value(value):
    """{entry: {device class: devices}} of a claims key's value, or None when it does not parse."""
    out = {}
    for part in str(value or "").split(" "):
        entry, sep, devices = part.partition(":")
        if not sep or not _DNS_LABEL.match(entry) or entry in out:
            return None
        out[entry] = {}
        for pair in [d for d in devices.split(",") if d]:
            klass, sep, count = pair.partition("=")
            if not sep or not _DNS_SUBDOMAIN.match(klass) or not count.isdigit() or int(count) < 1:
                return None
            out[entry][klass] = int(count)
    return out or None


def pinned_amounts(charge):
    """The part of a charge ({quota name: amount}) a size pins: PINNED_NAMES, an alias (quota's "cpu") taken as the
    name it stands for when that name is not there itself."""
    known = dict((name, charge[name]) for name in PINNED_NAMES if name in charge)
    known.update((name, charge[alias]) for name, alias in _PINNED_ALIASES.items()
                 if name not in known and alias in charge)
    return known


def size_value(charge):
    """A size key's value from a target pod's charge ({quota name: Fraction or quantity string}, as sizing computes
    it: requests.cpu or cpu, ...): the pinned names in PINNED_NAMES' order, a name the charge lacks pinned at 0."""
    if not isinstance(charge, dict):
        raise InputError("a migration's size must be a mapping of resource names to quantities, got %r" % (charge,),
                         "give the target pod's charge, e.g. {'requests.cpu': '925m', 'limits.memory': '1600Mi'}")
    known = pinned_amounts(charge)
    parsed = parse_resource_list(known, "size") if known else {}
    if any(value < 0 for value in parsed.values()):
        raise InputError("a migration's size must not be negative: %r" % (charge,), "give the target pod's charge")
    shown = format_resource_list(dict((name, parsed.get(name, Fraction(0))) for name in PINNED_NAMES))
    return " ".join(shown[name] for name in PINNED_NAMES)


def parse_size_value(value):
    """{pinned name: Fraction} of a size key's value, or None when it is not four quantities."""
    parts = str(value or "").split(" ")
    if len(parts) != len(PINNED_NAMES):
        return None
    try:
        return parse_resource_list(dict(zip(PINNED_NAMES, parts)), "size")
    except InputError:
        return None


def migration_value(vmi_uid, uid=None):
    """The value of a migration's key: "<VMI uid>/<migration uid>", "<VMI uid>/" while its UID is not known."""
    return "%s/%s" % (vmi_uid, uid or "")


def parse_migration_value(value):
    """(VMI uid, migration uid or '' while not known) of a migration key's value."""
    vmi, _sep, uid = str(value or "").partition("/")
    return vmi, uid


def normalize_migrations(namespace, migrations):
    """[{'name', 'uid' ('' while not known), 'vmi_uid' or None, 'vm' or None, 'size' (size_value) or None, 'claims'
    (claims_value) or None}] for migrations given as dicts with name, uid (None or '' while the migration is not
    created yet), the VMI they migrate: vmi_uid (its metadata.uid) or vm (its name, looked up among the namespace's
    reserved VMIs), and optionally size (the most its target pod may charge, see size_value) and claims (the most
    devices each of its ResourceClaims may ask for, see claims_value). An InputError names what is wrong."""
    if migrations is None:
        return []
    if isinstance(migrations, (str, bytes, dict)) or not hasattr(migrations, "__iter__"):
        raise InputError("migrations must be a list of {name, uid, vm}, got %s" % type(migrations).__name__,
                         "give a list such as [{'name': 'vm-a-kvq-1', 'uid': '<metadata.uid>', 'vm': 'vm-a'}]")
    out, seen = [], {}
    for item in migrations:
        if not isinstance(item, dict):
            raise InputError("a fenced migration must be a dict with name, uid and vm, got %r" % (item,),
                             "give {'name': <migration name>, 'uid': <its metadata.uid>, 'vm': <VMI name>}")
        name, uid = item.get("name"), item.get("uid") or ""
        vmi_uid, vm = item.get("vmi_uid") or None, item.get("vm") or None
        if not isinstance(name, str) or not _DNS_SUBDOMAIN.match(name):
            raise InputError("migration name %r is not a valid object name" % (name,),
                             "give the VirtualMachineInstanceMigration's metadata.name")
        if longest_key(namespace, name) > MAX_KEY_LENGTH:
            raise InputError("migration %s/%s: the name is too long for the fence's ConfigMap keys (%s at most "
                             "253 characters)" % (namespace, name, claims_key(namespace, "<name>")),
                             "give the migration a name of at most %d characters"
                             % (MAX_KEY_LENGTH - longest_key(namespace, "")))
        if uid and (not isinstance(uid, str) or not _UID.match(uid)):
            raise InputError("migration %s/%s has no valid uid (%r)" % (namespace, name, uid),
                             "give the migration's metadata.uid, or none while it is not created yet")
        if vmi_uid is not None and (not isinstance(vmi_uid, str) or not _UID.match(vmi_uid)):
            raise InputError("migration %s/%s names no valid VMI uid (%r)" % (namespace, name, vmi_uid),
                             "give the metadata.uid of the VMI it migrates")
        if vmi_uid is None and (not isinstance(vm, str) or not _DNS_SUBDOMAIN.match(vm)):
            raise InputError("migration %s/%s names no VMI (vm %r)" % (namespace, name, vm),
                             "give the name (vm) or uid (vmi_uid) of the VMI it migrates")
        size, claims = item.get("size"), item.get("claims")
        try:
            size = None if size is None else size_value(size)
        except InputError as err:
            raise InputError("migration %s/%s: %s" % (namespace, name, err.message), err.fix)
        if claims is not None and parse_claims_value(claims) is None:
            raise InputError("migration %s/%s: claims %r is not '<entry>:<device class>=<devices>,... ...'"
                             % (namespace, name, claims), "give claims_value(<the migration's claims>)")
        entry = {"name": name, "uid": uid, "vmi_uid": vmi_uid, "vm": vm, "size": size, "claims": claims}
        if seen.get(name, entry) != entry:
            raise InputError("migration %s/%s is given twice, differently" % (namespace, name),
                             "give each migration once")
        if name not in seen:
            seen[name] = entry
            out.append(entry)
    return out


def _resolve_vmi(data, namespace, migration):
    """The uid of the reserved VMI a normalized migration belongs to in data, or None."""
    vmis = fenced_vmis(data, namespace)
    if migration["vmi_uid"] is not None:
        return migration["vmi_uid"] if migration["vmi_uid"] in vmis else None
    found = [uid for uid, name in vmis.items() if name == migration["vm"]]
    return found[0] if len(found) == 1 else None


def _put_migration(new, namespace, migration, vmi_uid):
    """Add or update one migration's keys in new (a dict): a known UID is never replaced by 'not known yet' for the
    same VMI (a late pending write must not widen what the entry admits); a size given replaces the one listed,
    none given keeps it."""
    key = migration_key(namespace, migration["name"])
    old_vmi, old_uid = parse_migration_value(new.get(key)) if key in new else (None, "")
    uid = migration["uid"]
    if not uid and old_vmi == vmi_uid and old_uid:
        uid = old_uid
    new[key] = migration_value(vmi_uid, uid)
    if migration.get("size") is not None:
        new[size_key(namespace, migration["name"])] = migration["size"]
    if migration.get("claims") is not None:
        new[claims_key(namespace, migration["name"])] = migration["claims"]


def normalize_vmis(vmis):
    """{uid: name} for a list of VMIs given as {'name': ..., 'uid': ...} (or VMI objects with metadata)."""
    if vmis is None:
        return {}
    if isinstance(vmis, (str, bytes, dict)) or not hasattr(vmis, "__iter__"):
        raise InputError("vmis must be a list of {name, uid}, got %s" % type(vmis).__name__,
                         "give a list such as [{'name': 'vm-a', 'uid': '<metadata.uid of the VMI>'}]")
    out = {}
    for item in vmis:
        entry = item.get("metadata") if isinstance(item, dict) and isinstance(item.get("metadata"), dict) else item
        if not isinstance(entry, dict):
            raise InputError("a reserved VMI must be a dict with name and uid, got %r" % (item,),
                             "give {'name': <VMI name>, 'uid': <VMI metadata.uid>}")
        name, uid = entry.get("name"), entry.get("uid")
        if not isinstance(name, str) or not _DNS_SUBDOMAIN.match(name):
            raise InputError("reserved VMI name %r is not a valid object name" % (name,),
                             "give the VMI's metadata.name")
        if not isinstance(uid, str) or not _UID.match(uid):
            raise InputError("reserved VMI %s has no valid uid (%r)" % (name, uid),
                             "give the VMI's metadata.uid: the fence admits pods by owner uid, never by name alone")
        if out.get(uid, name) != name:
            raise InputError("uid %s is given for two VMIs (%s and %s)" % (uid, out[uid], name),
                             "give each VMI once, with its own metadata.uid")
        out[uid] = name
    return out


def fenced_vmis(data, namespace):
    """{uid: name} of the VMIs reserved in namespace according to the ConfigMap data."""
    prefix = "%s%s." % (VMI_PREFIX, namespace)
    return dict((key[len(prefix):], value) for key, value in (data or {}).items() if key.startswith(prefix))


def fenced_migrations(data, namespace):
    """{name: {'vmi': VMI uid, 'uid': migration uid ('' while not known)[, 'size': {pinned name: Fraction}, None
    when it does not parse]}} of the migrations listed in namespace according to the ConfigMap data ('size' only
    where one is listed)."""
    prefix = "%s%s." % (MIGRATION_PREFIX, namespace)
    out = {}
    data = data or {}
    for key, value in data.items():
        if key.startswith(prefix):
            vmi, uid = parse_migration_value(value)
            name = key[len(prefix):]
            out[name] = {"vmi": vmi, "uid": uid}
            if size_key(namespace, name) in data:
                out[name]["size"] = parse_size_value(data[size_key(namespace, name)])
    return out


def fenced_claim_pods(data, namespace):
    """{pod uid: migration name} of the target pods whose ResourceClaims may be created in namespace."""
    prefix = "%s%s." % (POD_PREFIX, namespace)
    return dict((key[len(prefix):], value) for key, value in (data or {}).items() if key.startswith(prefix))


def _drop_sizes(new, namespace):
    """Remove from new the size, claims and pod keys of namespace whose migration is not listed any more."""
    for prefix in ("%s%s." % (SIZE_PREFIX, namespace), "%s%s." % (CLAIMS_PREFIX, namespace)):
        for key in [k for k in new if k.startswith(prefix)]:
            if migration_key(namespace, key[len(prefix):]) not in new:
                del new[key]
    for uid, name in fenced_claim_pods(new, namespace).items():
        if migration_key(namespace, name) not in new:
            del new[pod_key(namespace, uid)]


def fenced_namespaces(data):
    """{namespace: {'note': text, 'vmis': {uid: name}}} of every fenced namespace in the ConfigMap data."""
    out = {}
    for key, value in (data or {}).items():
        if key.startswith(NAMESPACE_PREFIX):
            namespace = key[len(NAMESPACE_PREFIX):]
            out[namespace] = {"note": value, "vmis": fenced_vmis(data, namespace)}
    return out


def fence_note(since=None, expires=None, contact=None):
    """The text shown in a refusal: the reservation window and who to ask."""
    parts = []
    if since and expires:
        parts.append("reserved from %s until %s at the latest" % (since, expires))
    elif expires:
        parts.append("reserved until %s at the latest" % expires)
    elif since:
        parts.append("reserved since %s" % since)
    else:
        parts.append("reservation in progress")
    if contact:
        parts.append("contact: %s" % contact)
    return "; ".join(parts)


def fence_data(data, namespace, vmis, note, controller=None, migrations=None):
    """New ConfigMap data with namespace fenced, vmis ({uid: name}) and migrations (normalize_migrations) added;
    data itself is not changed. A migration must belong to a VMI reserved in namespace (InputError otherwise).

    controller: the identity to set (None keeps the one there, or sets DEFAULT_CONTROLLER when there is none).
    The resourceclaim controller's identity is kept as the administrator set it, else DEFAULT_CLAIM_CONTROLLER.
    """
    new = dict(data or {})
    if controller is not None:
        new[CONTROLLER_KEY] = controller
    elif not new.get(CONTROLLER_KEY):
        new[CONTROLLER_KEY] = DEFAULT_CONTROLLER
    if not new.get(CLAIM_CONTROLLER_KEY):
        new[CLAIM_CONTROLLER_KEY] = DEFAULT_CLAIM_CONTROLLER
    new[namespace_key(namespace)] = note
    for uid, name in vmis.items():
        new[vmi_key(namespace, uid)] = name
    for migration in migrations or ():
        vmi_uid = _resolve_vmi(new, namespace, migration)
        if vmi_uid is None:
            raise InputError("migration %s/%s is of VMI %s, which is not reserved in namespace %s"
                             % (namespace, migration["name"], migration["vmi_uid"] or migration["vm"], namespace),
                             "fence the VMI it migrates with it (vmis), by name and uid")
        _put_migration(new, namespace, migration, vmi_uid)
    return new


def add_migrations_data(data, namespace, migrations):
    """(new ConfigMap data, names skipped): migrations (normalize_migrations) listed in namespace when it is
    fenced and their VMI is reserved there; the others are skipped (nothing is fenced for them, so nothing
    needs admitting). data itself is not changed."""
    new, skipped = dict(data or {}), []
    for migration in migrations or ():
        vmi_uid = _resolve_vmi(new, namespace, migration) if namespace_key(namespace) in new else None
        if vmi_uid is None:
            skipped.append(migration["name"])
            continue
        _put_migration(new, namespace, migration, vmi_uid)
    return new, skipped


def add_claim_pods_data(data, namespace, pods):
    """(new ConfigMap data, pod uids skipped): pods ([{'uid', 'migration'}]: a target pod KubeVirt created for a
    listed migration) listed in namespace so that their ResourceClaims may be created; a pod whose migration is not
    listed (final, or never the run's) is skipped. data itself is not changed."""
    new, skipped = dict(data or {}), []
    for pod in pods or ():
        if namespace_key(namespace) in new and migration_key(namespace, pod["migration"]) in new:
            new[pod_key(namespace, pod["uid"])] = pod["migration"]
        else:
            skipped.append(pod["uid"])
    return new, skipped


def normalize_claim_pods(namespace, pods):
    """[{'uid', 'migration'}] for target pods given as dicts with uid (the pod's metadata.uid) and migration (the name
    of the listed migration it is the target of); an InputError names what is wrong."""
    if isinstance(pods, (str, bytes, dict)) or not hasattr(pods, "__iter__"):
        raise InputError("pods must be a list of {uid, migration}, got %s" % type(pods).__name__,
                         "give a list such as [{'uid': '<metadata.uid of the target pod>', 'migration': 'vm-a-kvq-1'}]")
    out = []
    for item in pods:
        uid, name = (item.get("uid"), item.get("migration")) if isinstance(item, dict) else (None, None)
        if not isinstance(uid, str) or not _UID.match(uid):
            raise InputError("target pod %r has no valid uid" % (item,), "give the pod's metadata.uid")
        if not isinstance(name, str) or not _DNS_SUBDOMAIN.match(name) or \
                len(pod_key(namespace, uid)) > MAX_KEY_LENGTH:
            raise InputError("target pod %s names no valid migration (%r)" % (uid, name),
                             "give the name of the listed migration it is the target of")
        out.append({"uid": uid, "migration": name})
    return out


def end_migrations_data(data, namespace, migrations):
    """New ConfigMap data without the keys of migrations ([{name, uid}]) in namespace: a key goes when it lists
    the same UID, no UID yet, or the given uid is None. The VMIs and the namespace stay (the reservation still
    holds the headroom until its release)."""
    new = dict(data or {})
    listed = fenced_migrations(new, namespace)
    for migration in migrations or ():
        entry = listed.get(migration.get("name"))
        if entry is not None and (not migration.get("uid") or not entry["uid"] or entry["uid"] == migration["uid"]):
            del new[migration_key(namespace, migration["name"])]
    _drop_sizes(new, namespace)
    return new


def unfence_data(data, namespace, uids=None):
    """New ConfigMap data with the given VMI uids (None: all) of namespace removed, with their migrations; the
    namespace itself (and every migration listed there) is unfenced once none of its VMIs is left."""
    new = dict(data or {})
    for uid in list(fenced_vmis(new, namespace)):
        if uids is None or uid in uids:
            del new[vmi_key(namespace, uid)]
    gone = uids is None or not fenced_vmis(new, namespace)
    for name, entry in fenced_migrations(new, namespace).items():
        if gone or entry["vmi"] not in fenced_vmis(new, namespace):
            del new[migration_key(namespace, name)]
    _drop_sizes(new, namespace)
    if gone:
        new.pop(namespace_key(namespace), None)
    return new


def data_changes(old, new):
    """(added or changed keys, removed keys) between two ConfigMap data dicts, sorted."""
    old, new = old or {}, new or {}
    return (sorted(k for k in new if old.get(k) != new[k]), sorted(k for k in old if k not in new))


# ---------------------------------------------------------------------------
# API

def configmap_path(operator_namespace, name=None):
    return api_path("v1", "configmaps", operator_namespace, name)


def read_fence(cluster, operator_namespace=DEFAULT_OPERATOR_NAMESPACE):
    """The fence ConfigMap (a dict) or None when there is none."""
    check_operator_namespace(operator_namespace)
    return cluster.exists(configmap_path(operator_namespace, FENCE_CONFIGMAP),
                          "get configmap %s in namespace %s" % (FENCE_CONFIGMAP, operator_namespace))


def fences(cluster, operator_namespace=DEFAULT_OPERATOR_NAMESPACE):
    """{namespace: {'note', 'vmis': {uid: name}}} of every fenced namespace (for the reaper and reports)."""
    current = read_fence(cluster, operator_namespace)
    return fenced_namespaces((current or {}).get("data"))


def _update(cluster, operator_namespace, change, what, check_mode):
    """Apply change(data) -> new data to the fence ConfigMap, conditionally, retrying on conflict.

    Returns {'changed', 'added', 'removed' (ConfigMap keys), 'data' (after)}."""
    outcome = {}

    def read():
        return read_fence(cluster, operator_namespace)

    def compute(current):
        old = (current or {}).get("data") or {}
        new = change(old)
        added, removed = data_changes(old, new)
        outcome.update(changed=bool(added or removed), added=added, removed=removed, data=new)
        if not (added or removed) or check_mode:
            return None
        if current is None:
            return {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": FENCE_CONFIGMAP, "namespace": operator_namespace, "labels": dict(LABELS)},
                    "data": new}
        body = copy.deepcopy(current)
        body["data"] = new
        return body

    def write(body):
        if body["metadata"].get("resourceVersion"):
            return cluster.replace(body, what=what)
        # a concurrent creator makes this a 409, which conditional_update retries against its ConfigMap
        return cluster.create(configmap_path(operator_namespace), body, what)

    conditional_update(read, compute, write, what=what)
    return outcome


def fence(cluster, operator_namespace, namespace, vmis, note=None, controller=None, check_mode=False,
          migrations=None):
    """Fence namespace, reserve vmis (a list of {name, uid}) there and admit the target pods and backend-storage
    PVCs of migrations (a list of {name, uid (None while not created yet), vm (VMI name) or vmi_uid}) of those
    VMIs; idempotent. A reserved VMI without a listed migration gets nothing admitted.

    note: the text refusals show (fence_note(since, expires, contact)); controller: KubeVirt's controller
    identity (controller_identity(<namespace of the KubeVirt CR>); None keeps the one in the ConfigMap).
    Returns {'changed', 'namespace', 'vmis' ({uid: name} fenced after), 'migrations' (fenced_migrations after),
    'added', 'removed'}."""
    check_operator_namespace(operator_namespace)
    check_namespace_name(namespace)
    wanted = normalize_vmis(vmis)
    admitted = normalize_migrations(namespace, migrations)
    if controller is not None and (not isinstance(controller, str) or not _USERNAME.match(controller)):
        raise InputError("fence controller identity %r is not a username" % (controller,),
                         "give KubeVirt's controller identity, e.g. %s" % DEFAULT_CONTROLLER)
    text = note if note is not None else fence_note()
    result = _update(cluster, operator_namespace,
                     lambda data: fence_data(data, namespace, wanted, str(text), controller, admitted),
                     "fence namespace %s (configmap %s in namespace %s)" % (namespace, FENCE_CONFIGMAP,
                                                                            operator_namespace),
                     check_mode)
    return {"changed": result["changed"], "namespace": namespace, "vmis": fenced_vmis(result["data"], namespace),
            "migrations": fenced_migrations(result["data"], namespace),
            "added": result["added"], "removed": result["removed"]}


def _add_where_listed(cluster, operator_namespace, namespace, add_data, items, what, check_mode):
    """_update with add_data(data, namespace, items) -> (new data, items skipped); returns (_update's result, the
    items skipped)."""
    skipped = []

    def change(data):
        new, left_out = add_data(data, namespace, items)
        skipped[:] = left_out
        return new
    result = _update(cluster, operator_namespace, change, "%s in the fence of namespace %s (configmap %s in namespace %s)"
                     % (what, namespace, FENCE_CONFIGMAP, operator_namespace), check_mode)
    return result, list(skipped)


def admit_migrations(cluster, operator_namespace, namespace, migrations, check_mode=False):
    """List migrations (as for fence) in namespace, when it is fenced and their VMI is reserved there; the others
    are skipped (nothing there is fenced for them). The run lists a migration it creates by name just before
    creating it (UID not known yet), then again with its UID once created. Idempotent.
    Returns {'changed', 'namespace', 'migrations' (fenced_migrations after), 'skipped' (names), 'added',
    'removed'}."""
    check_operator_namespace(operator_namespace)
    check_namespace_name(namespace)
    result, skipped = _add_where_listed(cluster, operator_namespace, namespace, add_migrations_data,
                                        normalize_migrations(namespace, migrations), "list migrations", check_mode)
    return {"changed": result["changed"], "namespace": namespace,
            "migrations": fenced_migrations(result["data"], namespace), "skipped": skipped,
            "added": result["added"], "removed": result["removed"]}


def admit_claim_pods(cluster, operator_namespace, namespace, pods, check_mode=False):
    """List target pods ([{'uid', 'migration'}]) of listed migrations in namespace, so that kube-controller-manager's
    resourceclaim controller may create their ResourceClaims there (each within its migration's claims pin); a pod
    whose migration is not listed is skipped. Idempotent; the keys go with their migration (end_migrations, unfence).
    Returns {'changed', 'namespace', 'pods' ({uid: migration} listed after), 'skipped' (uids), 'added', 'removed'}."""
    check_operator_namespace(operator_namespace)
    check_namespace_name(namespace)
    result, skipped = _add_where_listed(cluster, operator_namespace, namespace, add_claim_pods_data,
                                        normalize_claim_pods(namespace, pods), "list target pods", check_mode)
    return {"changed": result["changed"], "namespace": namespace,
            "pods": fenced_claim_pods(result["data"], namespace), "skipped": skipped,
            "added": result["added"], "removed": result["removed"]}


def end_migrations(cluster, operator_namespace, namespace, migrations, check_mode=False):
    """Stop admitting anything for migrations ([{name, uid}]) of namespace, final now; the namespace and its VMIs
    stay fenced until the release. Idempotent (nothing to do without the ConfigMap or the keys).
    Returns {'changed', 'namespace', 'migrations' (left), 'added', 'removed'}."""
    check_operator_namespace(operator_namespace)
    check_namespace_name(namespace)
    result = _update(cluster, operator_namespace, lambda data: end_migrations_data(data, namespace, migrations),
                     "end migrations in the fence of namespace %s (configmap %s in namespace %s)"
                     % (namespace, FENCE_CONFIGMAP, operator_namespace), check_mode)
    return {"changed": result["changed"], "namespace": namespace,
            "migrations": fenced_migrations(result["data"], namespace),
            "added": result["added"], "removed": result["removed"]}


def unfence(cluster, operator_namespace, namespace, vmis=None, check_mode=False):
    """Stop admitting anything for vmis (a list of {name, uid}; None: all) and their migrations in namespace; the
    namespace is unfenced once none of its VMIs is left. Idempotent (nothing to do without the ConfigMap).
    Returns {'changed', 'namespace', 'vmis' (left), 'fenced' (namespace still fenced), 'added', 'removed'}."""
    check_operator_namespace(operator_namespace)
    check_namespace_name(namespace)
    uids = None if vmis is None else set(normalize_vmis(vmis))
    result = _update(cluster, operator_namespace, lambda data: unfence_data(data, namespace, uids),
                     "unfence namespace %s (configmap %s in namespace %s)" % (namespace, FENCE_CONFIGMAP,
                                                                              operator_namespace),
                     check_mode)
    return _unfence_result(namespace, result)


def _unfence_result(namespace, result):
    """unfence's result from _update's."""
    return {"changed": result["changed"], "namespace": namespace, "vmis": fenced_vmis(result["data"], namespace),
            "fenced": namespace_key(namespace) in result["data"], "added": result["added"],
            "removed": result["removed"]}


def unfence_keeping_namespace(cluster, operator_namespace, namespace, vmis, note, check_mode=False):
    """Stop admitting target pods of vmis (a list of {name, uid}) in namespace and keep the namespace fenced, in one
    conditional write (never unfenced in between): with note when nothing else keeps it fenced, so that nothing
    is admitted there (a remainder of a reservation still held at usage, see reservations.py).
    Returns {'changed', 'namespace', 'vmis' (left), 'fenced', 'added', 'removed'}."""
    check_operator_namespace(operator_namespace)
    check_namespace_name(namespace)
    uids = set(normalize_vmis(vmis))

    def change(data):
        new = unfence_data(data, namespace, uids)
        if namespace_key(namespace) not in new:
            new = fence_data(new, namespace, {}, str(note))
        return new
    result = _update(cluster, operator_namespace, change,
                     "keep namespace %s fenced (configmap %s in namespace %s)" % (namespace, FENCE_CONFIGMAP,
                                                                                  operator_namespace),
                     check_mode)
    return _unfence_result(namespace, result)


def installed(cluster, operator_namespace=DEFAULT_OPERATOR_NAMESPACE):
    """True when roles/install/files/fence.yml's policy and binding are installed, False when either is missing; an
    InputError when the binding reads its parameters from another namespace than operator_namespace (the
    fence would never see what this collection writes). Needs the ClusterRole kvquota-maintenance-fence."""
    return installed_policy(cluster, operator_namespace) is not None


# the variable of roles/install/files/fence.yml that checks a target pod against its migration's size (added in issue 24)
SIZE_CHECK_VARIABLE = "withinPin"
# the one that checks a DRA ResourceClaim against its migration's claims pin (added in issue 27)
CLAIM_CHECK_VARIABLE = "withinClaimPin"


def outdated(policy):
    """What an installed fence policy (installed_policy's result) lacks of this collection's roles/install/files/fence.yml, as
    text for a warning, or None when it has all of it."""
    names = set(v.get("name") for v in ((policy or {}).get("spec") or {}).get("variables") or ())
    if SIZE_CHECK_VARIABLE not in names:
        return ("the installed headroom fence does not check a target pod's size against the run's plan (installed "
                "by an older release of the collection): a VM whose input a tenant changes between its migration's "
                "create and its target pod's render is seen only once rendered; apply it again: " + INSTALL_FIX)
    if CLAIM_CHECK_VARIABLE not in names:
        return ("the installed headroom fence does not fence DRA ResourceClaims (installed by an older release of the "
                "collection): while a namespace holds a reservation of device quota, a tenant's ResourceClaim can "
                "take it; apply it again: " + INSTALL_FIX)
    return None


def installed_policy(cluster, operator_namespace=DEFAULT_OPERATOR_NAMESPACE):
    """The fence's ValidatingAdmissionPolicy when it and its binding are installed, else None (see installed)."""
    check_operator_namespace(operator_namespace)
    try:
        policy = cluster.get(api_path(ADMISSION_API, "validatingadmissionpolicies", name=POLICY_NAME),
                             "get validatingadmissionpolicy %s" % POLICY_NAME)
        binding = cluster.get(api_path(ADMISSION_API, "validatingadmissionpolicybindings", name=POLICY_NAME),
                              "get validatingadmissionpolicybinding %s" % POLICY_NAME)
    except NotFoundError:
        return None
    ref = (binding.get("spec") or {}).get("paramRef") or {}
    if ref.get("name") != FENCE_CONFIGMAP or ref.get("namespace") != operator_namespace:
        raise InputError("the fence binding %s reads configmap %s/%s, not %s/%s"
                         % (POLICY_NAME, ref.get("namespace"), ref.get("name"), operator_namespace, FENCE_CONFIGMAP),
                         "set paramRef of the ValidatingAdmissionPolicyBinding %s to namespace %s, name %s (the install "
                         "playbook does, with kvquota_operator_namespace), or give operator_namespace: %s"
                         % (POLICY_NAME, operator_namespace, FENCE_CONFIGMAP, ref.get("namespace")))
    return policy
