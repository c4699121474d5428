"""nsqlookupd: discovery. nsqd registers over TCP (4160), producers and consumers look up over HTTP (4161)."""
