"""The chaos suite behind ``snapview chaos`` (Jepsen's shape): ``workloads`` (client + generator),
``nemesis`` (each fault paired with its recovery), ``checker`` (named reasons), ``history``
(invoke / ok / fail / info), ``runner`` (a seeded run with a heal phase before the final check),
and the jobs it starts and kills (``view_driver``, ``stream_job``, ``view_job``)."""
