"""Before a launch: preflight of a node's GPUs, variables and verl settings."""
