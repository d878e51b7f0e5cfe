# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the apiserver's quota admission said when it refused a pod, as data.

The ResourceQuota admission plugin refuses with
``exceeded quota: NAME, requested: R, used: U, limited: L`` where R, U and L are
``name=quantity`` lists joined by commas, sorted by name and masked to the names that
did not fit. virt-controller wraps it ('failed to create vmi migration target pod:
pods "virt-launcher-..." is forbidden: exceeded quota: ...') and a
VirtualMachineInstanceMigration then carries the condition
migrationRejectedByResourceQuota. Log pipelines sometimes group digits
("8,940,039,936"); both spellings are read.

The shortfall (requested + used - limited, positive part, per name) is exactly what the
quota lacked: adding it to a reservation that was estimated short makes the refused
pod fit.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re
from fractions import Fraction

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import parse_quantity

REJECTED_CONDITION = "migrationRejectedByResourceQuota"

_MARKER = re.compile(r"exceeded quota:\s*")
_QUOTA_NAME = re.compile(r"([^\s,]+)\s*,\s*")
_SECTION = {"requested": re.compile(r"requested:\s*"), "used": re.compile(r"used:\s*"),
            "limited": re.compile(r"limited:\s*")}
_SEPARATOR = re.compile(r",\s*")
_RESOURCE = re.compile(r"([A-Za-z0-9][A-Za-z0-9._/-]*)=")
# A quantity: digits grouped by commas in threes, or plain digits with an optional
# fraction, then an optional suffix (binary, decimal, or an exponent).
_QUANTITY = re.compile(
    r"[+-]?(?:[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])(?:\.[0-9]+)?|[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:[eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?(?![A-Za-z0-9])")


def _malformed(message, where):
    shown = message if len(message) <= 200 else message[:197] + "..."
    return InputError("cannot read the quota admission error at %s: '%s'" % (where, shown),
                      "pass the apiserver's message unchanged (exceeded quota: NAME, requested: ..., "
                      "used: ..., limited: ...)")


def _parse_list(text, pos, message):
    """(ResourceList, end) of a 'name=qty,name=qty' list starting at pos."""
    result = {}
    if not _RESOURCE.match(text, pos):
        return result, pos  # an empty list (the apiserver prints nothing for it)
    while True:
        name_match = _RESOURCE.match(text, pos)
        name = name_match.group(1)
        qty_match = _QUANTITY.match(text, name_match.end())
        if not qty_match:
            raise _malformed(message, "position %d (quantity of %s)" % (name_match.end(), name))
        raw = qty_match.group(0)
        result[name] = parse_quantity(raw.replace(",", ""), name)
        pos = qty_match.end()
        sep = _SEPARATOR.match(text, pos)
        if sep and _RESOURCE.match(text, sep.end()):
            pos = sep.end()
            continue
        return result, pos


def _expect(section, text, pos, message):
    """The end of ', <section>: ' at pos."""
    sep = _SEPARATOR.match(text, pos)
    if sep:
        pos = sep.end()
    match = _SECTION[section].match(text, pos)
    if not match:
        raise _malformed(message, "position %d (expected '%s:')" % (pos, section))
    return match.end()


def parse_exceeded_quota(message):
    """Every 'exceeded quota' refusal in message, in order of appearance.

    Returns a list of dicts: quota (name), requested, used, limited (ResourceLists of
    Fractions), shortfall (requested + used - limited, positive part). An empty list when
    the message has no such refusal; InputError when one is present but unreadable.
    """
    if message is None:
        return []
    text = str(message)
    result = []
    for marker in _MARKER.finditer(text):
        pos = marker.end()
        name_match = _QUOTA_NAME.match(text, pos)
        if not name_match:
            raise _malformed(text, "position %d (quota name)" % pos)
        entry = {"quota": name_match.group(1).strip("\"'")}
        pos = name_match.end()
        match = _SECTION["requested"].match(text, pos)
        if not match:
            raise _malformed(text, "position %d (expected 'requested:')" % pos)
        entry["requested"], pos = _parse_list(text, match.end(), text)
        pos = _expect("used", text, pos, text)
        entry["used"], pos = _parse_list(text, pos, text)
        pos = _expect("limited", text, pos, text)
        entry["limited"], pos = _parse_list(text, pos, text)
        entry["shortfall"] = shortfall(entry)
        result.append(entry)
    return result


def shortfall(entry):
    """requested + used - limited per name, positive part: what the quota lacked."""
    result = {}
    names = set(entry.get("requested") or {}) | set(entry.get("limited") or {})
    for name in names:
        short = ((entry.get("requested") or {}).get(name, Fraction(0))
                 + (entry.get("used") or {}).get(name, Fraction(0))
                 - (entry.get("limited") or {}).get(name, Fraction(0)))
        if short > 0:
            result[name] = short
    return result


def shortfall_by_quota(message):
    """{quota name: shortfall} over every refusal in message (max per name when a quota repeats)."""
    result = {}
    for entry in parse_exceeded_quota(message):
        merged = dict(result.get(entry["quota"], {}))
        for name, value in entry["shortfall"].items():
            if value > merged.get(name, Fraction(0)):
                merged[name] = value
        result[entry["quota"]] = merged
    return result


def top_up(estimate, entry):
    """A per-quota reservation delta raised by exactly what admission refused.

    estimate: the ResourceList reserved (or planned) for the quota; entry: one parsed
    refusal for that quota. Each name is raised by the shortfall the refusal shows;
    nothing else changes.
    """
    result = dict(estimate)
    for name, value in entry["shortfall"].items():
        result[name] = result.get(name, Fraction(0)) + value
    return result


def rejected_condition(vmim):
    """The migrationRejectedByResourceQuota condition of a VMIM when it is True, else None."""
    for condition in ((vmim.get("status") or {}).get("conditions") or ()):
        if condition.get("type") == REJECTED_CONDITION and str(condition.get("status")) == "True":
            return condition
    return None


def migration_rejection(vmim):
    """None, or what a VMIM rejected by quota says: reason, message, since, and the parsed
    refusals when its message carries the apiserver's text (an unreadable one is kept as text)."""
    condition = rejected_condition(vmim)
    if condition is None:
        return None
    message = condition.get("message") or ""
    try:
        refusals = parse_exceeded_quota(message)
        unreadable = None
    except InputError as err:
        refusals = []
        unreadable = str(err)
    meta = vmim.get("metadata") or {}
    return {
        "migration": meta.get("name"),
        "namespace": meta.get("namespace"),
        "vmi": (vmim.get("spec") or {}).get("vmiName"),
        "phase": (vmim.get("status") or {}).get("phase"),
        "reason": condition.get("reason"),
        "message": message,
        "since": condition.get("lastTransitionTime"),
        "refusals": refusals,
        "unreadable": unreadable,
    }
