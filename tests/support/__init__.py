"""The test suite's helpers: fixtures' builders, servers and fake machines."""
