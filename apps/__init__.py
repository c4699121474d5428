"""NSQ's command-line tools (``to_nsq``, ``nsq_tail``, ``nsq_stat``, ``nsq_to_file``), built on ``nsqclient``.

Each module is one program: an Options dataclass with NSQ's flag names and defaults, and an async ``main`` run by
``shared.program.run_tool``.
"""
