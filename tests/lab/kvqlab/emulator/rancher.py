"""Rancher and Harvester quota behaviour, as pure functions over API objects.

Rancher (cattle-cluster-agent's resource quota sync), as seen from the cluster:
- a namespace annotation field.cattle.io/resourceQuota = {"limit": {"limitsCpu": "3000m", ...}}
  is the namespace's quota; merged over the project's namespace default
  (Project spec.namespaceDefaultResourceQuota.limit) it gives spec.hard of the
  namespace's ResourceQuota labelled resourcequota.management.cattle.io/default-resource-quota=true;
- on every namespace change and on agent restart that quota's whole spec.hard is
  replaced when it differs (this is what reverts a direct edit: field report 2);
- a project limit (Project spec.resourceQuota.limit) caps the sum over the project's
  namespaces; a namespace whose limit would exceed it is not applied and gets the
  condition ResourceQuotaValidated=False in its cattle.io/status annotation;
- Rancher 2.14+: a limit may hold "extended", a map from any ResourceQuota resource name to a
  quantity (rancher/rancher 52544, 56498). A limit becomes a ResourceList extended entries first,
  then the fixed keys, so a fixed key wins over an extended entry of the same name
  (pkg/resourcequota/quota_validate.go ConvertLimitToResourceList); a namespace's "extended" replaces
  the project default's whole map, and only when the default has one (completeQuota in
  pkg/controllers/managementuser/resourcequota/resource_quota_sync.go); the project's usedLimit puts
  names without a fixed key back into "extended" (convertResourceListToLimit).

Harvester (>= v1.4.2) quota scaling: spec.hard[limits.cpu|limits.memory] = namespace
annotation base + sum of the JSON ResourceLists in annotations
harvesterhci.io/migratingUID-<vmi uid> on that quota, unless the quota carries
harvesterhci.io/skipResourceQuotaAutoScaling: "true". v1.9 (harvester PR 10197) adds to limits.memory the
JSON ResourceList in harvesterhci.io/migratingCompensation (pkg/controller/master/resourcequota,
pkg/util/resourcequota/calculator.go CalculateNewResourceQuotaFromBaseDelta).
"""
import json

from . import collection

RANCHER_LABEL = "resourcequota.management.cattle.io/default-resource-quota"
QUOTA_ANNOTATION = "field.cattle.io/resourceQuota"
PROJECT_ANNOTATION = "field.cattle.io/projectId"
STATUS_ANNOTATION = "cattle.io/status"
HARVESTER_SKIP = "harvesterhci.io/skipResourceQuotaAutoScaling"
HARVESTER_MIGRATING_PREFIX = "harvesterhci.io/migratingUID-"
# Harvester v1.9 (PR 10197; v1.9.0-rc6 pkg/util/constants.go:71-74, pkg/util/resourcequota/utils.go): one memory
# compensation per quota after a migration was refused by quota, and the flag of the ping-pong between its
# migration controller (sets "true" with each annotation change) and its quota controller (sets "false" once
# spec.hard follows; the key stays)
HARVESTER_COMPENSATION = "harvesterhci.io/migratingCompensation"
HARVESTER_RESYNC = "harvesterhci.io/migratingScalingResyncNeeded"
HARVESTER_COMPENSATION_SLACK = 128 << 20      # additionalCompensationMemory: added to every compensation
HARVESTER_V19 = (1, 9, 0)
# Harvester's controllers run as the ServiceAccount harvester in harvester-system (its chart's serviceaccount.yaml)
HARVESTER_IDENTITY = ("harvester-system", "harvester")

# Rancher 2.14.6+/2.15.2+ (rancher/webhook validators for resourcequotas): any create, update or delete
# of a quota bearing RANCHER_LABEL, and any update adding or removing the label, is refused unless
# it comes from Rancher itself (which sends its own quota writes past the webhook). The namespace
# controller may still delete such quotas when their namespace is deleted. The lab states the same
# rule as a ValidatingAdmissionPolicy, with the Rancher agent's ServiceAccount as Rancher's identity.
RANCHER_IDENTITY = ("cattle-system", "cattle")
LOCKDOWN_POLICY = "kvqlab-rancher-quota-lockdown"
LOCKDOWN_MESSAGE = ("rancher webhook: resource quotas labelled %s are managed by Rancher; change the "
                    "project or namespace limit in Rancher instead" % RANCHER_LABEL)

# Rancher's camelCase keys -> ResourceQuota resource names
RANCHER_KEYS = {
    "pods": "pods",
    "services": "services",
    "replicationControllers": "replicationcontrollers",
    "secrets": "secrets",
    "configMaps": "configmaps",
    "persistentVolumeClaims": "persistentvolumeclaims",
    "servicesNodePorts": "services.nodeports",
    "servicesLoadBalancers": "services.loadbalancers",
    "requestsCpu": "requests.cpu",
    "requestsMemory": "requests.memory",
    "requestsStorage": "requests.storage",
    "limitsCpu": "limits.cpu",
    "limitsMemory": "limits.memory",
}
RESOURCE_TO_RANCHER = {v: k for k, v in RANCHER_KEYS.items()}
EXTENDED = "extended"


