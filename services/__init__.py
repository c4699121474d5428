"""The separately deployable services: nsqd, lookupd, admin and the Spark pipeline."""
