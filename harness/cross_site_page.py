"""A page on another site, for tests of what a browser lets it do to a service on 127.0.0.1: the given HTML
document served from ``http://127.0.0.2:<free port>/``.

127.0.0.2 is loopback like 127.0.0.1 (Linux routes all of 127/8 to ``lo``), and for a browser a different site:
sites of IP addresses are the addresses themselves, so requests from this page to 127.0.0.1 carry
``Sec-Fetch-Site: cross-site`` and ``Origin: http://127.0.0.2:<port>``, as a page on the internet's would.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOST = "127.0.0.2"


@contextmanager
def cross_site_page(html: str) -> Iterator[str]:
    """Serves ``html`` at ``/`` (any other path is a 404) until the block ends, whatever happens in it; yields the
    page's URL."""
    document = html.encode()

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.partition("?")[0] != "/":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(document)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(document)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a test's output shows what it checks, not the page's requests

    server = ThreadingHTTPServer((HOST, 0), Page)
    # polled often, so that shutting down (which waits for the next poll) takes no noticeable time
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), name="cross-site-page", daemon=True)
    thread.start()
    try:
        yield f"http://{HOST}:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
