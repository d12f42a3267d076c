"""A live web page of the service at `/ui`: every running dataflow the caller may see,
its latency against its target over time, its graph with each operator coloured by its
share of the critical path, and the explanation in words (`ServiceCore.explain`).

Plain server-rendered HTML with inline SVG: no build step, no script, nothing fetched
from the network. The page reloads itself every few seconds (meta refresh).

A browser cannot set an Authorization header, so the page takes the same tokens once,
as `/ui?token=...` or from its login form, keeps the token in an HttpOnly SameSite=Strict
cookie valid under `/ui` only, and redirects to strip it from the address bar. Every
name and word shown is escaped.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.requests import cookie_parser

from cameo_actors.errors import CameoError
from cameo_actors.runtime.boundary import LIVE_STATES
from cameo_actors.service.auth import Principal, TokenStore
from cameo_actors.service.core import ServiceCore
from cameo_actors.service.errors import ApiError
from cameo_actors.service.protocol import parse_last

PREFIX = "/ui"
COOKIE = "cameo_ui_token"
REFRESH_S = 5
#: The login form's body (a token and little else).
LOGIN_BODY_BYTES = 4096
HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
           "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
           "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                                      "form-action 'self'; frame-ancestors 'none'; "
                                      "base-uri 'none'"}

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">{refresh}<title>{title}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d2329; }}
header {{ display: flex; gap: 1em; align-items: baseline; flex-wrap: wrap; }}
h1 {{ font-size: 1.4em; margin: 0; }} h2 {{ font-size: 1.15em; margin: 0 0 .3em; }}
section {{ border: 1px solid #d0d7de; border-radius: 6px; padding: .8em 1em; margin: 1em 0; }}
.row {{ display: flex; gap: 1.5em; flex-wrap: wrap; align-items: flex-start; }}
.muted {{ color: #57606a; }} .bad {{ color: #b42318; }} .ok {{ color: #1a7f37; }}
ul.words {{ margin: .4em 0; padding-left: 1.2em; }} form {{ display: inline; }}
a {{ color: #0969da; }}
</style></head>
<body>{body}</body></html>
"""


def is_ui_path(path: str) -> bool:
    """Whether a request path is the page's (its callers come with a cookie)."""
    return path == PREFIX or path.startswith(PREFIX + "/")


def browser_caller(tokens: TokenStore, header: str | None,
                   raw_headers: Iterable[tuple[bytes, bytes]]) -> Principal | None:
    """The caller of a request for the page: its Authorization header, else its cookie."""
    principal = tokens.authenticate(header)
    if principal is not None:
        return principal
    cookies = "; ".join(v.decode("latin-1") for k, v in raw_headers if k == b"cookie")
    token = cookie_parser(cookies).get(COOKIE) if cookies else None
    return tokens.authenticate(f"Bearer {token}") if token else None


# -- pure rendering ---------------------------------------------------------------------------
def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def pct(share: Any) -> str:
    return f"{100 * share:.1f} %" if isinstance(share, (int, float)) and math.isfinite(share) \
        else "-"


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def page(title: str, body: str, *, refresh: bool = False) -> str:
    return PAGE.format(title=esc(title), body=body,
                       refresh=f'<meta http-equiv="refresh" content="{REFRESH_S}">'
                       if refresh else "")


def login_form(message: str | None = None) -> str:
    note = f'<p class="bad">{esc(message)}</p>' if message else ""
    return page("cameo: sign in", f"""<h1>cameo</h1>{note}
<p>Sign in with the admin token or a tenant token (<code>cameo token create TENANT</code>).</p>
<form method="post" action="{PREFIX}/login"><label>token
<input type="password" name="token" autocomplete="off" size="48" autofocus></label>
<button type="submit">sign in</button></form>""")


