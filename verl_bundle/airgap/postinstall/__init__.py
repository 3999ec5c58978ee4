"""After the install: what is installed, and whether verl's trainer can start (readiness)."""
