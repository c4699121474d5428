"""nsqd's side of AUTH: asking the auth servers about a client's secret (``query``: what nsqd tells them of the
client, and the one error the client sees when they fail) and the JSON nsqd answers a granted AUTH with
(``auth_response``). The auth server's reply, its parsing and what it allows are ``shared.auth_reply``'s;
``auth_client`` asks the servers over HTTP.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from shared import go_json
from shared.auth_reply import AuthError, AuthState, certificate_common_name
from shared.protocol.errors import FatalClientError

if TYPE_CHECKING:
    from shared.auth_client import AuthClient

    from .client import Client

log = logging.getLogger("nsqd")


async def query(auth_client: AuthClient, client: Client, secret: str) -> AuthState:
    """What the auth servers grant ``client`` for ``secret``; the client keeps both (the secret to ask again once
    the grant expires). E_AUTH_FAILED when no server answers validly."""
    try:
        state = await auth_client.query(client.remote_address.rsplit(":", 1)[0].strip("[]"), client.tls is not None,
                                        secret, certificate_common_name(client.tls))
    except AuthError as error:
        # the reason may hold what the auth server said: logged, never sent to the client
        log.warning("PROTOCOL(V2): [%s] AUTH failed %s", client, error)
        raise FatalClientError("E_AUTH_FAILED", "AUTH failed") from None
    client.authenticated(state, secret)
    return state


def auth_response(state: AuthState) -> bytes:
    """The JSON nsqd answers a successful AUTH with; ``permission_count`` is the number of authorizations."""
    return go_json.encode({"identity": state.identity, "identity_url": state.identity_url,
                           "permission_count": len(state.authorizations)})
