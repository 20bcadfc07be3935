"""The console's HTML: one helper that escapes every value, and the one rule for text that
came from outside.

``html(template, **values)`` fills a template of ours with values, each escaped unless it is
``Html`` already (markup this module made). Nothing else builds markup, so no value reaches
the page unescaped.

Text from a model, a tool or an event is shown by the approval page's rule (store/display.py):
printable ASCII only, every other character as its JSON escape (a bidi override shows as
``\\u202e``, a Cyrillic ``а`` as ``\\u0430``) and named in a flag box with where it stands;
long values wrapped by the stylesheet, never cut off the screen; labelled as not checked. A
link's token (``token=…``) is hidden. No value is ever a link or markup: a fake "Approve"
link is text in a box.
"""

from __future__ import annotations

import html as html_lib
import re
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, urlencode

from store import display

SHOWN_MAX = 20_000  # characters of one value shown; the rest is counted, never sent
_TOKEN = re.compile(r"((?:token|sig|signature)=)[A-Za-z0-9._~%+/=-]{6,}", re.IGNORECASE)
HIDDEN_NOTE = "a link's token was hidden (shown as [hidden])"
# The approval page's warning (store/display.py FLAGS_LABEL) for text an operator reads, not answers.
FLAGS_LABEL = "Look closely: this text holds characters that can disguise or hide text. Each is shown escaped above:"
FROM_OUTSIDE = "not checked"


class Html(str):
    """Markup made here: never escaped again."""


def html(template: str, **values: Any) -> Html:
    """``template`` (a literal of ours) with each value escaped unless it is ``Html``."""
    return Html(template.format(**{k: v if isinstance(v, Html) else html_lib.escape(str(v)) for k, v in values.items()}))


def join(parts: Iterable[Html], sep: str = "") -> Html:
    return Html(sep.join(parts))


def name(value: object) -> str:
    """A short value from outside (an inbox, a key, a holder): printable ASCII, escapes shown."""
    return display.escaped(str(value))


def url(path: str, **query: Any) -> str:
    kept = {k: v for k, v in query.items() if v is not None}
    return path + ("?" + urlencode(kept, quote_via=quote) if kept else "")


def inbox_url(inbox: str, **query: Any) -> str:
    return url("/console/inbox", i=inbox, **query)


def untrusted(label: str, value: Any, *, css: str = "") -> Html:
    """A value from outside, shown whole (up to SHOWN_MAX characters) by the approval page's
    rule, under ``label`` (which says whose it is and that it is not checked)."""
    if isinstance(value, str):
        # Line breaks stay line breaks (a message is written in lines), and a quote is a quote
        # (the rule escapes backslashes, so an escape shown is always one); the rest as the rule says.
        text = "\n".join(display.escaped(line).replace('\\"', '"') for line in value.split("\n"))
        flags = list(display.for_approval({"text": value.replace("\n", ".")}).flags)
    else:
        shown = display.for_approval(value)
        text, flags = shown.input, list(shown.flags)
    text, hidden = _TOKEN.subn(r"\1[hidden]", text)
    if hidden:
        flags.append(HIDDEN_NOTE)
    more = len(text) - SHOWN_MAX
    if more > 0:
        text = text[:SHOWN_MAX]
    note = html('<p class="cut">… {more} more characters not shown</p>', more=f"{more:,}") if more > 0 else Html()
    box = html('<div class="flags" role="note"><p>{label}</p><ul>{items}</ul></div>', label=FLAGS_LABEL,
               items=join(html("<li>{f}</li>", f=f) for f in flags)) if flags else Html()
    return html('<div class="untrusted {css}"><p class="label">{label}</p><pre class="value">{text}</pre>{note}'
                "{box}</div>", css=css, label=label, text=text, note=note, box=box)


# -- time -----------------------------------------------------------------------------------------

def when(at: int | None) -> str:
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))


def duration(seconds: int | None) -> str:
    """Seconds as the largest two units: 42 s, 5 min 3 s, 2 h 10 min, 3 d 4 h."""
    if seconds is None:
        return "-"
    left, parts = abs(int(seconds)), []
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if left >= size or (size == 1 and not parts):
            parts.append(f"{left // size} {unit}")
            left %= size
    return ("-" if seconds < 0 else "") + " ".join(parts[:2])


def moment(at: int | None, now: int) -> Html:
    """A time, UTC, with how long ago or ahead it is."""
    if at is None:
        return Html("-")
    ago = f"in {duration(at - now)}" if at > now else f"{duration(now - at)} ago"
    return html('<time datetime="{iso}" title="{ago}">{shown}</time> <span class="ago">({ago})</span>',
                iso=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)), shown=when(at), ago=ago)


# -- the page ---------------------------------------------------------------------------------------

def page(title: str, body: Html, *, user: str, query: str = "") -> str:
    return html(
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<title>{title} · wakeful console</title><link rel="icon" href="data:,">'
        '<link rel="stylesheet" href="/console/static/console.css">'
        '</head><body><header><a class="brand" href="/console">wakeful console</a>'
        '<form class="search" method="get" action="/console/search" role="search">'
        '<input name="q" value="{query}" placeholder="inbox, or an event\'s source key" aria-label="search" '
        'maxlength="300"><button>Search</button></form><span class="who">signed in as {user}</span></header>'
        "<main>{body}</main></body></html>", title=title, body=body, user=user, query=query)


def form(action: str, csrf: str, fields: dict[str, Any], button: str, *, css: str = "", value: str = "") -> Html:
    """A POST form with its CSRF token and hidden fields, and one button."""
    hidden = join(html('<input type="hidden" name="{k}" value="{v}">', k=k, v=v) for k, v in fields.items())
    pressed = html(' name="answer" value="{v}"', v=value) if value else Html()
    return html('<form method="post" action="{action}" class="act {css}"><input type="hidden" name="csrf" '
                'value="{csrf}">{hidden}<button{pressed}>{button}</button></form>', action=action, css=css,
                csrf=csrf, hidden=hidden, pressed=pressed, button=button)


def table(headers: Iterable[str], rows: Iterable[Iterable[Any]], *, empty: str, css: str = "") -> Html:
    """Cells are escaped unless ``Html``; ``empty`` is said when there are no rows."""
    body = [join(html("<td>{c}</td>", c=cell) for cell in row) for row in rows]
    if not body:
        return html('<p class="empty">{empty}</p>', empty=empty)
    head = join(html("<th>{h}</th>", h=h) for h in headers)
    return html('<div class="scroll"><table class="{css}"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody>'
                "</table></div>", css=css, head=head, rows=join(html("<tr>{r}</tr>", r=r) for r in body))
