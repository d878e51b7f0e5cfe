# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""AAQ (kubevirt application-aware-quota): two kinds of object whose spec.hard AAQ owns; kvquota recognises both,
reports them and never writes them.

- an ApplicationAwareResourceQuota (aaq.kubevirt.io): AAQ charges a migration only for target-minus-source growth
  (in its growth modes, plan/aaq.py), so it needs no expansion.
- the native ResourceQuota AAQ's rq-controller keeps for each ARQ whose spec.hard has names AAQ does not schedule
  itself (util.FilterNonScheduableResources: anything but pods, cpu, memory, ephemeral-storage and requests.* /
  limits.* other than requests.storage; e.g. count/pods, hugepages-<size>, requests.storage,
  persistentvolumeclaims). AAQ v1.8.0 pkg/aaq-controller/rq-controller/rq-controller.go creates it named
  <arq>-non-schedulable-resources-managed-rq-x (RQSuffix), labelled aaq.kubevirt.io=true (util.AAQLabel), with
  metav1.NewControllerRef(arq, ApplicationAwareResourceQuotaGroupVersionKind), and rewrites its spec (hard, scopes,
  scopeSelector) to the ARQ's whenever they differ: a value kvquota wrote would be put back. The API server still
  admits pods against it (it is a native quota): a migration's target pod needs room in it, which only raising the
  ARQ gives (AAQ copies the ARQ's value into it).

Recognised by its controller ownerReference to an ApplicationAwareResourceQuota of group aaq.kubevirt.io; the label
(which anyone who may write the quota may set, and which AAQ puts back only on a quota its informer still sees) is
neither needed nor enough. Whoever may create the quota may write the ownerReference too; what it earns is only
that kvquota does not write that quota and names it as a blocker when it lacks room: never an amount, never a
write (amounts come from the quota's status, which only the quota controller writes).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import (
    labels as _labels,
    meta as _meta,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners.protocol import QuotaOwner

AAQ = "aaq"
AAQ_GROUP = "aaq.kubevirt.io"
AAQ_KIND = "ApplicationAwareResourceQuota"
AAQ_LABEL = "aaq.kubevirt.io"                               # pkg/util/util.go AAQLabel
MANAGED_SUFFIX = "-non-schedulable-resources-managed-rq-x"  # pkg/aaq-controller/rq-controller RQSuffix


def is_aaq(quota):
    api_version = str((quota or {}).get("apiVersion") or "")
    return (quota or {}).get("kind") == AAQ_KIND or api_version.startswith(AAQ_GROUP + "/")


def managing_arq(quota):
    """The controller ownerReference of a native ResourceQuota to an ApplicationAwareResourceQuota (kind
    ApplicationAwareResourceQuota, API group aaq.kubevirt.io, controller true, with a name), or None."""
    if is_aaq(quota):
        return None
    for ref in _meta(quota).get("ownerReferences") or ():
        if not isinstance(ref, dict) or ref.get("kind") != AAQ_KIND or ref.get("controller") is not True:
            continue
        if str(ref.get("apiVersion") or "").split("/", 1)[0] != AAQ_GROUP or not ref.get("name"):
            continue
        return ref
    return None


def _ref(namespace, name):
    return "%s/%s" % (namespace or "-", name)


class AAQOwner(QuotaOwner):
    """Read-only: AAQ's own controller owns it (an ARQ, or the native quota AAQ keeps for an ARQ)."""

    name = AAQ

    def __init__(self, notes=None, arq=None):
        super(AAQOwner, self).__init__(notes)
        self.arq = arq    # the controller ownerReference of an AAQ-managed native quota (None: an ARQ itself)

    @classmethod
    def claims(cls, quota, facts):
        return is_aaq(quota) or managing_arq(quota) is not None

    @classmethod
    def for_quota(cls, quota, facts, notes):
        arq = managing_arq(quota)
        if arq is None:
            return cls(notes)
        meta = _meta(quota)
        note = ("ResourceQuota %s is kept by AAQ for ApplicationAwareResourceQuota %s (its controller "
                "ownerReference): AAQ's controller rewrites its spec.hard from the ARQ's; kvquota never writes it"
                % (_ref(meta.get("namespace"), meta.get("name")), _ref(meta.get("namespace"), arq["name"])))
        if AAQ_LABEL not in _labels(quota):
            note += " (its label %s is missing: AAQ's controller does not see it until the label is back)" % AAQ_LABEL
        return cls(list(notes or []) + [note], arq)

    def describe(self):
        data = super(AAQOwner, self).describe()
        if self.arq is not None:
            data["managed_by"] = {"kind": AAQ_KIND, "name": self.arq.get("name"), "uid": self.arq.get("uid")}
        return data

    def _arq_ref(self, quota):
        return _ref(_meta(quota).get("namespace"), self.arq["name"])

    def read_only_reason(self, quota):
        if self.arq is None:
            return "ApplicationAwareResourceQuota: AAQ charges migrations only for their growth"
        return ("AAQ keeps it for ApplicationAwareResourceQuota %s and rewrites its spec.hard from the ARQ's (a value "
                "kvquota wrote would be put back); the API server still admits a migration's target pod against it"
                % self._arq_ref(quota))

    def restate_fix(self, quota, fix):
        if self.arq is None:
            return fix
        when = "" if fix.get("permanent") else " for the maintenance window"
        text = ("raise %s of ApplicationAwareResourceQuota %s to %s%s (AAQ copies it into quota %s; kvquota never "
                "writes either)" % (fix["resource"], self._arq_ref(quota), fix["suggested"], when,
                                    _ref(_meta(quota).get("namespace"), _meta(quota).get("name"))))
        if fix.get("reason"):
            text += ": " + fix["reason"]
        return dict(fix, text=text, raise_on={"kind": AAQ_KIND, "namespace": _meta(quota).get("namespace"),
                                              "name": self.arq["name"]})
