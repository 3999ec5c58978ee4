"""What a bundle needs to cross the gap: signatures, volumes, the SBOM and licence report, a delta's base, and the approval's inspection."""
