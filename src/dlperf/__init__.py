"""dlperf: a performance lab for deep-learning training."""

__version__ = "0.1.0"
