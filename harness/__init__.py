"""What the tests (tests/) and the benchmarks (bench/) drive the project with: real services started on free ports,
bare protocol clients, damaged networks and disks, crash points, and the scenarios both run (briefly as a test, for
as long as asked as a benchmark). Not part of the installed package: it is imported from a checkout.

- ``processes``: nsqd, nsqlookupd, nsqadmin, nsq_auth_server and the tools as processes of their own;
  ``Service``, what a test uses of one (its addresses, its HTTP API: ``http``, ``publish``, ``channel_stats``);
  ``wait_for``; ``FAST_SCAN``, the nsqd flags that make timeouts and deferrals fire promptly
- ``in_process``: nsqd on a thread of the test's own process
- ``wire``: a bare protocol-V2 client (raw commands out, frames in)
- ``pynsq``: NSQ's own Python client (pynsq) on a tornado loop of its own
- ``browser``, ``cross_site_page``: headless chromium, and a page on another site for it to open
- ``spark_cluster``, ``archive_jobs``, ``batch_archive_job``: a Spark standalone cluster, and archive jobs as
  processes (``batch_archive_job`` is the program ``archive_jobs.BatchJob`` runs)
- ``hostile``: hostile input for the sans-I/O parsers and the properties every input keeps
- ``fault_proxy``: a TCP proxy that delays, drops bytes, stalls and cuts; ``faulty_network``, the scenario on it
- ``netns``: network namespaces cut apart with iptables; ``partitions``, the scenario on them
- ``full_disk``: nsqd on a tmpfs that fills up, and the scenario
- ``kill_points``: SIGKILL at a chosen system call (strace); ``crash_points``: kill -9 at random moments, the scenario
- ``lookupd_loss``: lookupds lost and replaced under traffic, the scenario
"""
