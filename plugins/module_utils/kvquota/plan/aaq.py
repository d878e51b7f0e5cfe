# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What AAQ (kubevirt application-aware-quota) does to a migration, per namespace: kvquota_check's `aaq` field.

AAQ gates every pod created in the namespaces its AAQ CR selects (spec.namespaceSelector, default: the label key
application-aware-quota/enable-gating exists; aaq-operator resources/cluster/aaqserver.go) and lifts the gate when
its quotas have room: ApplicationAwareResourceQuotas in the namespace, ApplicationAwareClusterResourceQuotas whose
spec.selector (labels and annotations, both when both are set) selects it. How a VM's launcher pods count is the AAQ
CR's spec.configuration.vmiCalculatorConfiguration.configName. With VmiPodUsage, VirtualResources,
DedicatedVirtualResources and GuestEffectiveResources, AAQ's virt-launcher calculator charges a migration's target
pod only what it adds over its source (SubtractWithNonNegativeResult(target, source), aaq-controller
built-in-usage-calculators/virt-launcher-usage-calc.go): the AAQ quotas need no expansion. With
IgnoreVmiCalculator no calculator is registered (aaq-controller application.go) and both pods count whole:
kvquota does not expand AAQ quotas, so AAQ's gate may hold the target pod. An empty configName makes the operator
pass no mode and the controller uses VmiPodUsage (util.DefaultLauncherConfig). Native ResourceQuotas are admitted
by the API server whatever AAQ does: they are planned and expanded as before, except the ones AAQ keeps for an ARQ
(<arq>-non-schedulable-resources-managed-rq-x, state/owners/aaq.py), which kvquota never writes.

Pure: reads the snapshot (inventory.py) and the namespaces' plans (check.py); nothing is written, ever.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import (
    annotations,
    labels,
    meta,
    requirement_matches,
)

ARQ_KIND = "ApplicationAwareResourceQuota"
ACRQ_KIND = "ApplicationAwareClusterResourceQuota"
MODE_FIELD = "spec.configuration.vmiCalculatorConfiguration.configName"
HCO_MODE_FIELD = "spec.deployment.applicationAwareConfig.vmiCalcConfigName"
DEFAULT_MODE = "VmiPodUsage"              # pkg/util/util.go DefaultLauncherConfig
GROWTH_MODES = ("VmiPodUsage", "VirtualResources", "DedicatedVirtualResources", "GuestEffectiveResources")
WHOLE_MODE = "IgnoreVmiCalculator"
GATING_LABEL = "application-aware-quota/enable-gating"
DEFAULT_NAMESPACE_SELECTOR = {"matchExpressions": [{"key": GATING_LABEL, "operator": "Exists"}]}
HCO_MANAGED_BY = ("app.kubernetes.io/managed-by", "hco-operator")

GROWTH, WHOLE, UNKNOWN = "growth", "source_and_target", "unknown"


def selector_matches(selector, object_labels):
    """metav1.LabelSelector semantics; an unknown operator matches nothing."""
    object_labels = object_labels or {}
    for key, value in ((selector or {}).get("matchLabels") or {}).items():
        if object_labels.get(key) != str(value):
            return False
    for expr in (selector or {}).get("matchExpressions") or ():
        values = [str(v) for v in expr.get("values") or ()]
        if not requirement_matches(expr.get("operator"), values, object_labels.get(expr.get("key"))):
            return False
    return True


def cluster_quota_selects(cluster_quota, ns_obj):
    """Whether an ApplicationAwareClusterResourceQuota's spec.selector selects the namespace (clusterquotamapping
    GetObjectMatcher: the label selector when set, and every annotation of the annotation selector when set), or
    its status lists the namespace."""
    selector = (cluster_quota.get("spec") or {}).get("selector") or {}
    matched = True
    if selector.get("labels") is not None:
        matched = selector_matches(selector["labels"], labels(ns_obj))
    if matched and selector.get("annotations"):
        ns_annotations = annotations(ns_obj)
        matched = all(ns_annotations.get(k) == v for k, v in selector["annotations"].items())
    if matched and (selector.get("labels") is not None or selector.get("annotations")):
        return True
    name = meta(ns_obj).get("name")
    return any((entry or {}).get("namespace") == name
               for entry in ((cluster_quota.get("status") or {}).get("namespaces") or ()))


def _hco_managed(config):
    return labels(config).get(HCO_MANAGED_BY[0]) == HCO_MANAGED_BY[1]


def mode_of(configs):
    """(mode, where it was read, the AAQ CR) from the AAQ CRs (None: not readable)."""
    if configs is None:
        return None, "the AAQ CR (aaqs.aaq.kubevirt.io) was not readable", None
    if not configs:
        return None, "no AAQ CR (aaqs.aaq.kubevirt.io) found", None
    config = sorted(configs, key=lambda o: meta(o).get("name") or "")[0]
    name = meta(config).get("name")
    mode = (((config.get("spec") or {}).get("configuration") or {}).get("vmiCalculatorConfiguration") or {}).get(
        "configName")
    if not mode:
        where = "AAQ %s %s not set: the AAQ controller's default (%s)" % (name, MODE_FIELD, DEFAULT_MODE)
        return DEFAULT_MODE, where, config
    return mode, "AAQ %s %s" % (name, MODE_FIELD), config


def charge_of(mode):
    if mode is None:
        return UNKNOWN
    if mode == WHOLE_MODE:
        return WHOLE
    return GROWTH   # an unknown name: the controller falls back to VmiPodUsage (validConfig), a growth mode


def gated(config, ns_obj):
    """Whether AAQ's gating webhook selects the namespace (None when the AAQ CR is not known)."""
    if config is None:
        return None
    selector = (config.get("spec") or {}).get("namespaceSelector")
    return selector_matches(DEFAULT_NAMESPACE_SELECTOR if selector is None else selector, labels(ns_obj))


