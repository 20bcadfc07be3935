"""Charts as inline SVG, drawn here from the store's numbers: no script, nothing fetched.

Each chart is a ``<figure>``: the SVG (scaled to the figure's width by the stylesheet; colours
are the stylesheet's classes), a caption with its scale, and the numbers themselves in a
``<details>`` table, for a screen reader and for anyone who wants the figure, not the shape.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .render import Html, html, join, table

HEIGHT = 100


def _scale(values: Sequence[float]) -> float:
    top = max(values, default=0)
    return HEIGHT / top if top else 0.0


def _steps(values: Sequence[float | None], per: float, css: str) -> Html:
    """One level per bucket, a gap where a bucket has none."""
    path = "".join(f"M{i},{HEIGHT - v * per:.1f}H{i + 1}" for i, v in enumerate(values) if v is not None)
    return html('<path class="{css}" d="{path}"/>', css=css, path=path) if path else Html()


def _area(values: Sequence[float], per: float, css: str) -> Html:
    path = "".join(f"L{i},{HEIGHT - v * per:.1f}L{i + 1},{HEIGHT - v * per:.1f}" for i, v in enumerate(values))
    return html('<path class="{css}" d="M0,{h}{path}L{n},{h}Z"/>', css=css, h=HEIGHT, path=path, n=len(values))


def _bars(values: Sequence[float], per: float, css: str) -> Html:
    return join(html('<rect class="{css}" x="{x}" y="{y}" width="0.8" height="{h}"/>', css=css, x=f"{i + 0.1:.1f}",
                     y=f"{HEIGHT - v * per:.1f}", h=f"{v * per:.1f}") for i, v in enumerate(values))


def _svg(width: int, label: str, shapes: Html) -> Html:
    return html('<svg class="chart" viewBox="0 -2 {w} {h}" preserveAspectRatio="none" role="img" '
                'aria-label="{label}">{shapes}</svg>', w=width, h=HEIGHT + 4, label=label, shapes=shapes)


def _figure(title: str, caption: str, svg: Html, numbers: Html, css: str = "") -> Html:
    return html('<figure class="{css}"><figcaption><b>{title}</b> <span>{caption}</span></figcaption>{svg}'
                "<details><summary>the numbers</summary>{numbers}</details></figure>",
                css=css, title=title, caption=caption, svg=svg, numbers=numbers)


def _hm(at: int) -> str:
    return time.strftime("%H:%M", time.gmtime(at))


def _when(at: int) -> str:
    return time.strftime("%m-%d %H:%M", time.gmtime(at))


def _day(at: int) -> str:
    return time.strftime("%m-%d", time.gmtime(at))


def runs_per_minute(series: Sequence[tuple[int, int, int]]) -> Html:
    counts = [n for _, n, _ in series]
    errors = [e for _, _, e in series]
    per = _scale(counts)
    busiest = max(counts, default=0)
    svg = _svg(len(series), f"runs per minute, last 24 h: {sum(counts)} runs, {sum(errors)} failed",
               join([_area(counts, per, "runs"), _area(errors, per, "errors")]))
    hours: dict[int, list[int]] = {}
    for at, n, e in series:
        hour = hours.setdefault(at - (at - series[0][0]) % 3600, [0, 0])
        hour[0], hour[1] = hour[0] + n, hour[1] + e
    caption = (f"{sum(counts):,} runs in 24 h ({sum(errors):,} failed), at most {busiest} a minute; "
               f"{_when(series[0][0])} to {_when(series[-1][0] + 60)} UTC" if series else "")
    return _figure("Runs per minute", caption, svg, table(
        ("hour (UTC)", "runs", "failed"), [(_hm(at), n, e) for at, (n, e) in hours.items()], empty="no runs"), "wide")


def latency(series: Sequence[tuple[int, int | None, int | None, int]]) -> Html:
    p50 = [p for _, p, _, _ in series]
    p99 = [p for _, _, p, _ in series]
    per = _scale([p for p in p99 if p is not None])
    svg = _svg(len(series), "ingest to agent, p50 and p99 per hour, last 24 h",
               join([_steps(p99, per, "p99"), _steps(p50, per, "p50")]))
    worst = max((p for p in p99 if p is not None), default=None)
    caption = ("from an event's arrival to the claim that ran it, per hour: "
               + (f"p99 at most {worst} s" if worst is not None else "no events finished"))
    return _figure("Ingest → agent, p50 / p99", caption, svg, table(
        ("hour (UTC)", "events", "p50 ≤", "p99 ≤"),
        [(_hm(at), n, _seconds(a), _seconds(b)) for at, a, b, n in series if n], empty="no events finished"))


def _seconds(value: int | None) -> str:
    return "-" if value is None else f"{value} s"


def per_day(title: str, series: Sequence[tuple[int, float]], unit: str, css: str) -> Html:
    values = [v for _, v in series]
    svg = _svg(len(series), f"{title}, last {len(series)} days", _bars(values, _scale(values), css))
    shown = [(_day(at), f"{v:,.4f}" if isinstance(v, float) and v % 1 else f"{int(v):,}") for at, v in series]
    caption = (f"last {len(series)} days (UTC), {_day(series[0][0])} to {_day(series[-1][0])}; "
               f"at most {max(values, default=0):,.4g} a day ({unit})" if series else "")
    return _figure(title, caption, svg, table(("day", unit), shown, empty="nothing"))
