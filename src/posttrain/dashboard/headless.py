"""A headless Chromium driven over its DevTools pipe: how the dashboard's tests and benchmark look at the page.

Covers: starting `chromium --headless=new --remote-debugging-pipe` (the DevTools protocol as NUL-terminated
JSON on file descriptors 3 and 4: nothing listens on a port, no extra package), opening a page, evaluating
JavaScript in it, waiting for a condition, and collecting what the page's console reported as errors
(console.error calls, uncaught exceptions, failed loads).
Does not cover: anything a user runs; the page itself (`static/`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"


class BrowserError(RuntimeError):
    """The browser answered a command with an error, died, or a wait timed out."""


class Browser:
    """One headless Chromium process.

    >>> with Browser() as browser:
    ...     page = browser.open("http://127.0.0.1:8050/")
    ...     page.wait_for("document.body.dataset.ready === '1'")
    """

    def __init__(self, executable: str = CHROMIUM, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="posttrain-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds() -> None:  # the protocol's fixed descriptors in the child (via copies: a pipe may already be 3 or 4)
            a, b = os.dup(to_child_r), os.dup(from_child_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [executable, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--remote-debugging-pipe",
             "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
             f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=fds,
            close_fds=False)
        os.close(to_child_r)
        os.close(from_child_w)
        self._next = 0
        self._lock = threading.Lock()
        self._replies: dict[int, dict[str, Any]] = {}
        self._arrived = threading.Condition()
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, name="chromium-devtools", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_child, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._arrived:
                    self._arrived.notify_all()
                return
            buf += chunk
            *messages, buf = buf.split(b"\0")
            with self._arrived:
                for raw in messages:
                    msg = json.loads(raw)
                    if "id" in msg:
                        self._replies[msg["id"]] = msg
                    else:
                        self.events.append(msg)
                self._arrived.notify_all()

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """One DevTools command; its result (raises `BrowserError` on an error reply or a timeout)."""
        with self._lock:
            self._next += 1
            ident = self._next
        msg: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        with self._arrived:
            while ident not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise BrowserError(f"no reply to {method}")
                self._arrived.wait(min(left, 0.5))
            reply = self._replies.pop(ident)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error'].get('message')}")
        return reply.get("result", {})

    def open(self, url: str) -> "Page":
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.send(f"{domain}.enable", session=session)
        page = Page(self, session)
        page.navigate(url)
        return page

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (BrowserError, OSError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Page:
    """One tab of a `Browser`."""

    def __init__(self, browser: Browser, session: str) -> None:
        self.browser, self.session = browser, session

    def navigate(self, url: str) -> None:
        self.browser.send("Page.navigate", {"url": url}, self.session)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        r = self.browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                   "awaitPromise": True}, self.session)
        if "exceptionDetails" in r:
            raise BrowserError(f"{expression[:80]}: {r['exceptionDetails'].get('text')}")
        return r["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0, interval: float = 0.01) -> Any:
        """Evaluate until the expression is truthy; its value (raises `BrowserError` after `timeout` seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.evaluate(expression)
            except BrowserError:
                value = None  # the page is still loading
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out waiting for {expression}")
            time.sleep(interval)

    def console_errors(self) -> list[str]:
        """What this page reported as an error: console.error/assert, uncaught exceptions, failed requests."""
        out = []
        for e in list(self.browser.events):
            if e.get("sessionId") != self.session:
                continue
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif e["method"] == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                entry = p["entry"]
                out.append(entry.get("text", "") + (f" ({entry['url']})" if entry.get("url") else ""))
        return out


def page_html(path: Path) -> str:
    return path.resolve().as_uri()
