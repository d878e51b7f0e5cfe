# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read everything kvquota_check needs, in a few list calls.

The number of API requests grows with the number of object KINDS (and pages of 500),
never with the number of VMs, namespaces or quotas: one list per kind, narrowed by
label and field selectors where the scope allows, filtered here otherwise. A whole-cluster
read fetches exactly kubectl's pages for the kinds kubectl would list (the pods of all
namespaces are listed once, for the launchers and for the nodes' free capacity). Lists are
read as raw JSON through cluster.request (cluster.list_items): the client's model
deserialisation is several times slower than the request itself on large lists.

The result is an Inventory snapshot made of plain dicts (API JSON), which the pure
planning code in check.py consumes; tests build the same dicts by hand.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import admission
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import claims as claims_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import store
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan.capacity import requests_by_node
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client.cluster import (
    PAGE_SIZE,
    api_path,
    custom_path,
    list_items,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    ForbiddenError,
    InputError,
    NotFoundError,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.ownership import (
    FINAL_MIGRATION_PHASES,
    KUBEVIRT,
    event_is_about,
    launcher_vmi_ref,
    launcher_vmi_uid,
    uid_of,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.quotas import (
    FINISHED_POD_PHASES,
    quota_matches_claim,
)

VMI_NODE_LABEL = "kubevirt.io/nodeName"

HARVESTER_SETTINGS = ("harvesterhci.io", "v1beta1", "settings")
AAQ_QUOTAS = ("aaq.kubevirt.io", "v1alpha1", "applicationawareresourcequotas")
AAQ_CLUSTER_QUOTAS = ("aaq.kubevirt.io", "v1alpha1", "applicationawareclusterresourcequotas")
AAQ_CONFIGS = ("aaq.kubevirt.io", "v1alpha1", "aaqs")   # the AAQ CR (cluster scope): its VMI calculator mode
RANCHER_PROJECTS = ("management.cattle.io", "v3", "projects")
PRIORITY_CLASSES = ("scheduling.k8s.io", "v1", "priorityclasses")
CLAIM_TEMPLATES = ("resource.k8s.io", "v1", "resourceclaimtemplates")   # DRA, GA (and served) from Kubernetes 1.34

RANCHER_QUOTA_LABEL = "resourcequota.management.cattle.io/default-resource-quota"


# ---------------------------------------------------------------------------
# Scope
# ---------------------------------------------------------------------------

def _names(value, what):
    if value is None:
        return []
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",")]
    if not isinstance(value, (list, tuple, set, frozenset)):
        raise InputError("%s must be a name or a list of names, got %s" % (what, type(value).__name__),
                         "give e.g. %s: [worker-1, worker-2]" % what)
    result = []
    for name in value:
        if not isinstance(name, str) or not name.strip():
            raise InputError("%s holds an empty or non-text name (%r)" % (what, name),
                             "give names such as worker-1")
        if name.strip() not in result:
            result.append(name.strip())
    return result


def normalize_scope(scope):
    """{'nodes': [...], 'namespaces': [...]} from a scope given as None/'cluster'/dict.

    Both empty = the whole cluster. Nodes and namespaces together = the VMs on those
    nodes in those namespaces.
    """
    if scope in (None, "", "cluster", {}):
        return {"nodes": [], "namespaces": []}
    if not isinstance(scope, dict):
        raise InputError("scope must be a mapping with nodes and/or namespaces, got %r" % (scope,),
                         "give scope: {nodes: [worker-1]} or {namespaces: [tenant-a]} or {} for the cluster")
    unknown = sorted(set(scope) - set(["nodes", "namespaces", "node", "namespace", "cluster"]))
    if unknown:
        raise InputError("unknown scope key(s) %s" % ", ".join(unknown),
                         "use nodes, namespaces, or nothing for the whole cluster")
    nodes = _names(scope.get("nodes"), "nodes") + _names(scope.get("node"), "node")
    namespaces = _names(scope.get("namespaces"), "namespaces") + _names(scope.get("namespace"), "namespace")
    return {"nodes": sorted(set(nodes)), "namespaces": sorted(set(namespaces))}


