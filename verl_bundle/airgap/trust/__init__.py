"""The trust root outside the bundle: the installed verifier (`verl-bundle-verify`), which checks
a later bundle with code already on the server, never with that bundle's own lib/, and the
signed release number that refuses a downgrade. Standard library only, Python 3.8+."""
