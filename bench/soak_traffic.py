"""The soak's clients: producers publishing every way nsqd takes messages, and consumers answering them every way
a consumer can, all reporting to the ledger (``soak_ledger``).

- ``Publishers``: per nsqd, a few tasks each with a ``Producer`` sending PUB, MPUB and DPUB over TCP, and HTTP
  ``/pub``, ``/mpub`` and ``/pub?defer=``, paced to a total rate, to the open topics.
- ``ChannelConsumers``: the consumers of one channel. A ``Consumer`` that finds the nsqds through lookupd and is
  replaced every few seconds (CLS, then a new one subscribes; sometimes after a gap, so that a backlog builds and
  goes to disk); optionally, on each nsqd, a bare client that drops its connection without CLS, with messages in
  flight.
- ``Policy``: what a consumer does with a delivery: FIN most (some after a TOUCH), REQ some (at once or with a
  delay), leave some unanswered until nsqd's timeout; from the fourth attempt on, and once the soak drains, FIN.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

import aiohttp

from bench.soak_ledger import Action, ChannelLife, Ledger, TopicLife, body
from harness.wire import WireClient
from nsqclient import Consumer, Message, NSQError, Producer
from nsqclient.protocol.frames import FRAME_TYPE_MESSAGE, decode_message, encode_command

PADDING = 100  # body bytes
CONNECT_TIMEOUT = 5.0  # seconds; generous, the machine is busy
LOOKUPD_POLL = 2.0  # how often consumers ask lookupd (s)
ROTATE_EVERY = (4.0, 12.0)  # a consumer is replaced after this many seconds
RUDE_SESSION = (1.0, 6.0)  # a rude client keeps its connection this long


@dataclass(frozen=True)
class Cluster:
    nsqd_tcp: list[str]  # host:port, by nsqd index
    nsqd_http: list[str]
    lookupd_http: str


@dataclass
class Counters:
    """What the clients saw that the ledger does not count."""

    publishes: dict[str, int] = field(default_factory=dict)  # by kind
    publish_errors: list[str] = field(default_factory=list)
    consumers_started: int = 0
    rude_connections: int = 0
    client_errors: list[str] = field(default_factory=list)


class Policy:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.draining = False

    def decide(self, attempts: int) -> tuple[Action, float]:
        """The action for a delivery, and the REQ's delay in seconds."""
        if self.draining or attempts >= 4:
            return Action.FIN, 0.0
        draw = self.rng.random()
        if draw < 0.05:
            return Action.REQ, 0.0
        if draw < 0.10:
            return Action.REQ_DELAYED, self.rng.uniform(0.2, 2.0)
        # few: each holds a place of the consumer's RDY for nsqd's whole --msg-timeout
        if draw < 0.115:
            return Action.IGNORE, 0.0
        if draw < 0.145:
            return Action.TOUCH_FIN, 0.0
        return Action.FIN, 0.0


async def pause(stopping: asyncio.Event, seconds: float) -> bool:
    """Sleeps ``seconds`` or until ``stopping`` is set; True if it is."""
    try:
        await asyncio.wait_for(stopping.wait(), seconds)
    except TimeoutError:
        pass
    return stopping.is_set()


# -- publishing ------------------------------------------------------------------------------------------------


class Publishers:
    KINDS = (("PUB", 40), ("MPUB", 20), ("DPUB", 15), ("HTTP /pub", 10), ("HTTP /mpub", 8), ("HTTP /pub?defer", 7))

    def __init__(self, cluster: Cluster, ledger: Ledger, rate: float, rng: random.Random, counters: Counters,
                 session: aiohttp.ClientSession, per_node: int = 3) -> None:
        self.cluster, self.ledger, self.rng, self.counters, self.session = cluster, ledger, rng, counters, session
        self.workers = per_node * len(cluster.nsqd_tcp)
        self.seconds_per_message = self.workers / rate
        self.per_node = per_node
        self.stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._publish_loop(node, worker))
                       for node in range(len(self.cluster.nsqd_tcp)) for worker in range(self.per_node)]

    async def stop(self) -> None:
        self.stopping.set()
        await asyncio.gather(*self._tasks)

    def _pick_topic(self) -> TopicLife | None:
        topics = [topic for topic in self.ledger.lives if topic.open]
        if not topics:
            return None
        return self.rng.choices(topics, [3 if topic.durable else 1 for topic in topics])[0]

    async def _publish_loop(self, node: int, worker: int) -> None:
        producer = Producer(self.cluster.nsqd_tcp[node], connect_timeout=CONNECT_TIMEOUT)
        producer_id = node * 100 + worker
        kinds, weights = zip(*self.KINDS)
        try:
            while not self.stopping.is_set():
                topic = self._pick_topic()
                if topic is None:
                    await pause(self.stopping, 0.1)
                    continue
                kind = self.rng.choices(kinds, weights)[0]
                count = self.rng.randint(2, 20) if "MPUB" in kind else 1
                numbers = self.ledger.sent(topic, node, count, time.monotonic())
                bodies = [body(number, producer_id, PADDING) for number in numbers]
                error = await self._publish(producer, node, kind, topic.name, bodies)
                if error is None:
                    self.ledger.acknowledged(topic, numbers)
                    self.counters.publishes[kind] = self.counters.publishes.get(kind, 0) + 1
                else:
                    self.ledger.refused(topic, numbers)
                    self.counters.publish_errors.append(f"{kind} to {topic!r} on nsqd{node}: {error}")
                await pause(self.stopping, count * self.seconds_per_message)
        finally:
            await producer.close()

    async def _publish(self, producer: Producer, node: int, kind: str, topic: str, bodies: list[bytes]) -> str | None:
        """None once nsqd acknowledged ``bodies``, else what went wrong."""
        delay = self.rng.uniform(0.1, 3.0)
        try:
            if kind == "PUB":
                await producer.publish(topic, bodies[0])
            elif kind == "MPUB":
                await producer.multi_publish(topic, bodies)
            elif kind == "DPUB":
                await producer.deferred_publish(topic, bodies[0], delay)
            else:
                return await self._http_publish(node, kind, topic, bodies, delay)
        except NSQError as error:
            return str(error)
        return None

    async def _http_publish(self, node: int, kind: str, topic: str, bodies: list[bytes], delay: float) -> str | None:
        base = f"http://{self.cluster.nsqd_http[node]}"
        url = {"HTTP /pub": f"{base}/pub?topic={topic}", "HTTP /mpub": f"{base}/mpub?topic={topic}",
               "HTTP /pub?defer": f"{base}/pub?topic={topic}&defer={round(delay * 1000)}"}[kind]
        try:
            async with self.session.post(url, data=b"\n".join(bodies)) as response:
                answer = await response.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            return f"{type(error).__name__}: {error}"
        return None if response.status == 200 else f"{response.status} {answer!r}"


