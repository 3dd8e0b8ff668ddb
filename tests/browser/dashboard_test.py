#!/usr/bin/python3
"""The dashboard in a real browser (docs/dashboard.md): Debian's chromium, headless, driven by
python3-selenium against real sundiald processes with known queues.

  overview      the counts on screen equal the server's; an enqueue from the CLI changes them
                with no reload and no HTTP request (the browser's network log); sort and filter
  queue page    search a known id, a metadata filter, page through 2,500 messages in priority
                order, the message detail with explain
  actions       each through its confirmation, the server's state checked after
  read-only     no action on screen, and the server refuses the page's own attempt
  sign-in       a wrong token refused after a delay with no hint, the right one works, the
                /ws upgrade without the cookie is refused, sign-out ends it
  off           no page
  reconnect     the page says it lost the server and comes back by itself
  cluster       on a real etcd and two nodes: the cluster panel's members, roles, epoch and
                synchronous standby; a standby's page read-only with a note linking to the
                primary's dashboard (and refused by the server); after a kill -9 of the
                primary, the same page becomes the primary's with its actions back
and no uncaught script error on any page. Screenshots go to --out.

Run by ctest (tests/CMakeLists.txt); alone:
  /usr/bin/python3 tests/browser/dashboard_test.py --sundiald build/release/server/sundiald \
      --cli build/release/tools/sundial --out /tmp/shots [--only NAME]
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "replication"))
from cluster_harness import Cluster  # noqa: E402
from sundial_harness import (Server, UpgradeRefused, Ws, WsError, http_requests,  # noqa: E402
                             start_chromium, wait_for)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

STATES = ["waiting", "invisible", "pending", "running", "completed", "canceled", "errored"]


class Context:
    def __init__(self, args, driver):
        self.args = args
        self.driver = driver
        self.servers = []

    def server(self, flags=(), **kw):
        s = Server(self.args.sundiald, flags, **kw).start()
        self.servers.append(s)
        return s

    def cli(self, server, *argv):
        out = subprocess.run([self.args.cli, "--addr", f"127.0.0.1:{server.port}", *argv],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, f"sundial {' '.join(argv)}: {out.returncode} {out.stderr}"
        return out.stdout

    def shot(self, name):
        os.makedirs(self.args.out, exist_ok=True)
        self.driver.save_screenshot(os.path.join(self.args.out, name + ".png"))

    # ---- the page -------------------------------------------------------------------------

    def css(self, selector):
        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def all(self, selector):
        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def text(self, selector):
        return self.css(selector).text

    def js(self, script, *args):
        return self.driver.execute_script(script, *args)

    def open(self, url):
        self.driver.get(url)
        self.wait_live()

    def wait_live(self):
        wait_for(lambda: self.css("#conn").get_attribute("data-state") == "open", 30,
                 "the page's WebSocket to open")

    def wait_text(self, selector, expected, timeout=30):
        wait_for(lambda: self.text(selector) == expected, timeout,
                 f"{selector} to read {expected!r} (it reads {self._safe_text(selector)!r})")

    def _safe_text(self, selector):
        try:
            return self.text(selector)
        except Exception as e:  # noqa: BLE001
            return f"<{type(e).__name__}>"

    def click(self, selector):
        el = wait_for(lambda: (lambda e: e if e.is_enabled() and e.is_displayed() else None)(
            self.css(selector)), 30, f"{selector} to be clickable")
        self.js("arguments[0].scrollIntoView({block: 'center'})", el)
        el.click()

    def confirm(self, must_mention=()):
        """Confirms the open dialog after checking that it names what it touches."""
        dialog = wait_for(lambda: self.css("#confirm[open]"), 30, "the confirmation dialog")
        text = dialog.text
        for needle in must_mention:
            assert needle in text, f"the confirmation does not say {needle!r}: {text!r}"
        self.click("#confirm-ok")
        wait_for(lambda: not self.all("#confirm[open]"), 30, "the dialog to close")
        return text

    def no_script_errors(self):
        errors = self.js("return window.sundialErrors || []")
        assert errors == [], f"uncaught script errors: {errors}"
        severe = [e for e in self.driver.get_log("browser")
                  if e["level"] == "SEVERE" and ("Uncaught" in e["message"] or
                                                 e.get("source") == "javascript")]
        assert severe == [], f"script errors in the console: {severe}"

    def go(self, hash_route):
        self.js("location.hash = arguments[0]", hash_route)


def row_counts(ctx, queue):
    """The overview's cells of one queue, by column key (one round trip to the browser)."""
    return ctx.js("const r = document.querySelector(`tr[data-queue=\"${arguments[0]}\"]`);"
                  "return r ? Object.fromEntries([...r.querySelectorAll('td[data-key]')]"
                  ".map(c => [c.dataset.key, c.textContent])) : {};", queue)


def fmt(n):
    return f"{n:,}"


# ---- the tests --------------------------------------------------------------------------------


def test_overview(ctx):
    s = ctx.server(["--fsync", "never"])
    ws = Ws(s.http_port)
    ws.call("CreateQueue", {"name": "emails"})
    ws.call("CreateQueue", {"name": "builds", "settings": {"type": "exclusive",
                                                           "exclusivity_key": "repo"}})
    ws.call("CreateQueue", {"name": "reports", "settings": {"max_attempts": 1}})
    ws.enqueue("emails", [{"id": f"e{i}", "priority": i} for i in range(30)])
    ws.enqueue("emails", [{"id": f"later{i}", "priority": i, "delay_ms": 3_600_000}
                          for i in range(5)])
    ws.enqueue("builds", [{"id": f"b{i}", "priority": i,
                           "metadata": [{"key": "repo", "value": "web" if i < 2 else f"r{i}"}]}
                          for i in range(4)])
    ws.call("Dequeue", {"queue": "builds", "max": 1})  # b0 runs, b1 (same repo) is blocked
    ws.enqueue("reports", [{"id": f"r{i}", "priority": i} for i in range(3)])
    for m in ws.call("Dequeue", {"queue": "reports", "max": 3})["messages"]:
        ws.call("Fail", {"queue": "reports", "id": m["id"], "lease_token": m["lease_token"],
                         "error": "report template missing"})
    ws.call("UpdateQueue", {"name": "reports", "update": {"dequeue_paused": True}})

    ctx.open(s.url + "/")
    wait_for(lambda: len(ctx.all("#queue-rows tr[data-queue]")) == 3, 30, "three queue rows")
    for name in ("emails", "builds", "reports"):
        server = ws.counts(name)
        wait_for(lambda: all(row_counts(ctx, name).get(k) == fmt(server[k]) for k in server), 30,
                 f"{name}'s counts on screen to equal the server's {server}")
    assert row_counts(ctx, "builds")["blocked"] == "1"
    assert row_counts(ctx, "builds")["type"] == "exclusive (repo)"
    assert row_counts(ctx, "reports")["status"] == "dequeue paused"
    ctx.wait_text("#overview-summary", "3 queues · 42 messages")
    ctx.no_script_errors()

    # Live: an enqueue from the CLI reaches the screen with no reload and no HTTP request. (A
    # rate needs two ticks: the enqueue comes after the page's first one.)
    wait_for(lambda: ctx.js("return window.sundial.store.ticks.length") >= 1, 30, "a first tick")
    ctx.js("window.sundialMarker = 1")
    ctx.driver.get_log("performance")  # everything so far
    before = ws.counts("emails")["pending"]
    ctx.cli(s, "enqueue", "emails", "--id", "from-cli-1", "--payload", "hi")
    ctx.cli(s, "enqueue", "emails", "--id", "from-cli-2", "--payload", "hi")
    wait_for(lambda: row_counts(ctx, "emails")["pending"] == fmt(before + 2), 30,
             "the CLI's enqueues on screen")
    wait_for(lambda: row_counts(ctx, "emails")["enqueued"] != "0", 30,
             lambda: f"a rate on screen: {row_counts(ctx, 'emails')} " +
             ctx.js("return JSON.stringify(window.sundial.store.queues.get('emails').recent)"))
    assert ctx.js("return window.sundialMarker") == 1, "the page was reloaded"
    requests = http_requests(ctx.driver.get_log("performance"))
    assert requests == [], f"the page made HTTP requests after loading: {requests}"
    ctx.shot("overview")

    # Sorting and the name filter.
    ctx.click('th[data-key="pending"] button')
    wait_for(lambda: ctx.all("#queue-rows tr[data-queue]")[0].get_attribute("data-queue") == "emails", 30,
             "the busiest queue first")
    ctx.css("#queue-filter").send_keys("rep")
    wait_for(lambda: [r.get_attribute("data-queue")
                      for r in ctx.all("#queue-rows tr[data-queue]")] == ["reports"], 30,
             "only 'reports' shown")
    ctx.css("#queue-filter").clear()
    ctx.js("document.getElementById('queue-filter').dispatchEvent(new Event('input'))")
    ctx.no_script_errors()
    ws.close()
    ctx.overview_server = s


