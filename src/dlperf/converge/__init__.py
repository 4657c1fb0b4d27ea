"""Convergence and resource models: when a job reaches its target and how fast it runs.

- `curve`: the Optimus loss model l(k) = 1/(β0·k + β1) + β2 and a power law, with bootstrap
  intervals and the step at which a target is reached (Peng et al., EuroSys 2018).
- `ensemble`: the step reaching a target as a distribution, a Bayesian average of six curve
  families on a grid posterior (after Domhan et al., IJCAI 2015).
- `regress`: the loss-model coefficients as functions of run features.
- `fitting`: what `converge fit | predict | regress` do, from stored runs or CSV files.
- `results`: what they find, as records whose `to_dict()` is the command's --json document;
  `views`: the same as the tables and lines the commands print.
- `speed`: Optimus's parameter-server speed models and Pollux's iteration-time model
  (Qiao et al., OSDI 2021), fitted to a speed table or a study and asked for configurations.
- `plan`: time and cost to a target versus workers and parameter servers; Optimus's greedy
  allocator for several jobs; the curve and speed fits and jobs.toml it reads.
- `staleness`: an event-driven parameter server with asynchronous learners.

Everything here returns dataclasses and never prints or draws; `dlperf.cli.converge` prints
them and draws their figures with `dlperf.report.curves`.
"""
