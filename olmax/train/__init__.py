"""Training: mesh and sharding, optimizer and schedules, train step, checkpoints, the loop."""
