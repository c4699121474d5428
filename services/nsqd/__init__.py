"""nsqd: the broker. ``NSQD(Options(...))`` is the library; ``python -m services.nsqd`` the program.

The path of a message, module by module:

- ``protocol_v2.ConnectionV2.data_received`` hands the bytes to the client's ``SessionV2.receive``
  (``shared/protocol/session_v2.py``): the parser cuts ``PUB <topic>\\n[size][body]`` out of them and the session
  checks it against NSQ's rules, yielding ``Publish("PUB", topic, [body], 0)``. Its handler, ``commands_v2.publish``,
  asks the broker (``NSQD.get_topic``) for the topic and calls ``Topic.publish``; the ``OK`` is buffered and written
  once the bytes received are processed (``Client.flush``).
- ``Topic.publish`` gives the message an ID and makes it a ``QueuedMessage`` tuple (id, body, timestamp,
  attempts 0). With channels, ``Topic._distribute`` hands that one tuple to every ``Channel.put_new``; without
  (or paused) ``Topic._hold`` keeps it in the topic's ``MessageQueue`` (memory, then disk) until a channel exists.
- ``Channel.put_new`` delivers at once to a client with room (``Channel._deliver``: an ``InFlightMessage`` with
  its deadline, pushed on the in-flight queue, framed into the client's output buffer by ``Client.send_message``)
  or queues it in the channel's ``MessageQueue``. When a client gets room (RDY, FIN), ``Channel.update_ready``
  drains that queue into it.
- ``FIN <id>`` lines come out of the session as one ``Finish(ids)`` per run of them; ``commands_v2.finish``
  calls ``Channel.finish`` for each (off the in-flight queue, ``Client.finished``), then once per batch
  ``Client.update_ready`` lets the channel refill the freed window.
- Messages not finished in time are taken back by ``QueueScanner`` (``queue_scan.py``) through
  ``Channel.process_in_flight`` (``Client.timed_out``) and ``Channel.process_deferred``, and delivered again.
"""
