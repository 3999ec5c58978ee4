"""Placing an asset bundle (models, datasets) and checking what was placed."""
