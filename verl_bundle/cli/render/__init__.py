"""Every host result rendered as text for people and as JSON for machines."""
