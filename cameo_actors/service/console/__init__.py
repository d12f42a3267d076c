"""The web console: a single page at `/console/` over the JSON API (no build step).

Three static files (`index.html`, `console.js`, `console.css`) served as they are: the
page signs in with a token it keeps in the tab's sessionStorage, and every value it shows
comes from a call to the API with `Authorization: Bearer <token>`. The files hold no data,
so they are served without a token (`PATHS` are the paths the auth middleware lets pass);
what they fetch is checked as any client's call is.

The console refreshes in place every 2 s and acts (cancel, change, scale, drain) through
the same API the CLI uses. It replaced `/ui`, a server-rendered page of the running
dataflows: `/ui` addresses lead to the console. Its answers forbid
inline scripts and styles, framing, and any fetch that leaves the service (the CSP), and
are never cached.

>>> sorted(PATHS)
['/console', '/console/', '/console/console.css', '/console/console.js', '/console/index.html']
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from fastapi import FastAPI
from fastapi.responses import RedirectResponse, Response

from cameo_actors.service.errors import ApiError

PREFIX = "/console"
#: The files served, and their media types.
ASSETS = {"index.html": "text/html; charset=utf-8",
          "console.js": "text/javascript; charset=utf-8",
          "console.css": "text/css; charset=utf-8"}
#: The paths that need no token: the page's files (they hold no data).
PATHS = frozenset({PREFIX, PREFIX + "/", *(f"{PREFIX}/{name}" for name in ASSETS)})
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY",
           "Content-Security-Policy": CSP}


#: The page before the console (`/ui`, `/ui/dataflows/NAME`): its links lead here.
OLD_PREFIX = "/ui"


def is_console_path(path: str) -> bool:
    """Whether a request path is one of the console's files or an old page's address (both
    served without a token: they hold no data).

    >>> [is_console_path(p) for p in ("/console/", "/ui/dataflows/a", "/uix", "/v1/info")]
    [True, True, False, False]
    """
    return path in PATHS or path == OLD_PREFIX or path.startswith(OLD_PREFIX + "/")


def _read_assets() -> dict[str, bytes]:
    here = Path(__file__).parent
    return {name: (here / name).read_bytes() for name in ASSETS}


def add_routes(app: FastAPI) -> None:
    """The console's routes on `app` (left out of the OpenAPI document: they answer files).

    The files are read once, here: a request reads no disk.
    """
    files = _read_assets()

    def answer(name: str) -> Response:
        return Response(files[name], media_type=ASSETS[name], headers=HEADERS)

    @app.get(PREFIX, include_in_schema=False)
    async def console_root() -> Response:
        return RedirectResponse(PREFIX + "/", status_code=308, headers=HEADERS)

    @app.get(PREFIX + "/", include_in_schema=False)
    async def console_page() -> Response:
        return answer("index.html")

    @app.get(OLD_PREFIX, include_in_schema=False)
    @app.get(OLD_PREFIX + "/{rest:path}", include_in_schema=False)
    async def old_page(rest: str = "") -> Response:
        """The page before the console: its addresses open the console's page for them
        (`/ui/dataflows/NAME`: that dataflow's)."""
        name = rest.removeprefix("dataflows/") if rest.startswith("dataflows/") else ""
        where = f"#/dataflow/{quote(name, safe='')}" if name else ""
        return RedirectResponse(f"{PREFIX}/{where}", status_code=308, headers=HEADERS)

    @app.get(PREFIX + "/{asset}", include_in_schema=False)
    async def console_asset(asset: str) -> Response:
        if asset not in files:
            raise ApiError(404, "not_found", f"the console has no file {asset!r}",
                           expected=f"one of {sorted(files)}", got=asset,
                           fix=f"open {PREFIX}/")
        return answer(asset)