def is_rancher_quota(rq):
    return ((rq.get("metadata") or {}).get("labels") or {}).get(RANCHER_LABEL) == "true"


def rancher_limit_to_hard(limit):
    """{'limitsCpu': '3000m', 'extended': {'count/pods': '4'}} -> {'limits.cpu': '3000m', 'count/pods': '4'}:
    extended entries first, the fixed keys over them (Rancher: "the fixed data wins"); unknown keys are ignored."""
    extended = (limit or {}).get(EXTENDED)
    hard = {str(k): str(v) for k, v in (extended.items() if isinstance(extended, dict) else ()) if v not in (None, "")}
    hard.update({RANCHER_KEYS[k]: str(v) for k, v in (limit or {}).items()
                 if k in RANCHER_KEYS and v not in (None, "")})
    return hard


def namespace_limit(ns):
    """The namespace's own Rancher limit (camelCase dict) or None when it has no annotation."""
    text = ((ns.get("metadata") or {}).get("annotations") or {}).get(QUOTA_ANNOTATION)
    if not text:
        return None
    try:
        return dict((json.loads(text) or {}).get("limit") or {})
    except (ValueError, AttributeError):
        return None


def project_ref(ns):
    """('local', 'p-abcde') from field.cattle.io/projectId 'local:p-abcde', or None."""
    text = ((ns.get("metadata") or {}).get("annotations") or {}).get(PROJECT_ANNOTATION)
    if not text or ":" not in text:
        return None
    cluster, project = text.split(":", 1)
    return cluster, project


def effective_limit(ns, project=None):
    """Namespace limit merged over the project's namespace default (namespace wins)."""
    own = namespace_limit(ns)
    default = (((project or {}).get("spec") or {}).get("namespaceDefaultResourceQuota") or {}).get("limit") or {}
    if own is None and not default:
        return None
    merged = dict(default)
    merged.update(own or {})
    # Rancher's completeQuota: the namespace's extended map replaces the default's whole, only when the default
    # has one; otherwise the namespace's is ignored (a namespace outside any project keeps the lab's leniency:
    # its own limit applies as it is)
    if EXTENDED in default:
        merged[EXTENDED] = (own or {}).get(EXTENDED, default[EXTENDED])
    elif default:
        merged.pop(EXTENDED, None)
    return merged


def parse(rl):
    resources = collection.core()[1]
    return resources.parse_resource_list(rl or {})


def same_hard(a, b):
    """Semantic equality of two spec.hard maps ('1Gi' == '1024Mi')."""
    resources = collection.core()[1]
    return resources.equals(parse(a), parse(b))


def project_violation(ns, project, namespaces):
    """None if this namespace's limit fits the project's limit together with the other
    namespaces of the project, else a message naming the resources that do not fit."""
    plimit = (((project or {}).get("spec") or {}).get("resourceQuota") or {}).get("limit") or {}
    if not plimit:
        return None
    resources = collection.core()[1]
    total = {}
    for other in namespaces:
        lim = effective_limit(other, project)
        if lim:
            total = resources.add(total, parse(rancher_limit_to_hard(lim)))
    cap = parse(rancher_limit_to_hard(plimit))
    fits, bad = resources.less_or_equal(resources.mask(total, list(cap)), cap)
    if fits:
        return None
    return "Resource quota [%s] exceeds project limit" % ", ".join(
        "%s=%s" % (RESOURCE_TO_RANCHER.get(n, n), resources.format_resource_list({n: total[n]})[n]) for n in sorted(bad))


def used_limit(project, namespaces):
    """Rancher's Project spec.resourceQuota.usedLimit: the sum of the namespaces' limits (camelCase)."""
    resources = collection.core()[1]
    total = {}
    for ns in namespaces:
        lim = effective_limit(ns, project)
        if lim:
            total = resources.add(total, parse(rancher_limit_to_hard(lim)))
    plimit = (((project or {}).get("spec") or {}).get("resourceQuota") or {}).get("limit") or {}
    keep = list(rancher_limit_to_hard(plimit))
    formatted = resources.format_resource_list(resources.mask(total, keep))
    result = {RESOURCE_TO_RANCHER[n]: v for n, v in formatted.items() if n in RESOURCE_TO_RANCHER}
    extended = {n: v for n, v in formatted.items() if n not in RESOURCE_TO_RANCHER}
    if extended:
        result[EXTENDED] = extended
    return result


