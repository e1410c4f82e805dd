"""The console in a real browser: Debian's chromium driven by Playwright, against ``ams serve`` on
each backend (docs/console.md, "Tests").

Every page visited is screenshotted into ``test-artifacts/console/{backend}/`` (CI keeps that
folder) and checked with axe-core for serious accessibility violations. The pages run under the
console's real Content-Security-Policy: a script or style it refuses fails the test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import IN_CI, require_backend
from tests.helpers import ROOT, AmsServer, Api, backend_env, unique
from tools import browser as browser_tool

#: Where the screenshots go: a folder of this suite's own, kept by CI as an artifact.
SHOTS = ROOT / "test-artifacts" / "console"
CONSOLE_INDEX = ROOT / "ams_app" / "console_dist" / "index.html"
AXE = ROOT / "console" / "node_modules" / "axe-core" / "axe.min.js"
#: Impacts that fail a page (axe-core's scale: minor, moderate, serious, critical).
FAILING_IMPACTS = {"serious", "critical"}


def _missing(what: str) -> None:
    """A missing browser, build or tool: skipped outside CI, a failure under CI=true."""
    if IN_CI:
        pytest.fail(f"{what} (under CI=true nothing is skipped)")
    pytest.skip(what)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    try:
        options = browser_tool.launch_options()
    except browser_tool.BrowserError as missing:
        _missing(str(missing))
    if not CONSOLE_INDEX.exists():
        _missing("the console is not built: make console")
    if not AXE.exists():
        _missing("axe-core is not installed: make console (npm ci)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(**options)  # Debian's chromium (tools/browser.py)
        yield launched
        launched.close()


class Console:
    """One browser tab on the console of ``server``, with the screenshots and checks of the suite."""

    def __init__(self, context: Any, server: AmsServer, label: str) -> None:
        self.context = context
        self.server = server
        self.label = label
        self.page = context.new_page()
        self.problems: list[str] = []
        self.page.on("pageerror", lambda err: self.problems.append(f"page error: {err}"))
        self.page.on(
            "console",
            lambda msg: (
                self.problems.append(f"console {msg.type}: {msg.text}")
                if msg.type == "error" and "Failed to load resource" not in msg.text
                else None
            ),
        )
        self.page.set_default_timeout(15_000)

    @property
    def base(self) -> str:
        return self.server.url.rsplit("/v1", 1)[0]

    def goto(self, path: str) -> Any:
        self.page.goto(f"{self.base}/console{path}")
        return self.page

    def sign_in(self, token: str) -> None:
        """By keyboard, as a user without a mouse would."""
        self.goto("/")
        field = self.page.get_by_label("Token")
        field.focus()
        self.page.keyboard.type(token)
        self.page.keyboard.press("Enter")
        self.page.get_by_test_id("whoami").wait_for()

    def shot(self, name: str) -> None:
        """A screenshot of the whole page, and axe-core's check of it."""
        folder = SHOTS / self.server.backend
        folder.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(folder / f"{self.label}-{name}.png"), full_page=True)
        self.check_accessibility(name)

    def check_accessibility(self, name: str) -> None:
        result = self.page.evaluate(
            "async () => { const r = await axe.run(document, {resultTypes: ['violations']});"
            " return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,"
            " nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))})); }"
        )
        serious = [v for v in result if v["impact"] in FAILING_IMPACTS]
        assert not serious, f"axe-core on {name}: {serious}"

    def assert_clean(self) -> None:
        """No script error and nothing the CSP refused, in the whole visit."""
        assert not self.problems, self.problems


@pytest.fixture(scope="module")
def console_server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AmsServer]:
    """``ams serve`` over plain HTTP on loopback (the browser needs no test CA), node name fixed so
    the cluster view can be checked."""
    require_backend(backend)
    data = tmp_path_factory.mktemp(f"console-{backend}") / "data"
    env = {**backend_env(backend), "AMS_NODE_NAME": f"console-{backend}-a"}
    srv = AmsServer(data, backend=backend, env=env)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def admin_api(console_server: AmsServer) -> Iterator[Api]:
    api = console_server.api()
    yield api
    api.close()


def new_service_admin(api: Api) -> str:
    """A service admin user's token. The console signs users in (GET /v1/users/profile): the
    settings' service_token is no user (docs/console.md)."""
    return str(api.new_user(unique("root"), email="root@example.org", service_roles=["service_admin"])["token"])


@pytest.fixture
def open_console(browser: Any, console_server: AmsServer) -> Iterator[Any]:
    """Opens console tabs in contexts of their own (a fresh session storage each); at the end,
    checks that none of them met a script error or a CSP refusal."""
    opened: list[Console] = []

    def open_(label: str, **context_options: Any) -> Console:
        options = {"viewport": {"width": 1280, "height": 900}, "timezone_id": "UTC", **context_options}
        context = browser.new_context(**options)
        context.add_init_script(path=str(AXE))  # injected by the browser, outside the page's CSP
        tab = Console(context, console_server, label)
        opened.append(tab)
        return tab

    yield open_
    try:
        for tab in opened:
            tab.assert_clean()
    finally:
        for tab in opened:
            tab.context.close()
