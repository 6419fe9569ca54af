"""The watchdog's pages for a phone: one shell, escaped text, plain forms.

Readable at 360 px, no JavaScript (a form POST is the only way to act), no third-party asset (the style
is inline and the response's CSP forbids anything else). Every text that reaches a page goes through
`esc`: a pod's name, a provider's status and a pod's own words are data, never markup.
"""

from __future__ import annotations

import html
from collections.abc import Iterable

from gpuc.functions.edge import Response

_STYLE = """
body{font:16px/1.45 system-ui,-apple-system,sans-serif;margin:0;padding:12px;max-width:640px;
color:#111;background:#fafafa}
h1{font-size:1.25em;margin:.2em 0 .6em}h2{font-size:1.05em;margin:1.2em 0 .4em}
.card{background:#fff;border:1px solid #ddd;border-radius:8px;padding:10px 12px;margin:0 0 10px}
.muted{color:#555;font-size:.9em}.warn{color:#a40000;font-weight:600}.ok{color:#0a5d00;font-weight:600}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 10px;margin:.3em 0}dt{color:#555}dd{margin:0}
form{display:inline-block;margin:6px 6px 0 0}
button{font:inherit;padding:10px 14px;min-height:44px;border-radius:6px;border:1px solid #888;background:#eee}
button.danger{background:#a40000;color:#fff;border-color:#a40000}
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:4px 6px;border-bottom:1px solid #eee}
"""


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def page(title: str, body: str) -> str:
    """A whole page: `body` is markup built from `esc`-aped parts."""
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        '<meta name="referrer" content="no-referrer"><meta name="robots" content="noindex,nofollow">'
        f"<title>{esc(title)}</title><style>{_STYLE}</style></head>"
        f"<body><h1>{esc(title)}</h1>{body}</body></html>\n"
    )


def html_response(status: int, title: str, body: str) -> Response:
    return Response(status, {}, html=page(title, body))


def button_form(action: str, label: str, *, danger: bool = False, fields: Iterable[tuple[str, str]] = ()) -> str:
    """A POST form with one button: the only way a page acts. `action` is a path on this watchdog."""
    hidden = "".join(f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">' for k, v in fields)
    cls = ' class="danger"' if danger else ""
    return f'<form method="post" action="{esc(action)}">{hidden}<button{cls}>{esc(label)}</button></form>'


def facts(rows: Iterable[tuple[str, object]]) -> str:
    return "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows) + "</dl>"
