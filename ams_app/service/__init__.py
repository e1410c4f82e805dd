"""The pub/sub rules. Never imports Flask or a backend implementation."""
