"""What the target environment's own python runs as scripts (the readiness probe, the trainer dry run's entry and hooks): they import nothing of the project."""
