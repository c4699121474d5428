"""nsqd's side of AUTH: the JSON it answers a granted AUTH with (``auth_response``). The auth server's reply, its
parsing and what it allows are ``shared.auth_reply``'s; ``auth_client`` asks the servers.
"""

from __future__ import annotations

from shared import go_json
from shared.auth_reply import AuthState


def auth_response(state: AuthState) -> bytes:
    """The JSON nsqd answers a successful AUTH with; ``permission_count`` is the number of authorizations."""
    return go_json.encode({"identity": state.identity, "identity_url": state.identity_url,
                           "permission_count": len(state.authorizations)})
