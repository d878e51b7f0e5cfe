# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/preflight.yml against the lab (scenario a), and its HTML page in a real headless browser.

With the overhead ratio asked "what if 4.5", the tenant's usage after migration exceeds its quota: the
report must say so (blocked) with the fix, in JSON, Markdown and HTML; the play fails unless
preflight_fail_on_blockers is false. The HTML page is opened in Debian's chromium (--dump-dom for the
DOM the browser built, --screenshot for a PNG that must not be blank, kept beside the report and copied to
/tmp/preflight-report.png and /tmp/preflight-report-reservation.png). The page must show at a glance: the blockers
(named, with their fix) before the namespaces, a bar per quota resource (used, hard, the peak the maintenance
adds), amounts in human units with the exact quantity in a title= tooltip, and "reserved automatically during
the maintenance" (no fix to apply by hand) where only a reservation is needed.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from html.parser import HTMLParser

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


class Page(HTMLParser):
    """What a browser's DOM shows: the bars (div.bar with their segments and marks), the quantities
    (span.qty: title and text), the text of each namespace row's "what to do" cell (td.todo) and the text of
    the namespaces table."""

    VOID = {"br", "meta", "img", "hr", "input", "link"}

    def __init__(self, dom):
        HTMLParser.__init__(self)
        self.bars = []          # {namespace, quota, resource, parts: [(classes, style)]}
        self.quantities = []    # (title, text)
        self.todo = {}          # (namespace, quota) -> text
        self.table_text = []
        self._stack = []        # (tag, attrs)
        self._qty = None
        self._todo = None
        self.feed(dom)

    def inside(self, tag, **attrs):
        return any(t == tag and all(a.get(k) == v for k, v in attrs.items()) for t, a in self._stack)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if tag == "div" and "bar" in classes:
            self.bars.append({"namespace": attrs.get("data-namespace"), "quota": attrs.get("data-quota"),
                              "resource": attrs.get("data-resource"), "parts": []})
        elif tag == "div" and self._stack and "bar" in (self._stack[-1][1].get("class") or "").split():
            self.bars[-1]["parts"].append((classes, attrs.get("style") or ""))
        if tag == "span" and "qty" in classes:
            self._qty = [attrs.get("title"), ""]
        if tag == "td" and "todo" in classes:
            row = next(a for t, a in reversed(self._stack) if t == "tr")
            self._todo = (row.get("data-namespace"), row.get("data-quota"))
            self.todo[self._todo] = ""
        if tag not in self.VOID:
            self._stack.append((tag, attrs))

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        while self._stack:
            opened = self._stack.pop()[0]
            if opened == tag:
                break
        if tag == "span" and self._qty is not None:
            self.quantities.append((self._qty[0], self._qty[1].strip()))
            self._qty = None
        if tag == "td":
            self._todo = None

    def handle_data(self, data):
        if self._qty is not None:
            self._qty[1] += data
        if self._todo is not None:
            self.todo[self._todo] += data
        if self.inside("table", id="namespaces"):
            self.table_text.append(data)


def percent(style, prop):
    found = re.search(r"(?:^|;)\s*%s:\s*([0-9.]+)%%" % prop, style)
    assert found, "no %s in style %r" % (prop, style)
    return float(found.group(1))


BINARY = {"": 1, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "m": 0.001, "k": 10 ** 3, "M": 10 ** 6,
          "G": 10 ** 9}


def number(quantity):
    value, suffix = re.match(r"^(-?[0-9.]+)([A-Za-z]*)$", quantity).groups()
    return float(value) * BINARY[suffix]


