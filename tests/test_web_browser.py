"""The web page in a real browser: Debian's Chromium, headless, driven by Playwright (no
browser is downloaded). One `corral up` and one browser for the module; every page is checked
for JavaScript errors (the page runs under the API's strict CSP, so a violation shows up too).
"""

from __future__ import annotations

import os
import shutil

import pytest
from conftest import TEAM_QUOTA, port_block

pytestmark = pytest.mark.live

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):
    pytest.skip("needs Debian's chromium (apt-get install chromium)", allow_module_level=True)

from playwright.sync_api import sync_playwright  # noqa: E402

XSS = "<script>window.pwned=1</script>"
# A job's page whose script reports what it can read in the browser: a notebook's output, a
# TensorBoard plugin or any page opened through the proxy could run the same.
SPY_PAGE = """<!doctype html><title>spy</title><script>
document.title = "found " + JSON.stringify({storage: {...localStorage}, cookie: document.cookie});
</script>"""
SPY_TEMPLATE = """
- name: spy
  description: serves a page that looks for the viewer's credentials
  command: mkdir -p j/{{job}}/http && cp {page} j/{{job}}/http/index.html &&
    exec {{python}} -m http.server --bind 127.0.0.1 {{port.http}}
  ports: {{http: http}}
  ready: ""
  idle: [proxy]
"""


@pytest.fixture(scope="module")
def server(module_servers):
    s = module_servers(TEAM_QUOTA, fake_gpus=4, start=False)
    page = module_servers.root / "spy.html"
    page.write_text(SPY_PAGE)
    templates = module_servers.root / "templates.yaml"
    templates.write_text(SPY_TEMPLATE.format(page=page))
    s.args += ["--port-range", port_block(), "--templates", str(templates)]
    return s.start()


@pytest.fixture(scope="module")
def user(server):
    return server.token("carol")


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        # --no-sandbox: CI runs as root, where Chromium's sandbox cannot start.
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser, server, user):
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(server.url + "/#/jobs")
    page.fill("#tok", user)
    page.click("#login button")
    page.wait_for_selector("#who:has-text('signed in as carol')")
    yield page
    context.close()
    assert not [e for e in errors if "favicon" not in e], errors


def submit(server, token: str, **spec) -> str:
    with server.http(token) as c:
        resp = c.post("/v1/jobs", json=spec)
        assert resp.status_code == 201, resp.text
        return resp.json()["id"]


def test_job_page_follows_the_log_and_cancels(page, server, user):
    job = submit(
        server,
        user,
        name="counter",
        command="for i in $(seq 1 200); do echo line-$i; sleep 0.2; done",
    )
    page.wait_for_selector(f"#jobs tr[data-job='{job}']")
    page.click(f"#jobs a[href='#/job/{job}']")
    page.wait_for_selector("#log:has-text('line-2')")
    page.wait_for_selector("#log:has-text('line-12')")  # it follows: later lines arrive
    page.click("#cancel")
    page.wait_for_selector("h2 .state:has-text('cancelled')", timeout=30_000)
    assert server.job(job)["state"] == "cancelled"
    page.wait_for_selector("ul.events li:has-text('cancel')")


def test_jupyter_in_two_clicks(page, server, user):
    page.click("button[data-template='jupyter']")  # click 1: on the jobs page
    link = page.wait_for_selector("a.endpoint[data-ready='1']", timeout=60_000)
    with page.expect_popup() as popup:
        link.click()  # click 2: the link carries the token in its fragment only
    nb = popup.value
    nb.wait_for_load_state()
    nb.wait_for_url("**/j/*/http/", timeout=30_000)
    assert "token" not in nb.url
    nb.wait_for_selector("text=Jupyter Server", timeout=30_000)
    job = nb.url.split("/j/")[1].split("/")[0]
    server.cli("cancel", job, token=user)


def test_a_jobs_page_cannot_read_the_web_pages_token(page, server, user):
    assert page.evaluate("localStorage.token") == user  # what a script beside the page could read
    page.click("button[data-template='spy']")
    link = page.wait_for_selector("a.endpoint[data-ready='1']", timeout=30_000)
    assert link.get_attribute("href").startswith(server.proxy_url + "/j/")
    with page.expect_popup() as popup:
        link.click()  # signs in on the proxy's origin, then loads the job's page
    spy = popup.value
    spy.wait_for_function("document.title.startsWith('found')", timeout=30_000)
    assert spy.title() == 'found {"storage":{},"cookie":""}'  # the session cookie is HttpOnly
    job = spy.url.split("/j/")[1].split("/")[0]
    server.cli("cancel", job, token=user)


def test_user_strings_are_shown_as_text(page, server, user):
    job = submit(
        server,
        user,
        name="xss",
        command=f"echo '{XSS}'; sleep 60",
        env={"NOTE": XSS, "<b>KEY</b>": "<img src=x onerror=alert(2)>"},
    )
    page.goto(f"{server.url}/#/job/{job}")
    page.wait_for_selector(f"dd:has-text('{XSS}')")
    page.wait_for_selector(f"#log:has-text('{XSS}')")
    assert page.locator("dd", has_text="<b>KEY</b>=<img src=x onerror=alert(2)>").count() == 1
    assert page.evaluate("window.pwned") is None
    page.goto(f"{server.url}/#/jobs")
    page.wait_for_selector(f"#jobs tr[data-job='{job}']")
    assert page.evaluate("window.pwned") is None
    server.cli("cancel", job, token=user)


def test_pool_page_and_offline_docs(page, server):
    page.goto(server.url + "/#/pool")
    page.wait_for_selector("svg.chart path", state="attached")
    page.wait_for_selector(".node .gpu")
    page.goto(server.url + "/docs")
    page.wait_for_selector(".opblock", timeout=30_000)  # Swagger UI, from our own files


def test_submit_form_queues_a_batch_job(page, server, user):
    page.goto(server.url + "/#/submit")
    page.fill("#submit [name=name]", "from-form")
    page.fill("#submit [name=command]", "echo hello-from-the-form")
    page.fill("#submit [name=env]", "GREETING=hi")
    page.click("#submit button")
    page.wait_for_selector("h2:has-text('from-form')")
    page.wait_for_selector("#log:has-text('hello-from-the-form')", timeout=30_000)
    with server.http(user) as c:
        job = [j for j in c.get("/v1/jobs").json() if j["name"] == "from-form"][0]
    assert server.job(job["id"])["env"] == {"GREETING": "hi"}
