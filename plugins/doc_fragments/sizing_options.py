# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


class ModuleDocFragment(object):
    # The two overrides of how a VM's migration target pod is sized, the same in every module that sizes one.
    DOCUMENTATION = r'''
options:
  kubevirt_version:
    description:
      - The KubeVirt version whose launcher pod sizing applies, for example C(1.6.3). By default read from the
        KubeVirt CR's status.
    type: str
  overhead_ratio:
    description:
      - Override of the memory overhead ratio (C(additionalGuestMemoryOverheadRatio)), for example to ask what a
        ratio of 4.5 would need. By default the cluster's current one (the KubeVirt CR, else Harvester's
        C(additional-guest-memory-overhead-ratio) setting).
    type: str
'''