# -- consuming -------------------------------------------------------------------------------------------------


class ChannelConsumers:
    """Everything that consumes one channel life, started and stopped together."""

    def __init__(self, channel: ChannelLife, cluster: Cluster, ledger: Ledger, policy: Policy,
                 rng: random.Random, counters: Counters, rude: bool) -> None:
        self.channel, self.cluster, self.ledger, self.policy = channel, cluster, ledger, policy
        self.rng, self.counters = rng, counters
        self.rude = rude
        self._calm = asyncio.Event()  # no more replacing and no more rude clients (the soak drains)
        self._consumers: list[Consumer] = []
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._keep_replacing())]
        if self.rude:
            self._tasks += [asyncio.create_task(self._rude_client(node)) for node in range(len(self.cluster.nsqd_tcp))]

    async def calm(self) -> None:
        """One consumer stays, subscribed, and nothing else comes or goes."""
        self._calm.set()
        await asyncio.gather(*self._tasks)
        if not self._consumers:
            await self._start_consumer()

    async def stop(self) -> None:
        await self.calm()
        while self._consumers:
            await self._consumers.pop().stop(timeout=1.0)

    async def _start_consumer(self) -> None:
        channel = self.channel
        consumer = Consumer(channel.topic.name, channel.name, self._handle,
                            lookupd_http_addresses=[self.cluster.lookupd_http],
                            max_in_flight=self.rng.choice([20, 50, 100]), concurrency=2, max_attempts=0,
                            lookupd_poll_interval=LOOKUPD_POLL, connect_timeout=CONNECT_TIMEOUT)
        self._consumers.append(consumer)
        self.counters.consumers_started += 1
        await consumer.start()

    async def _keep_replacing(self) -> None:
        """Now and then a new consumer: before the old one stops (a handover), or a few seconds after (a gap)."""
        await self._start_consumer()
        while not await pause(self._calm, self.rng.uniform(*ROTATE_EVERY)):
            old = self._consumers.pop(0)
            if self.rng.random() < 0.5:
                await self._start_consumer()
                await old.stop(timeout=1.0)
            else:
                await old.stop(timeout=1.0)
                await pause(self._calm, self.rng.uniform(0.0, 3.0))
                await self._start_consumer()

    async def _handle(self, message: Message) -> None:
        action, delay = self.policy.decide(message.attempts)
        self.ledger.delivered(self.channel, message.body, message.attempts, action)
        if action is Action.REQ or action is Action.REQ_DELAYED:
            message.requeue(delay, backoff=False)
        elif action is Action.IGNORE:
            message.disable_auto_response()
        elif action is Action.TOUCH_FIN:
            message.touch()  # and the FIN as the handler returns

    async def _rude_client(self, node: int) -> None:
        """Subscribes straight to one nsqd, answers for a few seconds, then drops the connection without CLS
        (what it left unanswered times out in nsqd); again and again."""
        address = self.cluster.nsqd_tcp[node].rsplit(":", 1)
        while not self._calm.is_set():
            self.counters.rude_connections += 1
            try:
                client = await WireClient.connect((address[0], int(address[1])))
            except OSError as error:
                self.counters.client_errors.append(f"rude client to nsqd{node}: {error}")
                await pause(self._calm, 1.0)
                continue
            try:
                await client.subscribe(self.channel.topic.name, self.channel.name, rdy=self.rng.randint(5, 40))
                await self._answer_for(client, self.rng.uniform(*RUDE_SESSION))
            except (ConnectionError, OSError, TimeoutError, AssertionError) as error:
                self.counters.client_errors.append(f"rude client on nsqd{node}: {error!r}")
            finally:
                client.writer.transport.abort()
            await pause(self._calm, self.rng.uniform(0.2, 2.0))

    async def _answer_for(self, client: WireClient, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self._calm.is_set():
            try:
                frame = await client.read_frame(timeout=0.5)
            except TimeoutError:
                continue
            if frame.frame_type != FRAME_TYPE_MESSAGE:
                raise AssertionError(f"unexpected frame {frame}")
            message = decode_message(frame.data)
            action, delay = self.policy.decide(message.attempts)
            self.ledger.delivered(self.channel, message.body, message.attempts, action)
            if action is Action.TOUCH_FIN:
                client.send(encode_command(b"TOUCH", message.id))
            if action.finishes:
                client.send(encode_command(b"FIN", message.id))
            elif action is not Action.IGNORE:
                client.send(encode_command(b"REQ", message.id, b"%d" % round(delay * 1000)))

