"""Experiments trained as recorded runs: the layer between the commands and the engine.

Named for what its callers hand it, an experiment (dlperf.config's `Experiment`), and for
what it makes of one: runs in the store. It owns everything about a run that is the
store's business (opening and marking runs, the lease a resume takes, studies, dropping the
metrics a resumed run repeats, the `StoreSink` the loop writes to) so that dlperf.engine
trains against a `MetricSink` and never imports the store.

- run.py: `run_experiment` and `resume_run` (`dlperf run`, `dlperf.run`, a sweep's points).
- staleness.py: sync and emulated asynchronous SGD as one study (`dlperf staleness --train`).
- sink.py: `StoreSink`, and `ended`: how every trainer's run ends once its loss diverges.
"""