def latency_chart(explanation: dict[str, Any], width: int = 560, height: int = 190) -> str:
    """p50 and p99 of each 1-s snapshot as lines, the target as a dashed horizontal line."""
    points = [p for p in explanation.get("latency") or [] if _num(p.get("t_ms")) is not None]
    target = _num(explanation.get("latency_target_ms"))
    left, right, top, bottom = 52, 12, 12, 26
    w, h = width - left - right, height - top - bottom
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'role="img" aria-label="latency against target">'
           f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="#fafbfc" '
           f'stroke="#d0d7de"/>']
    if not points:
        out.append(f'<text x="{left + 10}" y="{top + h / 2}" fill="#57606a">no latency '
                   f'snapshots in this window</text></svg>')
        return "".join(out)
    times = [float(p["t_ms"]) for p in points]
    t0 = _num(explanation.get("from_ms")) or min(times)
    t1 = _num(explanation.get("to_ms")) or max(times)
    t0, t1 = min(t0, min(times)), max(t1, max(times))
    span = max(t1 - t0, 1000.0)
    values = [v for p in points for k in ("p50_ms", "p99_ms") if (v := _num(p.get(k))) is not None]
    top_ms = max([*values, 2 * target if target else 1.0]) * 1.1 or 1.0

    def x(t: float) -> float:
        return left + (t - t0) / span * w

    def y(ms: float) -> float:
        return top + h - min(ms, top_ms) / top_ms * h

    for ms in (0.0, top_ms / 2, top_ms):
        out.append(f'<text x="{left - 4}" y="{y(ms) + 4:.1f}" font-size="11" '
                   f'text-anchor="end" fill="#57606a">{ms:.0f} ms</text>')
    out.append(f'<text x="{left}" y="{height - 8}" font-size="11" fill="#57606a">'
               f'-{span / 1000:.0f} s</text><text x="{left + w}" y="{height - 8}" '
               f'font-size="11" text-anchor="end" fill="#57606a">now</text>')
    if target:
        out.append(f'<line x1="{left}" x2="{left + w}" y1="{y(target):.1f}" y2="{y(target):.1f}" '
                   f'stroke="#b42318" stroke-dasharray="6 4"/><text x="{left + w - 4}" '
                   f'y="{y(target) - 4:.1f}" font-size="11" text-anchor="end" '
                   f'fill="#b42318">target {target:g} ms</text>')
    for key, colour in (("p50_ms", "#0969da"), ("p99_ms", "#bf8700")):
        run: list[str] = []
        for p in [*points, {}]:  # a gap (no value) ends a line
            v = _num(p.get(key))
            if v is not None:
                run.append(f"{x(float(p['t_ms'])):.1f},{y(v):.1f}")
                continue
            if len(run) == 1:
                cx, cy = run[0].split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{colour}"/>')
            elif run:
                out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                           f'points="{" ".join(run)}"/>')
            run = []
    out.append(f'<text x="{left + 8}" y="{top + 14}" font-size="11" fill="#0969da">p50</text>'
               f'<text x="{left + 40}" y="{top + 14}" font-size="11" fill="#bf8700">p99</text>')
    return "".join(out) + "</svg>"


def _columns(steps: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Each step's column: 0 for a source, else one after its furthest input."""
    ids = {str(s.get("id")) for s in steps}
    column: dict[str, int] = {}
    for _ in range(len(steps) + 1):  # a valid spec is a DAG: this settles in len(steps) rounds
        for s in steps:
            inputs = [str(i) for i in s.get("inputs") or [] if str(i) in ids]
            column[str(s.get("id"))] = 1 + max((column.get(i, 0) for i in inputs), default=-1)
    return column


def heat(share: float) -> str:
    """A fill from pale (no part of the critical path) to red (all of it)."""
    s = min(1.0, max(0.0, share))
    r, g, b = (round(a + (z - a) * s) for a, z in ((238, 214), (242, 39), (246, 40)))
    return f"rgb({r},{g},{b})"


def graph(spec: dict[str, Any], operators: dict[str, Any], box_w: int = 128, box_h: int = 40
          ) -> str:
    """The dataflow's steps as boxes in topological columns, inputs joined by lines, each box
    coloured by its step's share of the critical path."""
    steps = [s for s in spec.get("steps") or [] if isinstance(s, dict)]
    if not steps:
        return '<p class="muted">no steps</p>'
    column = _columns(steps)
    rows: dict[int, int] = {}
    at: dict[str, tuple[int, int]] = {}
    gap_x, gap_y, pad = 44, 14, 6
    for s in steps:
        c = column[str(s.get("id"))]
        at[str(s.get("id"))] = (pad + c * (box_w + gap_x), pad + rows.get(c, 0) * (box_h + gap_y))
        rows[c] = rows.get(c, 0) + 1
    width = pad * 2 + (max(column.values()) + 1) * (box_w + gap_x) - gap_x
    height = pad * 2 + max(rows.values()) * (box_h + gap_y) - gap_y
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'role="img" aria-label="dataflow graph">']
    for s in steps:
        x2, y2 = at[str(s.get("id"))]
        for i in s.get("inputs") or []:
            if str(i) in at:
                x1, y1 = at[str(i)]
                out.append(f'<line x1="{x1 + box_w}" y1="{y1 + box_h / 2}" x2="{x2}" '
                           f'y2="{y2 + box_h / 2}" stroke="#8c959f" stroke-width="1.5"/>')
    for s in steps:
        sid = str(s.get("id"))
        x, y = at[sid]
        share = _num(operators.get(sid)) or 0.0
        ink = "#ffffff" if share > 0.5 else "#1d2329"
        label = sid if len(sid) <= 17 else sid[:16] + "\u2026"
        out.append(f'<g><title>{esc(sid)} ({esc(s.get("op"))}): {pct(share)} of the critical '
                   f'path</title><rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="5" '
                   f'fill="{heat(share)}" stroke="#57606a"/><text x="{x + 6}" y="{y + 16}" '
                   f'font-size="12" fill="{ink}">{esc(label)}</text><text x="{x + 6}" '
                   f'y="{y + 32}" font-size="11" fill="{ink}">{esc(s.get("op"))} '
                   f'{pct(share) if share else ""}</text></g>')
    return "".join(out) + "</svg>"


