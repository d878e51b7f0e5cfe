# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The plain owner: kvquota writes spec.hard of the ResourceQuota itself (the ledger lives in the operator
namespace); the quota's value and the 0.1.0 ledger annotation's removal travel in one conditional write."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import parse_quantity
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.ledger import (
    LEDGER_ANNOTATION,
    desired_strings,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners.protocol import (
    QuotaOwner,
    hard_of,
    with_annotations,
)

PLAIN = "plain"


class PlainOwner(QuotaOwner):
    """spec.hard belongs to whoever writes it: kvquota writes it."""

    name = PLAIN
    writable = True
    written_on = "quota"

    @classmethod
    def claims(cls, quota, facts):
        return True   # the last owner asked: any ResourceQuota no other owner claims

    def durable_hard(self, quota, namespace):
        """The values that decide spec.hard (here: spec.hard itself)."""
        return hard_of(quota)

    def render(self, quota, namespace, ledger):
        """{"quota": new quota} carrying the desired spec.hard (a 0.1.0 ledger annotation, adopted by then, is
        dropped in the same write)."""
        result = with_annotations(quota, {LEDGER_ANNOTATION: None})
        spec = result.setdefault("spec", {})
        hard = dict(spec.get("hard") or {})
        hard.update(desired_strings(ledger))
        spec["hard"] = hard
        return {"quota": result}

    def followed(self, quota, ledger):
        hard = hard_of(quota)
        wrong = [name for name, text in sorted(desired_strings(ledger).items())
                 if name not in hard or parse_quantity(hard[name], name) != parse_quantity(text, name)]
        return not wrong, wrong
