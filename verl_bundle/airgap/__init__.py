"""The server side: standard library only, Python 3.8+, carried inside every bundle."""
