# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""KubeVirt's own report of a launcher pod's memory overhead, compared with the overhead kvquota's sizing computes.

From v1.9.0 (feature gate VmiMemoryOverheadReport, Beta, on by default) virt-controller puts the overhead it computed
when it rendered a launcher pod on the pod (annotation kubevirt.io/memory-overhead-bytes, decimal bytes) and copies it
to the VMI as a Quantity (BinarySI): status.memory.memoryOverhead for the running pod (virt-handler replaces it with
the target's when a migration completes) and status.migrationState.targetMemoryOverhead for a migration's target pod.

Both live in the VMI's status, which a tenant with KubeVirt's edit role can write (the VMI has no status subresource
and virt-api's VMI update admitter only refuses spec and reserved-label changes), and the annotation they are copied
from sits on a pod in the tenant's namespace. So a reported value is input to check per VM, never authority for an
amount: compare() only names the VMs where it differs, and nothing sizes, plans or reserves with it.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import dataclasses
import re
from fractions import Fraction
from typing import Optional

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import labels, meta
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import (
    BINARY_SI,
    format_quantity,
    parse_quantity,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.overhead import memory_overhead
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.rules import (
    parse_overhead_ratio,
    parse_version,
)

# KubeVirt's label of the overhead ratio a VMI's memory hotplug needs (virt-controller sets it; it is not among the
# labels virt-api reserves, so it is a hint checked by recomputing, like every explanation here)
HOTPLUG_RATIO_LABEL = "kubevirt.io/memory-hotplug-overhead-ratio"

MEMORY_OVERHEAD = "status.memory.memoryOverhead"
TARGET_MEMORY_OVERHEAD = "status.migrationState.targetMemoryOverhead"

LACKING_RULE = "a sizing rule kvquota lacks (or an input of the pod kvquota does not see)"


@dataclasses.dataclass(frozen=True)
class OverheadDifference:
    """One VM whose reported memory overhead differs from the computed one (or cannot be read)."""

    namespace: str
    vm: str
    field: str                      # MEMORY_OVERHEAD or TARGET_MEMORY_OVERHEAD
    computed: Fraction              # kvquota's overhead for the VM with the cluster's configuration now
    reported: Optional[Fraction]    # None when malformed
    why: str
    malformed: Optional[str] = None  # the reported text and what is wrong with it

    @property
    def difference(self):
        """reported - computed (None when malformed)."""
        return None if self.reported is None else self.reported - self.computed

    def as_dict(self):
        """The record as the check's result carries it: bytes as integers and as quantity strings."""
        out = {"namespace": self.namespace, "vm": self.vm, "field": self.field,
               "computed": int(self.computed), "computed_quantity": format_quantity(self.computed, BINARY_SI),
               "reported": None, "reported_quantity": None, "difference": None, "why": self.why}
        if self.reported is not None:
            out.update(reported=int(self.reported), reported_quantity=format_quantity(self.reported, BINARY_SI),
                       difference=int(self.difference))
        if self.malformed is not None:
            out["malformed"] = self.malformed
        return out


def reported_overheads(vmi):
    """[(field, raw value)] of the overheads KubeVirt reports for a VMI: the running pod's, and the target pod's of
    a migration under way (once a migration completed the running pod's is the target's)."""
    status = vmi.get("status") if isinstance(vmi, dict) else None
    status = status if isinstance(status, dict) else {}
    out = []
    memory = status.get("memory")
    if isinstance(memory, dict) and memory.get("memoryOverhead") is not None:
        out.append((MEMORY_OVERHEAD, memory["memoryOverhead"]))
    state = status.get("migrationState")
    if isinstance(state, dict) and state.get("targetMemoryOverhead") is not None and not state.get("completed"):
        out.append((TARGET_MEMORY_OVERHEAD, state["targetMemoryOverhead"]))
    return out


# The largest value a Kubernetes Quantity holds as an integer (int64): KubeVirt reports none larger, and a larger one
# would not print as a BinarySI quantity.
MAX_REPORTED_BYTES = 2 ** 63 - 1
# A tenant's malformed value is shown cut to this many characters.
SHOWN_CHARACTERS = 64


def read_reported(raw):
    """(bytes, None) of a reported overhead, or (None, what is wrong): a Quantity of whole, non-negative bytes that
    fits an int64."""
    shown = repr(raw)[:SHOWN_CHARACTERS]
    try:
        value = parse_quantity(raw)
    except InputError as err:
        return None, err.message[:2 * SHOWN_CHARACTERS]
    if value < 0 or value.denominator != 1:
        return None, "not a whole, non-negative number of bytes: %s" % shown
    if value > MAX_REPORTED_BYTES:
        return None, "larger than a Kubernetes quantity holds (int64 bytes): %s" % shown
    return value, None


def _overhead(vmi, config):
    """The overhead of vmi under config, or None when it cannot be computed (a tenant's label or status may make
    any arithmetic of it fail: an overflowing ratio, an infinite float)."""
    try:
        return memory_overhead(vmi, config)
    except (InputError, ArithmeticError, ValueError):
        return None


def _shown_ratio(text):
    return "unset" if parse_overhead_ratio(text) is None else text


def _ratio_candidates(vmi, config, reported):
    """Overhead ratios the running pod may have been rendered with: the VMI's hotplug ratio label, none at all, and
    the ratio the difference implies (each to be verified by recomputing)."""
    hint = labels(vmi).get(HOTPLUG_RATIO_LABEL)
    candidates = []
    if isinstance(hint, str):
        candidates.append(hint)
    candidates.append(None)
    without = _overhead(vmi, dataclasses.replace(config, overhead_ratio=None))
    if without:
        # O = B + int(ceil(B/1000) x (ratio - 1)) x 1000: the ratio whose addition is the reported excess
        kilo = -(-without // 1000)
        added = Fraction(reported - without) / 1000
        if added > 0 and kilo > 0:
            # exact decimals of a Fraction: a float of a tenant's huge value would overflow
            ratio = 1 + added / kilo
            for digits in (1, 2, 3):
                whole, part = divmod(round(ratio, digits), 1)
                candidates.append(("%d.%0*d" % (int(whole), digits, int(part * 10 ** digits))).rstrip("0").rstrip("."))
    return candidates


def _launcher_version(vmi):
    """The KubeVirt version in the tag of the VMI's launcher image (status.launcherContainerImageVersion), if any."""
    image = ((vmi.get("status") or {}).get("launcherContainerImageVersion") or "")
    match = re.search(r":(v?\d+\.\d+\.\d+)$", str(image))
    if not match:
        return None
    try:
        return parse_version(match.group(1))
    except InputError:
        return None


def likely_why(vmi, config, computed, reported, field):
    """Why the reported overhead differs from the computed one, verified where it can be: the overhead ratio or the
    KubeVirt version of when the pod was rendered reproduce the reported value exactly; else a rule kvquota lacks."""
    if field == MEMORY_OVERHEAD:
        try:
            current = parse_overhead_ratio(config.overhead_ratio)
        except InputError:
            current = None
        for ratio in _ratio_candidates(vmi, config, reported):
            try:
                if parse_overhead_ratio(ratio) == current:
                    continue
            except InputError:
                continue
            if _overhead(vmi, dataclasses.replace(config, overhead_ratio=ratio)) == reported:
                return ("the overhead ratio changed since the VM started: its pod was rendered with ratio %s, the "
                        "cluster has %s now (its target pod is sized with the current one)"
                        % (_shown_ratio(ratio), _shown_ratio(config.overhead_ratio)))
        version = _launcher_version(vmi)
        if version is not None and version != config.version:
            shown = "%d.%d.%d" % version
            if _overhead(vmi, dataclasses.replace(config, kubevirt_version=shown)) == reported:
                return ("the KubeVirt version changed since the VM started: its pod was rendered by KubeVirt %s, the "
                        "cluster runs %s now (its target pod is sized with the current one)"
                        % (shown, config.kubevirt_version))
    return "%s: KubeVirt reports %s than kvquota computes" % (LACKING_RULE, "more" if reported > computed else "less")


def compare(namespace, vmi, config, computed):
    """[OverheadDifference] of one running VMI: each reported overhead that differs from computed (the overhead
    kvquota's sizing gives the VMI with config, the cluster's configuration now) or cannot be read."""
    name = meta(vmi).get("name")
    out = []
    for field, raw in reported_overheads(vmi):
        reported, problem = read_reported(raw)
        if problem is not None:
            out.append(OverheadDifference(namespace, name, field, Fraction(computed), None,
                                          "the reported value cannot be read; nothing uses it", problem))
        elif reported != computed:
            try:
                why = likely_why(vmi, config, computed, reported, field)
            except Exception:  # pylint: disable=broad-except
                # the explanation reads the tenant's VMI further (labels, status): whatever fails there, the VM is
                # still named and no other VM or namespace is held up
                why = "%s: KubeVirt reports %s than kvquota computes" % (LACKING_RULE,
                                                                         "more" if reported > computed else "less")
            out.append(OverheadDifference(namespace, name, field, Fraction(computed), reported, why))
    return out
