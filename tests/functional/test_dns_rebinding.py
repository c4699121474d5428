"""DNS rebinding, in a real browser: a page on a hostile name that resolves to 127.0.0.1 is same-origin with
nsqd, lookupd and the admin there, so the cross-site check cannot see it; the Host allow-list refuses it. The
browser's resolver maps ``rebound.test`` to 127.0.0.1, as the attacker's DNS would once the page is loaded."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.browser import chromium_page, requires_chromium
from harness.processes import NSQDProcess, start_admin, start_lookupd, start_nsqd

REBOUND = "rebound.test"

# what the hostile page does once its name points at the service: read what it has, and change it
ATTACK = """async (path) => {
    const read = await fetch("/ping");
    const write = await fetch(path, {method: "POST"});
    return [read.status, write.status, await write.text()];
}"""


@pytest.fixture
def services(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[dict[str, NSQDProcess]]:
    extra = list(request.param)
    (tmp_path / "admin").mkdir()
    started: dict[str, NSQDProcess] = {}
    try:
        started["lookupd"] = start_lookupd(*extra)
        started["nsqd"] = start_nsqd(f"--lookupd-tcp-address=127.0.0.1:{started['lookupd'].tcp_port}", *extra,
                                     data_path=tmp_path)
        started["admin"] = start_admin(f"--lookupd-http-address=127.0.0.1:{started['lookupd'].http_port}", *extra,
                                       data_path=tmp_path / "admin")
        yield started
    finally:
        for process in started.values():
            process.stop()


def attack(service: NSQDProcess, path: str) -> tuple[int | None, list[object] | None]:
    """Loads the service's /ping under the rebound name and, if that page loads, runs the attack from it."""
    with chromium_page(resolve={REBOUND: "127.0.0.1"}) as page:
        response = page.goto(f"http://{REBOUND}:{service.http_port}/ping")
        status = response.status if response is not None else None
        return status, page.evaluate(ATTACK, path) if status == 200 else None


@requires_chromium
@pytest.mark.parametrize("services", [()], indirect=True)
def test_a_rebound_name_is_refused_by_every_service(services: dict[str, NSQDProcess]) -> None:
    nsqd, lookupd, admin = services["nsqd"], services["lookupd"], services["admin"]
    for service, path in ((nsqd, "/topic/create?topic=stolen"), (lookupd, "/topic/create?topic=stolen"),
                          (admin, "/api/topics/stolen")):
        assert attack(service, path) == (403, None)
    assert "stolen" not in json.dumps(json.loads(nsqd.http("GET", "/stats?format=json")[2]))
    assert b"stolen" not in lookupd.http("GET", "/topics")[2]
    refused = json.loads(nsqd.http("GET", "/ping", headers={"Host": f"{REBOUND}:{nsqd.http_port}"})[2])
    assert refused == {"message": "HOST_NOT_ALLOWED"}
    assert "--http-allowed-host=rebound.test serves it" in json.loads(
        admin.http("GET", "/ping", headers={"Host": REBOUND})[2])["message"]
    # the names they are reached by as usual still work: an IP address, localhost
    assert nsqd.http("GET", "/ping", headers={"Host": f"localhost:{nsqd.http_port}"})[0] == 200


@requires_chromium
@pytest.mark.parametrize("services", [("--http-allowed-host=*",)], indirect=True)
def test_without_the_allow_list_the_attack_works_as_it_does_against_nsq(services: dict[str, NSQDProcess]) -> None:
    nsqd, lookupd = services["nsqd"], services["lookupd"]
    status, outcome = attack(nsqd, "/topic/create?topic=stolen")
    assert status == 200 and outcome is not None and outcome[:2] == [200, 200]
    assert "stolen" in json.dumps(json.loads(nsqd.http("GET", "/stats?format=json")[2]))
    status, outcome = attack(lookupd, "/topic/create?topic=stolen")
    assert status == 200 and outcome is not None and outcome[:2] == [200, 200]
