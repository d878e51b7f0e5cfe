# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a migration target's DRA ResourceClaims charge against ResourceQuota (Kubernetes 1.34 and later).

KubeVirt (v1.9) copies a VMI's spec.resourceClaims into its launcher pod, the migration target's too. An entry with
resourceClaimTemplateName makes kube-controller-manager's resourceclaim controller create a NEW ResourceClaim for
the target pod, its spec copied from the ResourceClaimTemplate (in the VMI's namespace) at the pod's creation; the
source pod's claim goes when the source pod finishes. So while the migration runs the namespace pays for both. An
entry with resourceClaimName shares the existing claim: no new charge, but a node-local allocation ties the target
to the source's node (unschedulable: a warning, never an amount).

The quota evaluator (k8s pkg/quota/v1/evaluator/core/resource_claims.go, the same counting in 1.34 to 1.37) charges
a ResourceClaim at its creation, from its spec (immutable; status and allocation play no part):

- count/resourceclaims.resource.k8s.io: 1 per claim;
- <deviceClassName>.deviceclass.resource.k8s.io/devices, per request of spec.devices.requests[]: `exactly` with
  allocationMode ExactCount (the default) its count (default 1), with allocationMode All 32 (the most one
  allocation may hold); `firstAvailable` (subrequests): per device class the largest of its subrequests; summed per
  class over all requests.

The evaluator matches no quota scope: a quota with spec.scopes or a scopeSelector never charges a claim. The
DRAExtendedResource names (requests.deviceclass.resource.kubernetes.io/<class>, requests.<extended resource> of a
DeviceClass that maps one; 1.36 and later) are not modelled.

Pure: templates and VMIs are plain dicts (API JSON); charges are {quota name: Fraction}.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re
from fractions import Fraction

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.quotas import (
    CLAIM_COUNT,
    DEVICE_CLASS_SUFFIX,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.vmi import VmInputError
# resourceapi.AllocationResultsMaxSize: what allocationMode All is charged per request
ALL_DEVICES = 32
EXACT_COUNT = "ExactCount"
ALL = "All"
ALLOCATION_MODES = (EXACT_COUNT, ALL)
# the fields of a request of resource.k8s.io/v1 that name what it asks for (exactly one is set)
REQUEST_KINDS = ("exactly", "firstAvailable")
CLAIM_TEMPLATES_GROUP = "resource.k8s.io"
CLAIM_TEMPLATES_VERSION = "v1"

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(r"^%s(\.%s)*$" % (_DNS_LABEL, _DNS_LABEL))


class ClaimInputError(VmInputError):
    """A ResourceClaimTemplate, or a VMI's spec.resourceClaims entry, that cannot be charged: it blocks only the VMs
    whose target needs it (named with the field and the fix), the others are planned."""


def device_class_name(name):
    """The quota name of a device class's devices: <class>.deviceclass.resource.k8s.io/devices."""
    return name + DEVICE_CLASS_SUFFIX


def is_dns_subdomain(name):
    """Whether name is a DNS subdomain (RFC 1123): what a DeviceClass name must be."""
    return isinstance(name, str) and 0 < len(name) <= 253 and bool(_DNS_SUBDOMAIN.match(name))


def _devices(request, where, fix):
    """(class quota name, devices) of one `exactly` request or one subrequest (allocationMode, count defaulted)."""
    if not isinstance(request, dict):
        raise ClaimInputError("%s is not a mapping" % where, fix, field=where)
    klass = request.get("deviceClassName")
    if not is_dns_subdomain(klass):
        raise ClaimInputError("%s.deviceClassName %r is not a DeviceClass name (a DNS subdomain)" % (where, klass),
                              fix, field=where + ".deviceClassName")
    mode = request.get("allocationMode") or EXACT_COUNT
    if mode not in ALLOCATION_MODES:
        raise ClaimInputError("%s.allocationMode %r is not one of %s" % (where, mode, ", ".join(ALLOCATION_MODES)),
                              fix, field=where + ".allocationMode")
    if mode == ALL:
        return device_class_name(klass), Fraction(ALL_DEVICES)
    count = request.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ClaimInputError("%s.count %r is not a whole number of devices of at least 1" % (where, count),
                              fix, field=where + ".count")
    return device_class_name(klass), Fraction(count)


def claim_spec_charge(spec, where="spec", fix=None):
    """{quota name: Fraction} what quota charges for a ResourceClaim of this spec (a ResourceClaimSpec: a claim's
    spec, or a ResourceClaimTemplate's spec.spec), per the evaluator's rules (see the module's docstring).

    Raises ClaimInputError (where: the field shown, fix: what to do) for a spec that is not a mapping, a request
    with neither or both of exactly and firstAvailable, an unknown allocationMode, a count that is not an integer
    of at least 1, a deviceClassName that is not a DNS subdomain.
    """
    fix = fix or "correct %s (the apiserver's validation of resource.k8s.io/v1 says how)" % where
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise ClaimInputError("%s is not a mapping" % where, fix, field=where)
    devices = spec.get("devices") or {}
    if not isinstance(devices, dict):
        raise ClaimInputError("%s.devices is not a mapping" % where, fix, field=where + ".devices")
    requests = devices.get("requests") or []
    if not isinstance(requests, list):
        raise ClaimInputError("%s.devices.requests is not a list" % where, fix, field=where + ".devices.requests")
    charge = {CLAIM_COUNT: Fraction(1)}
    for index, request in enumerate(requests):
        at = "%s.devices.requests[%d]" % (where, index)
        if not isinstance(request, dict):
            raise ClaimInputError("%s is not a mapping" % at, fix, field=at)
        kinds = [kind for kind in REQUEST_KINDS if request.get(kind) is not None]
        if len(kinds) != 1:
            raise ClaimInputError("%s sets %s; exactly one of %s is needed" % (
                at, " and ".join(kinds) if kinds else "neither", " and ".join(REQUEST_KINDS)), fix, field=at)
        if kinds[0] == "exactly":
            name, count = _devices(request["exactly"], at + ".exactly", fix)
            charge[name] = charge.get(name, Fraction(0)) + count
            continue
        subrequests = request["firstAvailable"]
        if not isinstance(subrequests, list) or not subrequests:
            raise ClaimInputError("%s.firstAvailable is not a non-empty list" % at, fix, field=at + ".firstAvailable")
        largest = {}
        for sub_index, subrequest in enumerate(subrequests):
            name, count = _devices(subrequest, "%s.firstAvailable[%d]" % (at, sub_index), fix)
            largest[name] = max(largest.get(name, Fraction(0)), count)
        for name, count in largest.items():
            charge[name] = charge.get(name, Fraction(0)) + count
    return charge


def template_charge(template):
    """claim_spec_charge of a ResourceClaimTemplate (its spec.spec), the error naming the template."""
    template = template if isinstance(template, dict) else {}
    meta = template.get("metadata") or {}
    name = "ResourceClaimTemplate %s/%s" % (meta.get("namespace", ""), meta.get("name", ""))
    spec = (template.get("spec") or {}).get("spec") if isinstance(template.get("spec"), dict) else None
    return claim_spec_charge(spec, "%s spec.spec" % name,
                             "correct %s (its spec is immutable: re-create it, and the VMs that use it)" % name)


def vmi_claim_entries(vmi):
    """[(entry name, 'template' or 'claim', the template's or the claim's name)] of a VMI's (or a VM's template's)
    spec.resourceClaims. Raises ClaimInputError for an entry that is not a mapping, has no name, or sets neither or
    both of resourceClaimName and resourceClaimTemplateName."""
    spec = vmi.get("spec") or {}
    if vmi.get("kind") == "VirtualMachine":
        spec = ((spec.get("template") or {}).get("spec")) or {}
    entries = spec.get("resourceClaims") or []
    fix = "correct spec.resourceClaims of the VM (each entry: a name and one of resourceClaimName, " \
          "resourceClaimTemplateName)"
    if not isinstance(entries, list):
        raise ClaimInputError("spec.resourceClaims is not a list", fix, field="spec.resourceClaims")
    result = []
    for index, entry in enumerate(entries):
        at = "spec.resourceClaims[%d]" % index
        if not isinstance(entry, dict) or not entry.get("name"):
            raise ClaimInputError("%s has no name" % at, fix, field=at)
        claim, template = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
        if bool(claim) == bool(template):
            raise ClaimInputError("%s (%s) sets %s of resourceClaimName and resourceClaimTemplateName"
                                  % (at, entry["name"], "both" if claim else "neither"), fix, field=at)
        result.append((str(entry["name"]), "template" if template else "claim", str(template or claim)))
    return result


def shared_claims(vmi):
    """The names of the ResourceClaims a VMI's launcher pods share (its resourceClaimName entries); [] when its
    entries cannot be read (vmi_claim_entries reports that)."""
    try:
        return [name for _entry, kind, name in vmi_claim_entries(vmi) if kind == "claim"]
    except ClaimInputError:
        return []


def migration_claims_by_entry(vmi, templates):
    """{entry name: {quota name: Fraction}} what each ResourceClaim a migration target of vmi gets charges: one new
    claim per resourceClaimTemplateName entry, charged its template's spec (templates: {name: ResourceClaimTemplate}
    of the VMI's namespace). Entries naming a shared claim (resourceClaimName) charge nothing and are not listed.

    Raises ClaimInputError for an unreadable entry, a template not in templates (the target pod's claim cannot be
    created), or a template whose spec cannot be charged.
    """
    by_entry = {}
    namespace = (vmi.get("metadata") or {}).get("namespace", "")
    for entry, kind, name in vmi_claim_entries(vmi):
        if kind != "template":
            continue
        template = templates.get(name)
        if template is None:
            raise ClaimInputError(
                "spec.resourceClaims entry %s names ResourceClaimTemplate %s/%s, which does not exist: a target pod "
                "gets no claim and stays Pending" % (entry, namespace, name),
                "create ResourceClaimTemplate %s/%s, or correct the VM's spec.resourceClaims" % (namespace, name),
                field="spec.resourceClaims[%s].resourceClaimTemplateName" % entry)
        by_entry[entry] = template_charge(template)
    return by_entry


def migration_claims_charge(vmi, templates):
    """{quota name: Fraction} what the ResourceClaims a migration target of vmi gets charge: the sum of
    migration_claims_by_entry (its errors too)."""
    charge = {}
    for entry_charge in migration_claims_by_entry(vmi, templates).values():
        for quota_name, value in entry_charge.items():
            charge[quota_name] = charge.get(quota_name, Fraction(0)) + value
    return charge


def entry_devices(by_entry):
    """{entry name: {device class: devices (int)}} of migration_claims_by_entry's result: what the headroom fence
    pins for each claim of a target pod (an entry with no device maps to {})."""
    return dict((entry, dict((name[:-len(DEVICE_CLASS_SUFFIX)], int(value)) for name, value in charge.items()
                             if name.endswith(DEVICE_CLASS_SUFFIX) and value))
                for entry, charge in by_entry.items())


def claims_not_owned(source_pod, claims, entries):
    """The names of the claims a source pod got for entries (its resourceClaimTemplateName entries, as pod status
    resourceClaimStatuses names them) that claims ({name: ResourceClaim}; None: not read) show without a controller
    ownerReference to that pod: the resourceclaim controller deletes only the claims a finished pod owns, so such
    a claim outlives the migration. [] when nothing can be told (no pod, claims not read, a claim not there)."""
    if source_pod is None or claims is None:
        return []
    uid = (source_pod.get("metadata") or {}).get("uid")
    statuses = (source_pod.get("status") or {}).get("resourceClaimStatuses") or []
    names = dict((s.get("name"), s.get("resourceClaimName")) for s in statuses if isinstance(s, dict))
    orphaned = []
    for entry in sorted(entries or ()):
        claim = claims.get(names.get(entry) or "")
        if claim is None:
            continue
        owners = (claim.get("metadata") or {}).get("ownerReferences") or []
        if not any(isinstance(ref, dict) and ref.get("uid") == uid and ref.get("controller") for ref in owners):
            orphaned.append(names[entry])
    return orphaned


def claim_usage(claim):
    """What quota charges for an existing ResourceClaim (its spec, as at its creation); a spec that cannot be
    read (the apiserver validated it, so only a newer API's field) is charged its count alone."""
    try:
        return claim_spec_charge((claim or {}).get("spec"))
    except ClaimInputError:
        return {CLAIM_COUNT: Fraction(1)}


def uses_claims(vmi):
    """Whether a VMI has spec.resourceClaims entries."""
    spec = vmi.get("spec") or {}
    if vmi.get("kind") == "VirtualMachine":
        spec = ((spec.get("template") or {}).get("spec")) or {}
    return bool(spec.get("resourceClaims"))
