"""Runnable demos built on every layer (the CLI's ``snapview demo`` runs them)."""
