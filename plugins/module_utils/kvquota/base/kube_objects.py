# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading Kubernetes API objects given as plain dicts: metadata, labels, annotations, conditions, selectors.

Every part may be missing or null in what the API returns; these readers give {} or None instead.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


def meta(obj):
    """metadata of an API object ({} when missing)."""
    return (obj or {}).get("metadata") or {}


def labels(obj):
    """metadata.labels of an API object ({} when missing)."""
    return meta(obj).get("labels") or {}


def annotations(obj):
    """metadata.annotations of an API object ({} when missing)."""
    return meta(obj).get("annotations") or {}


def condition(obj, kind):
    """The status condition of type kind, or None."""
    for item in (((obj or {}).get("status") or {}).get("conditions") or ()):
        if item.get("type") == kind:
            return item
    return None


# metav1.LabelSelectorRequirement's operators (also those of a ResourceQuota's scopeSelector)
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def requirement_matches(operator, values, value):
    """Whether one selector requirement holds for its key's value (None: the key is absent), as labels.Selector
    and the quota scope evaluator read it; None when operator is not one of SELECTOR_OPERATORS."""
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    return None
