"""Chart files for people who paste reports: each chart as SVG, and as PNG through headless
Chromium when one is installed.

Owns: ``find_chromium()``, ``export_charts(svgs, directory)`` and ``render_png``.

Why Chromium and not matplotlib: the report's charts are already SVG (``svg.py``), and a
browser renders exactly what the HTML page shows, so the PNG and the page never disagree; it
also adds no Python dependency to the ``spark`` extra. matplotlib would redraw every chart a
second time in another style. Chromium is optional: without it the SVG files are written
and the PNGs are skipped with one line saying why.

Invariants: never raises for a missing or failing browser (returns what it wrote); each
Chromium call has a timeout and a throw-away profile directory.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

CHROMIUM_NAMES = (
    "chromium",
    "chromium-browser",
    "google-chrome",
    "chrome",
    "chromium-headless-shell",
)


def find_chromium() -> str | None:
    """``$KAIROSMQ_CHROMIUM`` or the first known Chromium binary on PATH."""
    if os.environ.get("KAIROSMQ_CHROMIUM"):
        return os.environ["KAIROSMQ_CHROMIUM"]
    return next((p for n in CHROMIUM_NAMES if (p := shutil.which(n))), None)


def chromium_args(browser: str, profile: str) -> list[str]:
    return [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
    ]


def render_png(browser: str, svg_file: Path, png_file: Path, timeout: float = 60) -> bool:
    """Screenshot one SVG file at its own size; True when the PNG was written."""
    text = svg_file.read_text(encoding="utf-8")
    m = re.search(r'width="(\d+)" height="(\d+)"', text)
    width, height = (m.group(1), m.group(2)) if m else ("760", "300")
    with tempfile.TemporaryDirectory(prefix="kairosmq-chromium-") as profile:
        try:
            subprocess.run(
                [
                    *chromium_args(browser, profile),
                    f"--screenshot={png_file}",
                    f"--window-size={width},{height}",
                    svg_file.resolve().as_uri(),
                ],
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
    return png_file.exists() and png_file.stat().st_size > 0


def export_charts(svgs: Mapping[str, str], directory: Path, *, png: bool = True) -> list[str]:
    """Write ``<name>.svg`` (and ``<name>.png``) per chart; return notes for the console."""
    directory.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    browser = find_chromium() if png else None
    if png and browser is None:
        notes.append(
            "charts: PNG skipped, no Chromium found (apt-get install -y chromium, or "
            "set KAIROSMQ_CHROMIUM); SVG files written"
        )
    for name, svg in svgs.items():
        svg_file = directory / f"{name}.svg"
        svg_file.write_text(svg, encoding="utf-8")
        if browser is not None and not render_png(browser, svg_file, directory / f"{name}.png"):
            notes.append(f"charts: {name}.png not written ({browser} failed)")
    return notes