def test_queue_page(ctx):
    s = ctx.overview_server
    ws = Ws(s.http_port)
    ws.enqueue("bulk", [{"id": f"b{i:04d}", "priority": 10_000 + i,
                         "payload": list(f"payload of b{i:04d}".encode()),
                         "metadata": [{"key": "tenant", "value": f"t{i % 5}"},
                                      {"key": "batch", "value": str(i // 1000)}]}
                        for i in range(2500)])
    ctx.go("#/q/bulk")
    wait_for(lambda: len(ctx.all("#browse-rows tr")) == 100, 30, "the first page of 100")
    ctx.wait_text("#count-pending", "2,500")

    # Page through all 2,500 in priority order, 500 at a time.
    Select(ctx.css("#page-size")).select_by_value("500")
    wait_for(lambda: len(ctx.all("#browse-rows tr")) == 500, 30, "a page of 500")
    seen = []
    for page in range(5):
        ids = ctx.js("return [...document.querySelectorAll('#browse-rows tr')]"
                     ".map(r => r.dataset.id)")
        assert len(ids) == 500, f"page {page + 1}: {len(ids)} rows"
        seen += ids
        if page < 4:
            loaded = ctx.css("#queue-view").get_attribute("data-loaded")
            ctx.click("#page-next")
            wait_for(lambda: ctx.css("#queue-view").get_attribute("data-loaded") != loaded, 30,
                     f"page {page + 2}")
    assert seen == [f"b{i:04d}" for i in range(2500)], "every message once, in priority order"
    assert not ctx.css("#page-next").is_enabled(), "no page after the last"
    assert "2,001–2,500 of 2,500 pending" in ctx.text("#page-info"), ctx.text("#page-info")
    ctx.click("#page-prev")
    wait_for(lambda: ctx.all("#browse-rows tr")[0].get_attribute("data-id") == "b1500", 30,
             "the previous page")

    # A metadata filter.
    ctx.css("#filter-input").send_keys("tenant=t3 batch=1")
    ctx.click("#filter-apply")
    ctx.wait_text("#filter-note", "200 messages match")
    wait_for(lambda: len(ctx.all("#browse-rows tr")) == 200, 30, "the 200 matches")
    ids = ctx.js("return [...document.querySelectorAll('#browse-rows tr')].map(r => r.dataset.id)")
    assert ids == [f"b{i:04d}" for i in range(1000, 2000) if i % 5 == 3], ids[:5]
    ctx.shot("queue-filter")
    ctx.click("#filter-clear")
    wait_for(lambda: len(ctx.all("#browse-rows tr")) == 500, 30, "the filter cleared")

    # Search by id: the detail.
    ctx.css("#id-search").send_keys("b1234")
    ctx.click("#id-search-go")
    wait_for(lambda: ctx.css("#message-detail").get_attribute("data-id") == "b1234", 30,
             "the detail of b1234")
    ctx.wait_text("#detail-field-state", "pending")
    ctx.wait_text("#detail-payload", "payload of b1234")
    assert ctx.css("#detail-explain").get_attribute("data-reason") == "dequeueable"
    meta = ctx.text("#detail-metadata")
    assert "tenant t4" in meta and "batch 1" in meta, meta
    ctx.click("#payload-hex")
    wait_for(lambda: ctx.text("#detail-payload").startswith("00000000  70 61 79"), 30, "hex")

    # A message that is not dequeueable: explain says why; its transitions are watched.
    leased = ws.call("Dequeue", {"queue": "bulk", "max": 1})["messages"][0]
    assert leased["id"] == "b0000"
    ctx.go("#/q/bulk/m/b0000")
    ctx.wait_text("#detail-field-state", "running")
    assert ctx.css("#detail-explain").get_attribute("data-reason") == "running"
    assert "leased by token" in ctx.text("#detail-explain")
    ctx.wait_text("#detail-lease-token", str(leased["lease_token"]))
    ws.call("Fail", {"queue": "bulk", "id": "b0000", "lease_token": leased["lease_token"],
                     "error": "upstream timeout", "retry_delay_ms": 3_600_000})
    ctx.wait_text("#detail-field-state", "invisible")
    wait_for(lambda: ctx.css("#detail-explain").get_attribute("data-reason") == "invisible", 30,
             "explain: invisible")
    wait_for(lambda: "failed" in history_events(ctx), 30,
             lambda: f"the failure in the history: {history_events(ctx)}")
    assert "upstream timeout" in ctx.text("#detail-last-error")
    ctx.shot("message-detail")
    ctx.go("#/q/bulk")
    wait_for(lambda: not ctx.all("#message-detail"), 30, "the detail closed")
    ctx.js("window.scrollTo(0, 0)")
    ctx.shot("queue")
    ctx.no_script_errors()
    ws.close()


def test_actions(ctx):
    s = ctx.overview_server
    ws = Ws(s.http_port)
    ws.call("CreateQueue", {"name": "acts", "settings": {"max_attempts": 1}})
    ws.enqueue("acts", [{"id": f"p{i}", "priority": i,
                         "metadata": [{"key": "group", "value": "a" if i < 4 else "b"}]}
                        for i in range(10)])
    ws.enqueue("acts", [{"id": f"x{i}", "priority": 100 + i,
                         "metadata": [{"key": "group", "value": "x" if i < 2 else "y"}]}
                        for i in range(6)])
    for m in ws.call("Dequeue", {"queue": "acts", "max": 6,
                                 "filter": [{"key": "group", "value": "x"}]})["messages"] + \
            ws.call("Dequeue", {"queue": "acts", "max": 6,
                                "filter": [{"key": "group", "value": "y"}]})["messages"]:
        ws.call("Fail", {"queue": "acts", "id": m["id"], "lease_token": m["lease_token"],
                         "error": "bad input"})
    assert ws.counts("acts")["errored"] == 6 and ws.counts("acts")["pending"] == 10
    ctx.go("#/q/acts")
    ctx.wait_text("#count-errored", "6")

    # Pause and resume enqueue, then dequeue.
    for which in ("enqueue", "dequeue"):
        ctx.click(f"#act-pause-{which}")
        ctx.confirm([f"Pause {which}", "acts"])
        wait_for(lambda: ws.settings("acts").get(f"{which}_paused") is True, 30, f"{which} paused")
        ctx.wait_text(f"#act-pause-{which}", f"Resume {which}")
        ctx.click(f"#act-pause-{which}")
        ctx.confirm([f"Resume {which}"])
        wait_for(lambda: not ws.settings("acts").get(f"{which}_paused"), 30, f"{which} resumed")
        ctx.wait_text(f"#act-pause-{which}", f"Pause {which}")

    # Redrive two selected errored messages.
    ctx.click('#state-tabs button[data-state="errored"]')
    wait_for(lambda: len(ctx.all("#browse-rows tr")) == 6, 30, "the 6 errored")
    for mid in ("x2", "x3"):
        ctx.css(f'#browse-rows tr[data-id="{mid}"] input[type=checkbox]').click()
    ctx.click("#act-redrive-selected")
    ctx.confirm(["Redrive 2 messages", "x2", "x3"])
    wait_for(lambda: ws.counts("acts")["errored"] == 4, 30, "2 redriven")
    assert ws.call("Get", {"queue": "acts", "id": "x2"})["message"]["state"] == "pending"

    # Redrive by filter (the 2 errored of group x), after a confirmation with the count.
    ctx.css("#filter-input").send_keys("group=x")
    ctx.click("#filter-apply")
    ctx.wait_text("#filter-note", "2 messages match")
    ctx.click("#act-redrive-filter")
    ctx.shot("confirm-redrive")
    ctx.confirm(["2 errored messages", "group=x"])
    wait_for(lambda: ws.counts("acts")["errored"] == 2, 30, "the filter's 2 redriven")
    ctx.click("#filter-clear")

    # Redrive all errored (the last 2).
    wait_for(lambda: ctx.text("#act-redrive-all") == "Redrive all errored (2)", 30, "2 errored left")
    ctx.click("#act-redrive-all")
    ctx.confirm(["2 errored messages"])
    wait_for(lambda: ws.counts("acts")["errored"] == 0, 30, "all redriven")

    # Cancel three selected pending messages.
    ctx.click('#state-tabs button[data-state="pending"]')
    wait_for(lambda: len(ctx.all("#browse-rows tr")) == 16, 30, "16 pending")
    for mid in ("p0", "p1", "p2"):
        ctx.css(f'#browse-rows tr[data-id="{mid}"] input[type=checkbox]').click()
    ctx.click("#act-cancel-selected")
    ctx.confirm(["Cancel 3 messages", "p0"])
    wait_for(lambda: ws.counts("acts")["canceled"] == 3, 30, "3 canceled")

    # Cancel by filter: group=b (6 pending).
    ctx.css("#filter-input").send_keys("group=b")
    ctx.click("#filter-apply")
    ctx.wait_text("#filter-note", "6 messages match")
    ctx.click("#act-cancel-filter")
    ctx.confirm(["6 messages will be canceled", "group=b"])
    wait_for(lambda: ws.counts("acts")["canceled"] == 9, 30, "the filter's 6 canceled")
    ctx.click("#filter-clear")

    # Purge the canceled ones (the dialog's default states: completed and canceled).
    ctx.click("#act-purge")
    ctx.confirm(["9 messages will be removed"])
    wait_for(lambda: ws.counts("acts")["canceled"] == 0, 30, "canceled purged")
    assert ws.counts("acts")["pending"] == 7

    # Delete the queue: the confirmation asks for its name.
    ctx.click("#act-delete")
    wait_for(lambda: ctx.css("#confirm[open]"), 30, "the delete confirmation")
    assert not ctx.css("#confirm-ok").is_enabled(), "enabled before the name is typed"
    assert "all its 7 messages" in ctx.text("#confirm")
    ctx.shot("confirm-delete")
    ctx.css("#confirm-typed").send_keys("acts")
    ctx.confirm(["Delete queue acts"])

    # The page's DeleteQueue and this connection's GetQueue may be served by different io
    # threads, in either order: poll until the server says NOT_FOUND.
    def queue_gone():
        try:
            ws.call("GetQueue", {"name": "acts"})
            return False
        except WsError as e:
            assert e.code == "NOT_FOUND", e
            return True
    wait_for(queue_gone, 30, "the queue deleted on the server")
    wait_for(lambda: ctx.all("#overview"), 30, "back on the overview")
    wait_for(lambda: not ctx.all('tr[data-queue="acts"]'), 30, "the row gone")
    ctx.no_script_errors()
    ws.close()


def test_reconnect(ctx):
    s = ctx.overview_server
    ctx.go("#/")
    ctx.wait_live()
    port = s.http_port
    s.stop()
    wait_for(lambda: ctx.css("#conn").get_attribute("data-state") != "open", 30, "the drop seen")
    wait_for(lambda: "retrying in" in ctx.text("#conn"), 30, "the countdown on screen")
    ctx.shot("reconnecting")
    s2 = ctx.server(["--fsync", "never"], data_dir=s.dir, http_port=port)
    ctx.wait_live()
    wait_for(lambda: ctx.all('tr[data-queue="bulk"]'), 30, "the queues back")
    ws = Ws(s2.http_port)
    ws.enqueue("emails", [{"id": "after-restart", "priority": 1}])
    pending = ws.counts("emails")["pending"]
    wait_for(lambda: row_counts(ctx, "emails")["pending"] == fmt(pending), 30,
             "live again after the restart")
    ctx.no_script_errors()
    ws.close()
    s2.stop()


def test_read_only(ctx):
    s = ctx.server(["--dashboard", "read-only", "--fsync", "never"])
    ws = Ws(s.http_port)
    ws.enqueue("ro", [{"id": f"m{i}", "priority": i} for i in range(5)])
    ctx.open(s.url + "/#/q/ro")
    ctx.wait_text("#count-pending", "5")
    wait_for(lambda: ctx.css("#mode").is_displayed(), 30, "the read-only badge")
    assert not ctx.all("#queue-actions"), "actions shown in read-only mode"
    assert not ctx.all("#bulk-actions"), "bulk actions shown in read-only mode"
    ctx.go("#/q/ro/m/m1")
    ctx.wait_text("#detail-field-state", "pending")
    assert not ctx.all("#detail-cancel"), "a cancel button in read-only mode"
    ctx.shot("read-only")
    # The page's own connection is refused an action by the server.
    code = ctx.driver.execute_async_script(
        "const done = arguments[0];"
        "window.sundial.conn.request('Cancel', {queue: 'ro', ids: ['m1']})"
        ".then(() => done('ok'), (e) => done(e.code));")
    assert code == "FAILED_PRECONDITION", code
    assert ws.counts("ro")["pending"] == 5, "nothing changed"
    ctx.no_script_errors()
    ws.close()


def test_sign_in(ctx):
    token_file = os.path.join(tempfile.mkdtemp(prefix="sundial-token-"), "token")
    with open(token_file, "w") as f:
        f.write("a-long-random-token-7f3c9d\n")
    s = ctx.server(["--auth-token-file", token_file, "--fsync", "never"])
    ws = Ws(s.http_port, headers={"Authorization": "Bearer a-long-random-token-7f3c9d"})
    ws.enqueue("secure", [{"id": "m1", "priority": 1}])

    ctx.driver.get(s.url + "/")
    ctx.driver.delete_all_cookies()
    ctx.driver.get(s.url + "/")
    wait_for(lambda: ctx.css("#signin-form"), 30, "the sign-in page")
    ctx.shot("sign-in")
    ctx.css("#token").send_keys("a-long-random-token-7f3c9e")
    started = time.monotonic()
    ctx.click("#signin-submit")
    error = wait_for(lambda: ctx.css("#signin-error"), 30, "the sign-in error")
    assert time.monotonic() - started >= 0.9, "a wrong token is answered after a delay"
    assert "Sign-in failed" in error.text, error.text
    assert "7f3c9" not in ctx.driver.page_source and "a-long" not in ctx.driver.page_source
    ctx.shot("sign-in-failed")
    assert ctx.driver.get_cookie("sundial_session") is None
    try:
        Ws(s.http_port, headers={"Origin": s.url})
        raise AssertionError("/ws upgraded without a cookie")
    except UpgradeRefused as e:
        assert e.status == 401, e

    ctx.css("#token").send_keys("a-long-random-token-7f3c9d")
    ctx.click("#signin-submit")
    ctx.wait_live()
    wait_for(lambda: ctx.all('tr[data-queue="secure"]'), 30, "the queues after signing in")
    cookie = ctx.driver.get_cookie("sundial_session")
    assert cookie and cookie["httpOnly"] and cookie.get("sameSite") == "Strict", cookie
    assert ctx.js("return document.cookie") == "", "the session cookie is readable by scripts"
    with_cookie = Ws(s.http_port, headers={"Origin": s.url,
                                           "Cookie": f"sundial_session={cookie['value']}"})
    with_cookie.call("Stats")
    with_cookie.close()
    ctx.no_script_errors()

    ctx.click("#signout button")
    wait_for(lambda: ctx.all("#signin-form"), 30, "the sign-in page after signing out")
    try:
        Ws(s.http_port, headers={"Origin": s.url, "Cookie": f"sundial_session={cookie['value']}"})
        raise AssertionError("the signed-out cookie still opens /ws")
    except UpgradeRefused as e:
        assert e.status == 401, e
    ws.close()


def test_off(ctx):
    s = ctx.server(["--dashboard", "off", "--fsync", "never"])
    try:
        urllib.request.urlopen(s.url + "/", timeout=10)
        raise AssertionError("--dashboard off served a page")
    except urllib.error.HTTPError as e:
        assert e.code == 404, e.code
    Ws(s.http_port).call("Stats")  # the protocol stays


def cluster_rows(ctx):
    """The cluster panel's rows: node -> {column key: text} (one round trip)."""
    return ctx.js("return Object.fromEntries([...document.querySelectorAll('#cluster-members tr')]"
                  ".map(r => [r.dataset.node, Object.fromEntries([...r.querySelectorAll("
                  "'td[data-key]')].map(c => [c.dataset.key, c.textContent]))]))")


def test_cluster(ctx):
    c = Cluster(ctx.args.sundiald, nodes=2, ttl_s=2, flags=["--ha-loop-ms", "100"]).start()
    try:
        primary = c.wait_primary()
        standby = c.standbys(primary)[0]
        ws = Ws(primary.http_port)
        ws.enqueue("ha", [{"id": f"m{i}", "priority": i} for i in range(3)])
        ws.close()

        # The primary's page: the panel, its role, and its actions.
        ctx.open(primary.url + "/")
        wait_for(lambda: ctx.css("#cluster").is_displayed(), 30, "the cluster panel")
        wait_for(lambda: set(cluster_rows(ctx)) == {primary.name, standby.name}, 30,
                 "both members in the panel")
        wait_for(lambda: f"synchronous standby {standby.name}" in ctx.text("#cluster-summary"),
                 30, lambda: f"the synchronous standby named: {ctx.text('#cluster-summary')!r}")
        rows = cluster_rows(ctx)
        assert rows[primary.name]["role"] == "primary", rows
        assert rows[standby.name]["role"] == "standby", rows
        assert rows[standby.name]["sync"] == "yes", rows
        assert rows[primary.name]["epoch"] == rows[standby.name]["epoch"], rows
        wait_for(lambda: cluster_rows(ctx)[standby.name]["lag_records"] == "0", 30,
                 "the standby caught up")
        wait_for(lambda: cluster_rows(ctx)[standby.name]["flushed_lsn"] ==
                 cluster_rows(ctx)[primary.name]["end_lsn"], 30, "equal LSNs")
        assert ctx.text("#role").startswith("primary · epoch"), ctx.text("#role")
        assert not ctx.css("#standby-note").is_displayed()
        ctx.shot("cluster-primary")
        ctx.go("#/q/ha")
        ctx.wait_text("#count-pending", "3")
        assert ctx.all("#queue-actions"), "no actions on the primary"
        assert not ctx.css("#cluster").is_displayed(), "the panel shows on the overview only"

        # The standby's page: read-only, the note links to the primary's dashboard.
        ctx.open(standby.url + "/#/q/ha")
        ctx.wait_text("#count-pending", "3")
        note = wait_for(lambda: (lambda e: e if e.is_displayed() else None)(
            ctx.css("#standby-note")), 30, "the standby's note")
        assert f"This node ({standby.name}) is a standby" in note.text, note.text
        assert ctx.text("#standby-note-primary") == primary.name
        link = ctx.css("#standby-note-link").get_attribute("href")
        assert link == primary.url + "/", link
        wait_for(lambda: not ctx.all("#queue-actions"), 30, "the actions gone on the standby")
        assert not ctx.all("#bulk-actions")
        assert ctx.text("#role").startswith("standby · epoch"), ctx.text("#role")
        ctx.go("#/q/ha/m/m1")
        ctx.wait_text("#detail-field-state", "pending")
        assert not ctx.all("#detail-cancel"), "a cancel button on a standby"
        ctx.shot("cluster-standby")
        # The server refuses the page's own attempt, naming the primary.
        code = ctx.driver.execute_async_script(
            "const done = arguments[0];"
            "window.sundial.conn.request('Cancel', {queue: 'ha', ids: ['m1']})"
            ".then(() => done('ok'), (e) => done(e.code + ' ' + e.detail));")
        assert code.startswith("NOT_PRIMARY") and primary.name in code, code
        ctx.go("#/")
        wait_for(lambda: ctx.css("#cluster").is_displayed(), 30, "the panel on the standby")
        assert cluster_rows(ctx)[standby.name]["node"].startswith(standby.name)

        # The primary dies: the standby is promoted and its page gets its actions back.
        c.kill(primary)
        c.wait_primary(exclude=primary, timeout=30)
        ctx.go("#/q/ha")
        wait_for(lambda: ctx.text("#role").startswith("primary"), 30,
                 lambda: f"the page to say primary (it says {ctx.text('#role')!r})")
        wait_for(lambda: not ctx.css("#standby-note").is_displayed(), 30, "the note gone")
        wait_for(lambda: ctx.all("#queue-actions"), 30, "the actions back after the promotion")
        ctx.go("#/")
        wait_for(lambda: cluster_rows(ctx).get(standby.name, {}).get("role") == "primary", 30,
                 "the panel showing the new primary")
        ctx.shot("cluster-after-failover")
        ctx.no_script_errors()
    except Exception:
        print(c.logs())
        raise
    finally:
        c.stop()
        c.cleanup()


def test_dependencies(ctx):
    """A message waiting on two others: counted as waiting on the overview and its queue page,
    explained, its dependencies listed with their states and linked; released when they
    complete (docs/dashboard.md, "Dependencies")."""
    s = ctx.server(["--fsync", "never"])
    ws = Ws(s.http_port)
    ws.enqueue("extract", [{"id": "part-1"}, {"id": "part-2"}])
    ws.enqueue("report", [{"id": "summary", "depends_on": ["extract/part-1", "extract/part-2"]}])
    ctx.open(s.url + "/")
    wait_for(lambda: row_counts(ctx, "report").get("waiting") == "1", 30, "report: 1 waiting")
    ctx.go("#/q/report")
    ctx.wait_text("#count-waiting", "1")
    ctx.go("#/q/report/m/summary")
    ctx.wait_text("#detail-field-state", "waiting")
    wait_for(lambda: ctx.css("#detail-explain").get_attribute("data-reason") ==
             "waiting_on_dependencies", 30, "explain: waiting on dependencies")
    deps = lambda: ctx.js("return [...document.querySelectorAll('#detail-dependencies [data-key]')]"  # noqa: E731
                          ".map(li => [li.dataset.key, li.dataset.state])")
    wait_for(lambda: deps() == [["extract/part-1", "pending"], ["extract/part-2", "pending"]], 30,
             lambda: f"both dependencies pending, listed: {deps()}")
    href = ctx.css("#detail-dependencies a").get_attribute("href")
    assert href.endswith("#/q/extract/m/part-1"), href
    assert ctx.css("#detail-cancel").is_enabled(), "a waiting message can be canceled"
    ctx.shot("dependencies-waiting")
    for m in ws.call("Dequeue", {"queue": "extract", "max": 2})["messages"]:
        ws.call("Complete", {"queue": "extract",
                             "items": [{"id": m["id"], "lease_token": m["lease_token"]}]})
    # The last completion releases it: the page follows its transition.
    ctx.wait_text("#detail-field-state", "pending")
    wait_for(lambda: deps() == [["extract/part-1", "completed"], ["extract/part-2", "completed"]],
             30, lambda: f"both dependencies completed, listed: {deps()}")
    wait_for(lambda: "released" in history_events(ctx), 30,
             lambda: f"the release in the history: {history_events(ctx)}")
    ctx.go("#/")
    wait_for(lambda: row_counts(ctx, "report").get("waiting") == "0", 30, "report: 0 waiting")
    ctx.no_script_errors()
    ws.close()


def history_events(ctx):
    """The message detail's history timeline: each row's event (fresh from the page each call)."""
    return ctx.js("return [...document.querySelectorAll('#detail-history tr')]"
                  ".map(tr => tr.dataset.event || '')")


def history_rows(ctx):
    """The timeline's rows as lists of cell texts."""
    return ctx.js("return [...document.querySelectorAll('#detail-history tr')]"
                  ".map(tr => [...tr.children].map(td => td.textContent))")


def graph_nodes(ctx, column):
    """One column of the detail's dependency graph as [key, state] pairs."""
    return ctx.js("return [...document.querySelectorAll(arguments[0] + ' [data-key]')]"
                  ".map(n => [n.dataset.key, n.dataset.state])", column)


def test_history_timeline(ctx):
    """A message enqueued, leased with a worker id, noted, failed, retried and completed with a
    result: the detail's timeline shows each entry with its worker, note and error and the time
    spent between entries (running per attempt), and the same timeline after a restart
    (docs/dashboard.md, "History")."""
    s = ctx.server()
    ws = Ws(s.http_port)
    ws.enqueue("jobs", [{"id": "h1", "payload": list(b"render invoice 7")}])
    first = ws.call("Dequeue", {"queue": "jobs", "max": 1, "worker_id": "host-a/pid-1"})["messages"][0]
    ws.call("Note", {"queue": "jobs", "id": "h1", "lease_token": first["lease_token"],
                     "text": "rendered, sending"})
    ws.call("Fail", {"queue": "jobs", "id": "h1", "lease_token": first["lease_token"],
                     "error": "SMTP 451", "retry_delay_ms": 300})
    ctx.open(s.url + "/#/q/jobs/m/h1")
    wait_for(lambda: history_events(ctx)[:4] == ["enqueued", "leased", "noted", "failed"], 30,
             lambda: f"the first attempt in the timeline: {history_events(ctx)}")
    second = wait_for(lambda: ws.call("Dequeue", {"queue": "jobs", "max": 1,
                                                  "worker_id": "host-b/pid-2"})["messages"], 30,
                      "the retry to become dequeueable")[0]
    assert second["attempts"] == 2, second
    ws.call("Complete", {"queue": "jobs", "items": [{"id": "h1", "lease_token": second["lease_token"],
                                                     "result": list(b"sent as 250 OK")}]})
    ctx.wait_text("#detail-field-state", "completed")
    expected = ["enqueued", "leased", "noted", "failed", "became_visible", "leased", "completed"]
    wait_for(lambda: history_events(ctx) == expected, 30,
             lambda: f"the whole timeline: {history_events(ctx)}")
    ctx.wait_text("#detail-result", "sent as 250 OK")
    rows = history_rows(ctx)
    by_event = {}
    for r in rows:
        by_event.setdefault(r[1], []).append(r)
    leased1, leased2 = by_event["leased"]
    assert leased1[2] == "pending → running" and leased1[3] == "1", leased1
    assert "host-a/pid-1" in leased1[4], leased1
    assert "host-b/pid-2" in leased2[4] and leased2[3] == "2", leased2
    assert by_event["noted"][0][5] == "rendered, sending", by_event["noted"]
    assert by_event["failed"][0][5] == "SMTP 451", by_event["failed"]
    assert by_event["failed"][0][2] == "running → invisible", by_event["failed"]
    # Each entry but the last says how long the message stayed in the state it entered.
    for r in rows[:-1]:
        assert r[6].startswith(r[2].split(" → ")[1] + " ") and r[6].endswith("s"), r
    assert rows[-1][6] == "", rows[-1]
    summary = ctx.text("#detail-history-summary")
    for needle in ("7 entries", "pending", "running (attempt 1)", "running (attempt 2)", "invisible"):
        assert needle in summary, f"{needle!r} not in {summary!r}"
    ctx.js("document.querySelector('#detail-history-summary').scrollIntoView({block: 'start'})")
    ctx.shot("message-history")

    # A restart: the page reconnects and shows the same durable timeline.
    port = s.http_port
    s.stop()
    wait_for(lambda: ctx.css("#conn").get_attribute("data-state") != "open", 30, "the drop seen")
    s2 = ctx.server(data_dir=s.dir, http_port=port)
    ctx.wait_live()
    ws2 = Ws(s2.http_port)
    served = ws2.call("History", {"queue": "jobs", "id": "h1"})
    assert [e["event"] for e in served["entries"]] == expected, served
    ctx.js("location.reload()")
    ctx.wait_live()
    ctx.wait_text("#detail-field-state", "completed")
    wait_for(lambda: history_rows(ctx) == rows, 30,
             lambda: f"the same timeline after the restart: {history_rows(ctx)} vs {rows}")
    ctx.no_script_errors()
    ws.close()
    ws2.close()


def test_flow_graph(ctx):
    """A flow extract → transform → load, enqueued as one tree by EnqueueFlow (load the root,
    each node waiting on its child): each message's page draws its dependencies with their
    states, linked, and follows them as they complete (docs/dashboard.md, "Dependencies")."""
    s = ctx.server(["--fsync", "never"])
    ws = Ws(s.http_port)
    nodes = ws.call("EnqueueFlow", {"nodes": [
        {"queue": "flow", "item": {"id": "load"}, "children": [
            {"queue": "flow", "item": {"id": "transform"}, "children": [
                {"queue": "flow", "item": {"id": "extract"}}]}]}]})["nodes"]
    assert [n["id"] for n in nodes] == ["load", "transform", "extract"], nodes
    ctx.open(s.url + "/#/q/flow/m/load")
    ctx.wait_text("#detail-field-state", "waiting")
    wait_for(lambda: graph_nodes(ctx, "#detail-dependencies") == [["flow/transform", "waiting"]], 30,
             lambda: f"load's dependency: {graph_nodes(ctx, '#detail-dependencies')}")
    assert ctx.css("#detail-graph-self").get_attribute("data-state") == "waiting"
    assert graph_nodes(ctx, "#detail-dependents") == [], "nothing waits on load"
    # The head of the chain: no dependencies, one dependent.
    ctx.go("#/q/flow/m/extract")
    wait_for(lambda: graph_nodes(ctx, "#detail-dependents") == [["flow/transform", "waiting"]], 30,
             lambda: f"extract's dependent: {graph_nodes(ctx, '#detail-dependents')}")
    assert graph_nodes(ctx, "#detail-dependencies") == []
    assert ctx.css("#detail-graph-self").get_attribute("data-state") == "pending"
    ctx.go("#/q/flow/m/load")
    wait_for(lambda: ctx.css("#message-detail").get_attribute("data-id") == "load" and
             graph_nodes(ctx, "#detail-dependencies") == [["flow/transform", "waiting"]], 30,
             "load's page again")
    # Follow the link to transform (clicked through the page's own element, found afresh).
    ctx.js("document.querySelector('#detail-dependencies [data-key=\"flow/transform\"]').click()")
    wait_for(lambda: ctx.css("#message-detail").get_attribute("data-id") == "transform", 30,
             "transform's page")
    wait_for(lambda: graph_nodes(ctx, "#detail-dependencies") == [["flow/extract", "pending"]], 30,
             lambda: f"transform's dependency: {graph_nodes(ctx, '#detail-dependencies')}")
    # Its dependent, from Explain's `dependents`: listed while it waits.
    wait_for(lambda: graph_nodes(ctx, "#detail-dependents") == [["flow/load", "waiting"]], 30,
             lambda: f"transform's dependent: {graph_nodes(ctx, '#detail-dependents')}")
    assert ctx.css("#detail-graph-self").get_attribute("data-state") == "waiting"
    ctx.js("document.querySelector('#message-detail').scrollIntoView({block: 'start'})")
    ctx.shot("flow-graph")

    def run(id_):
        m = wait_for(lambda: ws.call("Dequeue", {"queue": "flow", "max": 1})["messages"], 30,
                     f"{id_} to be dequeueable")[0]
        assert m["id"] == id_, m
        ws.call("Complete", {"queue": "flow", "items": [{"id": id_, "lease_token": m["lease_token"]}]})

    run("extract")
    wait_for(lambda: graph_nodes(ctx, "#detail-dependencies") == [["flow/extract", "completed"]], 30,
             lambda: f"extract completed: {graph_nodes(ctx, '#detail-dependencies')}")
    wait_for(lambda: ctx.css("#detail-graph-self").get_attribute("data-state") == "pending", 30,
             "transform released")
    run("transform")
    wait_for(lambda: ctx.css("#detail-graph-self").get_attribute("data-state") == "completed", 30,
             "transform completed")
    # Completed: it released load, which no longer waits on it.
    wait_for(lambda: graph_nodes(ctx, "#detail-dependents") == [], 30,
             lambda: f"no dependent left: {graph_nodes(ctx, '#detail-dependents')}")
    ctx.go("#/q/flow/m/load")
    wait_for(lambda: graph_nodes(ctx, "#detail-dependencies") == [["flow/transform", "completed"]],
             30, lambda: f"load's dependency completed: {graph_nodes(ctx, '#detail-dependencies')}")
    wait_for(lambda: ctx.css("#detail-graph-self").get_attribute("data-state") == "pending", 30,
             "load released")
    ctx.no_script_errors()
    ws.close()


def schedule_cells(ctx, key):
    """The schedules page's cells of one schedule ("queue/name"), by column key."""
    return ctx.js("const r = document.querySelector(`tr[data-schedule=\"${arguments[0]}\"]`);"
                  "return r ? Object.fromEntries([...r.querySelectorAll('td[data-key]')]"
                  ".map(c => [c.dataset.key, c.textContent])) : null;", key)


def test_schedules(ctx):
    """The schedules page: each schedule with its timing, state, fires and counts; run now,
    pause, resume and delete behind confirmations; the last fire's message linked; the queue
    page's link to its schedules (docs/dashboard.md, "Schedules")."""
    s = ctx.server(["--fsync", "never"])
    ws = Ws(s.http_port)
    ws.call("CreateQueue", {"name": "reports"})
    ws.call("UpsertSchedule", {"queue": "reports", "name": "nightly", "cron": "30 2 * * *",
                               "tz": "Europe/Paris", "misfire": "one"})
    ws.call("UpsertSchedule", {"queue": "reports", "name": "hourly", "every_ms": 3600000})
    ws.call("CreateQueue", {"name": "other"})
    ws.call("UpsertSchedule", {"queue": "other", "name": "tick", "every_ms": 60000})
    ctx.open(s.url + "/#/schedules")
    wait_for(lambda: schedule_cells(ctx, "reports/nightly") is not None, 30, "nightly listed")
    nightly = schedule_cells(ctx, "reports/nightly")
    assert nightly["when"] == "30 2 * * * (Europe/Paris)", nightly
    assert nightly["status"] == "active" and nightly["fires"] == "0", nightly
    # "2026-11-29 02:30:00in 11h 43m" — or "in 24m 18s" within the hour before 02:30 Paris.
    assert re.fullmatch(r"20\d\d-\d\d-\d\d \d\d:\d0:00in (\d+h \d\dm|\d+m \d\ds|[\d.]+ m?s)",
                        nightly["next"]), nightly
    assert ctx.text('tr[data-schedule="reports/nightly"] td[data-key="next"] .rel').startswith("in ")
    assert schedule_cells(ctx, "reports/hourly")["when"] == "every 1h 00m"
    assert schedule_cells(ctx, "other/tick") is not None
    ctx.shot("schedules")

    # Run now: one fire, its message linked from the row and present in the queue.
    ctx.click('tr[data-schedule="reports/hourly"] button[data-act="trigger"]')
    ctx.confirm(must_mention=["hourly", "reports"])
    wait_for(lambda: schedule_cells(ctx, "reports/hourly")["fires"] == "1", 30, "one fire counted")
    fired = schedule_cells(ctx, "reports/hourly")["enqueued"]
    assert fired.startswith("hourly@"), fired
    msg = ws.call("Get", {"queue": "reports", "id": fired})
    assert msg["message"]["id"] == fired, msg
    link = ctx.css('tr[data-schedule="reports/hourly"] td[data-key="enqueued"] a')
    assert link.get_attribute("href").endswith("#/q/reports/m/" + fired.replace("@", "%40"))

    # Pause, then resume: the server's state follows, and the row shows it.
    ctx.click('tr[data-schedule="reports/nightly"] button[data-act="pause"]')
    ctx.confirm(must_mention=["nightly"])
    wait_for(lambda: schedule_cells(ctx, "reports/nightly")["status"] == "paused", 30, "paused")
    assert ws.call("GetSchedule", {"queue": "reports", "name": "nightly"})["schedule"]["paused"]
    assert schedule_cells(ctx, "reports/nightly")["next"] == "—"
    ctx.click('tr[data-schedule="reports/nightly"] button[data-act="resume"]')
    ctx.confirm(must_mention=["nightly"])
    wait_for(lambda: schedule_cells(ctx, "reports/nightly")["status"] == "active", 30, "resumed")

    # One queue's schedules, reached from its page.
    ctx.go("#/q/reports")
    ctx.click("#queue-schedules-link")
    wait_for(lambda: ctx.js("return location.hash") == "#/schedules/reports", 30, "the link")
    wait_for(lambda: schedule_cells(ctx, "reports/nightly") is not None, 30, "reports' listed")
    assert schedule_cells(ctx, "other/tick") is None, "another queue's schedule is not listed"

    # Delete asks for the name to be typed; the messages it made stay.
    ctx.click('tr[data-schedule="reports/hourly"] button[data-act="delete"]')
    wait_for(lambda: ctx.css("#confirm[open]"), 30, "the confirmation")
    assert not ctx.css("#confirm-ok").is_enabled(), "deleting needs the name typed"
    ctx.css("#confirm-typed").send_keys("hourly")
    ctx.confirm(must_mention=["1 messages it made stay"])
    wait_for(lambda: schedule_cells(ctx, "reports/hourly") is None, 30, "hourly gone")
    try:
        ws.call("GetSchedule", {"queue": "reports", "name": "hourly"})
        raise AssertionError("the deleted schedule is still there")
    except WsError as e:
        assert "NOT_FOUND" in str(e), e
    assert ws.call("Get", {"queue": "reports", "id": fired})["message"]["id"] == fired
    ctx.no_script_errors()
    ws.close()


def test_batches(ctx):
    """The batch page: found by id, its members' progress as they finish, sealed from the page,
    done with its callback linked; the callback's batch linked back (docs/dashboard.md,
    "Batches")."""
    s = ctx.server(["--fsync", "never"])
    ws = Ws(s.http_port)
    ws.call("CreateBatch", {"id": "import-7", "callback": {"queue": "done"}})
    ws.call("CreateQueue", {"name": "parts", "settings": {"max_attempts": 1}})
    ws.enqueue("parts", [{"id": f"p{i}", "batch": "import-7"} for i in range(4)])
    ctx.open(s.url + "/#/batches")
    ctx.css("#batch-id").send_keys("import-7")
    ctx.click("#batch-go")
    ctx.wait_text("#batch-members", "4")
    ctx.wait_text("#batch-active", "4")
    assert ctx.css("#batch-body").get_attribute("data-state") == "open"
    leased = ws.call("Dequeue", {"queue": "parts", "max": 3})["messages"]
    ws.call("Complete", {"queue": "parts", "items": [
        {"id": m["id"], "lease_token": m["lease_token"]} for m in leased[:2]]})
    ws.call("Fail", {"queue": "parts", "id": leased[2]["id"],
                     "lease_token": leased[2]["lease_token"], "error": "bad row"})
    ws.call("Cancel", {"queue": "parts", "ids": ["p3"]})
    ctx.wait_text("#batch-completed", "2")
    ctx.wait_text("#batch-errored", "1")
    ctx.wait_text("#batch-canceled", "1")
    ctx.wait_text("#batch-active", "0")
    parts = ctx.js("return [...document.querySelectorAll('#batch-progress .part')]"
                   ".map(p => [p.dataset.part, Math.round(parseFloat(p.style.width))])")
    assert parts == [["completed", 50], ["canceled", 25], ["errored", 25]], parts
    ctx.shot("batch-open")
    # Not sealed: not done, although no member is active. Sealing from the page finishes it.
    ctx.click("#batch-seal")
    ctx.confirm(must_mention=["import-7", "done at once"])
    wait_for(lambda: ctx.css("#batch-body").get_attribute("data-state") == "done", 30, "done")
    link = ctx.css("#batch-callback-link")
    assert link.text == "done/batch:import-7", link.text
    assert not ctx.all("#batch-seal"), "a sealed batch offers no seal"
    ctx.shot("batch-done")
    link.click()
    wait_for(lambda: ctx.all("#detail-metadata a.batch-link"), 30, "the callback's batch link")
    meta = ctx.js("return Object.fromEntries([...document.querySelectorAll('#detail-metadata tr')]"
                  ".map(r => [r.cells[0].textContent, r.cells[1].textContent]))")
    assert meta["x-batch-completed"] == "2" and meta["x-batch-errored"] == "1", meta
    # In one script: the detail re-renders its metadata with every update of the message.
    ctx.js("document.querySelector('#detail-metadata a.batch-link').click()")
    wait_for(lambda: ctx.js("return location.hash") == "#/batches/import-7", 30, "back to the batch")
    ctx.go("#/batches/no-such-batch")
    wait_for(lambda: "No batch" in ctx._safe_text("#batch-error"), 30, "an unknown batch named")
    ctx.no_script_errors()
    ws.close()


def test_key_concurrency_settings(ctx):
    """A queue's flow key and key concurrency among the settings of its page, and a change of
    the limit shown live with no reload (docs/dashboard.md, "Queue page")."""
    s = ctx.server()
    ws = Ws(s.http_port)
    ws.call("CreateQueue", {"name": "keyed", "settings": {"flow_key": "tenant",
                                                          "key_concurrency": 5}})
    ws.call("CreateQueue", {"name": "plain"})
    ctx.open(s.url + "/#/q/keyed")
    wait_for(lambda: "flow key tenant: 5 running per value" in ctx._safe_text("#queue-settings"),
             30, lambda: f"the flow key on screen: {ctx._safe_text('#queue-settings')!r}")
    ctx.js("window.sundialMarker = 1")
    ws.call("UpdateQueue", {"name": "keyed", "update": {"key_concurrency": 0}})
    wait_for(lambda: "flow key tenant: no limit" in ctx._safe_text("#queue-settings"), 30,
             lambda: f"the new limit on screen: {ctx._safe_text('#queue-settings')!r}")
    ws.call("UpdateQueue", {"name": "keyed", "update": {"key_concurrency": 2}})
    wait_for(lambda: "flow key tenant: 2 running per value" in ctx._safe_text("#queue-settings"),
             30, lambda: f"the limit of 2 on screen: {ctx._safe_text('#queue-settings')!r}")
    ws.call("UpdateQueue", {"name": "keyed", "update": {"key_rate_per_s": 2.5, "key_burst": 3,
                                                        "rate_per_s": 100}})
    wait_for(lambda: "rate 100/s, burst 1 · key rate 2.5/s, burst 3 per value"
             in ctx._safe_text("#queue-settings"), 30,
             lambda: f"the rates on screen: {ctx._safe_text('#queue-settings')!r}")
    assert ctx.js("return window.sundialMarker") == 1, "the page was reloaded"
    ctx.shot("queue-key-concurrency")
    ctx.go("#/q/plain")
    shown = ("const v = document.querySelector('#queue-view[data-queue=\"plain\"]');"
             "return v ? v.querySelector('#queue-settings').textContent : '';")
    wait_for(lambda: "max attempts" in ctx.js(shown), 30, "plain's settings")
    assert "flow key" not in ctx.js(shown), ctx.js(shown)
    assert "/s, burst" not in ctx.js(shown), ctx.js(shown)
    ctx.no_script_errors()
    ws.close()


def test_expires_at(ctx):
    """A message with a ttl shows its expires_at on its page; one without shows none
    (docs/dashboard.md, "Message detail")."""
    s = ctx.server()
    ws = Ws(s.http_port)
    ws.enqueue("ttl", [{"id": "short", "payload": list(b"x"), "ttl_ms": 3_600_000},
                       {"id": "plain", "payload": list(b"y")}])
    ctx.open(s.url + "/#/q/ttl/m/short")
    ctx.wait_text("#detail-field-state", "pending")
    wait_for(lambda: ctx._safe_text("#detail-expires-at") != "", 30, "expires_at on screen")
    ctx.go("#/q/ttl/m/plain")
    wait_for(lambda: ctx.js("return location.hash") == "#/q/ttl/m/plain", 30, "the other page")
    ctx.wait_text("#detail-field-state", "pending")
    wait_for(lambda: ctx.js("return document.querySelector('#detail-expires-at') === null"), 30,
             "no expires_at for a message without a ttl")
    ctx.no_script_errors()
    ws.close()


def test_keys_panel(ctx):
    """A queue with a flow key lists its values with their messages and limits, an override
    set from the page is in effect (and in bold) and a reset puts the value back on the queue's
    limits; a queue without a flow key shows no panel (docs/dashboard.md, "Keys")."""
    s = ctx.server()
    ws = Ws(s.http_port)
    ws.call("CreateQueue", {"name": "studios", "settings": {"flow_key": "studio",
                                                            "key_concurrency": 1}})
    ws.enqueue("studios", [{"id": f"a{i}", "payload": list(b"x"),
                            "metadata": [{"key": "studio", "value": "acme"}]} for i in range(3)] +
               [{"id": "b0", "payload": list(b"x"),
                 "metadata": [{"key": "studio", "value": "bolt"}]}])
    ws.call("Dequeue", {"queue": "studios", "max": 10})
    ctx.open(s.url + "/#/q/studios")
    row = "#key-rows tr[data-value=\"acme\"]"
    cell = lambda field: ctx._safe_text(f"{row} td[data-field=\"{field}\"]")  # noqa: E731
    wait_for(lambda: ctx._safe_text(f"{row} td.state") == "held", 30,
             lambda: f"acme held on screen: {ctx._safe_text('#key-rows')!r}")
    assert ctx._safe_text("#key-rows tr:first-child td.text") == "acme", "most pending first"
    ctx.click(f"{row} button.link")
    ctx.css("#key-concurrency").send_keys("3")
    ctx.click("#key-limits-set")
    wait_for(lambda: cell("concurrency") == "3" and ctx._safe_text(f"{row} td.state") == "", 30,
             lambda: f"the override on screen: {ctx._safe_text('#key-rows')!r}")
    assert "override" in ctx.css(f"{row} td[data-field=\"concurrency\"]").get_attribute("class")
    got = ws.call("GetKeyLimits", {"queue": "studios", "value": "acme"})
    assert got["key"]["overrides"] == {"concurrency": 3}, got
    ws.call("Dequeue", {"queue": "studios", "max": 10})
    ctx.click("#key-limits-reset")
    wait_for(lambda: cell("concurrency") == "1" and ctx._safe_text(f"{row} td.state") == "held",
             30, lambda: f"the queue's limit again: {ctx._safe_text('#key-rows')!r}")
    ctx.shot("queue-keys")
    ws.call("CreateQueue", {"name": "plain"})
    ctx.go("#/q/plain")
    shown = ("const v = document.querySelector('#queue-view[data-queue=\"plain\"]');"
             "return v ? v.querySelector('#keys-panel').hidden : null;")
    wait_for(lambda: ctx.js(shown) is True, 30, "no keys panel on a queue without a flow key")
    ctx.no_script_errors()
    ws.close()


TESTS = [test_overview, test_queue_page, test_actions, test_reconnect, test_read_only,
         test_sign_in, test_off, test_cluster, test_dependencies, test_schedules,
         test_batches, test_history_timeline, test_flow_graph, test_key_concurrency_settings,
         test_expires_at, test_keys_panel]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sundiald", required=True)
    parser.add_argument("--cli", required=True)
    parser.add_argument("--out", required=True, help="screenshots go here")
    parser.add_argument("--only", help="run this test (and the ones it needs) only")
    args = parser.parse_args()
    started = time.monotonic()
    os.makedirs(args.out, exist_ok=True)
    for name in os.listdir(args.out):
        if name.startswith("FAILED-"):
            os.remove(os.path.join(args.out, name))
    driver = start_chromium()
    ctx = Context(args, driver)
    passed = failed = 0
    needs_overview = {"test_queue_page", "test_actions", "test_reconnect"}
    try:
        for test in TESTS:
            if args.only and test.__name__ != args.only and not (
                    test is test_overview and args.only in needs_overview):
                continue
            t0 = time.monotonic()
            try:
                test(ctx)
                passed += 1
                print(f"ok    {test.__name__} ({time.monotonic() - t0:.1f} s)", flush=True)
            except Exception:  # noqa: BLE001
                failed += 1
                print(f"FAIL  {test.__name__} ({time.monotonic() - t0:.1f} s)", flush=True)
                traceback.print_exc()
                ctx.shot("FAILED-" + test.__name__)
                for s in ctx.servers:
                    print(f"--- sundiald {s.dir} log tail:\n{s.log()}")
                if test is test_overview:
                    break  # the others build on its server
    finally:
        driver.quit()
        for s in ctx.servers:
            s.cleanup()
    print(f"browser tests: {time.monotonic() - started:.1f} s; screenshots in {args.out}")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
