"""Data: synthetic generation, normalisation, splitting."""
