"""The first stage: profiles as values, read from TOML, the built-in table, the target's tags and the mirrors."""
