"""The resolve stage: uv resolves the profile for the target into the lock."""