def words(explanation: dict[str, Any] | None, key: str = "words") -> str:
    lines = [str(w) for w in (explanation or {}).get(key) or []]
    if not lines:
        return '<p class="muted">nothing traced in this window</p>' if key == "words" else ""
    rest = "".join(f"<li>{esc(w)}</li>" for w in lines[1:])
    return f"<p><strong>{esc(lines[0])}</strong></p>" + (f'<ul class="words">{rest}</ul>'
                                                         if rest else "")


def within(explanation: dict[str, Any]) -> str:
    share, n = explanation.get("within_target"), explanation.get("results") or 0
    target = _num(explanation.get("latency_target_ms"))
    if share is None:
        return '<span class="muted">no traced results in this window</span>'
    cls = "ok" if share >= 0.99 else "bad"
    return (f'<span class="{cls}">{pct(share)}</span> of {esc(f"{n:,}")} traced results within '
            f"the {esc(f'{target:g}') if target else '-'} ms target")


def dataflow_section(d: dict[str, Any], spec: dict[str, Any] | None,
                     explanation: dict[str, Any] | None, problem: str | None, query: str) -> str:
    name = str(d.get("name"))
    head = (f'<h2><a href="{PREFIX}/dataflows/{esc(quote(name, safe=""))}{esc(query)}">'
            f'{esc(name)}</a></h2><p class="muted">tenant {esc(d.get("tenant"))} &middot; '
            f'{esc(d.get("state"))} &middot; target {esc(d.get("latency_target_ms"))} ms</p>')
    if problem:
        return f'<section>{head}<p class="bad">{esc(problem)}</p></section>'
    explanation = explanation or {}
    return (f"<section>{head}<p>{within(explanation)}</p><div class=\"row\">"
            f"<div>{latency_chart(explanation)}</div>"
            f"<div>{graph(spec or {}, explanation.get('operators') or {})}</div></div>"
            f"{words(explanation)}{words(explanation, 'late_words')}</section>")


def dashboard(principal: Principal, last_s: float, pool: dict[str, Any] | None,
              sections: list[str], query: str, *, single: str | None = None) -> str:
    who = "admin" if principal.admin else f"tenant {principal.tenant}"
    back = f'<a href="{PREFIX}{esc(query)}">all dataflows</a>' if single else ""
    top = "" if single else (f"<section><h2>the pool</h2>{words(pool)}</section>"
                             if pool is not None else "")
    empty = "" if sections else '<p class="muted">no running dataflows</p>'
    return page(f"cameo: {single}" if single else "cameo", f"""<header><h1>cameo</h1>
<span class="muted">{esc(who)} &middot; the last {last_s:g} s &middot; refreshed every
{REFRESH_S} s</span>{back}<form method="post" action="{PREFIX}/logout">
<button type="submit">sign out</button></form></header>
{top}{"".join(sections)}{empty}""", refresh=True)


# -- routes ------------------------------------------------------------------------------------
def _html(text: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers=HEADERS)


def _error_page(status: int, message: str) -> HTMLResponse:
    return _html(page("cameo", f'<h1>cameo</h1><p class="bad">{esc(message)}</p>'
                               f'<p><a href="{PREFIX}">all dataflows</a></p>'), status)


