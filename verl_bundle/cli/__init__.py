"""The host's command line: the only host code that parses options or prints."""
