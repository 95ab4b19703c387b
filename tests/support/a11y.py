"""axe-core in the browser tests: inject the vendored script (``tests/support/axe/``) into
a Playwright page and list the violations of the impacts that fail a test.

Exclusions are by single rule and selector, each with the reason it cannot be fixed on our
side (see :data:`EXCLUDED`); nothing is disabled wholesale.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playwright.sync_api import Page

AXE_JS = Path(__file__).parent / "axe" / "axe.min.js"
AXE_VERSION = "4.14.1"
FAILING_IMPACTS = ("serious", "critical")

# (rule id, CSS selector of the node) pairs axe may report without failing the test,
# each with its reason. Keep this list short, single, and explained.
EXCLUDED: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Violation:
    rule: str
    impact: str
    help: str
    targets: tuple[str, ...]
    summary: str

    def __str__(self) -> str:
        shown = ", ".join(self.targets[:6]) + (" …" if len(self.targets) > 6 else "")
        return f"[{self.impact}] {self.rule}: {self.help} — {shown}\n    {self.summary}"


def inject(page: Page) -> None:
    """Load axe into the page (once per document). Evaluated through the DevTools protocol,
    not as a ``<script>`` tag, so the page's own Content-Security-Policy (the login page
    allows no inline script) stays exactly as users get it."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(AXE_JS.read_text("utf-8") + "\n;undefined")
    version = page.evaluate("() => window.axe.version")
    assert version == AXE_VERSION, f"vendored axe {version}, expected {AXE_VERSION}"


def run_axe(page: Page) -> dict[str, Any]:
    """axe's full result for the page's current state (WCAG 2.x A and AA rules and axe's
    best practices)."""
    inject(page)
    result: dict[str, Any] = page.evaluate(
        """async () => await window.axe.run(document, {
            resultTypes: ["violations"],
        })"""
    )
    return result


def failing(result: dict[str, Any]) -> list[Violation]:
    """Serious and critical violations, minus the explained exclusions."""
    found = []
    for rule in result["violations"]:
        if rule.get("impact") not in FAILING_IMPACTS:
            continue
        nodes = [
            node
            for node in rule["nodes"]
            if (rule["id"], _selector(node)) not in EXCLUDED
            and node.get("impact", rule["impact"]) in FAILING_IMPACTS
        ]
        if nodes:
            found.append(
                Violation(
                    rule["id"],
                    rule["impact"],
                    rule["help"],
                    tuple(_selector(node) for node in nodes),
                    str(nodes[0].get("failureSummary", "")).replace("\n", " ")[:300],
                )
            )
    return found


def report(violations: list[Violation]) -> str:
    return "\n".join(str(v) for v in violations)


def save(result: dict[str, Any], path: Path) -> None:
    """The full result as JSON (an artifact to read when a test fails)."""
    path.write_text(json.dumps(result["violations"], indent=1, ensure_ascii=False), "utf-8")


def _selector(node: dict[str, Any]) -> str:
    return " ".join(str(part) for part in node.get("target", []))
