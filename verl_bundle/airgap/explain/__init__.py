"""Matching a failed run's log to known causes and offline fixes."""
