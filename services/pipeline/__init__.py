"""The data pipeline's Spark jobs (``jobs``), on the ``nsq`` data source of ``nsqspark``."""