# ---------------------------------------------------------------------------
# Listing
# ---------------------------------------------------------------------------

def list_all(cluster, path, what, page_size=PAGE_SIZE, label_selector=None, field_selector=None):
    """Every item of the list at path (cluster.list_items: pages of page_size, raw JSON dicts), without
    metadata.managedFields."""
    return list_items(cluster, path, {"labelSelector": label_selector, "fieldSelector": field_selector}, what,
                      page_size, each=_without_managed_fields)


def _without_managed_fields(obj):
    """obj without metadata.managedFields, as its page arrives: the field is often the largest part of an object,
    the check never reads it and never writes a listed object back, so tens of thousands of pods and VMIs take
    less memory."""
    (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


def _list_custom(cluster, group, version, plural, what, page_size, namespace=None, label_selector=None):
    return list_all(cluster, custom_path(group, version, plural, namespace), what, page_size,
                    label_selector=label_selector)


def api_groups(cluster):
    """The API groups the server serves (one discovery request), or None when the cluster object
    cannot tell (then optional kinds are probed by listing them: 404 = not installed)."""
    discover = getattr(cluster, "api_groups", None)
    if discover is None:
        return None
    try:
        return set(discover())
    except (NotFoundError, ForbiddenError):
        return None


def discovered_facts(cluster, harvester_settings):
    """The cluster facts as the connection tells them (client.cluster.Cluster.facts, sharing its discovery request
    with api_groups, and Harvester's server-version with the settings listed: harvester_settings), or None when the
    cluster object cannot tell or discovery is refused."""
    facts = getattr(cluster, "facts", None)
    if facts is None:
        return None
    try:
        return facts(harvester_settings=harvester_settings)
    except (NotFoundError, ForbiddenError):
        return None


def _optional(cluster, groups, group, version, plural, what, page_size, notes, required=False, **params):
    """A list of a kind that may not be installed: None when its API group is not served (or 404).

    Forbidden: an error when the kind matters (required), else a note.
    """
    if groups is not None and group not in groups:
        return None
    try:
        return _list_custom(cluster, group, version, plural, what, page_size, **params)
    except NotFoundError:
        return None
    except ForbiddenError as err:
        if required:
            raise
        notes.append("%s: not readable (%s); not checked" % (what, err.message))
        return None


def _by_namespace(items):
    result = {}
    for item in items:
        ns = (item.get("metadata") or {}).get("namespace", "")
        result.setdefault(ns, []).append(item)
    return result


def _name(obj):
    return (obj.get("metadata") or {}).get("name", "")


def _not_found(kind, missing, known, command):
    shown = ", ".join(sorted(known)[:10]) + (", ..." if len(known) > 10 else "")
    return NotFoundError(
        "%s %s not found" % (kind if len(missing) == 1 else kind + "s", ", ".join(repr(m) for m in missing)),
        "check the name%s with `%s`%s" % ("" if len(missing) == 1 else "s", command,
                                          ("; known: " + shown) if known else ""))


@dataclass(frozen=True)
class Snapshot:
    """What one read of a scope found (read_inventory), as plain API JSON: the plan's one input. Frozen. A partial
    snapshot (a batch's objects, headroom) leaves the rest at its default."""

    scope: dict = field(default_factory=dict)           # {"nodes": [...], "namespaces": [...]} as normalized
    ledgers: dict = field(default_factory=dict)         # {quota uid: Ledger} from the operator namespace
    nodes: dict = field(default_factory=dict)           # {name: Node}: the scope's, every node with node_capacity
    node_requests: dict = None                          # {node: requests of its non-terminal pods}; None: not read
    namespaces: dict = field(default_factory=dict)      # {name: Namespace} the report covers
    quotas: dict = field(default_factory=dict)          # {namespace: [ResourceQuota]}
    pods: dict = field(default_factory=dict)            # {namespace: [virt-launcher pod]} (controller ownerReference)
    vmis: dict = field(default_factory=dict)            # {namespace: [VirtualMachineInstance]}
    vmims: dict = field(default_factory=dict)           # {namespace: [VirtualMachineInstanceMigration]}
    migration_events: dict = field(default_factory=dict)  # {(namespace, migration): verified FailedCreate Events}
    kubevirt: dict = None                               # the KubeVirt CR, or None
    harvester_settings: dict = None                     # {name: setting}; None: Harvester not installed
    cluster_facts: dict = None                          # Cluster.facts() (discovery); None: not discovered
    kubernetes_minor: int = None                        # the API server's minor release; None: not known
    aaq_quotas: dict = None                             # {namespace: [ApplicationAwareResourceQuota]}; None: no AAQ
    aaq_cluster_quotas: list = None                     # [ApplicationAwareClusterResourceQuota]; None: not read
    aaq_configs: list = None                            # [AAQ] (aaqs.aaq.kubevirt.io); None: not read
    priority_classes: list = None                       # [PriorityClass]; None: not readable
    rancher_projects: list = None                       # [Project]; None: not visible from this cluster
    namespaces_all: list = None                         # every Namespace, when Rancher projects are (their sums)
    claim_templates: dict = None                        # {namespace: {name: ResourceClaimTemplate}} where needed
    claim_templates_problems: dict = None               # {namespace: why its templates could not be read}
    claims: dict = None                                 # {namespace: {name: ResourceClaim}} where templates are
    notes: list = field(default_factory=list)           # what could not be read, and what that means
    requests: int = None                                # API requests the read made

    @classmethod
    def of(cls, data):
        """A Snapshot from a mapping of its fields (a Snapshot itself is returned as it is)."""
        if isinstance(data, cls):
            return data
        unknown = sorted(set(data) - set(_SNAPSHOT_FIELDS))
        if unknown:
            raise ValueError("not fields of a Snapshot: %s" % ", ".join(unknown))
        return cls(**dict(data))


_SNAPSHOT_FIELDS = tuple(f.name for f in fields(Snapshot))


def read_inventory(cluster, scope=None, options=None):
    """The Snapshot of a scope (see Snapshot for what each field holds). Options: operator_namespace (where the
    ledgers are), node_capacity (read every node and the requests on it), page_size."""
    options = options or {}
    scope = normalize_scope(scope)
    start = getattr(cluster, "request_count", 0)
    # The pods are the largest list (every pod of the cluster without a node or namespace scope): listed on a
    # second thread while the rest is read, so the API server serves one list while this process decodes another.
    with ThreadPoolExecutor(max_workers=1) as pool:
        snapshot = _read(cluster, scope, options, pool)
    return replace(snapshot, requests=getattr(cluster, "request_count", 0) - start)


def vmis_missing_label(cluster, pods, known_uids, nodes):
    """The VMIs running on nodes that a list narrowed by the label kubevirt.io/nodeName missed. KubeVirt's virt-api
    refuses a user's change of that label, but a cluster may lack that webhook, and the label comes a moment
    after the pod is bound. Found through the non-finished pods on nodes whose controller ownerReference names a
    VMI not in known_uids: that VMI is read by name in the pod's namespace and kept when its UID is the one named
    and its status.nodeName (which only KubeVirt writes) is one of nodes. One GET per such VMI, none when every
    label is in place."""
    found, asked = [], set()
    for pod in pods:
        if ((pod.get("spec") or {}).get("nodeName")) not in nodes:
            continue
        if ((pod.get("status") or {}).get("phase")) in FINISHED_POD_PHASES:
            continue   # a finished launcher (a migration's source) runs nothing
        ref = launcher_vmi_ref(pod)
        if ref is None or ref["uid"] in known_uids or ref["uid"] in asked or not ref.get("name"):
            continue
        asked.add(ref["uid"])
        try:
            vmi = cluster.get_custom(*KUBEVIRT, "virtualmachineinstances", ref["name"],
                                     namespace=(pod.get("metadata") or {}).get("namespace"))
        except NotFoundError:
            continue
        if uid_of(vmi) == ref["uid"] and ((vmi.get("status") or {}).get("nodeName")) in nodes:
            found.append(vmi)
    return found


def _list_pods(cluster, scope, page):
    """The pods of the scope, listed by its node or namespace when it names exactly one, else every pod (a
    launcher pod is recognised by its ownerReference afterwards, never by a label selector)."""
    one_node = scope["nodes"][0] if len(scope["nodes"]) == 1 else None
    one_ns = scope["namespaces"][0] if len(scope["namespaces"]) == 1 else None
    return list_all(cluster, api_path("v1", "pods", one_ns), "list pods in %s" % one_ns if one_ns else "list pods", page,
                    field_selector="spec.nodeName=%s" % one_node if one_node else None)


def _read(cluster, scope, options, pool):
    """read_inventory's snapshot; the pods are listed on pool while the rest is read."""
    page = options.get("page_size", PAGE_SIZE)
    notes = []
    one_node = scope["nodes"][0] if len(scope["nodes"]) == 1 else None
    one_ns = scope["namespaces"][0] if len(scope["namespaces"]) == 1 else None
    pods_listed = pool.submit(_list_pods, cluster, scope, page)

    # Nodes: a single node by field selector, else the whole (small) list; all of them for node_capacity.
    capacity = bool(options.get("node_capacity"))
    node_selector = "metadata.name=%s" % one_node if one_node and not capacity else None
    nodes_path = api_path("v1", "nodes")
    node_list = list_all(cluster, nodes_path, "list nodes", page, field_selector=node_selector)
    nodes = dict((_name(n), n) for n in node_list)
    missing = [n for n in scope["nodes"] if n not in nodes]
    if missing:
        known = nodes if node_selector is None else dict(
            (_name(n), n) for n in list_all(cluster, nodes_path, "list nodes", page))
        raise _not_found("node", missing, known, "kubectl get nodes")

    # Namespaces.
    all_namespaces = list_all(cluster, api_path("v1", "namespaces"), "list namespaces", page,
                              field_selector="metadata.name=%s" % one_ns if one_ns else None)
    namespaces = dict((_name(n), n) for n in all_namespaces)
    missing = [n for n in scope["namespaces"] if n not in namespaces]
    if missing:
        raise _not_found("namespace", missing, namespaces if not one_ns else {}, "kubectl get namespaces")

    # VMIs: on the scoped nodes (label kubevirt.io/nodeName), in the scoped namespace(s).
    vmi_selector = "%s in (%s)" % (VMI_NODE_LABEL, ",".join(scope["nodes"])) if scope["nodes"] else None
    vmis = _list_custom(cluster, *KUBEVIRT, "virtualmachineinstances",
                        "list VirtualMachineInstances", page, namespace=one_ns, label_selector=vmi_selector)
    listed = None
    if scope["nodes"]:
        wanted = set(scope["nodes"])
        vmis = [v for v in vmis if ((v.get("status") or {}).get("nodeName")) in wanted]
        # the label only narrows the list: a VMI without it is found through its launcher pod
        listed = pods_listed.result()
        missed = vmis_missing_label(cluster, listed, set(uid_of(v) for v in vmis), wanted)
        if missed:
            notes.append("VMI(s) %s on the node(s) without their label %s=<node> (found through their launcher "
                         "pods)" % (", ".join(sorted("%s/%s" % (v["metadata"].get("namespace"), _name(v))
                                                     for v in missed)), VMI_NODE_LABEL))
            vmis += missed
    if scope["namespaces"]:
        wanted = set(scope["namespaces"])
        vmis = [v for v in vmis if (v.get("metadata") or {}).get("namespace") in wanted]
    vmis = _by_namespace(vmis)

    # The namespaces the report covers.
    if scope["namespaces"]:
        covered = set(scope["namespaces"])
    elif scope["nodes"]:
        covered = set(vmis)
    else:
        covered = set(namespaces)

    # Quotas.
    quotas = list_all(cluster, api_path("v1", "resourcequotas", one_ns),
                      "list ResourceQuotas in %s" % one_ns if one_ns else "list ResourceQuotas", page)
    quotas = dict((ns, items) for ns, items in _by_namespace(quotas).items() if ns in covered)

    # virt-launcher pods (the source pods), on the scoped nodes: recognised by their controller ownerReference
    # to a VirtualMachineInstance, not by the label kubevirt.io=virt-launcher, which any tenant may set on a pod of
    # its own (or remove from a real launcher); so the list is not narrowed by label. Without a single node or
    # namespace to narrow it by, it is every pod of the cluster, and the nodes' free capacity is read from it too.
    every_pod = not (one_ns or one_node)
    if listed is None:
        listed = pods_listed.result()
    # node_capacity: what the non-terminal pods of every namespace request on each node, for the free capacity
    # the target pods need (capacity.NodeCapacity): from the pods just listed when that was every pod, else one
    # more list (of the non-terminal pods only).
    node_requests = requests_by_node(listed) if capacity and every_pod else None
    pods = [p for p in listed if launcher_vmi_uid(p)]
    del listed   # every pod of the cluster, perhaps: not kept while the rest is read
    if scope["nodes"]:
        wanted = set(scope["nodes"])
        pods = [p for p in pods if ((p.get("spec") or {}).get("nodeName")) in wanted]
    pods = dict((ns, items) for ns, items in _by_namespace(pods).items() if ns in covered)

    if capacity and not every_pod:
        try:
            node_requests = requests_by_node(list_all(
                cluster, api_path("v1", "pods"), "list pods (node capacity)", page,
                field_selector=",".join("status.phase!=%s" % phase for phase in FINISHED_POD_PHASES)))
        except ForbiddenError as err:
            notes.append("pods of all namespaces: not readable (%s); the free capacity of the nodes is not "
                         "checked" % err.message)

    # Migrations.
    vmims = _list_custom(cluster, *KUBEVIRT, "virtualmachineinstancemigrations",
                         "list VirtualMachineInstanceMigrations", page, namespace=one_ns)
    vmims = dict((ns, items) for ns, items in _by_namespace(vmims).items() if ns in covered)

    # Quota refusals of pending migrations: virt-controller records the apiserver's message in a
    # FailedCreate Event on the migration (the condition itself usually has no message). Read only
    # when such a migration exists; only Events about these very migrations (UID) from virt-controller.
    refusals = {}
    if any(_rejected(m) for items in vmims.values() for m in items):
        refusals = migration_events(cluster, vmims, page, notes)

    # The KubeVirt CR (one per cluster).
    kubevirts = _list_custom(cluster, *KUBEVIRT, "kubevirts", "list KubeVirt", page)
    if not kubevirts:
        notes.append("no KubeVirt CR found: KubeVirt defaults assumed")
    elif len(kubevirts) > 1:
        notes.append("%d KubeVirt CRs found: the first one (%s) is used" % (len(kubevirts), _name(kubevirts[0])))

    # Optional APIs: which groups exist (one discovery request), then list only those.
    groups = api_groups(cluster)

    # Harvester's settings (the overhead ratio lives there): absent = not Harvester. Reading them is
    # required unless the KubeVirt CR states the ratio itself.
    ratio_in_cr = bool(kubevirts) and "additionalGuestMemoryOverheadRatio" in (
        ((kubevirts[0].get("spec") or {}).get("configuration")) or {})
    settings = _optional(cluster, groups, HARVESTER_SETTINGS[0], HARVESTER_SETTINGS[1], HARVESTER_SETTINGS[2],
                         "list Harvester settings", page, notes, required=not ratio_in_cr)
    harvester_settings = None if settings is None else dict((_name(s), s) for s in settings)
    facts = discovered_facts(cluster, harvester_settings)

    # AAQ's ApplicationAwareResourceQuotas.
    aaq = _optional(cluster, groups, AAQ_QUOTAS[0], AAQ_QUOTAS[1], AAQ_QUOTAS[2],
                    "list ApplicationAwareResourceQuotas", page, notes)
    aaq_quotas = None if aaq is None else dict(
        (ns, items) for ns, items in _by_namespace(aaq).items() if ns in covered)
    # and, where AAQ is served, its CR (the VMI calculator mode, which namespaces it gates) and its cluster quotas
    # (which select namespaces by label and annotation): read only, for the report (plan/aaq.py)
    aaq_configs = aaq_cluster_quotas = None
    if aaq is not None:
        aaq_configs = _optional(cluster, groups, AAQ_CONFIGS[0], AAQ_CONFIGS[1], AAQ_CONFIGS[2],
                                "list AAQ (aaqs.aaq.kubevirt.io)", page, notes)
        aaq_cluster_quotas = _optional(cluster, groups, AAQ_CLUSTER_QUOTAS[0], AAQ_CLUSTER_QUOTAS[1],
                                       AAQ_CLUSTER_QUOTAS[2], "list ApplicationAwareClusterResourceQuotas", page,
                                       notes)

    # PriorityClasses: only when a quota is scoped by priority class (globalDefault matters).
    priority_classes = None
    if any(has_priority_scope(q) for items in quotas.values() for q in items):
        priority_classes = _optional(cluster, groups, PRIORITY_CLASSES[0], PRIORITY_CLASSES[1], PRIORITY_CLASSES[2],
                                     "list PriorityClasses", page, notes)

    # Rancher projects: only when a quota is Rancher-managed, and only visible on the
    # Rancher management (local) cluster.
    rancher_projects = None
    if any(_is_rancher_quota(q) for items in quotas.values() for q in items):
        rancher_projects = _rancher_projects(cluster, groups, page, notes, namespaces, quotas)
        if rancher_projects is None:
            notes.append("Rancher projects are not visible from this cluster: project limits not checked")
        elif one_ns:
            # a project's limit is shared by all its namespaces: read them all
            all_namespaces = list_all(cluster, api_path("v1", "namespaces"), "list namespaces", page)

    # DRA ResourceClaimTemplates: only of the namespaces where a VMI's target gets claims from templates and a
    # quota charges claims (model/claims.py); one list.
    claim_templates, claim_problems = read_claim_templates(cluster, groups, vmis, quotas, page, notes)
    claims = read_claims(cluster, sorted(claim_templates), page, notes)

    # Ledgers: only the operator namespace's (by quota UID); nothing a tenant can write is read as one.
    ledger_store = store.Store(cluster, options.get("operator_namespace") or store.DEFAULT_OPERATOR_NAMESPACE)
    ledgers = dict((uid, entry) for uid, (entry, _configmap) in ledger_store.list(notes).items())

    return Snapshot(
        scope=scope,
        nodes=nodes,
        ledgers=ledgers,
        node_requests=node_requests,
        namespaces=dict((n, namespaces[n]) for n in sorted(covered) if n in namespaces),
        quotas=quotas,
        pods=pods,
        vmis=vmis,
        vmims=vmims,
        migration_events=refusals,
        kubevirt=kubevirts[0] if kubevirts else None,
        harvester_settings=harvester_settings,
        cluster_facts=facts,
        kubernetes_minor=getattr(cluster, "kubernetes_minor", None),
        aaq_quotas=aaq_quotas,
        aaq_cluster_quotas=aaq_cluster_quotas,
        aaq_configs=aaq_configs,
        priority_classes=priority_classes,
        rancher_projects=rancher_projects,
        namespaces_all=all_namespaces if rancher_projects is not None else None,
        claim_templates=claim_templates,
        claim_templates_problems=claim_problems,
        claims=claims,
        notes=notes,
    )


def _uses_claim_templates(vmi):
    """Whether a Running VMI (one that would migrate) names a ResourceClaimTemplate in spec.resourceClaims."""
    if (vmi.get("status") or {}).get("phase") != "Running":
        return False
    try:
        return any(kind == "template" for _e, kind, _n in claims_mod.vmi_claim_entries(vmi))
    except claims_mod.ClaimInputError:
        return False


def read_claim_templates(cluster, groups, vmis, quotas, page_size=PAGE_SIZE, notes=None):
    """({namespace: {name: ResourceClaimTemplate}}, {namespace: why not readable}) of the namespaces (of vmis and
    quotas, {namespace: [...]}) where a VMI's spec.resourceClaims names a template and a quota charges claims
    (quotas.quota_matches_claim); nothing is read elsewhere. One list (namespaced when one namespace needs it).
    Not served (DRA off, Kubernetes before 1.34) or forbidden: a note, and those namespaces' problem."""
    notes = [] if notes is None else notes
    wanted = sorted(ns for ns, items in (vmis or {}).items()
                    if any(_uses_claim_templates(v) for v in items)
                    and any(quota_matches_claim(q) for q in (quotas or {}).get(ns) or ()))
    if not wanted:
        return {}, {}
    group, version, plural = CLAIM_TEMPLATES
    problem = None
    if groups is not None and group not in groups:
        problem = "%s/%s is not served (DRA is off or Kubernetes is older than 1.34)" % (group, version)
    else:
        one_ns = wanted[0] if len(wanted) == 1 else None
        try:
            items = _list_custom(cluster, group, version, plural, "list ResourceClaimTemplates", page_size,
                                 namespace=one_ns)
        except NotFoundError:
            problem = "%s/%s is not served (DRA is off or Kubernetes is older than 1.34)" % (group, version)
        except ForbiddenError as err:
            problem = "not readable: %s" % err.message
    if problem is not None:
        notes.append("ResourceClaimTemplates of namespace(s) %s: %s; the VMs whose migration target gets claims "
                     "from them are blocked" % (", ".join(wanted), problem))
        return {}, dict((ns, problem) for ns in wanted)
    result = dict((ns, {}) for ns in wanted)
    for item in items:
        ns = (item.get("metadata") or {}).get("namespace", "")
        if ns in result:
            result[ns][_name(item)] = item
    return result, {}


def read_claims(cluster, namespaces, page_size=PAGE_SIZE, notes=None):
    """{namespace: {name: ResourceClaim}} of namespaces (those whose templates were read: a VMI there gets claims
    from templates and a quota charges them), so that a source pod's claim no longer owned by its pod is seen
    (vm_entries.claims_block). One list; not readable: a note, and no namespace's claims ({})."""
    notes = [] if notes is None else notes
    if not namespaces:
        return {}
    group, version, _plural = CLAIM_TEMPLATES
    try:
        items = _list_custom(cluster, group, version, "resourceclaims", "list ResourceClaims", page_size,
                             namespace=namespaces[0] if len(namespaces) == 1 else None)
    except (NotFoundError, ForbiddenError) as err:
        notes.append("ResourceClaims of namespace(s) %s not readable (%s): a source pod's claim no longer owned by "
                     "its pod is not seen" % (", ".join(namespaces), err.message))
        return {}
    result = dict((ns, {}) for ns in namespaces)
    for item in items:
        ns = (item.get("metadata") or {}).get("namespace", "")
        if ns in result:
            result[ns][_name(item)] = item
    return result


def _rejected(vmim):
    """A migration not final whose target pod quota admission refuses (admission.rejected_condition)."""
    return (vmim.get("status") or {}).get("phase") not in FINAL_MIGRATION_PHASES and \
        admission.rejected_condition(vmim) is not None


def failed_create_events(cluster, namespaces=None, page_size=PAGE_SIZE, notes=None):
    """The FailedCreate Events about VirtualMachineInstanceMigrations in these namespaces (all when None), as
    raw JSON, unverified: anyone who may create Events in a namespace may post one (see ownership.event_is_about).
    One list call (namespaced when exactly one namespace is given); Forbidden gives [] and a note."""
    notes = [] if notes is None else notes
    covered = set(namespaces) if namespaces else None
    one_ns = sorted(covered)[0] if covered and len(covered) == 1 else None
    try:
        events = list_all(cluster, api_path("v1", "events", one_ns),
                          "list migration events in %s" % one_ns if one_ns else "list migration events", page_size,
                          field_selector="involvedObject.kind=VirtualMachineInstanceMigration,reason=FailedCreate")
    except ForbiddenError as err:
        notes.append("migration events not readable (%s): the quotas that refused are not named" % err.message)
        return []
    return [e for e in events if covered is None or ((e.get("involvedObject") or {}).get("namespace") or (
        e.get("metadata") or {}).get("namespace")) in covered]


def event_stamp(event):
    """When an Event last happened, as the RFC 3339 text it carries ("" when it carries none)."""
    return event.get("lastTimestamp") or event.get("eventTime") or (event.get("metadata") or {}).get(
        "creationTimestamp") or ""


def verified_events(events, vmim):
    """The Events of events that are about this very VMIM (its UID) and say virt-controller reported them,
    oldest first."""
    return sorted((e for e in events if event_is_about(e, vmim)), key=event_stamp)


def migration_events(cluster, vmims, page_size=PAGE_SIZE, notes=None):
    """{namespace: {migration name: newest FailedCreate message}} for the VMIMs given ({namespace: [vmim]}),
    from the Events whose involvedObject carries the migration's UID and whose reporting component is
    virt-controller. Only ever shown, or used to name the quota that refused: a tenant can post such an Event,
    so no amount is taken from it."""
    wanted = dict((ns, items) for ns, items in (vmims or {}).items() if items)
    if not wanted:
        return {}
    events = failed_create_events(cluster, sorted(wanted), page_size, notes)
    result = {}
    for ns, items in sorted(wanted.items()):
        for vmim in items:
            mine = verified_events(events, vmim)
            if mine:
                result.setdefault(ns, {})[(vmim.get("metadata") or {}).get("name")] = mine[-1].get("message") or ""
    return result


def _rancher_projects(cluster, groups, page, notes, namespaces, quotas):
    """The Rancher Projects (management.cattle.io/v3): listed, or when listing is forbidden, each
    project a namespace with a Rancher-managed quota belongs to, read by name. None when not served."""
    if groups is not None and RANCHER_PROJECTS[0] not in groups:
        return None
    group, version, plural = RANCHER_PROJECTS
    try:
        return _list_custom(cluster, group, version, plural, "list Rancher projects", page)
    except NotFoundError:
        return None
    except ForbiddenError:
        pass
    refs = set()
    for ns, items in quotas.items():
        if any(_is_rancher_quota(q) for q in items):
            value = (((namespaces.get(ns) or {}).get("metadata") or {}).get("annotations") or {}).get(
                "field.cattle.io/projectId") or ""
            if ":" in value:
                refs.add(tuple(value.split(":", 1)))
    result = []
    for cluster_id, project in sorted(refs):
        try:
            result.append(cluster.request("GET", custom_path(group, version, plural, cluster_id, project),
                                          what="get Rancher project %s:%s" % (cluster_id, project)))
        except NotFoundError:
            notes.append("Rancher project %s:%s not found" % (cluster_id, project))
        except ForbiddenError as err:
            notes.append("Rancher project %s:%s not readable (%s)" % (cluster_id, project, err.message))
            return None
    return result


def has_priority_scope(quota):
    """Whether a quota selects pods by PriorityClass (the cluster's globalDefault class then matters)."""
    spec = quota.get("spec") or {}
    if "PriorityClass" in (spec.get("scopes") or ()):
        return True
    return any(e.get("scopeName") == "PriorityClass"
               for e in (spec.get("scopeSelector") or {}).get("matchExpressions") or ())


def _is_rancher_quota(quota):
    labels = (quota.get("metadata") or {}).get("labels") or {}
    return labels.get(RANCHER_QUOTA_LABEL) == "true" or labels.get("cattle.io/creator") == "norman"
