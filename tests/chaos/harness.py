# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the chaos campaigns (chaos.py, tenant.py) share: the repository's test code and the collection
importable, where labs run, the ansible-playbook runs to kill (with their workers) when a campaign is stopped, a logger,
quota values read leniently."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import importlib.util
import os
import signal
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUN_ROOT = Path(os.environ.get("KVQ_CHAOS_RUN_ROOT", "/tmp"))
LIVE = []   # ansible-playbook runs started by a campaign, killed with every process under them if it is stopped


def _load_repo_conftest():
    """The repository root's conftest.py exports KVQ_COLLECTIONS_PATH and makes the collection importable."""
    spec = importlib.util.spec_from_file_location("kvq_repo_conftest", str(REPO / "conftest.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_load_repo_conftest()
# the lab test helpers the campaigns reuse (test_roles_lab, modlab); kvqlab itself is installed (make deps)
_INTEGRATION = str(REPO / "tests" / "integration")
if _INTEGRATION not in sys.path:
    sys.path.insert(0, _INTEGRATION)

# importable only once the collection is on the path (above)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import (  # noqa: E402
    parse_resource_list)
from kvqlab.procs import signal_tree  # noqa: E402 - after the repository conftest: kvqlab checks the collection path


def kill_live(*signal_args):
    """Kill every ansible-playbook still running, with every process under it (signal_tree); as a signal handler, exit 143 afterwards."""
    for proc in list(LIVE):
        if proc.poll() is None:
            try:
                signal_tree(proc.pid, signal.SIGKILL)
            except OSError:
                pass
    if signal_args:
        sys.exit(143)


def logger(tag):
    """log(msg): one timestamped line on stderr, prefixed with the campaign's tag."""
    def log(msg):
        sys.stderr.write("[%s %s] %s\n" % (tag, time.strftime("%H:%M:%S"), msg))
        sys.stderr.flush()
    return log


def quantities(resource_list):
    """A ResourceList parsed; {} when a value cannot be read (the final byte-for-byte check reports it)."""
    try:
        return parse_resource_list(resource_list or {})
    except Exception:  # noqa: BLE001 - an unreadable value is reported by the final checks
        return {}