def _explained(core: ServiceCore, p: Principal, d: dict[str, Any], last_s: float,
               query: str) -> str:
    """One dataflow's section; a dataflow that ended or went meanwhile, or a runtime that did
    not answer, is said so in its section and the rest of the page renders."""
    try:
        spec = core.spec(p, d["name"])
        explanation = core.explain(p, d["name"], last_s=last_s)
    except (CameoError, TimeoutError) as e:
        message = e.message if isinstance(e, ApiError) else str(e)
        return dataflow_section(d, None, None, f"no explanation now: {message}", query)
    return dataflow_section(d, spec, explanation, None, query)


def add_routes(app: FastAPI, core: ServiceCore, tokens: TokenStore) -> None:
    """The page's routes (left out of the OpenAPI document: they answer HTML)."""

    def signed_in(request: Request, token: str) -> Response:
        """Keep a valid token in the cookie, and go to the page without it in the address."""
        rest = [(k, v) for k, v in parse_qsl(request.url.query) if k != "token"]
        path = request.url.path if request.method == "GET" else PREFIX
        target = path + (f"?{urlencode(rest)}" if rest else "")
        response = RedirectResponse(target, status_code=303, headers=HEADERS)
        response.set_cookie(COOKIE, token, path=PREFIX, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https")
        return response

    def gate(request: Request) -> tuple[Principal | None, Response | None, float]:
        """(caller, an answer instead of the page, the window in seconds)."""
        token = request.query_params.get("token")
        if token is not None:
            if tokens.authenticate(f"Bearer {token}") is None:
                return None, _html(login_form("that token is not valid"), 401), 0.0
            return None, signed_in(request, token), 0.0
        principal: Principal | None = getattr(request.state, "principal", None)
        if principal is None:
            return None, _html(login_form()), 0.0
        try:
            last_s = parse_last(request.query_params.get("last"))
        except ApiError as e:
            return None, _error_page(422, f"{e.message}: expected {e.expected}, got {e.got!r}. "
                                          f"Fix: {e.fix}"), 0.0
        return principal, None, last_s

    def window(request: Request) -> str:
        last = request.query_params.get("last")
        return f"?{urlencode({'last': last})}" if last else ""

    @app.get(PREFIX, include_in_schema=False)
    async def ui_home(request: Request) -> Response:
        principal, answer, last_s = gate(request)
        if principal is None:
            return answer or _html(login_form())
        query = window(request)

        def build() -> str:
            try:
                pool: dict[str, Any] | None = core.explain(principal, None, last_s=last_s)
            except (CameoError, TimeoutError) as e:
                pool = {"words": [f"no explanation of the pool now: {e}"]}
            flows = core.list(principal, list(LIVE_STATES))
            sections = [_explained(core, principal, dict(d), last_s, query)
                        for d in sorted(flows, key=lambda d: d["name"])]
            return dashboard(principal, last_s, pool, sections, query)

        return _html(await run_in_threadpool(build))

    @app.get(PREFIX + "/dataflows/{name}", include_in_schema=False)
    async def ui_dataflow(name: str, request: Request) -> Response:
        principal, answer, last_s = gate(request)
        if principal is None:
            return answer or _html(login_form())
        query = window(request)

        def build() -> str | None:
            entry = next((d for d in core.list(principal) if d["name"] == name), None)
            if entry is None:
                return None
            section = _explained(core, principal, dict(entry), last_s, query)
            return dashboard(principal, last_s, None, [section], query, single=name)

        text = await run_in_threadpool(build)
        if text is None:
            return _error_page(404, f"no dataflow named {name!r} is visible to this token")
        return _html(text)

    @app.post(PREFIX + "/login", include_in_schema=False)
    async def ui_login(request: Request) -> Response:
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > LOGIN_BODY_BYTES:
                return _html(login_form("that is not a token"), 413)
        token = dict(parse_qsl(body.decode("utf-8", "replace"))).get("token", "").strip()
        if not token or tokens.authenticate(f"Bearer {token}") is None:
            return _html(login_form("that token is not valid"), 401)
        return signed_in(request, token)

    @app.post(PREFIX + "/logout", include_in_schema=False)
    async def ui_logout() -> Response:
        response = RedirectResponse(PREFIX, status_code=303, headers=HEADERS)
        response.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict")
        return response
