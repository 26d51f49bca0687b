#!/usr/bin/python3
# Drives headless Chromium over the DevTools protocol (python3-websocket) for
# t/http_dashboard.t: loads the dashboard from sluice, waits for the first
# poll to render peers, saves the DOM and a screenshot, and optionally sends
# an API PATCH that marks a peer down and measures how long the page takes to
# show it.
#
# usage: dashboard_cdp.py CHROMIUM URL OUTDIR [PATCH_URL PEER]
# writes OUTDIR/dom1.html, OUTDIR/dashboard.png (and OUTDIR/dom2.html), and
# prints one JSON object: {"rendered": secs, "down_after": secs or null,
# "patch_status": N or null, "phone": [page width, viewport width] at a
# phone's 390 CSS pixels (OUTDIR/phone.png)}.

import base64
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

import websocket


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Page:
    def __init__(self, url):
        self.ws = websocket.create_connection(url, timeout=10)
        self.n = 0

    def call(self, method, **params):
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == self.n:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})

    def dom(self):
        r = self.call(
            "Runtime.evaluate",
            expression="document.documentElement.outerHTML",
            returnByValue=True,
        )
        return r.get("result", {}).get("value", "")

    def wait_for(self, pred, secs):
        start = time.monotonic()
        while True:
            html = self.dom()
            if pred(html):
                return html, time.monotonic() - start
            if time.monotonic() - start > secs:
                return html, None
            time.sleep(0.05)


def main():
    chromium, url, out = sys.argv[1:4]
    patch = sys.argv[4:6]
    port = free_port()
    env = dict(os.environ, HOME=out)
    proc = subprocess.Popen(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--window-size=1100,900",
            f"--remote-debugging-port={port}",
            f"--user-data-dir={out}/chromium",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    result = {"rendered": None, "down_after": None, "patch_status": None, "phone": None}
    try:
        pages = []
        for _ in range(200):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as r:
                    pages = [p for p in json.load(r) if p.get("type") == "page"]
                if pages:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        if not pages:
            raise RuntimeError("chromium did not open its DevTools port")
        page = Page(pages[0]["webSocketDebuggerUrl"])
        page.call("Page.enable")
        page.call("Page.navigate", url=url)
        # A rendered peer row (the script's own text has the markup too, but
        # not with a state filled in).
        row = re.compile(r'class="peer state-[a-z]+" data-peer="')
        html, took = page.wait_for(lambda h: row.search(h) is not None, 15)
        result["rendered"] = took
        with open(f"{out}/dom1.html", "w") as f:
            f.write(html)
        # SHOT_DELAY: seconds of polls before the screenshot (rates and
        # sparklines need a few).
        time.sleep(float(os.environ.get("SHOT_DELAY", "0")))
        shot = page.call("Page.captureScreenshot", format="png")
        with open(f"{out}/dashboard.png", "wb") as f:
            f.write(base64.b64decode(shot.get("data", "")))
        if len(patch) == 2:
            patch_url, peer = patch
            req = urllib.request.Request(
                patch_url,
                data=b'{"down": true}',
                method="PATCH",
                headers={"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    result["patch_status"] = r.status
            except urllib.error.HTTPError as e:
                result["patch_status"] = e.code
            mark = f'class="peer state-down" data-peer="{peer}"'
            html, took = page.wait_for(lambda h: mark in h, 5)
            result["down_after"] = took
            with open(f"{out}/dom2.html", "w") as f:
                f.write(html)
        # A phone's width: the page must not need sideways scrolling.
        page.call(
            "Emulation.setDeviceMetricsOverride",
            width=390,
            height=844,
            deviceScaleFactor=2,
            mobile=True,
        )
        time.sleep(1.2)
        r = page.call(
            "Runtime.evaluate",
            expression="[document.documentElement.scrollWidth, window.innerWidth]",
            returnByValue=True,
        )
        result["phone"] = r.get("result", {}).get("value")
        shot = page.call("Page.captureScreenshot", format="png")
        with open(f"{out}/phone.png", "wb") as f:
            f.write(base64.b64decode(shot.get("data", "")))
    finally:
        proc.kill()
        proc.wait()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
