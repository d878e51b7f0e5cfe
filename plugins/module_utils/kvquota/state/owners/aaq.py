# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""ApplicationAwareResourceQuota (aaq.kubevirt.io): AAQ charges a migration only for target-minus-source growth,
so no expansion is needed; kvquota recognises it, reports it and never writes it."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners.protocol import QuotaOwner

AAQ = "aaq"
AAQ_GROUP = "aaq.kubevirt.io"
AAQ_KIND = "ApplicationAwareResourceQuota"


def is_aaq(quota):
    api_version = str((quota or {}).get("apiVersion") or "")
    return (quota or {}).get("kind") == AAQ_KIND or api_version.startswith(AAQ_GROUP + "/")


class AAQOwner(QuotaOwner):
    """Read-only: AAQ's own controller owns it and needs no headroom for a migration."""

    name = AAQ

    @classmethod
    def claims(cls, quota, facts):
        return is_aaq(quota)
