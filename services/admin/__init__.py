"""nsqadmin: the cluster's web UI on 4171. Not built yet."""
