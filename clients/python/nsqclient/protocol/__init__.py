"""NSQ's protocol V2 as the client needs it, without I/O: frames and commands as bytes, topic and channel
names, compression codecs."""
