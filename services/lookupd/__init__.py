"""nsqlookupd: the discovery service (TCP 4160, HTTP 4161). Not built yet."""
