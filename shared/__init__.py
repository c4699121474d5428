"""Code every service shares: the sans-I/O protocol core, names, flags and logging."""
