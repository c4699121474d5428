"""nsqd: the broker. ``NSQD(Options(...))`` is the library; ``python -m services.nsqd`` the program.

The path of a message, module by module:

- ``protocol_v2.ConnectionV2.data_received`` hands the bytes to the client's ``SessionV2.receive``
  (``shared/protocol/session_v2.py``): the parser cuts ``PUB <topic>\\n[size][body]`` out of them and the session
  checks it against NSQ's rules, yielding ``Publish("PUB", topic, [body], 0)``. Its handler, ``commands_v2.publish``,
  asks the broker (``NSQD.get_topic``) for the topic and calls ``Topic.publish``; the ``OK`` is buffered and written
  once the bytes received are processed (``Client.flush``).
- ``Topic.publish`` gives the message an ID and makes it a ``QueuedMessage`` tuple (id, body, timestamp,
  attempts 0; read by the named positions ``message.ID``, ``BODY``, ...). With channels, ``Topic._distribute``
  hands that one tuple to every ``Channel.publish``; without (or paused) ``Topic._hold`` keeps it in the topic's
  queue until a channel exists, and ``Topic._pump_backlog`` then hands it over (``Channel.put_held``,
  ``Channel.put_from_disk``).
- ``Channel.publish`` gives it to its ``MessageQueue`` (``accept``) with ``Channel._deliver_now`` as the consumers'
  share: a memory-first queue lets a consumer with room take it at once (``Channel._deliver``: an
  ``InFlightMessage`` with its deadline, pushed on the in-flight queue, framed into the client's output buffer by
  ``Client.send_message``), else keeps it in memory, then disk; a disk-through queue (``--mem-queue-size=0``)
  writes it first and ``Channel._drain`` reads it back for the consumers. Which kind a queue is was chosen once,
  in ``Storage`` (storage.py). When a consumer gains room (RDY, FIN, a timeout, a drained socket),
  ``Channel.update_ready`` drains the queue into it.
- ``FIN <id>`` lines come out of the session as one ``Finish(ids)`` per run of them; ``commands_v2.finish`` calls
  ``Channel.finish_all`` once for the run (each off the in-flight queue, a disk-through copy released, then
  ``Client.finished(count)``), and once per read ``Client.update_ready`` lets the channel refill the freed window.
- Messages not finished in time are taken back by ``QueueScanner`` (``queue_scan.py``) through
  ``Channel.process_in_flight``; deferred ones (DPUB, REQ with a delay) wait in the queue's ``DeferredStore``
  until ``Channel.process_deferred`` queues them again.

- What happens to a queue's messages is told to its recorder (``recorder.py``), which storage chose for it: the
  null one, or replication's (``replication/records.py``), which makes it a record for the mirrors.

Who owns what: ``topic.py`` and ``channel.py`` the fan-out and delivery rules (``consumers.py``: who is next);
``message_queue.py`` the two kinds of queue; ``deferred_store.py`` deferred messages; ``storage.py`` which kind each
queue is and what records it; ``disk_queue.py`` (with ``segment_files.py``, ``disk_queue_meta.py``,
``held_records.py``, ``queue_cap.py``, ``deferred_file.py``) the files; ``client.py`` a connected client's window and
output; ``stats.py`` the /stats view of it all; ``nsqd.py`` the composition root (lifecycle, listeners, the topic
registry, lookupd, metadata), which starts replication (``replication/node.py``) only with ``--etcd-address``.
"""
