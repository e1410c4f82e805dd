"""Taking over from another messaging service (docs/migration.md)."""