def fix_for(config):
    """The change that makes AAQ charge a migration only its growth."""
    modes = "VmiPodUsage (counts launcher pods as today, a migration only its growth) or GuestEffectiveResources " \
            "(AAQ v1.8.0 and later, also leaves out KubeVirt's memory overhead)"
    if config is not None and _hco_managed(config):
        where = "HyperConverged %s (HCO reconciles AAQ %s)" % (HCO_MODE_FIELD, meta(config).get("name"))
    else:
        where = "AAQ %s %s" % (meta(config).get("name") if config else "", MODE_FIELD)
    return "set %s to %s; or raise these AAQ quotas yourself for the maintenance window: kvquota does not expand " \
           "AAQ quotas" % (where, modes)


def covering(snapshot, namespace, ns_obj):
    """[{kind, namespace, name}] of the AAQ objects that cover the namespace."""
    found = [{"kind": ARQ_KIND, "namespace": namespace, "name": meta(o).get("name")}
             for o in sorted((snapshot.aaq_quotas or {}).get(namespace) or (), key=lambda o: meta(o).get("name"))]
    found += [{"kind": ACRQ_KIND, "namespace": None, "name": meta(o).get("name")}
              for o in sorted(snapshot.aaq_cluster_quotas or (), key=lambda o: meta(o).get("name") or "")
              if cluster_quota_selects(o, ns_obj)]
    return found


def namespace_entry(namespace, quotas, is_gated, mode, mode_read_from, config, native, managed=()):
    """One namespace's entry: the AAQ objects, whether AAQ gates it, whether they need expansion and why. native:
    the native ResourceQuotas a target pod is charged against; managed: those of them AAQ keeps for an ARQ
    (kvquota never writes them)."""
    charge = charge_of(mode)
    fix = None
    if is_gated is False:
        needs = False
        reason = "AAQ does not gate pods in namespace %s (its AAQ CR's namespaceSelector%s does not select it): " \
                 "its AAQ quotas hold no pod" % (namespace, "" if (config.get("spec") or {}).get(
                     "namespaceSelector") is not None else ", default: label key %s" % GATING_LABEL)
    elif charge == GROWTH:
        needs = False
        reason = "AAQ's mode %s (%s) charges a migration's target pod only its growth over its source: these AAQ " \
                 "quotas need no expansion" % (mode, mode_read_from)
    elif charge == WHOLE:
        needs = True
        reason = "AAQ's mode %s (%s) counts a migration's source and target pods whole: kvquota does not expand " \
                 "AAQ quotas, so AAQ's scheduling gate may hold a target pod" % (mode, mode_read_from)
        fix = fix_for(config)
    else:
        needs = None
        reason = "AAQ's mode is not known (%s; read needs list on aaqs.aaq.kubevirt.io): whether these AAQ quotas " \
                 "charge a migration twice is not checked" % mode_read_from
    return {"quotas": quotas, "gated": is_gated, "needs_expansion": needs, "reason": reason, "fix": fix,
            "native_quotas": native, "aaq_managed_quotas": list(managed)}


def aaq_report(snapshot, ns_plans):
    """kvquota_check's `aaq` field: None without AAQ (its API not served, or its quotas not readable), else the
    mode and, per namespace in scope that an AAQ object covers, namespace_entry."""
    if snapshot.aaq_quotas is None:
        return None
    mode, read_from, config = mode_of(snapshot.aaq_configs)
    namespaces = {}
    for namespace in sorted(ns_plans):
        ns_obj = (snapshot.namespaces or {}).get(namespace) or {}
        quotas = covering(snapshot, namespace, ns_obj)
        if not quotas:
            continue
        native = [plan.name for plan in ns_plans[namespace].quota_plans]
        # the native quotas AAQ keeps for an ARQ (state/owners/aaq.py): charged by the API server, never written
        managed = [plan.name for plan in ns_plans[namespace].quota_plans if not plan.backend.writable]
        namespaces[namespace] = namespace_entry(namespace, quotas, gated(config, ns_obj), mode, read_from, config,
                                                native, managed)
    return {"mode": mode, "mode_read_from": read_from, "migration_charge": charge_of(mode),
            "namespaces": namespaces}


def _names(quotas):
    return ", ".join("%s %s" % (o["kind"], o["name"]) for o in quotas)


def namespace_findings(namespace, entry):
    """The human line of a namespace's entry, as a finding (findings.finding's shape)."""
    if entry is None:
        return []
    managed = entry.get("aaq_managed_quotas") or []
    native = [name for name in entry["native_quotas"] if name not in managed]
    native_text = ("; native ResourceQuota(s) %s still charge the whole target pod and are expanded as before"
                   % ", ".join(native)) if native else ""
    if managed:
        native_text += ("; ResourceQuota(s) %s, which AAQ keeps for its ARQs, charge the whole target pod too and "
                        "are never written by kvquota (raise the ARQ where they lack room)" % ", ".join(managed))
    if not entry["native_quotas"]:
        native_text = "; no native ResourceQuota of the namespace is charged"
    if entry["needs_expansion"]:
        return [{"kind": "aaq_migration_charged_twice", "namespace": namespace,
                 "message": "namespace %s: %s: %s%s" % (namespace, _names(entry["quotas"]), entry["reason"],
                                                        native_text),
                 "fix": entry["fix"]}]
    verdict = "need no expansion" if entry["needs_expansion"] is False else "not checked"
    return [{"kind": "aaq_present", "namespace": namespace,
             "message": "namespace %s: AAQ quotas %s %s: %s%s" % (namespace, _names(entry["quotas"]), verdict,
                                                                  entry["reason"], native_text),
             "fix": None}]
