"""Replication between nsqd, coordinated through etcd (on with ``--etcd-address``); see ``docs/replication.md``."""
