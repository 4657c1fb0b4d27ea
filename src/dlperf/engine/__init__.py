"""The training engine: the one training step (step.py) every trainer uses, the loop, its
timers, schedules and checkpoints."""