def dump(page):
    dom = browse(str(page), "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout


def screenshot(page, shot, keep):
    result = browse(str(page), "--screenshot=%s" % shot, "--window-size=1280,1100", "--hide-scrollbars")
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    shutil.copyfile(str(shot), keep)   # the artifact the closing note shows
    width, height, raw = png_pixels(str(shot))
    assert (width, height) == (1280, 1100)
    assert shot.stat().st_size > 20000, "screenshot suspiciously small"
    # not a blank page: many distinct byte values in the image, and both dark (text) and light (page) rows
    assert len(set(raw)) > 64
    row = len(raw) // height
    darks = sum(1 for y in range(height) if min(raw[y * row + 1:(y + 1) * row]) < 80)
    assert darks > 50, "no dark pixels (text) in %d rows" % darks


def check_bars(page, data):
    """A bar per resource of each quota: the used part, the hard mark and, where the maintenance needs headroom,
    the peak on top of used (hard + needed), each at its place on one scale."""
    for ns, n in data["namespaces"].items():
        for quota in n["quotas"]:
            for resource, hard in quota["hard"].items():
                key = (ns, quota["name"], resource)
                bars = [b for b in page.bars if (b["namespace"], b["quota"], b["resource"]) == key]
                assert len(bars) == 1, (ns, quota["name"], resource, page.bars)
                parts = dict((" ".join(c), s) for c, s in bars[0]["parts"])
                used = number(quota["used"].get(resource, "0"))
                peak = used
                if resource in quota["needed"]:
                    peak = number(hard) + number(quota["needed"][resource])
                after = number(hard) + number(quota["over_after"][resource]) if resource in quota["over_after"] else 0
                scale = max(number(hard), used, peak, after)
                assert abs(percent(parts["seg used"], "width") - 100.0 * used / scale) < 0.1, parts
                assert abs(percent(parts["mark hard"], "left") - 100.0 * number(hard) / scale) < 0.1, parts
                if resource in quota["needed"]:
                    seg = parts["seg peak"]
                    assert abs(percent(seg, "left") - 100.0 * used / scale) < 0.1, parts
                    assert abs(percent(seg, "left") + percent(seg, "width") - 100.0 * peak / scale) < 0.1, parts
                else:
                    assert "seg peak" not in parts, parts


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
    data = json.loads((report / "preflight.json").read_text())
    page = report / "preflight.html"
    text = dump(page)
    assert '<table id="namespaces">' in text
    assert 'data-namespace="a-tenant"' in text
    assert '<span class="verdict blocked">blocked</span>' in text
    assert 'id="verdict" class="verdict blocked"' in text
    assert "<script" not in text and "http://" not in text and "https://" not in text   # static, self-contained

    # what stops the maintenance comes first, named, with its fix; then the namespaces
    assert text.index('id="blockers"') < text.index('id="namespaces"')
    blockers = text[text.index('id="blockers"'):text.index('id="namespaces"')]
    assert "usage_above_hard" in blockers
    assert "raise limits.memory of quota a-tenant/a-tenant-quota to 5353Mi" in blockers

    parsed = Page(text)
    check_bars(parsed, data)
    # human units, the exact quantity as the API prints it in the tooltip; no raw byte counts in the table
    assert ("4800765905", "4.47 GiB") in parsed.quantities, parsed.quantities
    assert ("5000Mi", "4.88 GiB") in parsed.quantities
    assert ("2025m", "2.03 cores") in parsed.quantities
    assert ("5170250810", "4.82 GiB") in parsed.quantities   # the headroom needed
    assert not re.search(r"\b[0-9]{6,}\b", " ".join(parsed.table_text)), " ".join(parsed.table_text)
    # blocked: the fix the administrator must make, by hand (permanent), and not the window's headroom, which the
    # maintenance reserves itself
    todo = parsed.todo[("a-tenant", "a-tenant-quota")]
    assert "raise limits.memory of quota a-tenant/a-tenant-quota to 5353Mi" in todo, todo
    assert "for the maintenance window" not in todo, todo
    assert "reserved automatically during the maintenance" in todo, todo

    screenshot(page, report / "preflight.png", "/tmp/preflight-report.png")


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
    assert data["fixes"] and not any(f["permanent"] for f in data["fixes"])
    page = tmp_path / "preflight.html"
    text = dump(page)
    assert "needs_reservation" in text
    assert text.index('id="blockers"') < text.index('id="namespaces"')
    parsed = Page(text)
    check_bars(parsed, data)
    assert ("4358651810", "4.06 GiB") in parsed.quantities, parsed.quantities
    # nothing for the administrator to do: the maintenance reserves the headroom and releases it afterwards
    todo = parsed.todo[("a-tenant", "a-tenant-quota")]
    assert "reserved automatically during the maintenance" in todo, todo
    assert "raise " not in text, "a fix to apply by hand on a page that needs only a reservation"
    markdown = (tmp_path / "preflight.md").read_text()
    assert "reserved automatically during the maintenance" in markdown
    assert "raise " not in markdown
    screenshot(page, tmp_path / "preflight.png", "/tmp/preflight-report-reservation.png")
