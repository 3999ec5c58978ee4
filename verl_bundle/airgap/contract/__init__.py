"""The host<->server contract: the manifests, names, hashing and events."""
