# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/preflight.yml against the lab (scenario a), and its HTML page in a real headless browser.

With the overhead ratio asked "what if 4.5", the tenant's usage after migration exceeds its quota: the
report must say so (blocked) with the fix, in JSON, Markdown and HTML; the play fails unless
preflight_fail_on_blockers is false. The HTML page is opened in Debian's chromium (--dump-dom for the
text, --screenshot for a PNG that must not be blank).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import os
import shutil
import struct
import subprocess
import tempfile
import zlib

import pytest

from modlab import required
from test_roles_lab import lab_fixture, playbook

pytestmark = pytest.mark.roles   # make roles-tests (conftest.py: every lab test has one such marker)

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


def chromium():
    path = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if path is None:
        # make deps installs it; with KVQ_LAB_REQUIRED=1 (make test) a missing browser fails, never skips
        message = "chromium is not installed. Fix: apt-get install -y chromium (make deps does it as root)"
        if required():
            pytest.fail(message)
        pytest.skip(message)
    return path


def browse(page, *extra):
    profile = tempfile.mkdtemp(prefix="kvq-chromium-")
    try:
        cmd = [chromium()] + CHROMIUM_FLAGS + ["--user-data-dir=%s" % profile] + list(extra) + ["file://%s" % page]
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, check=False,
                              universal_newlines=True)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def png_pixels(path):
    """(width, height, raw scanlines) of a PNG (no dependency beyond zlib)."""
    with open(path, "rb") as fh:
        data = fh.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, width, height, idat = 8, 0, 0, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", chunk[:8])
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    return width, height, zlib.decompress(idat)


lab = lab_fixture("a")


@pytest.fixture(scope="module")
def report(lab, tmp_path_factory):
    out = tmp_path_factory.mktemp("preflight")
    run = playbook(lab, "preflight", {"preflight_report_dir": str(out), "preflight_overhead_ratio": "4.5",
                                      "preflight_fail_on_blockers": False})
    print(run.stdout[-3000:])
    assert run.rc == 0, run
    return out


def test_files_and_verdict(report):
    data = json.loads((report / "preflight.json").read_text())
    assert data["verdict"] == "blocked"
    assert data["namespaces"]["a-tenant"]["verdict"] == "blocked"
    kinds = [b["kind"] for b in data["blockers"]]
    assert "usage_above_hard" in kinds
    markdown = (report / "preflight.md").read_text()
    assert "| a-tenant | blocked | a-tenant-quota |" in markdown
    assert "raise limits.memory of quota a-tenant/a-tenant-quota to" in markdown


def test_html_in_a_real_browser(report):
    page = report / "preflight.html"
    dom = browse(str(page), "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = dom.stdout
    assert '<table id="namespaces">' in text
    assert 'data-namespace="a-tenant"' in text
    assert '<span class="verdict blocked">blocked</span>' in text
    assert "raise limits.memory of quota a-tenant/a-tenant-quota to" in text
    assert 'id="verdict" class="verdict blocked"' in text

    shot = report / "preflight.png"
    result = browse(str(page), "--screenshot=%s" % shot, "--window-size=1280,900", "--hide-scrollbars")
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    width, height, raw = png_pixels(str(shot))
    assert (width, height) == (1280, 900)
    assert shot.stat().st_size > 20000, "screenshot suspiciously small"
    # not a blank page: many distinct byte values in the image, and both dark (text) and light (page) rows
    assert len(set(raw)) > 64
    row = len(raw) // height
    darks = sum(1 for y in range(height) if min(raw[y * row + 1:(y + 1) * row]) < 80)
    assert darks > 50, "no dark pixels (text) in %d rows" % darks


def test_blockers_fail_the_play(lab, tmp_path):
    run = playbook(lab, "preflight", {"preflight_report_dir": str(tmp_path), "preflight_overhead_ratio": "4.5"})
    assert run.rc != 0, run
    assert "blocker(s): [usage_above_hard]" in run.stdout
    assert (tmp_path / "preflight.html").exists()


def test_current_ratio_needs_a_reservation_only(lab, tmp_path):
    run = playbook(lab, "preflight", {"preflight_report_dir": str(tmp_path)})
    assert run.rc == 0, run
    data = json.loads((tmp_path / "preflight.json").read_text())
    assert data["verdict"] == "needs_reservation"
    assert "needs_reservation" in (tmp_path / "preflight.html").read_text()
