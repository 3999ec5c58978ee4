"""The assemble stage (assembly.py: plan, then write one tarball): the plan, the tar, the bundle's index, reading and verifying a bundle; crossing/ for what crosses the gap."""
