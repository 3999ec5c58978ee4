"""Checking a bundle against SHA256SUMS and its manifest (a directory, a tarball, a served copy)."""
