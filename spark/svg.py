"""Dependency-free inline SVG charts for the HTML report (grouped bars, lines, bands).

Owns: ``bar_chart``, ``line_chart`` and ``band_chart``, which turn small Python lists into one
``<svg>`` string.

Invariants: output is well-formed XML with every text escaped; all series have one value per
category (``None`` = missing, drawn as a gap); an empty or all-missing chart renders a "no data"
box instead of failing. A log axis (``log=True``) has one tick per power of ten from the decade
below the smallest positive value to the decade above the largest, and no 0 tick: values at or
below the bottom decade (zero, negative) are drawn on the axis floor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1")
WIDTH, HEIGHT = 760, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 52, 48

Series = dict[str, Sequence[float | None]]


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if 0 < abs(v) < 0.01:
        return f"{v:.0e}"
    if abs(v) >= 1e6:
        return f"{v / 1e6:.3g}M"
    if abs(v) >= 1e3:
        return f"{v / 1e3:.3g}k"
    return f"{v:.3g}"


def _nice_ticks(top: float, n: int = 5) -> list[float]:
    if top <= 0:
        return [0.0, 1.0]
    raw = top / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(math.ceil(top / step)) + 1)]


def _scale(values: list[float], log: bool) -> tuple[list[float], Callable[[float], float]]:
    """Tick values (in data units) and a data -> pixel y mapping."""
    plot_h = HEIGHT - TOP - BOTTOM
    top = max(values, default=0.0)
    if log:
        positive = [v for v in values if v > 0] or [1.0]
        lo = math.floor(math.log10(min(positive)))
        hi = max(lo + 1, math.ceil(math.log10(max(positive))))
        ticks = [10.0**d for d in range(lo, hi + 1)]

        def y_log(v: float) -> float:
            d = math.log10(v) if v > 10.0**lo else lo
            return TOP + plot_h * (1 - (d - lo) / (hi - lo))

        return ticks, y_log
    ticks = _nice_ticks(top)
    return ticks, lambda v: TOP + plot_h * (1 - v / ticks[-1])


def _frame(title: str, y_label: str, ticks: list[float], y: Callable[[float], float]) -> list[str]:
    out = [
        f'<text x="{LEFT}" y="20" class="t">{escape(title)}</text>',
        f'<text x="14" y="{TOP + (HEIGHT - TOP - BOTTOM) / 2:.0f}" class="a" '
        f'transform="rotate(-90 14 {TOP + (HEIGHT - TOP - BOTTOM) / 2:.0f})">'
        f"{escape(y_label)}</text>",
    ]
    for t in ticks:
        py = y(t)
        out.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{py:.1f}" y2="{py:.1f}" stroke="#ddd"/>'
        )
        out.append(
            f'<text x="{LEFT - 6}" y="{py + 4:.1f}" class="a" text-anchor="end">{_fmt(t)}</text>'
        )
    return out


def _legend(names: list[str]) -> list[str]:
    out, x = [], WIDTH - RIGHT
    for i, name in reversed(list(enumerate(names))):
        x -= 14 + 7 * len(name) + 10
        out.append(
            f'<rect x="{x}" y="28" width="10" height="10" fill="{PALETTE[i % 7]}"/>'
            f'<text x="{x + 14}" y="37" class="a">{escape(name)}</text>'
        )
    return out


def _wrap(body: list[str], title: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">'
        "<style>.t{font:bold 14px sans-serif}.a{font:11px sans-serif;fill:#444}</style>"
        + "".join(body)
        + "</svg>"
    )


def _empty(title: str) -> str:
    return _wrap(
        [
            f'<text x="{LEFT}" y="20" class="t">{escape(title)}</text>',
            f'<text x="{WIDTH / 2:.0f}" y="{HEIGHT / 2:.0f}" class="a" '
            'text-anchor="middle">no data</text>',
        ],
        title,
    )


def _present(series: Series) -> list[float]:
    return [float(v) for vals in series.values() for v in vals if v is not None]


def bar_chart(
    categories: Sequence[str], series: Series, *, title: str, y_label: str = "", log: bool = False
) -> str:
    """Grouped vertical bars: one group per category, one bar per series."""
    values = _present(series)
    if not categories or not values:
        return _empty(title)
    ticks, y = _scale(values, log)
    body = _frame(title, y_label, ticks, y) + _legend(list(series))
    slot = (WIDTH - LEFT - RIGHT) / len(categories)
    bar = max(1.0, slot * 0.8 / len(series))
    every = max(1, math.ceil(len(categories) / 24))
    for c, cat in enumerate(categories):
        x0 = LEFT + c * slot + slot * 0.1
        for s, (name, vals) in enumerate(series.items()):
            v = vals[c]
            if v is None:
                continue
            top = y(float(v))
            body.append(
                f'<rect x="{x0 + s * bar:.1f}" y="{top:.1f}" width="{bar:.1f}" '
                f'height="{max(0.0, y(ticks[0]) - top):.1f}" fill="{PALETTE[s % 7]}">'
                f"<title>{escape(f'{cat} {name}: {_fmt(float(v))}')}</title></rect>"
            )
        if c % every == 0:
            body.append(
                f'<text x="{LEFT + (c + 0.5) * slot:.1f}" y="{HEIGHT - BOTTOM + 16}" '
                f'class="a" text-anchor="middle">{escape(str(cat))}</text>'
            )
    return _wrap(body, title)


def line_chart(
    x_labels: Sequence[str], series: Series, *, title: str, y_label: str = "", log: bool = False
) -> str:
    """One polyline per series over evenly spaced ``x_labels`` (gaps where a value is None)."""
    values = _present(series)
    if not x_labels or not values:
        return _empty(title)
    ticks, y = _scale(values, log)
    body = _frame(title, y_label, ticks, y) + _legend(list(series))
    n = len(x_labels)
    step = (WIDTH - LEFT - RIGHT) / max(1, n - 1)

    def px(i: int) -> float:
        return LEFT + (i * step if n > 1 else (WIDTH - LEFT - RIGHT) / 2)

    for s, (name, vals) in enumerate(series.items()):
        color = PALETTE[s % 7]
        run: list[str] = []
        for i, v in enumerate([*vals, None]):
            if v is not None:
                run.append(f"{px(i):.1f},{y(float(v)):.1f}")
                continue
            if len(run) > 1:
                body.append(
                    f'<polyline points="{" ".join(run)}" fill="none" '
                    f'stroke="{color}" stroke-width="1.5"/>'
                )
            elif run:
                body.append(
                    f'<circle cx="{run[0].split(",")[0]}" cy="{run[0].split(",")[1]}" '
                    f'r="2.5" fill="{color}"/>'
                )
            run = []
        body.append(f"<title>{escape(name)}</title>")
    labels = max(1, math.ceil(n / 8))
    for i in range(0, n, labels):
        body.append(
            f'<text x="{px(i):.1f}" y="{HEIGHT - BOTTOM + 16}" class="a" '
            f'text-anchor="middle">{escape(x_labels[i])}</text>'
        )
    return _wrap(body, title)


BANDS = (("p50", "p90", 0.85), ("p90", "p99", 0.5), ("p99", "p999", 0.25))


def band_chart(
    categories: Sequence[str],
    stats: Sequence[dict[str, float | None]],
    *,
    title: str,
    y_label: str = "",
    log: bool = True,
) -> str:
    """Per category a vertical band: p50-p90 dark, p90-p99 lighter, p99-p99.9 lightest, a dot
    at p50 and a tick at the max (each ``stats`` item has ``p50, p90, p99, p999, max``)."""
    values = [
        float(st[k])
        for st in stats
        for k in ("p50", "p90", "p99", "p999", "max")
        if st.get(k) is not None
    ]
    if not categories or not values:
        return _empty(title)
    ticks, y = _scale(values, log)
    body = _frame(title, y_label, ticks, y)
    body += _legend(["p50-p90", "p90-p99", "p99-p99.9", "max"])
    slot = (WIDTH - LEFT - RIGHT) / len(categories)
    width = max(2.0, min(28.0, slot * 0.5))
    for c, (cat, st) in enumerate(zip(categories, stats, strict=True)):
        cx = LEFT + (c + 0.5) * slot
        for i, (lo_key, hi_key, opacity) in enumerate(BANDS):
            lo, hi = st.get(lo_key), st.get(hi_key)
            if lo is None or hi is None:
                continue
            top, bottom = y(float(hi)), y(float(lo))
            tip = escape(f"{cat} {lo_key}-{hi_key}: {_fmt(float(lo))}-{_fmt(float(hi))} ms")
            body.append(
                f'<rect x="{cx - width / 2:.1f}" y="{top:.1f}" width="{width:.1f}" '
                f'height="{max(1.0, bottom - top):.1f}" fill="{PALETTE[i]}" '
                f'fill-opacity="{opacity}"><title>{tip}</title></rect>'
            )
        top_value = st.get("max")
        if top_value is not None:
            my = y(float(top_value))
            tip = escape(f"{cat} max: {_fmt(float(top_value))} ms")
            body.append(
                f'<line x1="{cx - width / 2:.1f}" x2="{cx + width / 2:.1f}" '
                f'y1="{my:.1f}" y2="{my:.1f}" stroke="{PALETTE[3]}" stroke-width="2">'
                f"<title>{tip}</title></line>"
            )
        if st.get("p50") is not None:
            body.append(f'<circle cx="{cx:.1f}" cy="{y(float(st["p50"])):.1f}" r="3" fill="#222"/>')
        body.append(
            f'<text x="{cx:.1f}" y="{HEIGHT - BOTTOM + 16}" class="a" '
            f'text-anchor="middle">{escape(str(cat))}</text>'
        )
    return _wrap(body, title)
