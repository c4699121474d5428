"""etcd v3 over its JSON gateway: what nsqd keeps of the cluster (membership, mirrors, epochs) lives there."""
