"""Wheels built on the online host before resolution and after it: a tree, a git revision, a
wheel or sdist file (sourcebuild: your verl, git and local requirements) and the pure-Python
sdists of a lock (hostbuild)."""