def harvester_deltas(rq):
    """Sum of the JSON ResourceLists in harvesterhci.io/migratingUID-* annotations (limits.cpu/memory only)."""
    resources = collection.core()[1]
    total = {}
    for key, value in ((rq.get("metadata") or {}).get("annotations") or {}).items():
        if key.startswith(HARVESTER_MIGRATING_PREFIX):
            try:
                rl = json.loads(value)
            except ValueError:
                continue
            total = resources.add(total, resources.mask(parse(rl), ["limits.cpu", "limits.memory"]))
    return total


def harvester_compensation(rq):
    """limits.memory of v1.9's harvesterhci.io/migratingCompensation annotation (0 when absent or unreadable)."""
    text = ((rq.get("metadata") or {}).get("annotations") or {}).get(HARVESTER_COMPENSATION)
    if not text:
        return 0
    try:
        return parse(json.loads(text)).get("limits.memory", 0)
    except Exception:  # noqa: BLE001 - not JSON, or a malformed quantity (the core's error): counted as none
        return 0


def harvester_desired_hard(rq, ns_limit_hard, compensation=False):
    """spec.hard Harvester's quota controller would write, or None when it leaves the quota alone.
    compensation (v1.9): limits.memory also gets the migratingCompensation annotation's amount."""
    md = rq.get("metadata") or {}
    if (md.get("annotations") or {}).get(HARVESTER_SKIP) == "true":
        return None
    resources = collection.core()[1]
    base = {k: v for k, v in resources.mask(parse(ns_limit_hard or {}), ["limits.cpu", "limits.memory"]).items() if v}
    if not base:
        return None
    want = resources.add(base, resources.mask(harvester_deltas(rq), list(base)))
    if compensation and "limits.memory" in want:
        want["limits.memory"] += harvester_compensation(rq)
    hard = dict((rq.get("spec") or {}).get("hard") or {})
    hard.update(resources.format_resource_list(want))
    return hard


def harvester_compensation_needed(rq, target_memory):
    """v1.9's CalculateCompensationResourceQuotaWithVMI (calculator.go): when the quota's status.used limits.memory
    plus what the migration target pod adds (target_memory: the VMI's memory limit + its overhead) exceeds
    spec.hard limits.memory, the JSON ResourceList {"limits.memory": used + target - hard + 128Mi} Harvester writes
    into harvesterhci.io/migratingCompensation; else None. None too when the quota has no limits.memory."""
    resources = collection.core()[1]
    hard = parse((rq.get("spec") or {}).get("hard")).get("limits.memory", 0)
    if not hard or not target_memory:
        return None
    used = parse((rq.get("status") or {}).get("used")).get("limits.memory", 0)
    if used + target_memory <= hard:
        return None
    return json.dumps(resources.format_resource_list(
        {"limits.memory": used + target_memory - hard + HARVESTER_COMPENSATION_SLACK}), separators=(",", ":"))


def parse_version(text):
    """(major, minor, patch) of 'v1.9.0-rc6', '1.6', ...; None when unreadable."""
    import re
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", str(text or "").strip())
    return tuple(int(p or 0) for p in match.groups()) if match else None


def service_account_user(namespace, name):
    return "system:serviceaccount:%s:%s" % (namespace, name)


def lockdown_policy(rancher_user=None):
    """The ValidatingAdmissionPolicy of Rancher's quota lock-down (see RANCHER_IDENTITY)."""
    rancher_user = rancher_user or service_account_user(*RANCHER_IDENTITY)
    # bearing the label at all (whatever its value) is what the webhook looks at
    labelled = "has({0}.metadata.labels) && '%s' in {0}.metadata.labels" % RANCHER_LABEL
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": LOCKDOWN_POLICY, "labels": {"app.kubernetes.io/part-of": "kvqlab"}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE", "DELETE"],
                "resources": ["resourcequotas"]}]},
            "matchConditions": [
                {"name": "not-rancher", "expression": "request.userInfo.username != '%s'" % rancher_user},
            ],
            "variables": [
                # what the namespace controller does while a namespace is deleted
                {"name": "teardown", "expression":
                    "request.operation == 'DELETE' && namespaceObject != null && "
                    "has(namespaceObject.status.phase) && namespaceObject.status.phase == 'Terminating'"},
                {"name": "labelledBefore", "expression": "oldObject != null && (%s)" % labelled.format("oldObject")},
                {"name": "labelledAfter", "expression": "object != null && (%s)" % labelled.format("object")},
            ],
            "validations": [{
                "expression": "variables.teardown || (!variables.labelledBefore && !variables.labelledAfter)",
                "reason": "Forbidden",
                "message": LOCKDOWN_MESSAGE,
            }],
        },
    }


def lockdown_binding():
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": LOCKDOWN_POLICY, "labels": {"app.kubernetes.io/part-of": "kvqlab"}},
        "spec": {"policyName": LOCKDOWN_POLICY, "validationActions": ["Deny"]},
    }
