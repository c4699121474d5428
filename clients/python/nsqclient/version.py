"""The NSQ version this client is released with (the project's: the services report the same)."""

VERSION = "1.3.0"
