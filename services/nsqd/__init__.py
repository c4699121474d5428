"""nsqd: the broker. ``NSQD(Options(...))`` is the library; ``python -m services.nsqd`` the program."""
