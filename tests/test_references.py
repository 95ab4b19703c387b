"""Every file the repository's docs, docstrings and scripts point to is in the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\((?!https?://|mailto:|#)([^)\s#]+)")
# design notes kept outside the repository, which the code must never cite
OUTSIDE = re.compile(r"\b(?:DESIGN|STACK)\.md\b")


def tracked(*patterns: str) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--", *patterns], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / name for name in listed if (ROOT / name).is_file()]


@pytest.mark.parametrize("path", tracked("*.md"), ids=lambda p: str(p.relative_to(ROOT)))
def test_markdown_links_name_files_that_exist(path: Path) -> None:
    missing = [
        target
        for target in LINK.findall(path.read_text(encoding="utf-8"))
        if not (path.parent / target).exists()
    ]
    assert missing == [], f"{path.relative_to(ROOT)} links to missing files"


def test_nothing_cites_design_notes_the_repository_does_not_hold() -> None:
    files = tracked("*.py", "*.md", "*.sh", "*.toml", "*.service", "*.env", "*.example")
    citing = [
        str(p.relative_to(ROOT)) for p in files if OUTSIDE.search(p.read_text(encoding="utf-8"))
    ]
    assert citing == []
