"""AuthN: client certificates mapped to AMS users and their tokens (``ams authn``)."""
