"""NSQ's wire protocol, sans-I/O: bytes in, typed commands and frames out, never a socket.

Nothing in this package imports asyncio, socket or aiohttp; tests feed it bytes directly.
"""
