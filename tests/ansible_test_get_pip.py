"""Stand-in for the get-pip bootstrap script that ansible-test downloads.

ansible-test --venv fetches get-pip-<version>.py from a host this machine cannot
reach. It runs the script inside a fresh virtual environment with pip's install
arguments (e.g. "pip==24.2 --no-setuptools --no-wheel"); Python's own ensurepip
gives the venv a pip, which then installs the pinned pip from PyPI.
"""
import ensurepip
import os
import subprocess
import sys

ensurepip.bootstrap(upgrade=True)
env = dict(os.environ)
# The pip that ensurepip bundles may not read the machine's pip.conf; hand it the
# system CA bundle so an intercepting proxy's certificate verifies.
bundle = "/etc/ssl/certs/ca-certificates.crt"
if "PIP_CERT" not in env and os.path.exists(bundle):
    env["PIP_CERT"] = bundle
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", "--disable-pip-version-check"] + args, env=env))
