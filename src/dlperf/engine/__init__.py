"""The training engine: the loop, its timers, schedules and checkpoints."""
